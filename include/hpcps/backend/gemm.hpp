#pragma once
// GEMM providers for the CPU backend. Both are well-kept libraries; which one is the default is a
// measured choice (bench/gemm_shapes.cpp, docs/backends.md), not a guess.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include <Eigen/Core>
#include <cblas.h>

namespace hpcps::backend {

enum class Transpose { no, yes };

// C(m x n) = alpha * op(A)(m x k) * op(B)(k x n) + beta * C, all row-major, on `threads` threads
// (set_threads(threads) first, once per process).
struct EigenGemm {
  static constexpr const char* name = "eigen";

  static void set_threads(int threads) { Eigen::setNbThreads(threads); }

  // Eigen threads its GEMM itself, on OpenMP, with the count set_threads gave it.
  static void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                   const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                   std::size_t ldc, int /*threads*/ = 1) {
    using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using ConstMap = Eigen::Map<const Matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
    using Map = Eigen::Map<Matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
    const auto rows_a = static_cast<Eigen::Index>(ta == Transpose::no ? m : k);
    const auto cols_a = static_cast<Eigen::Index>(ta == Transpose::no ? k : m);
    const auto rows_b = static_cast<Eigen::Index>(tb == Transpose::no ? k : n);
    const auto cols_b = static_cast<Eigen::Index>(tb == Transpose::no ? n : k);
    ConstMap A(a, rows_a, cols_a, Eigen::OuterStride<>(static_cast<Eigen::Index>(lda)));
    ConstMap B(b, rows_b, cols_b, Eigen::OuterStride<>(static_cast<Eigen::Index>(ldb)));
    Map C(c, static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(n),
          Eigen::OuterStride<>(static_cast<Eigen::Index>(ldc)));
    // Four explicit cases keep Eigen on its GEMM kernel (an expression with a runtime transpose
    // flag would not compile to one).
    auto run = [&](const auto& op_a, const auto& op_b) {
      if (beta == 0.0f) {
        C.noalias() = alpha * op_a * op_b;
      } else {
        if (beta != 1.0f) C *= beta;
        C.noalias() += alpha * op_a * op_b;
      }
    };
    if (ta == Transpose::no && tb == Transpose::no) run(A, B);
    else if (ta == Transpose::no) run(A, B.transpose());
    else if (tb == Transpose::no) run(A.transpose(), B);
    else run(A.transpose(), B.transpose());
  }
};

struct CblasGemm {
  static constexpr const char* name = "openblas";

  // OpenBLAS itself runs one thread: its pthreads pool and OpenMP's (oneDNN's convolutions, our
  // elementwise kernels) each spin on both cores between calls, and a CNN step on 2 threads then
  // ran its dense layers 2x slower than on 1. A call with threads > 1 instead splits C into blocks,
  // one single-threaded OpenBLAS call per OpenMP thread, so one pool runs everything.
  static void set_threads(int /*threads*/) { openblas_set_num_threads(1); }

  static void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                   const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                   std::size_t ldc, int threads = 1) {
    const std::size_t parts = threads > 1 && m * n * k >= split_threshold ? static_cast<std::size_t>(threads) : 1;
    if (parts == 1) return gemm_block(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    // Blocks of C's rows (rows of op(A)) or of its columns (columns of op(B)), whichever C has
    // more of; column blocks are multiples of 16 floats so no two threads share a cache line of C.
    const bool by_rows = m >= n;
    const std::size_t extent = by_rows ? m : n;
    const std::size_t align = by_rows ? 1 : 16;
    const std::size_t step = (extent + parts * align - 1) / (parts * align) * align;
    const auto blocks = static_cast<std::ptrdiff_t>((extent + step - 1) / step);
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (std::ptrdiff_t i = 0; i < blocks; ++i) {
      const std::size_t begin = static_cast<std::size_t>(i) * step, size = std::min(step, extent - begin);
      if (by_rows) {
        const float* a_block = a + (ta == Transpose::no ? begin * lda : begin);
        gemm_block(ta, tb, size, n, k, alpha, a_block, lda, b, ldb, beta, c + begin * ldc, ldc);
      } else {
        const float* b_block = b + (tb == Transpose::no ? begin : begin * ldb);
        gemm_block(ta, tb, m, size, k, alpha, a, lda, b_block, ldb, beta, c + begin, ldc);
      }
    }
  }

 private:
  // Below about this many multiply-adds a parallel region costs more than half the GEMM.
  static constexpr std::size_t split_threshold = std::size_t{1} << 17;

  static void gemm_block(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                         const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                         std::size_t ldc) {
    // OpenBLAS clears C for beta = 0 with its own pass (sgemm_beta), which ran at about 13 GB/s and
    // took ~6% of a training step at 784-256-128-10, batch 128 (perf). memset clears the same
    // rows faster, and accumulating onto zeros is the same arithmetic, so results are unchanged:
    // local_training, 1 thread, 5 interleaved pairs, 74.0-75.0k -> 77.1-78.8k samples/s.
    if (beta == 0.0f) {
      for (std::size_t r = 0; r < m; ++r) std::memset(c + r * ldc, 0, n * sizeof(float));
      beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, ta == Transpose::no ? CblasNoTrans : CblasTrans,
                tb == Transpose::no ? CblasNoTrans : CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
                static_cast<int>(ldc));
  }
};

}  // namespace hpcps::backend
