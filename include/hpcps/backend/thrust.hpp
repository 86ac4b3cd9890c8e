#pragma once
// The Thrust gradient backend: the same kernels as backend::Cpu written once as Thrust algorithms
// over the backend's memory, with the device system chosen by type (Thrust's own system tags),
// so one program can hold a CPU and a GPU composition side by side:
//
//   hpcps::backend::ThrustOmp   Thrust<thrust::system::omp::tag>   OpenMP threads, host memory
//   hpcps::backend::ThrustCpp   Thrust<thrust::system::cpp::tag>   serial, host memory
//   hpcps::backend::ThrustCuda  Thrust<thrust::system::cuda::tag>  CUDA, device memory (nvcc only)
//
// GEMM goes to CBLAS on the host systems and to cuBLAS on CUDA (row sums too, as GEMVs). Everything
// else (bias + activation, activation derivative, softmax + loss + delta) is a fused Thrust
// for_each. Needs Thrust's headers (CCCL, under /usr/local/cuda/include/cccl) and, for
// the OpenMP system, -fopenmp; target hpcps::thrust in CMake provides both.
#include <cstddef>
#include <cstdint>
#include <memory>

#include <omp.h>

#include <fmt/format.h>
#include <thrust/copy.h>
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cpp/execution_policy.h>
#include <thrust/system/cpp/vector.h>
#include <thrust/system/omp/execution_policy.h>
#include <thrust/system/omp/vector.h>

#include "hpcps/backend/detail/batch_norm_kernels.hpp"
#include "hpcps/backend/detail/thrust_kernels.hpp"
#include "hpcps/backend/gemm.hpp"
#include "hpcps/backend/window.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/batch_stats.hpp"

#if defined(__CUDACC__)
#include "hpcps/backend/detail/cuda_system.hpp"
#endif

namespace hpcps::backend {
namespace detail {

// What differs between Thrust's systems: where vectors live, the execution policy, the GEMM.
// The host systems share host memory and OpenBLAS.
struct HostThrustSystem {
  template <class T>
  using host_allocator = std::allocator<T>;
  static constexpr bool host_accessible = true;
  template <class Context>
  static void gemm(Context& context, Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                   const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                   std::size_t ldc) {
    CblasGemm::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, context.threads);
  }
};

template <>
struct ThrustSystem<thrust::system::omp::tag> : HostThrustSystem {
  template <class T>
  using vector = thrust::omp::vector<T>;
  static constexpr const char* name = "thrust-omp";
  struct Context {
    explicit Context(int thread_count) : threads(thread_count) {
      omp_set_num_threads(threads);
      CblasGemm::set_threads(threads);
    }
    int threads;
  };
  static auto policy(Context&) { return thrust::omp::par; }
};

template <>
struct ThrustSystem<thrust::system::cpp::tag> : HostThrustSystem {
  template <class T>
  using vector = thrust::cpp::vector<T>;
  static constexpr const char* name = "thrust-cpp";
  struct Context {
    explicit Context(int thread_count) : threads(thread_count) { CblasGemm::set_threads(threads); }
    int threads;
  };
  static auto policy(Context&) { return thrust::cpp::par; }
};

}  // namespace detail

template <class SystemTag>
class Thrust {
  using System = detail::ThrustSystem<SystemTag>;

 public:
  using system_tag = SystemTag;
  using buffer_type = typename System::template vector<float>;
  using label_buffer_type = typename System::template vector<std::int32_t>;
  // Host memory for the worker's MPI buffers: page-locked on CUDA.
  template <class T>
  using host_allocator = typename System::template host_allocator<T>;
  static constexpr bool host_accessible = System::host_accessible;
  static constexpr const char* name = System::name;

  explicit Thrust(int threads = 1)
      : threads_(threads), context_(std::make_shared<typename System::Context>(check_threads(threads))) {}

  int threads() const { return threads_; }

  buffer_type make_buffer(std::size_t n) const { return buffer_type(n, 0.0f); }
  label_buffer_type make_label_buffer(std::size_t n) const { return label_buffer_type(n, 0); }
  static float* data(buffer_type& b) { return thrust::raw_pointer_cast(b.data()); }
  static const float* data(const buffer_type& b) { return thrust::raw_pointer_cast(b.data()); }
  static std::int32_t* data(label_buffer_type& b) { return thrust::raw_pointer_cast(b.data()); }
  static const std::int32_t* data(const label_buffer_type& b) { return thrust::raw_pointer_cast(b.data()); }

