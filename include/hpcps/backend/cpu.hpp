#pragma once
// The CPU gradient backend: GEMM from a library (the Gemm policy), and the elementwise work
// fused into single passes over memory (bias + activation, softmax + loss + delta), threaded with
// OpenMP. Memory is ordinary host memory, so the parameter server hands MPI buffers to it directly.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "hpcps/backend/detail/softmax_row.hpp"
#include "hpcps/backend/gemm.hpp"
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

  explicit BasicCpu(int threads = 1) : threads_(threads) {
    if (threads < 1) throw Error(fmt::format("backend::Cpu: thread count must be >= 1, got {}", threads));
    Gemm::set_threads(threads);
  }

  int threads() const { return threads_; }

  buffer_type make_buffer(std::size_t n) const { return buffer_type(n, 0.0f); }
  label_buffer_type make_label_buffer(std::size_t n) const { return label_buffer_type(n, 0); }
  static float* data(buffer_type& b) { return b.data(); }
  static const float* data(const buffer_type& b) { return b.data(); }

  // Where a kernel may read a host array from: the host array itself, no copy.
  const float* stage(const float* host, std::size_t, buffer_type&) const { return host; }
  const std::int32_t* stage(const std::int32_t* host, std::size_t, label_buffer_type&) const { return host; }
  void upload(const float* host, std::size_t n, float* dst) const { std::copy(host, host + n, dst); }
  void download(const float* src, std::size_t n, float* host) const { std::copy(src, src + n, host); }

  void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
            std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) const {
    Gemm::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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

 private:
  // Below this many elements a parallel region costs more than it saves.
  static constexpr std::size_t parallel_threshold = 1u << 15;
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
