#pragma once
// Batch normalization (Ioffe & Szegedy 2015) per channel of NCHW samples, or per feature of a flat
// input (Shape{n, 1, 1}: one "channel" per feature), as nn::BatchNorm2d and nn::BatchNorm1d.
// Training normalises by the batch's mean and biased variance, evaluation by the running moments.
// Parameters, in order: gamma [C], beta [C], then the state (nn/state_slots.hpp) E[x] [C] and
// E[x^2] [C], the running averages of the raw moments, var = E[x^2] - E[x]^2. Raw moments average
// linearly, so the server's mean of pushed sums is the global batch's moments whatever the split
// into workers; their "gradient" is written by backward from the training pass's statistics.
#include <algorithm>
#include <cstddef>
#include <vector>

#include <fmt/format.h>

#include "hpcps/data/random.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/shape.hpp"
#include "hpcps/nn/state_slots.hpp"

namespace hpcps::nn {

class BatchNorm {
 public:
  struct Config {
    float epsilon = 1e-5f;
    float momentum = 0.1f;  // of the running moments, as PyTorch's BatchNorm's
  };
  static constexpr const char* name = "batch_norm";

  BatchNorm(Shape input, const Config& config)
      : shape_(input), epsilon_(config.epsilon), momentum_(config.momentum) {
    if (!(config.epsilon > 0.0f)) throw Error(fmt::format("epsilon must be > 0, got {}", config.epsilon));
    if (!(config.momentum > 0.0f && config.momentum <= 1.0f)) {
      throw Error(fmt::format("the running moments' momentum must be in (0, 1], got {}", config.momentum));
    }
  }

  Shape output_shape() const { return shape_; }
  std::size_t parameter_count() const { return 4 * shape_.channels; }
  // gamma 1, beta 0, E[x] 0, E[x^2] 1 (a variance of 1 until the first batch arrives).
  void initialize(float* params, data::Rng&) const {
    const std::size_t c = shape_.channels;
    std::fill(params, params + c, 1.0f);
    std::fill(params + c, params + 3 * c, 0.0f);
    std::fill(params + 3 * c, params + 4 * c, 1.0f);
  }
  std::vector<StateSlots> state_slots() const { return {{2 * shape_.channels, 2 * shape_.channels, momentum_}}; }

  // The training pass's statistics, read by backward: mean, 1 / sqrt(var + eps), raw moments.
  template <class Backend>
  struct Workspace {
    typename Backend::buffer_type mean, inv_std, moments;
  };
  template <class Backend>
  Workspace<Backend> make_workspace(const Backend& backend, std::size_t /*max_batch*/) const {
    const std::size_t c = shape_.channels;
    return Workspace<Backend>{backend.make_buffer(c), backend.make_buffer(c), backend.make_buffer(2 * c)};
  }

  template <class Backend>
  void forward(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x, std::size_t count,
               float* y, bool training) const {
    const std::size_t c = shape_.channels;
    if (training) {
      backend.batch_norm_train(x, count, c, shape_.pixels(), params, params + c, epsilon_, y, Backend::data(ws.mean),
                               Backend::data(ws.inv_std), Backend::data(ws.moments));
    } else {
      backend.batch_norm_infer(x, count, c, shape_.pixels(), params, params + c, params + 2 * c, epsilon_, y);
    }
  }

  // grad = [dgamma, dbeta, the training pass's summed moments]; dx unless null.
  template <class Backend>
  void backward(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x, const float* /*y*/,
                const float* dy, std::size_t count, float* dx, float* grad) const {
    const std::size_t c = shape_.channels;
    backend.batch_norm_backward(x, dy, count, c, shape_.pixels(), params, Backend::data(ws.mean),
                                Backend::data(ws.inv_std), dx, grad, grad + c);
    backend.copy(Backend::data(ws.moments), 2 * c, grad + 2 * c);
  }

 private:
  Shape shape_;
  float epsilon_, momentum_;
};

// The same layer by the names the frameworks use: per channel after a convolution, per feature
// after a dense layer.
using BatchNorm2d = BatchNorm;
using BatchNorm1d = BatchNorm;

}  // namespace hpcps::nn
