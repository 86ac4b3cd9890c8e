#pragma once
// Max pooling over square windows (no padding). The forward pass records each window's argmax in
// the workspace, so the backward pass routes the gradient without searching the window again.
#include <cstddef>

#include <fmt/format.h>

#include "hpcps/backend/window.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/layers/stateless.hpp"
#include "hpcps/nn/shape.hpp"

namespace hpcps::nn {

namespace detail {
// Shared by the pooling layers: the window must fit, stride 0 means "the window".
inline backend::Window2d pool_geometry(Shape input, std::size_t window, std::size_t stride) {
  if (window == 0) throw Error("the pooling window must be positive, got 0");
  if (window > input.height || window > input.width) {
    throw Error(fmt::format("window {}x{} is larger than the input {}", window, window, input));
  }
  return backend::Window2d::make(input.channels, input.height, input.width, window, stride == 0 ? window : stride, 0);
}
}  // namespace detail

class MaxPool2d : public StatelessLayer {
 public:
  struct Config {
    std::size_t window = 2;
    std::size_t stride = 0;  // 0: the window (non-overlapping)
  };
  static constexpr const char* name = "max_pool2d";

  MaxPool2d(Shape input, const Config& config) : g_(detail::pool_geometry(input, config.window, config.stride)) {}

  Shape output_shape() const { return Shape{g_.channels, g_.out_height, g_.out_width}; }
  const backend::Window2d& geometry() const { return g_; }

  template <class Backend>
  struct Workspace {
    typename Backend::label_buffer_type argmax;  // [max_batch x output size]
    typename Backend::buffer_type scaled_dy;     // [max_batch x output size], for backward_through
  };
  template <class Backend>
  Workspace<Backend> make_workspace(const Backend& backend, std::size_t max_batch) const {
    return Workspace<Backend>{backend.make_label_buffer(max_batch * g_.out_size()),
                              backend.make_buffer(max_batch * g_.out_size())};
  }

  template <class Backend>
  void forward(const Backend& backend, Workspace<Backend>& ws, const float*, const float* x, std::size_t count,
               float* y, bool) const {
    backend.max_pool(x, count, g_, y, Backend::data(ws.argmax));
  }
  template <class Backend>
  void backward(const Backend& backend, Workspace<Backend>& ws, const float*, const float*, const float*,
                const float* dy, std::size_t count, float* dx, float*) const {
    if (dx != nullptr) backend.max_pool_backward(dy, Backend::data(ws.argmax), count, g_, dx);
  }
  // The backward pass of the activation Act before this layer too: dx = d(loss)/d(Act's input).
  // Only each window's maximum gets a gradient, and Act'(x) there is Act'(y) of this layer's
  // output y, so the derivative costs a pass over y, a quarter of x for 2x2 windows.
  template <class Act, class Backend>
  void backward_through(const Backend& backend, Workspace<Backend>& ws, const float*, const float*, const float* y,
                        const float* dy, std::size_t count, float* dx, float*) const {
    if (dx == nullptr) return;
    float* scaled = Backend::data(ws.scaled_dy);
    backend.template activation_gradient<Act>(dy, y, count * g_.out_size(), scaled);
    backend.max_pool_backward(scaled, Backend::data(ws.argmax), count, g_, dx);
  }

 private:
  backend::Window2d g_;
};

}  // namespace hpcps::nn
