#pragma once
// An activation policy (nn::Relu, Tanh, Sigmoid, Identity) as a layer of its own. nn::Sequential
// wraps a policy in it automatically, so users write nn::Relu in a layer list.
#include <cstddef>

#include "hpcps/nn/activation.hpp"
#include "hpcps/nn/layers/stateless.hpp"
#include "hpcps/nn/shape.hpp"

namespace hpcps::nn {

template <class Act>
class ActivationLayer : public StatelessLayer {
 public:
  using activation_type = Act;
  struct Config {};
  static constexpr const char* name = Act::name;

  ActivationLayer(Shape input, const Config&) : shape_(input) {}
  Shape output_shape() const { return shape_; }

  template <class Backend>
  void forward(const Backend& backend, Workspace<Backend>&, const float*, const float* x, std::size_t count, float* y,
               bool) const {
    backend.template activation<Act>(x, count * shape_.size(), y);
  }
  // The derivative from the output y, the form every activation policy provides.
  template <class Backend>
  void backward(const Backend& backend, Workspace<Backend>&, const float*, const float*, const float* y,
                const float* dy, std::size_t count, float* dx, float*) const {
    if (dx != nullptr) backend.template activation_gradient<Act>(dy, y, count * shape_.size(), dx);
  }

 private:
  Shape shape_;
};

}  // namespace hpcps::nn
