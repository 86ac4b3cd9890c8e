#pragma once
// 2-D convolution (cross-correlation, as in every framework) over NCHW samples, computed by the
// backend's convolution method (backend/conv2d_method.hpp). Parameters: W as
// [out_channels x in_channels x k x k], then one bias per output channel.
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include <fmt/format.h>

#include "hpcps/backend/channel_blocked.hpp"
#include "hpcps/backend/conv2d_method.hpp"
#include "hpcps/backend/window.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/layers/max_pool2d.hpp"
#include "hpcps/nn/layers/stateless.hpp"
#include "hpcps/nn/shape.hpp"

namespace hpcps::nn {

class Conv2d {
 public:
  struct Config {
    std::size_t out_channels = 0;
    std::size_t kernel = 1;   // square, kernel x kernel
    std::size_t padding = 0;  // zeros on every side
    std::size_t stride = 1;
  };
  static constexpr const char* name = "conv2d";

  Conv2d(Shape input, const Config& config) : out_channels_(config.out_channels) {
    if (config.out_channels == 0 || config.kernel == 0 || config.stride == 0) {
      throw Error(fmt::format("out_channels, kernel and stride must be positive, got {}, {}, {}", config.out_channels,
                              config.kernel, config.stride));
    }
    const std::size_t h = input.height + 2 * config.padding, w = input.width + 2 * config.padding;
    if (config.kernel > h || config.kernel > w) {
      throw Error(fmt::format("kernel {}x{} does not fit the input {} padded by {} ({}x{})", config.kernel,
                              config.kernel, input, config.padding, h, w));
    }
    g_ = backend::Window2d::make(input.channels, input.height, input.width, config.kernel, config.stride,
                                 config.padding);
  }

  Shape output_shape() const { return Shape{out_channels_, g_.out_height, g_.out_width}; }
  std::size_t parameter_count() const { return out_channels_ * g_.patch() + out_channels_; }
  void initialize(float* params, data::Rng& rng) const {
    he_uniform(params, out_channels_ * g_.patch(), g_.patch(), rng);
    std::fill(params + out_channels_ * g_.patch(), params + parameter_count(), 0.0f);
  }
  const backend::Window2d& geometry() const { return g_; }

  // The backend's convolution method (backend/conv2d_method.hpp: oneDNN on backend::Cpu, im2col +
  // GEMM on Thrust), with its buffers and primitives made once for max_batch samples.
  template <class Backend>
  struct Workspace {
    backend::conv2d_method_t<Backend> method;
  };
  template <class Backend>
  Workspace<Backend> make_workspace(const Backend& backend, std::size_t max_batch) const {
    return Workspace<Backend>{backend::conv2d_method_t<Backend>(backend, g_, out_channels_, max_batch)};
  }

  template <class Backend>
  void forward(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x, std::size_t count,
               float* y, bool /*training*/) const {
    ws.method.forward(backend, params, x, count, y);
  }

  // y = Act(conv(x)), for nn::Sequential's fusion with the activation after this layer.
  template <class Act, class Backend>
  void forward_activated(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x,
                         std::size_t count, float* y, bool /*training*/) const {
    ws.method.template forward_activated<Act>(backend, params, x, count, y);
  }

  // y = max_pool(Act(conv(x))), for nn::Sequential's fusion with the activation and the max pooling
  // after this layer, where the backend's method runs them (backend::Cpu: docs/layers.md#fusion).
  template <class Act, class Backend, class Method = backend::conv2d_method_t<Backend>,
            std::enable_if_t<backend::conv2d_pools_after_v<Method, Act>, int> = 0>
  void forward_pooled(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x,
                      std::size_t count, const MaxPool2d& pool, float* y, bool /*training*/) const {
    ws.method.template forward_max_pooled<Act>(backend, params, x, count, pool.geometry(), y);
  }
  // Its backward pass: y and dy are the pooling's output and its gradient.
  template <class Act, class Backend, class Method = backend::conv2d_method_t<Backend>,
            std::enable_if_t<backend::conv2d_pools_after_v<Method, Act>, int> = 0>
  void backward_pooled(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x,
                       const float* y, const float* dy, std::size_t count, const MaxPool2d& pool, float* dx,
                       float* grad) const {
    ws.method.template backward_max_pooled<Act>(backend, params, x, y, dy, count, pool.geometry(), dx, grad);
  }

  // The training output kept channel-blocked for the batch normalization after this layer, where
  // the backend's method does so (backend::Cpu: docs/layers.md#fusion); empty where it does not.
  // nn::Sequential then runs forward_blocked, lets the next layer read blocked_output() and write
  // its input gradient into blocked_output_gradient(count), and runs backward_blocked.
  template <class Backend, class Method = backend::conv2d_method_t<Backend>,
            std::enable_if_t<backend::conv2d_hands_blocked_v<Method>, int> = 0>
  backend::ChannelBlocked blocked_output(const Workspace<Backend>& ws) const {
    return ws.method.blocked_output();
  }
  template <class Backend, class Method = backend::conv2d_method_t<Backend>,
            std::enable_if_t<backend::conv2d_hands_blocked_v<Method>, int> = 0>
  void forward_blocked(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x,
                       std::size_t count) const {
    ws.method.forward_blocked(backend, params, x, count);
  }
  template <class Backend, class Method = backend::conv2d_method_t<Backend>,
            std::enable_if_t<backend::conv2d_hands_blocked_v<Method>, int> = 0>
  backend::ChannelBlocked blocked_output_gradient(Workspace<Backend>& ws, std::size_t count) const {
    return ws.method.blocked_output_gradient(count);
  }
  template <class Backend, class Method = backend::conv2d_method_t<Backend>,
            std::enable_if_t<backend::conv2d_hands_blocked_v<Method>, int> = 0>
  void backward_blocked(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x,
                        std::size_t count, float* dx, float* grad) const {
    ws.method.backward_blocked(backend, params, x, count, dx, grad);
  }

  // grad = [dW, db] summed over the batch (overwritten); dx = d(loss)/dx unless null.
  template <class Backend>
  void backward(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x, const float* /*y*/,
                const float* dy, std::size_t count, float* dx, float* grad) const {
    ws.method.backward(backend, params, x, dy, count, dx, grad);
  }

 private:
  std::size_t out_channels_;
  backend::Window2d g_;
};

}  // namespace hpcps::nn
