#pragma once
// The CPU gradient backend: GEMM from a library (the Gemm policy), and the elementwise work
// fused into single passes over memory (bias + activation, softmax + loss + delta), threaded with
// OpenMP. Memory is ordinary host memory, so the parameter server hands MPI buffers to it directly.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "hpcps/backend/channel_blocked.hpp"
#include "hpcps/backend/detail/batch_norm_blocked_kernels.hpp"
#include "hpcps/backend/detail/batch_norm_kernels.hpp"
#include "hpcps/backend/detail/cpu_layer_kernels.hpp"
#include "hpcps/backend/detail/dnnl_conv2d.hpp"
#include "hpcps/backend/detail/dropout_hash.hpp"
#include "hpcps/backend/detail/softmax_row.hpp"
#include "hpcps/backend/gemm.hpp"
#include "hpcps/backend/window.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/batch_stats.hpp"

namespace hpcps::backend {

template <class Gemm>
class BasicCpu {
 public:
  using buffer_type = std::vector<float>;
  using label_buffer_type = std::vector<std::int32_t>;
  // The backend computes on host memory: callers may pass host pointers without staging.
  static constexpr bool host_accessible = true;
  static constexpr const char* name = Gemm::name;
  // nn::Conv2d runs on oneDNN's primitives here (backend/conv2d_method.hpp): 2-3x faster than
  // im2col + GEMM at the CNN's shapes (docs/backends.md, "Convolution: which method").
  using conv2d_method_type = detail::DnnlConv2d;

  explicit BasicCpu(int threads = 1) : threads_(threads) {
    if (threads < 1) throw Error(fmt::format("backend::Cpu: thread count must be >= 1, got {}", threads));
    Gemm::set_threads(threads);
  }

  int threads() const { return threads_; }

  buffer_type make_buffer(std::size_t n) const { return buffer_type(n, 0.0f); }
  label_buffer_type make_label_buffer(std::size_t n) const { return label_buffer_type(n, 0); }
  static float* data(buffer_type& b) { return b.data(); }
  static const float* data(const buffer_type& b) { return b.data(); }
  static std::int32_t* data(label_buffer_type& b) { return b.data(); }
  static const std::int32_t* data(const label_buffer_type& b) { return b.data(); }

  // Where a kernel may read a host array from: the host array itself, no copy.
  const float* stage(const float* host, std::size_t, buffer_type&) const { return host; }
  const std::int32_t* stage(const std::int32_t* host, std::size_t, label_buffer_type&) const { return host; }
  void upload(const float* host, std::size_t n, float* dst) const { std::copy(host, host + n, dst); }
  void download(const float* src, std::size_t n, float* host) const { std::copy(src, src + n, host); }

