#pragma once
// Convolution by im2col + GEMM, written against the backend primitives only (im2col, col2im,
// gemm, channel_bias, channel_sums), so it runs on every backend: each sample's patches become a
// [C*k*k x P] matrix and y_n = W * cols_n. The method of the Thrust backends, and the reference the
// CPU backend's oneDNN method is tested against (backend/conv2d_method.hpp chooses per backend).
#include <algorithm>
#include <cstddef>

#include "hpcps/backend/gemm.hpp"
#include "hpcps/backend/window.hpp"

namespace hpcps::backend {

template <class Backend>
class Im2colConv2d {
 public:
  static constexpr const char* name = "im2col+gemm";

  Im2colConv2d() = default;  // an empty method, to be assigned one made for a layer
  // The columns of `chunk_` samples at a time: small enough to stay in cache between the copy and
  // the GEMM that reads it (~4 MiB), and never more than the batch.
  Im2colConv2d(const Backend& backend, const Window2d& g, std::size_t out_channels, std::size_t max_batch)
      : g_(g), out_channels_(out_channels) {
    const std::size_t per_sample = g_.patch() * g_.out_pixels();
    chunk_ = std::clamp<std::size_t>((std::size_t{1} << 20) / per_sample, 1, std::max<std::size_t>(max_batch, 1));
    cols_ = backend.make_buffer(chunk_ * per_sample);
  }

  // y = W * x + b over `count` NCHW samples; params = W [out x C x k x k], then b [out].
  void forward(const Backend& backend, const float* params, const float* x, std::size_t count, float* y) {
    const std::size_t K = g_.patch(), P = g_.out_pixels();
    float* cols = Backend::data(cols_);
    for (std::size_t begin = 0; begin < count; begin += chunk_) {
      const std::size_t n = std::min(chunk_, count - begin);
      backend.im2col(x + begin * g_.in_size(), n, g_, cols);
      for (std::size_t s = 0; s < n; ++s) {
        backend.gemm(Transpose::no, Transpose::no, out_channels_, P, K, 1.0f, params, K, cols + s * K * P, P, 0.0f,
                     y + (begin + s) * out_channels_ * P, P);
      }
    }
    backend.channel_bias(y, params + out_channels_ * K, count, out_channels_, P);
  }

  // y = Act(W * x + b): here a pass over y after the convolution.
  template <class Act>
  void forward_activated(const Backend& backend, const float* params, const float* x, std::size_t count, float* y) {
    forward(backend, params, x, count, y);
    backend.template activation<Act>(y, count * out_channels_ * g_.out_pixels(), y);
  }

  // grad = [dW, db] summed over the batch (overwritten); dx = d(loss)/dx unless null.
  // dW = sum_n dy_n cols_n^T; dcols_n = W^T dy_n overwrites cols_n once dW has read it; dx = col2im.
  void backward(const Backend& backend, const float* params, const float* x, const float* dy, std::size_t count,
                float* dx, float* grad) {
    const std::size_t K = g_.patch(), P = g_.out_pixels();
    float* cols = Backend::data(cols_);
    for (std::size_t begin = 0; begin < count; begin += chunk_) {
      const std::size_t n = std::min(chunk_, count - begin);
      backend.im2col(x + begin * g_.in_size(), n, g_, cols);
      for (std::size_t s = 0; s < n; ++s) {
        const float* dy_n = dy + (begin + s) * out_channels_ * P;
        float* cols_n = cols + s * K * P;
        backend.gemm(Transpose::no, Transpose::yes, out_channels_, K, P, 1.0f, dy_n, P, cols_n, P,
                     begin + s == 0 ? 0.0f : 1.0f, grad, K);
        if (dx != nullptr) {
          backend.gemm(Transpose::yes, Transpose::no, K, P, out_channels_, 1.0f, params, K, dy_n, P, 0.0f, cols_n, P);
        }
      }
      if (dx != nullptr) backend.col2im(cols, n, g_, dx + begin * g_.in_size());
    }
    backend.channel_sums(dy, count, out_channels_, P, grad + out_channels_ * K);
  }

  // Samples whose columns are built at once.
  std::size_t chunk() const { return chunk_; }

 private:
  Window2d g_;
  std::size_t out_channels_ = 0;
  std::size_t chunk_ = 1;
  typename Backend::buffer_type cols_;
};

}  // namespace hpcps::backend
