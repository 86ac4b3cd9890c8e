#pragma once
// The CUDA system of backend::Thrust: device vectors, thrust::cuda::par_nosync on one stream, cuBLAS
// for GEMM and for the row sums. Only compiled by nvcc (backend/thrust.hpp includes it under
// __CUDACC__).
//
// What a training step costs the host (docs/backends.md#the-cuda-path-step-by-step): the kernels,
// GEMMs and copies are queued on one stream and the host never waits for them, except in
// download() (the gradient goes to MPI) and in synchronize() (the worker's fence before MPI writes
// into memory an upload may still be reading). Nothing is allocated after the first step: the
// scratch arrays grow to the largest size seen and stay.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/system/cuda/vector.h>

#include "hpcps/backend/detail/thrust_kernels.hpp"
#include "hpcps/backend/gemm.hpp"
#include "hpcps/error.hpp"

namespace hpcps::backend::detail {

inline void cuda_check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw Error(fmt::format("{} failed: {}", call, cudaGetErrorString(status)));
}
inline void cublas_check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("{} failed: cuBLAS status {}", call, static_cast<int>(status)));
}

// True when a CUDA device can be used; tests and examples skip or refuse with a message otherwise.
inline bool cuda_device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Page-locked host memory: the worker's MPI buffers for a CUDA backend, so copies to and from
// the device are DMA transfers that can run asynchronously (Debian's MPICH is not CUDA-aware, so
// every slice is staged through host memory).
template <class T>
struct PinnedAllocator {
  using value_type = T;
  PinnedAllocator() = default;
  template <class U>
  PinnedAllocator(const PinnedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    void* p = nullptr;
    cuda_check(cudaMallocHost(&p, n * sizeof(T)), "cudaMallocHost");
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { cudaFreeHost(p); }
  friend bool operator==(const PinnedAllocator&, const PinnedAllocator&) { return true; }
  friend bool operator!=(const PinnedAllocator&, const PinnedAllocator&) { return false; }
};

// A page-locked array that grows and never shrinks: host memory a copy can leave from, or land
// in, without the host waiting (a copy from pageable memory returns only once the data is out).
class PinnedScratch {
 public:
  PinnedScratch() = default;
  PinnedScratch(const PinnedScratch&) = delete;
  PinnedScratch& operator=(const PinnedScratch&) = delete;
  ~PinnedScratch() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  void* reserve(std::size_t bytes) {
    if (bytes > bytes_) {
      if (data_ != nullptr) cuda_check(cudaFreeHost(data_), "cudaFreeHost");
      data_ = nullptr;
      bytes_ = 0;
      cuda_check(cudaMallocHost(&data_, bytes), "cudaMallocHost");
      bytes_ = bytes;
    }
    return data_;
  }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

template <>
struct ThrustSystem<thrust::system::cuda::tag> {
  template <class T>
  using vector = thrust::cuda::vector<T>;
  template <class T>
  using host_allocator = PinnedAllocator<T>;
  static constexpr bool host_accessible = false;
  static constexpr const char* name = "thrust-cuda";

  // One stream for everything: kernels, cuBLAS and copies are ordered on it, so an upload needs
  // no wait before the kernels that read it, and only a download waits (its data goes to MPI).
  struct Context {
    cublasHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
    void* cublas_workspace = nullptr;
    // Staged batches (inputs, labels), each with the event of its last upload: the next batch
    // may overwrite the page-locked copy only once the device has read it.
    PinnedScratch staged[2];
    cudaEvent_t staged_read[2] = {nullptr, nullptr};
    PinnedScratch stats;  // a StatsTotals, downloaded without a wait where the caller defers it
    thrust::cuda::vector<float> ones, partial;  // for the row sums as cuBLAS GEMVs

