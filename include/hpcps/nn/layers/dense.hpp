#pragma once
// Fully connected layer: y = x W^T + b on flat inputs. Parameters: W as [units x inputs]
// row-major, then b, the layout of one nn::Mlp layer, so the two agree parameter for parameter.
#include <algorithm>
#include <cstddef>

#include <fmt/format.h>

#include "hpcps/backend/gemm.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/activation.hpp"
#include "hpcps/nn/layers/stateless.hpp"
#include "hpcps/nn/shape.hpp"

namespace hpcps::nn {

class Dense {
 public:
  struct Config {
    std::size_t units = 0;
  };
  static constexpr const char* name = "dense";

  Dense(Shape input, const Config& config) : in_(input.size()), out_(config.units) {
    if (!input.flat()) {
      throw Error(fmt::format("input {} is not flat: put nn::Flatten before a dense layer", input));
    }
    if (out_ == 0) throw Error("a dense layer needs at least one unit, got units = 0");
  }

  Shape output_shape() const { return Shape{out_, 1, 1}; }
  std::size_t parameter_count() const { return out_ * in_ + out_; }
  void initialize(float* params, data::Rng& rng) const {
    he_uniform(params, out_ * in_, in_, rng);
    std::fill(params + out_ * in_, params + parameter_count(), 0.0f);
  }

  template <class Backend>
  struct Workspace {};
  template <class Backend>
  Workspace<Backend> make_workspace(const Backend&, std::size_t) const {
    return {};
  }

  template <class Backend>
  void forward(const Backend& backend, Workspace<Backend>&, const float* params, const float* x, std::size_t count,
               float* y, bool /*training*/) const {
    forward_activated<Identity>(backend, params, x, count, y);
  }

  template <class Backend>
  void backward(const Backend& backend, Workspace<Backend>&, const float* params, const float* x, const float* /*y*/,
                const float* dy, std::size_t count, float* dx, float* grad) const {
    parameter_gradient(backend, x, dy, count, grad);
    if (dx != nullptr) input_gradient(backend, params, dy, count, dx);
  }

  // y = Act(x W^T + b), for nn::Sequential's fusion with the activation after this layer.
  template <class Act, class Backend>
  void forward_activated(const Backend& backend, Workspace<Backend>&, const float* params, const float* x,
                         std::size_t count, float* y, bool /*training*/) const {
    forward_activated<Act>(backend, params, x, count, y);
  }

  // The two halves of the passes, for networks that fuse or interleave them (nn::Mlp): the
  // forward pass with an activation applied in the bias pass, one sweep over y instead of two;
  // the parameter gradient [dW, db] and the input gradient separately, so the parameters' slice
  // can be pushed before the input gradient is computed.
  template <class Act, class Backend>
  void forward_activated(const Backend& backend, const float* params, const float* x, std::size_t count,
                         float* y) const {
    backend.gemm(backend::Transpose::no, backend::Transpose::yes, count, out_, in_, 1.0f, x, in_, params, in_, 0.0f, y,
                 out_);
    backend.template bias_activation<Act>(y, params + out_ * in_, count, out_);
  }
  template <class Backend>
  void parameter_gradient(const Backend& backend, const float* x, const float* dy, std::size_t count,
                          float* grad) const {
    backend.gemm(backend::Transpose::yes, backend::Transpose::no, out_, in_, count, 1.0f, dy, out_, x, in_, 0.0f, grad,
                 in_);
    backend.column_sums(dy, count, out_, grad + out_ * in_);
  }
  template <class Backend>
  void input_gradient(const Backend& backend, const float* params, const float* dy, std::size_t count,
                      float* dx) const {
    backend.gemm(backend::Transpose::no, backend::Transpose::no, count, in_, out_, 1.0f, dy, out_, params, in_, 0.0f,
                 dx, in_);
  }

 private:
  std::size_t in_, out_;
};

}  // namespace hpcps::nn