  void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
            std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) const {
    Gemm::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads_);
  }

  // y[r, :] = act(y[r, :] + bias) in place.
  template <class Activation>
  void bias_activation(float* y, const float* bias, std::size_t rows, std::size_t cols) const {
    const auto total = static_cast<std::ptrdiff_t>(rows);
#pragma omp parallel for num_threads(threads_) if (threads_ > 1 && rows * cols > parallel_threshold)
    for (std::ptrdiff_t r = 0; r < total; ++r) {
      float* row = y + static_cast<std::size_t>(r) * cols;
      for (std::size_t c = 0; c < cols; ++c) row[c] = Activation::forward(row[c] + bias[c]);
    }
  }

  // delta *= act'(.) given the activation's outputs.
  template <class Activation>
  void activation_backward(float* delta, const float* output, std::size_t n) const {
    const auto total = static_cast<std::ptrdiff_t>(n);
    // The if clause names `parallel`: unqualified, OpenMP 5 applies it to the simd part too, and
    // GCC then runs the single-thread case as a scalar loop with a data-dependent branch (ReLU's
    // mask), 15x slower than the vector loop (~210 us of a ~2 ms step at batch 128).
#pragma omp parallel for simd num_threads(threads_) if (parallel : threads_ > 1 && n > parallel_threshold)
    for (std::ptrdiff_t i = 0; i < total; ++i) delta[i] *= Activation::derivative_from_output(output[i]);
  }

  // out[c] = sum_r m[r, c]: the bias gradient.
  void column_sums(const float* m, std::size_t rows, std::size_t cols, float* out) const {
    std::fill(out, out + cols, 0.0f);
    for (std::size_t r = 0; r < rows; ++r) {
      const float* row = m + r * cols;
#pragma omp simd
      for (std::size_t c = 0; c < cols; ++c) out[c] += row[c];
    }
  }

  // One pass per row: log-sum-exp loss, argmax for accuracy, and the logits overwritten with
  // d(loss)/d(logits) = softmax - onehot (for the sum of per-sample losses).
  nn::BatchStats softmax_cross_entropy(float* logits, const std::int32_t* labels, std::size_t rows,
                                       std::size_t cols, bool write_delta) const {
    double loss = 0.0;
    std::size_t correct = 0;
    const auto total = static_cast<std::ptrdiff_t>(rows);
#pragma omp parallel for num_threads(threads_) reduction(+ : loss, correct) if (threads_ > 1 && rows * cols > parallel_threshold)
    for (std::ptrdiff_t r = 0; r < total; ++r) {
      const detail::RowLoss row = detail::softmax_cross_entropy_row(logits + static_cast<std::size_t>(r) * cols,
                                                                    static_cast<std::size_t>(labels[r]), cols, write_delta);
      loss += static_cast<double>(row.loss);
      correct += row.hit ? 1 : 0;
    }
    return nn::BatchStats{loss, correct, rows};
  }

  // ---- Layer kernels (docs/layers.md#backend-primitives). Samples are NCHW, batch-major. ----

  // cols[n] = im2col of sample n, a [g.patch() x g.out_pixels()] matrix, samples one after another.
  void im2col(const float* x, std::size_t count, const Window2d& g, float* cols) const {
    over_samples(count, g.patch() * g.out_pixels(), [&](std::size_t n) {
      detail::im2col_sample(x + n * g.in_size(), g, cols + n * g.patch() * g.out_pixels());
    });
  }

  // dx = the adjoint of im2col (overwritten, not accumulated).
  void col2im(const float* cols, std::size_t count, const Window2d& g, float* dx) const {
    over_samples(count, g.patch() * g.out_pixels(), [&](std::size_t n) {
      detail::col2im_sample(cols + n * g.patch() * g.out_pixels(), g, dx + n * g.in_size());
    });
  }

  // y[n][c][p] += bias[c].
  void channel_bias(float* y, const float* bias, std::size_t count, std::size_t channels, std::size_t pixels) const {
    over_samples(count, channels * pixels, [&](std::size_t n) {
      for (std::size_t c = 0; c < channels; ++c) {
        float* plane = y + (n * channels + c) * pixels;
        const float b = bias[c];
#pragma omp simd
        for (std::size_t p = 0; p < pixels; ++p) plane[p] += b;
      }
    });
  }

  // out[c] = sum over samples and pixels of dy[n][c][p]: a convolution's bias gradient.
  void channel_sums(const float* dy, std::size_t count, std::size_t channels, std::size_t pixels, float* out) const {
    for (std::size_t c = 0; c < channels; ++c) {
      float sum = 0.0f;
      for (std::size_t n = 0; n < count; ++n) {
        const float* plane = dy + (n * channels + c) * pixels;
        for (std::size_t p = 0; p < pixels; ++p) sum += plane[p];
      }
      out[c] = sum;
    }
  }

  // y = window maxima; argmax[n][c][o] = the maximum's index within its input plane (iy * width + ix).
  void max_pool(const float* x, std::size_t count, const Window2d& g, float* y, std::int32_t* argmax) const {
    over_samples(count, g.in_size(), [&](std::size_t n) {
      detail::max_pool_sample(x + n * g.in_size(), g, y + n * g.out_size(), argmax + n * g.out_size());
    });
  }

  // dx = dy routed back to each window's maximum (overwritten).
  void max_pool_backward(const float* dy, const std::int32_t* argmax, std::size_t count, const Window2d& g,
                         float* dx) const {
    over_samples(count, g.in_size(), [&](std::size_t n) {
      detail::max_pool_backward_sample(dy + n * g.out_size(), argmax + n * g.out_size(), g, dx + n * g.in_size());
    });
  }

  void avg_pool(const float* x, std::size_t count, const Window2d& g, float* y) const {
    over_samples(count, g.in_size(), [&](std::size_t n) {
      detail::avg_pool_sample(x + n * g.in_size(), g, y + n * g.out_size());
    });
  }

  void avg_pool_backward(const float* dy, std::size_t count, const Window2d& g, float* dx) const {
    over_samples(count, g.in_size(), [&](std::size_t n) {
      detail::avg_pool_backward_sample(dy + n * g.out_size(), g, dx + n * g.in_size());
    });
  }

  // y = Act(x), out of place.
  template <class Activation>
  void activation(const float* x, std::size_t n, float* y) const {
    const auto total = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd num_threads(threads_) if (parallel : threads_ > 1 && n > parallel_threshold)
    for (std::ptrdiff_t i = 0; i < total; ++i) y[i] = Activation::forward(x[i]);
  }

  // dx = dy * Act'(.) given the activation's outputs y; dx may be dy.
  template <class Activation>
  void activation_gradient(const float* dy, const float* y, std::size_t n, float* dx) const {
    const auto total = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd num_threads(threads_) if (parallel : threads_ > 1 && n > parallel_threshold)
    for (std::ptrdiff_t i = 0; i < total; ++i) dx[i] = dy[i] * Activation::derivative_from_output(y[i]);
  }

  void copy(const float* src, std::size_t n, float* dst) const { std::copy(src, src + n, dst); }

  // out = a * b elementwise; out may be a or b.
  void multiply(const float* a, const float* b, std::size_t n, float* out) const {
    const auto total = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd num_threads(threads_) if (parallel : threads_ > 1 && n > parallel_threshold)
    for (std::ptrdiff_t i = 0; i < total; ++i) out[i] = a[i] * b[i];
  }

  // out = Act(a + b) elementwise (a residual block's sum and the activation after it in one
  // pass); out may be a or b.
  template <class Act = nn::Identity>
  void add(const float* a, const float* b, std::size_t n, float* out) const {
    const auto total = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd num_threads(threads_) if (parallel : threads_ > 1 && n > parallel_threshold)
    for (std::ptrdiff_t i = 0; i < total; ++i) out[i] = Act::forward(a[i] + b[i]);
  }

  // Batch normalization over samples and pixels, channel by channel (nn::BatchNorm; the kernels
  // in backend/detail/batch_norm_kernels.hpp, shared with the Thrust backend). Training: y, the
  // channel's mean and 1 / sqrt(var + eps) for the backward pass, and its summed raw moments.
  // Act: y = Act(the normalisation), with each channel's scale and shift in `affine` [2 x channels]
  // for batch_norm_backward<Act>.
  template <class Act = nn::Identity>
  void batch_norm_train(const float* x, std::size_t count, std::size_t channels, std::size_t pixels,
                        const float* gamma, const float* beta, float epsilon, float* y, float* mean, float* inv_std,
                        float* moments, float* affine = nullptr) const {
    over_channels(channels, count * pixels,
                  detail::BatchNormTrainChannel<Act>{x, gamma, beta, y, mean, inv_std, moments, count, channels,
                                                     pixels, epsilon, affine});
  }
  // Evaluation: normalised by the running moments `running` (E[x] per channel, then E[x^2]).
  void batch_norm_infer(const float* x, std::size_t count, std::size_t channels, std::size_t pixels,
                        const float* gamma, const float* beta, const float* running, float epsilon, float* y) const {
    const detail::BatchNormInferElement element{x, gamma, beta, running, y, channels, pixels, epsilon};
    const auto total = static_cast<std::ptrdiff_t>(count * channels * pixels);
#pragma omp parallel for num_threads(threads_) if (threads_ > 1 && count * channels * pixels > parallel_threshold)
    for (std::ptrdiff_t i = 0; i < total; ++i) element(static_cast<std::size_t>(i));
  }
  // dgamma, dbeta (overwritten) and dx unless null, from the training pass's mean and inv_std.
  // Act: dy is the gradient of batch_norm_train<Act>'s y, and `affine` what that pass kept.
  template <class Act = nn::Identity>
  void batch_norm_backward(const float* x, const float* dy, std::size_t count, std::size_t channels,
                           std::size_t pixels, const float* gamma, const float* mean, const float* inv_std, float* dx,
                           float* dgamma, float* dbeta, const float* affine = nullptr) const {
    over_channels(channels, count * pixels,
                  detail::BatchNormBackwardChannel<Act>{x, dy, gamma, mean, inv_std, dx, dgamma, dbeta, count,
                                                        channels, pixels, affine});
  }

  // The same two passes with x held channel-blocked (the convolution before the layer kept its
  // output so: backend/channel_blocked.hpp): y and dy in NCHW, dx written blocked. The same floats
  // as batch_norm_train and batch_norm_backward (backend/detail/batch_norm_blocked_kernels.hpp).
  template <class Act = nn::Identity>
  void batch_norm_train(ChannelBlocked x, std::size_t count, std::size_t channels, std::size_t pixels,
                        const float* gamma, const float* beta, float epsilon, float* y, float* mean, float* inv_std,
                        float* moments, float* affine = nullptr) const {
    const std::size_t span = blocked_span(x, x, channels);
    with_block(x.block, [&](auto block) {
      over_channels(channels / (span * detail::batch_norm_group), span * detail::batch_norm_group * count * pixels,
                    detail::BatchNormTrainBlocked<Act, decltype(block)::value>{
                        x, gamma, beta, y, mean, inv_std, moments, count, channels, pixels, epsilon, affine, span});
    });
  }
  template <class Act = nn::Identity>
  void batch_norm_backward(ChannelBlocked x, const float* dy, std::size_t count, std::size_t channels,
                           std::size_t pixels, const float* gamma, const float* mean, const float* inv_std,
                           ChannelBlocked dx, float* dgamma, float* dbeta, const float* affine = nullptr) const {
    const std::size_t span = blocked_span(x, dx, channels);
    with_block(x.block, [&](auto block) {
      over_channels(channels / (span * detail::batch_norm_group), span * detail::batch_norm_group * count * pixels,
                    detail::BatchNormBackwardBlocked<Act, decltype(block)::value>{
                        x, dy, gamma, mean, inv_std, dx, dgamma, dbeta, count, channels, pixels, affine, span});
    });
  }

  // mask[i] = 1/keep with probability keep, else 0, as a function of (seed, first + i) only.
  void dropout_mask(float* mask, std::size_t n, float keep, std::uint64_t seed, std::size_t first) const {
    const auto total = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for num_threads(threads_) if (threads_ > 1 && n > parallel_threshold)
    for (std::ptrdiff_t i = 0; i < total; ++i) {
      mask[i] = detail::dropout_mask_value(seed, first + static_cast<std::size_t>(i), keep);
    }
  }

 private:
  // Below this many elements a parallel region costs more than it saves.
  static constexpr std::size_t parallel_threshold = 1u << 15;
  // Runs body(n) for every sample, over the backend's threads when the batch holds enough work
  // (`per_sample` elements each) to pay for a parallel region. Each sample has one writer.
  template <class Body>
  void over_samples(std::size_t count, std::size_t per_sample, Body&& body) const {
    const auto total = static_cast<std::ptrdiff_t>(count);
#pragma omp parallel for num_threads(threads_) if (threads_ > 1 && count > 1 && count * per_sample > parallel_threshold)
    for (std::ptrdiff_t n = 0; n < total; ++n) body(static_cast<std::size_t>(n));
  }

  // Groups of 8 channels per work item of the blocked batch-norm kernels: a whole block where
  // there are enough blocks for the threads (each pixel's cache line read once), else one group.
  std::size_t blocked_span(ChannelBlocked x, ChannelBlocked other, std::size_t channels) const {
    if (!x || !other || (x.block != 8 && x.block != 16) || other.block != x.block || channels % x.block != 0) {
      throw Error(fmt::format("backend::Cpu: batch normalization over channel blocks of {} (and {}) needs blocks of "
                              "8 or 16 channels that divide its {}",
                              x.block, other.block, channels));
    }
    const std::size_t blocks = channels / x.block;
    return blocks >= static_cast<std::size_t>(threads_) ? x.block / detail::batch_norm_group : 1;
  }
  // body(std::integral_constant<std::size_t, block>{}): the kernels' strides known to the compiler.
  template <class Body>
  static void with_block(std::size_t block, Body&& body) {
    if (block == 16) {
      body(std::integral_constant<std::size_t, 16>{});
    } else {
      body(std::integral_constant<std::size_t, 8>{});
    }
  }

  template <class Body>
  void over_channels(std::size_t channels, std::size_t per_channel, Body&& body) const {
    const auto total = static_cast<std::ptrdiff_t>(channels);
#pragma omp parallel for num_threads(threads_) if (threads_ > 1 && channels > 1 && channels * per_channel > parallel_threshold)
    for (std::ptrdiff_t c = 0; c < total; ++c) body(static_cast<std::size_t>(c));
  }

  int threads_ = 1;
};

// OpenBLAS is the default because it measured faster at MLP shapes here: gradient of
// 784-256-128-10, batch 64, one thread, 67k samples/s against Eigen's 55k (bench/gemm_providers,
// docs/backends.md), and again at batch 128 on one thread with the step's GEMMs timed one by one:
// OpenBLAS 70-84 GFLOP/s on the large shapes, Eigen (AVX2: no AVX-512 is exposed here) 50-64, and
// no shape where Eigen wins by enough to pay for a per-shape provider. Eigen stays available as
// CpuEigen.
using Cpu = BasicCpu<CblasGemm>;
using CpuEigen = BasicCpu<EigenGemm>;

}  // namespace hpcps::backend
