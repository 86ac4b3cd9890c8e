#pragma once
// Average pooling over square windows (no padding). A window the size of the input is global
// average pooling: AvgPool2d::Config{7} on a Cx7x7 input gives C values.
#include <cstddef>

#include "hpcps/backend/window.hpp"
#include "hpcps/nn/layers/max_pool2d.hpp"  // detail::pool_geometry
#include "hpcps/nn/layers/stateless.hpp"
#include "hpcps/nn/shape.hpp"

namespace hpcps::nn {

class AvgPool2d : public StatelessLayer {
 public:
  struct Config {
    std::size_t window = 2;
    std::size_t stride = 0;  // 0: the window (non-overlapping)
  };
  static constexpr const char* name = "avg_pool2d";

  AvgPool2d(Shape input, const Config& config) : g_(detail::pool_geometry(input, config.window, config.stride)) {}

  Shape output_shape() const { return Shape{g_.channels, g_.out_height, g_.out_width}; }

  template <class Backend>
  void forward(const Backend& backend, Workspace<Backend>&, const float*, const float* x, std::size_t count, float* y,
               bool) const {
    backend.avg_pool(x, count, g_, y);
  }
  template <class Backend>
  void backward(const Backend& backend, Workspace<Backend>&, const float*, const float*, const float*, const float* dy,
                std::size_t count, float* dx, float*) const {
    if (dx != nullptr) backend.avg_pool_backward(dy, count, g_, dx);
  }

 private:
  backend::Window2d g_;
};

}  // namespace hpcps::nn
