#pragma once
// The CUDA system of backend::Thrust: device vectors, thrust::cuda::par, cuBLAS for GEMM. Only
// compiled by nvcc (backend/thrust.hpp includes it under __CUDACC__).
#include <cstddef>

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
    explicit Context(int /*threads*/) {
      int count = 0;
      cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
      if (count == 0) throw Error("backend::ThrustCuda: no CUDA device");
      // A blocking stream: it orders after the legacy default stream, where thrust::cuda::vector
      // initialises new buffers.
      cuda_check(cudaStreamCreate(&stream), "cudaStreamCreate");
      cublas_check(cublasCreate(&handle), "cublasCreate");
      cublas_check(cublasSetStream(handle, stream), "cublasSetStream");
    }
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    ~Context() {
      if (handle != nullptr) cublasDestroy(handle);
      if (stream != nullptr) cudaStreamDestroy(stream);
    }
    template <class T>
    void upload(const T* host, std::size_t n, T* device) {
      cuda_check(cudaMemcpyAsync(device, host, n * sizeof(T), cudaMemcpyHostToDevice, stream),
                 "cudaMemcpyAsync(host to device)");
    }
    template <class T>
    void download(const T* device, std::size_t n, T* host) {
      cuda_check(cudaMemcpyAsync(host, device, n * sizeof(T), cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync(device to host)");
      cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    }
  };
  static auto policy(Context& context) { return thrust::cuda::par.on(context.stream); }

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
};

}  // namespace hpcps::backend::detail