  // A host array as kernels can read it: the array itself on host systems, else a copy in `buffer`
  // (on CUDA through page-locked memory, so the host does not wait for the copy).
  const float* stage(const float* host, std::size_t n, buffer_type& buffer) const {
    if constexpr (host_accessible) {
      return host;
    } else {
      context_->stage(host, n, data(buffer), 0);
      return data(buffer);
    }
  }
  const std::int32_t* stage(const std::int32_t* host, std::size_t n, label_buffer_type& buffer) const {
    if constexpr (host_accessible) {
      return host;
    } else {
      context_->stage(host, n, data(buffer), 1);
      return data(buffer);
    }
  }
  // Uploads are queued: `host` must stay as it is until the next download() or synchronize().
  void upload(const float* host, std::size_t n, float* dst) const {
    if constexpr (host_accessible) {
      std::copy(host, host + n, dst);
    } else {
      context_->upload(host, n, dst);
    }
  }
  void download(const float* src, std::size_t n, float* host) const {
    if constexpr (host_accessible) {
      std::copy(src, src + n, host);
    } else {
      context_->download(src, n, host);
    }
  }

  // Waits until everything queued so far is done: uploads have read their host memory.
  void synchronize() const {
    if constexpr (!host_accessible) context_->synchronize();
  }

