#pragma once
// Plain stochastic gradient descent with optional L2 weight decay, applied by a server to the
// shard it owns. Stateless, so its State is empty; stateful rules keep theirs per shard.
#include <cstddef>

#include <fmt/format.h>

#include "hpcps/error.hpp"

namespace hpcps::optim {

class Sgd {
 public:
  static constexpr const char* name = "sgd";
  struct State {};

  explicit Sgd(float learning_rate = 0.1f, float weight_decay = 0.0f)
      : learning_rate_(learning_rate), weight_decay_(weight_decay) {
    if (!(learning_rate > 0.0f)) throw Error(fmt::format("optim::Sgd: learning rate must be > 0, got {}", learning_rate));
    if (!(weight_decay >= 0.0f)) throw Error(fmt::format("optim::Sgd: weight decay must be >= 0, got {}", weight_decay));
  }

  float learning_rate() const { return learning_rate_; }
  float weight_decay() const { return weight_decay_; }

  State make_state(std::size_t /*shard_size*/) const { return {}; }

  // params -= lr * (grad + wd * params). `grad` is the mean gradient over the clock's samples.
  void step(State&, float* params, const float* grad, std::size_t n, std::size_t /*step*/) const {
    const float lr = learning_rate_, wd = weight_decay_;
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) params[i] -= lr * (grad[i] + wd * params[i]);
  }

 private:
  float learning_rate_, weight_decay_;
};

using StandardSgd = Sgd;

}  // namespace hpcps::optim
