#pragma once
// Stochastic gradient descent run by a server on the shard it owns. The step direction is a
// policy (ensmallen's SGD<UpdatePolicy> idea): VanillaUpdate or MomentumUpdate, each with its
// per-shard State, so `Sgd<MomentumUpdate>` keeps its velocity beside the parameters it updates.
#include <cstddef>
#include <vector>

#include <fmt/format.h>

#include "hpcps/error.hpp"
#include "hpcps/optim/schedule.hpp"

namespace hpcps::optim {

// The update policies take the gradient as a sum and a scale (the server's 1 / samples) plus the
// weight decay, and fold them into their single pass over the shard: g = sum * scale + wd * params.
// `offset` locates the piece [offset, offset + n) of the shard in the policy's State.

// params -= lr * g
struct VanillaUpdate {
  static constexpr const char* name = "sgd";
  struct State {};
  State make_state(std::size_t) const { return {}; }
  void apply(State&, std::size_t, float* params, const float* sum, float scale, float wd, std::size_t n, float lr) const {
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) params[i] -= lr * (sum[i] * scale + wd * params[i]);
  }
};

// Heavy-ball momentum, v = mu * v + g; params -= lr * v, or with Nesterov's correction
// params -= lr * (g + mu * v) (the form PyTorch's SGD uses, so hyperparameters carry over).
class MomentumUpdate {
 public:
  static constexpr const char* name = "momentum";
  struct State {
    std::vector<float> velocity;
  };

  explicit MomentumUpdate(float momentum = 0.9f, bool nesterov = false) : momentum_(momentum), nesterov_(nesterov) {
    if (!(momentum >= 0.0f && momentum < 1.0f)) {
      throw Error(fmt::format("optim::MomentumUpdate: momentum must be in [0, 1), got {}", momentum));
    }
  }
  float momentum() const { return momentum_; }
  bool nesterov() const { return nesterov_; }

  State make_state(std::size_t n) const { return State{std::vector<float>(n, 0.0f)}; }
  void apply(State& state, std::size_t offset, float* params, const float* sum, float scale, float wd, std::size_t n,
             float lr) const {
    float* v = state.velocity.data() + offset;
    const float mu = momentum_;
    if (nesterov_) {
#pragma omp simd
      for (std::size_t i = 0; i < n; ++i) {
        const float g = sum[i] * scale + wd * params[i];
        v[i] = mu * v[i] + g;
        params[i] -= lr * (g + mu * v[i]);
      }
    } else {
#pragma omp simd
      for (std::size_t i = 0; i < n; ++i) {
        v[i] = mu * v[i] + sum[i] * scale + wd * params[i];
        params[i] -= lr * v[i];
      }
    }
  }

 private:
  float momentum_;
  bool nesterov_;
};

template <class Update = VanillaUpdate>
class Sgd {
 public:
  static constexpr const char* name = Update::name;
  using update_type = Update;
  using State = typename Update::State;

  explicit Sgd(float learning_rate = 0.1f, float weight_decay = 0.0f, Update update = Update{})
      : Sgd(Schedule::constant(learning_rate), weight_decay, update) {}
  Sgd(Schedule schedule, float weight_decay, Update update = Update{})
      : schedule_(schedule), weight_decay_(weight_decay), update_(update) {
    if (!(weight_decay >= 0.0f)) throw Error(fmt::format("optim::Sgd: weight decay must be >= 0, got {}", weight_decay));
  }

  const Schedule& schedule() const { return schedule_; }
  float weight_decay() const { return weight_decay_; }
  const Update& update() const { return update_; }

  State make_state(std::size_t shard_size) const { return update_.make_state(shard_size); }

  // One update of a shard of n parameters; the mean gradient of the clock is sum * scale.
  void step(State& state, float* params, const float* sum, float scale, std::size_t n, std::size_t step) const {
    this->step(state, 0, params, sum, scale, n, step);
  }
  // The same update on elements [offset, offset + n) of the shard (params and sum point at element
  // offset): a server applies its shard piece by piece, while other pieces are still in flight.
  void step(State& state, std::size_t offset, float* params, const float* sum, float scale, std::size_t n,
            std::size_t step) const {
    update_.apply(state, offset, params, sum, scale, weight_decay_, n, schedule_.at(step));
  }

 private:
  Schedule schedule_;
  float weight_decay_;
  Update update_;
};

using StandardSgd = Sgd<VanillaUpdate>;
using MomentumSgd = Sgd<MomentumUpdate>;

}  // namespace hpcps::optim