    explicit Context(int /*threads*/) {
      int count = 0;
      cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
      if (count == 0) throw Error("backend::ThrustCuda: no CUDA device");
      // A blocking stream: it orders after the legacy default stream, where thrust::cuda::vector
      // initialises new buffers.
      cuda_check(cudaStreamCreate(&stream), "cudaStreamCreate");
      cublas_check(cublasCreate(&handle), "cublasCreate");
      cublas_check(cublasSetStream(handle, stream), "cublasSetStream");
      // cuBLAS would otherwise allocate its workspace at its first GEMM on the stream; set after
      // cublasSetStream, which resets it. 32 MiB is NVIDIA's recommendation for Hopper.
      constexpr std::size_t workspace_bytes = std::size_t{32} << 20;
      cuda_check(cudaMalloc(&cublas_workspace, workspace_bytes), "cudaMalloc(cuBLAS workspace)");
      cublas_check(cublasSetWorkspace(handle, cublas_workspace, workspace_bytes), "cublasSetWorkspace");
      for (auto& event : staged_read) {
        cuda_check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      }
      stats.reserve(sizeof(StatsTotals));
    }
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    ~Context() {
      for (auto& event : staged_read) {
        if (event != nullptr) cudaEventDestroy(event);
      }
      if (handle != nullptr) cublasDestroy(handle);
      if (cublas_workspace != nullptr) cudaFree(cublas_workspace);
      if (stream != nullptr) cudaStreamDestroy(stream);
    }
    // From page-locked memory (the worker's buffers): queued, no wait.
    template <class T>
    void upload(const T* host, std::size_t n, T* device) {
      cuda_check(cudaMemcpyAsync(device, host, n * sizeof(T), cudaMemcpyHostToDevice, stream),
                 "cudaMemcpyAsync(host to device)");
    }
    // From any host memory (a batch in a std::vector): copied into page-locked memory first, so
    // the upload is queued and the host goes on. `slot` 0 holds inputs, 1 labels.
    template <class T>
    void stage(const T* host, std::size_t n, T* device, int slot) {
      PinnedScratch& pinned = staged[slot];
      cudaEvent_t& read = staged_read[slot];
      // Normally long done (a download waited since the last upload); waits only for a caller
      // that stages twice without one.
      const cudaError_t state = cudaEventQuery(read);
      if (state == cudaErrorNotReady) {
        cuda_check(cudaEventSynchronize(read), "cudaEventSynchronize(staged batch)");
      } else {
        cuda_check(state, "cudaEventQuery(staged batch)");
      }
      T* copy = static_cast<T*>(pinned.reserve(n * sizeof(T)));
      if (n > 0) std::memcpy(copy, host, n * sizeof(T));
      upload(copy, n, device);
      cuda_check(cudaEventRecord(read, stream), "cudaEventRecord(staged batch)");
    }
    template <class T>
    void download(const T* device, std::size_t n, T* host) {
      cuda_check(cudaMemcpyAsync(host, device, n * sizeof(T), cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync(device to host)");
      synchronize();
    }
    void synchronize() { cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); }

    // The totals of the last softmax_cross_entropy, queued for download; valid after the next
    // wait (download() or synchronize()), or at once when `wait` is set.
    const StatsTotals& fetch_stats(const StatsTotals* device, bool wait) {
      cuda_check(cudaMemcpyAsync(stats.data(), device, sizeof(StatsTotals), cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync(batch statistics)");
      if (wait) synchronize();
      return settled_stats();
    }
    const StatsTotals& settled_stats() const { return *static_cast<const StatsTotals*>(stats.data()); }
  };
  // par_nosync: with thrust::cuda::par this CCCL waits for the stream after every algorithm
  // (cuda_cub::synchronize_optional), nine times a step; ordering on the stream is all we need.
  static auto policy(Context& context) { return thrust::cuda::par_nosync.on(context.stream); }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same call with the
  // operands swapped, no transposition in memory.
  static void gemm(Context& context, Transpose ta, Transpose tb, std::size_t m, std::size_t n, std::size_t k,
                   float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                   std::size_t ldc) {
    cublas_check(cublasSgemm(context.handle, tb == Transpose::no ? CUBLAS_OP_N : CUBLAS_OP_T,
                             ta == Transpose::no ? CUBLAS_OP_N : CUBLAS_OP_T, static_cast<int>(n), static_cast<int>(m),
                             static_cast<int>(k), &alpha, b, static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c,
                             static_cast<int>(ldc)),
                 "cublasSgemm");
  }

  // Sums over rows as GEMVs against a vector of ones: one thread per column summing every row
  // (the host systems' kernel) runs rows dependent loads in a row, latency-bound on a GPU, and a
  // convolution's bias gradient would give each of its few threads count * pixels of them.
  static void column_sums(Context& context, const float* m, std::size_t rows, std::size_t cols, float* out) {
    if (rows == 0 || cols == 0) return fill_zero(context, out, cols);
    const float one = 1.0f, zero = 0.0f;
    // Row-major m (rows x cols) is column-major cols x rows with leading dimension cols.
    cublas_check(cublasSgemv(context.handle, CUBLAS_OP_N, static_cast<int>(cols), static_cast<int>(rows), &one, m,
                             static_cast<int>(cols), ones(context, rows), 1, &zero, out, 1),
                 "cublasSgemv(column sums)");
  }
  static void channel_sums(Context& context, const float* dy, std::size_t count, std::size_t channels,
                           std::size_t pixels, float* out) {
    if (count == 0 || pixels == 0) return fill_zero(context, out, channels);
    if (context.partial.size() < count * channels) context.partial.resize(count * channels);
    float* planes = thrust::raw_pointer_cast(context.partial.data());
    const float one = 1.0f, zero = 0.0f;
    // Each (sample, channel) plane summed over its pixels, then the samples summed per channel.
    cublas_check(cublasSgemv(context.handle, CUBLAS_OP_T, static_cast<int>(pixels), static_cast<int>(count * channels),
                             &one, dy, static_cast<int>(pixels), ones(context, pixels), 1, &zero, planes, 1),
                 "cublasSgemv(plane sums)");
    column_sums(context, planes, count, channels, out);
  }

 private:
  static const float* ones(Context& context, std::size_t n) {
    if (context.ones.size() < n) context.ones.resize(n, 1.0f);
    return thrust::raw_pointer_cast(context.ones.data());
  }
  static void fill_zero(Context& context, float* out, std::size_t n) {
    if (n > 0) cuda_check(cudaMemsetAsync(out, 0, n * sizeof(float), context.stream), "cudaMemsetAsync");
  }
};

}  // namespace hpcps::backend::detail
