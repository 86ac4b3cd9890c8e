#pragma once
// The Thrust backend's elementwise kernels as functors over raw pointers, one work item per
// element, column or row. HPCPS_HOST_DEVICE makes them __host__ __device__ under nvcc and leaves
// them plain C++ under g++, so the OpenMP and CPP systems build without a CUDA compiler.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hpcps/backend/detail/softmax_row.hpp"
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

// One row of softmax cross-entropy (the arithmetic every backend shares), results to scratch.
struct SoftmaxCrossEntropyRow {
  float* logits;
  const std::int32_t* labels;
  double* loss;
  std::uint32_t* hit;
  std::size_t cols;
  bool write_delta;
  HPCPS_HOST_DEVICE void operator()(std::size_t r) const {
    const RowLoss row = softmax_cross_entropy_row(logits + r * cols, static_cast<std::size_t>(labels[r]), cols, write_delta);
    loss[r] = static_cast<double>(row.loss);
    hit[r] = row.hit ? 1u : 0u;
  }
};

}  // namespace hpcps::backend::detail
