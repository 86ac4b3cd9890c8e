#pragma once
// C x H x W -> (C*H*W) x 1 x 1, for a dense layer after convolutions. NCHW is already the flat
// order, so the values are copied unchanged.
#include <cstddef>

#include "hpcps/nn/layers/stateless.hpp"
#include "hpcps/nn/shape.hpp"

namespace hpcps::nn {

class Flatten : public StatelessLayer {
 public:
  struct Config {};
  static constexpr const char* name = "flatten";

  Flatten(Shape input, const Config&) : size_(input.size()) {}
  Shape output_shape() const { return Shape{size_, 1, 1}; }

  template <class Backend>
  void forward(const Backend& backend, Workspace<Backend>&, const float*, const float* x, std::size_t count, float* y,
               bool) const {
    backend.copy(x, count * size_, y);
  }
  template <class Backend>
  void backward(const Backend& backend, Workspace<Backend>&, const float*, const float*, const float*, const float* dy,
                std::size_t count, float* dx, float*) const {
    if (dx != nullptr) backend.copy(dy, count * size_, dx);
  }

 private:
  std::size_t size_;
};

}  // namespace hpcps::nn
