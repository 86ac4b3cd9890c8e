#pragma once
// The Thrust backend's elementwise kernels as functors over raw pointers, one work item per
// element, column or row. HPCPS_HOST_DEVICE makes them __host__ __device__ under nvcc and leaves
// them plain C++ under g++, so the OpenMP and CPP systems build without a CUDA compiler.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hpcps/nn/activation.hpp"

namespace hpcps::backend::detail {

// Specialised per Thrust system tag (backend/thrust.hpp, backend/detail/cuda_system.hpp).
template <class Tag>
struct ThrustSystem;

template <class Activation>
struct BiasActivation {
  float* y;
  const float* bias;
  std::size_t cols;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const { y[i] = Activation::forward(y[i] + bias[i % cols]); }
};

template <class Activation>
struct ActivationBackward {
  float* delta;
  const float* output;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const { delta[i] *= Activation::derivative_from_output(output[i]); }
};

// out[c] = sum over rows, in row order (the CPU backend's order, so results agree closely).
struct ColumnSum {
  const float* m;
  float* out;
  std::size_t rows, cols;
  HPCPS_HOST_DEVICE void operator()(std::size_t c) const {
    float s = 0.0f;
    for (std::size_t r = 0; r < rows; ++r) s += m[r * cols + c];
    out[c] = s;
  }
};

// The same arithmetic as BasicCpu::softmax_cross_entropy, for one row.
struct SoftmaxCrossEntropyRow {
  float* logits;
  const std::int32_t* labels;
  double* loss;
  std::uint32_t* hit;
  std::size_t cols;
  bool write_delta;
  HPCPS_HOST_DEVICE void operator()(std::size_t r) const {
    float* z = logits + r * cols;
    const auto label = static_cast<std::size_t>(labels[r]);
    std::size_t arg = 0;
    float top = z[0];
    for (std::size_t c = 1; c < cols; ++c) {
      if (z[c] > top) {
        top = z[c];
        arg = c;
      }
    }
    float sum = 0.0f;
    for (std::size_t c = 0; c < cols; ++c) sum += expf(z[c] - top);
    loss[r] = static_cast<double>(logf(sum) - (z[label] - top));
    hit[r] = arg == label ? 1u : 0u;
    if (write_delta) {
      const float inv = 1.0f / sum;
      for (std::size_t c = 0; c < cols; ++c) z[c] = expf(z[c] - top) * inv;
      z[label] -= 1.0f;
    }
  }
};

}  // namespace hpcps::backend::detail