  void gemm(Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
            std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) const {
    System::gemm(*context_, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  template <class Activation>
  void bias_activation(float* y, const float* bias, std::size_t rows, std::size_t cols) const {
    thrust::for_each(System::policy(*context_), thrust::counting_iterator<std::size_t>(0),
                     thrust::counting_iterator<std::size_t>(rows * cols),
                     detail::BiasActivation<Activation>{y, bias, cols});
  }

  template <class Activation>
  void activation_backward(float* delta, const float* output, std::size_t n) const {
    thrust::for_each(System::policy(*context_), thrust::counting_iterator<std::size_t>(0), thrust::counting_iterator<std::size_t>(n),
                     detail::ActivationBackward<Activation>{delta, output});
  }

  void column_sums(const float* m, std::size_t rows, std::size_t cols, float* out) const {
    if constexpr (host_accessible) {
      each(cols, detail::ColumnSum{m, out, rows, cols});
    } else {
      System::column_sums(*context_, m, rows, cols, out);
    }
  }

  // One row per work item: max, log-sum-exp loss, argmax, and the delta written in place; the
  // per-row losses and hits go to scratch arrays, summed in row order by one work item (a batch
  // has few rows; thrust::reduce would allocate its temporary storage and wait for the device at
  // every call). The scratch grows to the largest batch seen and is reused, so the steady state
  // allocates nothing. On a device system the totals come back with a wait, unless defer_stats()
  // is on: then the returned loss_sum and correct are zero until deferred_stats() fills them in.
  nn::BatchStats softmax_cross_entropy(float* logits, const std::int32_t* labels, std::size_t rows, std::size_t cols,
                                       bool write_delta) const {
    auto& scratch = *scratch_;
    if (scratch.loss.size() < rows) {
      scratch.loss.resize(rows);
      scratch.hit.resize(rows);
    }
    if (scratch.totals.empty()) scratch.totals.resize(1);
    double* loss = thrust::raw_pointer_cast(scratch.loss.data());
    std::uint32_t* hit = thrust::raw_pointer_cast(scratch.hit.data());
    detail::StatsTotals* totals = thrust::raw_pointer_cast(scratch.totals.data());
    each(rows, detail::SoftmaxCrossEntropyRow{logits, labels, loss, hit, cols, write_delta});
    each(1, detail::SumRowStats{loss, hit, rows, totals});
    if constexpr (host_accessible) {
      return nn::BatchStats{totals->loss_sum, static_cast<std::size_t>(totals->correct), rows};
    } else {
      scratch.deferred = scratch.deferring;
      if (scratch.deferring) {
        context_->fetch_stats(totals, false);
        return nn::BatchStats{0.0, 0, rows};
      }
      const detail::StatsTotals& t = context_->fetch_stats(totals, true);
      return nn::BatchStats{t.loss_sum, static_cast<std::size_t>(t.correct), rows};
    }
  }
  // A worker computes a gradient and then downloads it, which waits anyway: with defer_stats(true)
  // the loss and accuracy ride on that wait instead of adding one (device systems only).
  void defer_stats(bool on) const { scratch_->deferring = on; }
  // `stats` (what gradient() returned) with the loss and accuracy of a softmax_cross_entropy
  // deferred since, once a download() or synchronize() has waited for them.
  nn::BatchStats deferred_stats(nn::BatchStats stats) const {
    if constexpr (!host_accessible) {
      if (scratch_->deferred) {
        const detail::StatsTotals& t = context_->settled_stats();
        stats.loss_sum = t.loss_sum;
        stats.correct = static_cast<std::size_t>(t.correct);
        scratch_->deferred = false;
      }
    }
    return stats;
  }

  // ---- Layer kernels: the same contracts as backend::BasicCpu's (docs/layers.md#backend-primitives),
  // one Thrust work item per output element. ----

  void im2col(const float* x, std::size_t count, const Window2d& g, float* cols) const {
    each(count * g.patch() * g.out_pixels(), detail::Im2col{x, cols, g});
  }
  void col2im(const float* cols, std::size_t count, const Window2d& g, float* dx) const {
    each(count * g.in_size(), detail::Col2im{cols, dx, g});
  }
  void channel_bias(float* y, const float* bias, std::size_t count, std::size_t channels, std::size_t pixels) const {
    each(count * channels * pixels, detail::ChannelBias{y, bias, channels, pixels});
  }
  void channel_sums(const float* dy, std::size_t count, std::size_t channels, std::size_t pixels, float* out) const {
    if constexpr (host_accessible) {
      each(channels, detail::ChannelSum{dy, out, count, channels, pixels});
    } else {
      System::channel_sums(*context_, dy, count, channels, pixels, out);
    }
  }
  void max_pool(const float* x, std::size_t count, const Window2d& g, float* y, std::int32_t* argmax) const {
    each(count * g.out_size(), detail::MaxPool{x, y, argmax, g});
  }
  void max_pool_backward(const float* dy, const std::int32_t* argmax, std::size_t count, const Window2d& g,
                         float* dx) const {
    each(count * g.in_size(), detail::MaxPoolBackward{dy, argmax, dx, g});
  }
  void avg_pool(const float* x, std::size_t count, const Window2d& g, float* y) const {
    each(count * g.out_size(), detail::AvgPool{x, y, g});
  }
  void avg_pool_backward(const float* dy, std::size_t count, const Window2d& g, float* dx) const {
    each(count * g.in_size(), detail::AvgPoolBackward{dy, dx, g});
  }
  template <class Activation>
  void activation(const float* x, std::size_t n, float* y) const {
    each(n, detail::ActivationForward<Activation>{x, y});
  }
  template <class Activation>
  void activation_gradient(const float* dy, const float* y, std::size_t n, float* dx) const {
    each(n, detail::ActivationGradient<Activation>{dy, y, dx});
  }
  void copy(const float* src, std::size_t n, float* dst) const {
    thrust::copy(System::policy(*context_), src, src + n, dst);
  }
  void multiply(const float* a, const float* b, std::size_t n, float* out) const {
    each(n, detail::Multiply{a, b, out});
  }
  void dropout_mask(float* mask, std::size_t n, float keep, std::uint64_t seed, std::size_t first) const {
    each(n, detail::DropoutMask{mask, keep, seed, first});
  }
  template <class Act = nn::Identity>
  void add(const float* a, const float* b, std::size_t n, float* out) const { each(n, detail::Add<Act>{a, b, out}); }
  // Batch normalization (backend/detail/batch_norm_kernels.hpp): one work item per channel for
  // the statistics, which leaves a GPU mostly idle at a ResNet's 16-64 channels (docs/layers.md).
  template <class Act = nn::Identity>
  void batch_norm_train(const float* x, std::size_t count, std::size_t channels, std::size_t pixels,
                        const float* gamma, const float* beta, float epsilon, float* y, float* mean, float* inv_std,
                        float* moments, float* affine = nullptr) const {
    each(channels, detail::BatchNormTrainChannel<Act>{x, gamma, beta, y, mean, inv_std, moments, count, channels,
                                                      pixels, epsilon, affine});
  }
  void batch_norm_infer(const float* x, std::size_t count, std::size_t channels, std::size_t pixels,
                        const float* gamma, const float* beta, const float* running, float epsilon, float* y) const {
    each(count * channels * pixels, detail::BatchNormInferElement{x, gamma, beta, running, y, channels, pixels, epsilon});
  }
  template <class Act = nn::Identity>
  void batch_norm_backward(const float* x, const float* dy, std::size_t count, std::size_t channels,
                           std::size_t pixels, const float* gamma, const float* mean, const float* inv_std, float* dx,
                           float* dgamma, float* dbeta, const float* affine = nullptr) const {
    each(channels, detail::BatchNormBackwardChannel<Act>{x, dy, gamma, mean, inv_std, dx, dgamma, dbeta, count,
                                                         channels, pixels, affine});
  }

 private:
  struct Scratch {
    typename System::template vector<double> loss;
    typename System::template vector<std::uint32_t> hit;
    typename System::template vector<detail::StatsTotals> totals;
    bool deferring = false;  // defer_stats()
    bool deferred = false;   // a softmax_cross_entropy's totals are on their way (deferred_stats)
  };
  template <class Functor>
  void each(std::size_t n, Functor f) const {
    thrust::for_each(System::policy(*context_), thrust::counting_iterator<std::size_t>(0),
                     thrust::counting_iterator<std::size_t>(n), f);
  }
  static int check_threads(int threads) {
    if (threads < 1) throw Error(fmt::format("backend::Thrust: thread count must be >= 1, got {}", threads));
    return threads;
  }

  int threads_;
  // Shared: a backend is copied into each worker and workspace; they share one GEMM context.
  std::shared_ptr<typename System::Context> context_;
  std::shared_ptr<Scratch> scratch_ = std::make_shared<Scratch>();
};

using ThrustOmp = Thrust<thrust::system::omp::tag>;
using ThrustCpp = Thrust<thrust::system::cpp::tag>;
#if defined(__CUDACC__)
using ThrustCuda = Thrust<thrust::system::cuda::tag>;
#endif

}  // namespace hpcps::backend
