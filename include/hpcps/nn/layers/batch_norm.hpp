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
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hpcps/backend/channel_blocked.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/shape.hpp"
#include "hpcps/nn/state_slots.hpp"

namespace hpcps::nn {
namespace detail {
// Backends whose batch-norm kernels take an activation (both shipped ones): the normalisation and
// the activation after it run as one pass each way.
template <class B, class Act, class = void>
struct has_activated_batch_norm : std::false_type {};
template <class B, class Act>
struct has_activated_batch_norm<
    B, Act,
    std::void_t<decltype(std::declval<const B&>().template batch_norm_train<Act>(
                    (const float*)nullptr, std::size_t{}, std::size_t{}, std::size_t{}, (const float*)nullptr,
                    (const float*)nullptr, 1.0f, (float*)nullptr, (float*)nullptr, (float*)nullptr, (float*)nullptr,
                    (float*)nullptr)),
                decltype(std::declval<const B&>().template batch_norm_backward<Act>(
                    (const float*)nullptr, (const float*)nullptr, std::size_t{}, std::size_t{}, std::size_t{},
                    (const float*)nullptr, (const float*)nullptr, (const float*)nullptr, (float*)nullptr,
                    (float*)nullptr, (float*)nullptr, (const float*)nullptr))>> : std::true_type {};
// Backends with the training kernels over a channel-blocked input (backend::BasicCpu).
template <class B, class Act, class = void>
struct has_blocked_batch_norm : std::false_type {};
template <class B, class Act>
struct has_blocked_batch_norm<
    B, Act,
    std::void_t<decltype(std::declval<const B&>().template batch_norm_train<Act>(
                    backend::ChannelBlocked{}, std::size_t{}, std::size_t{}, std::size_t{}, (const float*)nullptr,
                    (const float*)nullptr, 1.0f, (float*)nullptr, (float*)nullptr, (float*)nullptr, (float*)nullptr,
                    (float*)nullptr)),
                decltype(std::declval<const B&>().template batch_norm_backward<Act>(
                    backend::ChannelBlocked{}, (const float*)nullptr, std::size_t{}, std::size_t{}, std::size_t{},
                    (const float*)nullptr, (const float*)nullptr, (const float*)nullptr, backend::ChannelBlocked{},
                    (float*)nullptr, (float*)nullptr, (const float*)nullptr))>> : std::true_type {};
}  // namespace detail

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

  // The training pass's statistics, read by backward: mean, 1 / sqrt(var + eps), raw moments;
  // with an activation fused, each channel's scale and shift.
  template <class Backend>
  struct Workspace {
    typename Backend::buffer_type mean, inv_std, moments, affine;
  };
  template <class Backend>
  Workspace<Backend> make_workspace(const Backend& backend, std::size_t /*max_batch*/) const {
    const std::size_t c = shape_.channels;
    return Workspace<Backend>{backend.make_buffer(c), backend.make_buffer(c), backend.make_buffer(2 * c),
                              backend.make_buffer(2 * c)};
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

  // y = Act(the normalisation): nn::Sequential fuses the activation layer after this one into it
  // (docs/layers.md#fusion), one pass over the output instead of two. The backward pass below then
  // runs that activation's backward pass as well, recomputing Act's input from x: neither the
  // normalised values nor Act's output are read back. Same floats as the two layers apart.
  template <class Act, class Backend, std::enable_if_t<detail::has_activated_batch_norm<Backend, Act>::value, int> = 0>
  void forward_activated(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x,
                         std::size_t count, float* y, bool training) const {
    const std::size_t c = shape_.channels;
    if (training) {
      backend.template batch_norm_train<Act>(x, count, c, shape_.pixels(), params, params + c, epsilon_, y,
                                             Backend::data(ws.mean), Backend::data(ws.inv_std),
                                             Backend::data(ws.moments), Backend::data(ws.affine));
    } else {
      backend.batch_norm_infer(x, count, c, shape_.pixels(), params, params + c, params + 2 * c, epsilon_, y);
      backend.template activation<Act>(y, count * shape_.size(), y);
    }
  }
  // dy: the gradient of forward_activated's output (Act's); y (Act's output) is not read.
  template <class Act, class Backend, std::enable_if_t<detail::has_activated_batch_norm<Backend, Act>::value, int> = 0>
  void backward_activated(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x,
                          const float* /*y*/, const float* dy, std::size_t count, float* dx, float* grad) const {
    const std::size_t c = shape_.channels;
    backend.template batch_norm_backward<Act>(x, dy, count, c, shape_.pixels(), params, Backend::data(ws.mean),
                                              Backend::data(ws.inv_std), dx, grad, grad + c,
                                              Backend::data(ws.affine));
    backend.copy(Backend::data(ws.moments), 2 * c, grad + 2 * c);
  }

  // The training passes over the channel-blocked output of the convolution before this layer
  // (nn::Sequential, where that layer keeps one: docs/layers.md#fusion), y = Act(the normalisation)
  // in NCHW and dx written blocked where the convolution's backward pass reads it: the floats of
  // forward_activated<Act> and backward_activated<Act> (of forward and backward with Identity).
  template <class Act, class Backend, std::enable_if_t<detail::has_blocked_batch_norm<Backend, Act>::value, int> = 0>
  void forward_from_blocked(const Backend& backend, Workspace<Backend>& ws, const float* params,
                            backend::ChannelBlocked x, std::size_t count, float* y) const {
    const std::size_t c = shape_.channels;
    backend.template batch_norm_train<Act>(x, count, c, shape_.pixels(), params, params + c, epsilon_, y,
                                           Backend::data(ws.mean), Backend::data(ws.inv_std),
                                           Backend::data(ws.moments), Backend::data(ws.affine));
  }
  template <class Act, class Backend, std::enable_if_t<detail::has_blocked_batch_norm<Backend, Act>::value, int> = 0>
  void backward_to_blocked(const Backend& backend, Workspace<Backend>& ws, const float* params,
                           backend::ChannelBlocked x, const float* dy, std::size_t count, backend::ChannelBlocked dx,
                           float* grad) const {
    const std::size_t c = shape_.channels;
    backend.template batch_norm_backward<Act>(x, dy, count, c, shape_.pixels(), params, Backend::data(ws.mean),
                                              Backend::data(ws.inv_std), dx, grad, grad + c,
                                              Backend::data(ws.affine));
    backend.copy(Backend::data(ws.moments), 2 * c, grad + 2 * c);
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
