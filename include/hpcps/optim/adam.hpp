#pragma once
// Adam (Kingma & Ba) on a server's shard: first and second moment estimates live with the shard,
// bias-corrected by the server's own update count (every push reaches every server, so all
// servers count alike). Weight decay is L2 added to the gradient, as in Sgd.
#include <cmath>
#include <cstddef>
#include <vector>

#include <fmt/format.h>

#include "hpcps/error.hpp"
#include "hpcps/optim/schedule.hpp"

namespace hpcps::optim {

class Adam {
 public:
  static constexpr const char* name = "adam";
  struct State {
    std::vector<float> m, v;
  };

  explicit Adam(float learning_rate = 1e-3f, float beta1 = 0.9f, float beta2 = 0.999f, float epsilon = 1e-8f,
                float weight_decay = 0.0f)
      : Adam(Schedule::constant(learning_rate), beta1, beta2, epsilon, weight_decay) {}
  Adam(Schedule schedule, float beta1, float beta2, float epsilon, float weight_decay)
      : schedule_(schedule), beta1_(beta1), beta2_(beta2), epsilon_(epsilon), weight_decay_(weight_decay) {
    if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f)) {
      throw Error(fmt::format("optim::Adam: betas must be in [0, 1), got {} and {}", beta1, beta2));
    }
    if (!(epsilon > 0.0f)) throw Error(fmt::format("optim::Adam: epsilon must be > 0, got {}", epsilon));
    if (!(weight_decay >= 0.0f)) throw Error(fmt::format("optim::Adam: weight decay must be >= 0, got {}", weight_decay));
  }

  const Schedule& schedule() const { return schedule_; }
  float beta1() const { return beta1_; }
  float beta2() const { return beta2_; }
  float epsilon() const { return epsilon_; }
  float weight_decay() const { return weight_decay_; }

  State make_state(std::size_t n) const { return State{std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)}; }

  // The mean gradient is sum * scale.
  void step(State& state, float* params, const float* sum, float scale, std::size_t n, std::size_t step) const {
    this->step(state, 0, params, sum, scale, n, step);
  }
  // Elements [offset, offset + n) of the shard; params and sum point at element offset.
  void step(State& state, std::size_t offset, float* params, const float* sum, float scale, std::size_t n,
            std::size_t step) const {
    const double t = static_cast<double>(step + 1);
    // Bias corrections folded into the step size and epsilon, so the loop does one division.
    const auto c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1_), t));
    const auto c2 = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2_), t)));
    const float rate = schedule_.at(step) * c2 / c1;
    const float eps = epsilon_ * c2;
    const float b1 = beta1_, b2 = beta2_, wd = weight_decay_;
    float* m = state.m.data() + offset;
    float* v = state.v.data() + offset;
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) {
      const float g = sum[i] * scale + wd * params[i];
      m[i] = b1 * m[i] + (1.0f - b1) * g;
      v[i] = b2 * v[i] + (1.0f - b2) * g * g;
      params[i] -= rate * m[i] / (std::sqrt(v[i]) + eps);
    }
  }

 private:
  Schedule schedule_;
  float beta1_, beta2_, epsilon_, weight_decay_;
};

}  // namespace hpcps::optim
