#pragma once
// 2-D convolution (cross-correlation, as in every framework) over NCHW samples by im2col + GEMM:
// each sample's patches become a [C*k*k x P] matrix and y_n = W * cols_n. Parameters: W as
// [out_channels x in_channels x k x k], then one bias per output channel.
#include <algorithm>
#include <cstddef>

#include <fmt/format.h>

#include "hpcps/backend/gemm.hpp"
#include "hpcps/backend/window.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/error.hpp"
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

  // im2col columns for `chunk` samples at a time: small enough to stay in cache between the
  // copy and the GEMM that reads it (~4 MiB), and never more than the batch.
  template <class Backend>
  struct Workspace {
    typename Backend::buffer_type cols;
    std::size_t chunk = 1;
  };
  template <class Backend>
  Workspace<Backend> make_workspace(const Backend& backend, std::size_t max_batch) const {
    Workspace<Backend> ws;
    const std::size_t per_sample = g_.patch() * g_.out_pixels();
    ws.chunk = std::clamp<std::size_t>((std::size_t{1} << 20) / per_sample, 1, std::max<std::size_t>(max_batch, 1));
    ws.cols = backend.make_buffer(ws.chunk * per_sample);
    return ws;
  }

  template <class Backend>
  void forward(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x, std::size_t count,
               float* y, bool /*training*/) const {
    const std::size_t K = g_.patch(), P = g_.out_pixels();
    float* cols = Backend::data(ws.cols);
    for (std::size_t begin = 0; begin < count; begin += ws.chunk) {
      const std::size_t n = std::min(ws.chunk, count - begin);
      backend.im2col(x + begin * g_.in_size(), n, g_, cols);
      for (std::size_t s = 0; s < n; ++s) {
        backend.gemm(backend::Transpose::no, backend::Transpose::no, out_channels_, P, K, 1.0f, params, K,
                     cols + s * K * P, P, 0.0f, y + (begin + s) * out_channels_ * P, P);
      }
    }
    backend.channel_bias(y, params + out_channels_ * K, count, out_channels_, P);
  }

  // dW = sum_n dy_n cols_n^T; dcols_n = W^T dy_n overwrites cols_n once dW has read it; dx = col2im.
  template <class Backend>
  void backward(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x, const float* /*y*/,
                const float* dy, std::size_t count, float* dx, float* grad) const {
    const std::size_t K = g_.patch(), P = g_.out_pixels();
    float* cols = Backend::data(ws.cols);
    for (std::size_t begin = 0; begin < count; begin += ws.chunk) {
      const std::size_t n = std::min(ws.chunk, count - begin);
      backend.im2col(x + begin * g_.in_size(), n, g_, cols);
      for (std::size_t s = 0; s < n; ++s) {
        const float* dy_n = dy + (begin + s) * out_channels_ * P;
        float* cols_n = cols + s * K * P;
        backend.gemm(backend::Transpose::no, backend::Transpose::yes, out_channels_, K, P, 1.0f, dy_n, P, cols_n, P,
                     begin + s == 0 ? 0.0f : 1.0f, grad, K);
        if (dx != nullptr) {
          backend.gemm(backend::Transpose::yes, backend::Transpose::no, K, P, out_channels_, 1.0f, params, K, dy_n, P,
                       0.0f, cols_n, P);
        }
      }
      if (dx != nullptr) backend.col2im(cols, n, g_, dx + begin * g_.in_size());
    }
    backend.channel_sums(dy, count, out_channels_, P, grad + out_channels_ * K);
  }

 private:
  std::size_t out_channels_;
  backend::Window2d g_;
};

}  // namespace hpcps::nn
