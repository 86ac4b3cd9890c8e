#pragma once
// The Thrust backend's elementwise kernels as functors over raw pointers, one work item per
// element, column or row (a batch's statistics: one work item). HPCPS_HOST_DEVICE makes them __host__ __device__ under nvcc and leaves
// them plain C++ under g++, so the OpenMP and CPP systems build without a CUDA compiler.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hpcps/backend/detail/dropout_hash.hpp"
#include "hpcps/backend/detail/softmax_row.hpp"
#include "hpcps/backend/window.hpp"
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

// What a batch's softmax_cross_entropy sums: loss and correct predictions.
struct StatsTotals {
  double loss_sum;
  unsigned long long correct;
};

// One work item sums the rows' losses and hits, in row order (backend::Cpu's order).
struct SumRowStats {
  const double* loss;
  const std::uint32_t* hit;
  std::size_t rows;
  StatsTotals* out;
  HPCPS_HOST_DEVICE void operator()(std::size_t) const {
    double sum = 0.0;
    unsigned long long correct = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      sum += loss[r];
      correct += hit[r];
    }
    out->loss_sum = sum;
    out->correct = correct;
  }
};

// ---- Layer kernels: one work item per OUTPUT element, so the backward passes gather instead of
// scatter and need no atomics on a GPU. Sums run in the order backend::Cpu's loops use. ----

// Work item i of count * patch * out_pixels: cols[n][row][p], as detail::im2col_sample writes it.
struct Im2col {
  const float* x;
  float* cols;
  Window2d g;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t P = g.out_pixels(), rows = g.patch();
    const std::size_t p = i % P, row = (i / P) % rows, n = i / (P * rows);
    const std::size_t kj = row % g.window, ki = (row / g.window) % g.window, c = row / (g.window * g.window);
    const long long iy = static_cast<long long>((p / g.out_width) * g.stride + ki) - static_cast<long long>(g.padding);
    const long long ix = static_cast<long long>((p % g.out_width) * g.stride + kj) - static_cast<long long>(g.padding);
    const bool inside = iy >= 0 && ix >= 0 && iy < static_cast<long long>(g.height) && ix < static_cast<long long>(g.width);
    cols[i] = inside ? x[n * g.in_size() + c * g.in_pixels() + static_cast<std::size_t>(iy) * g.width +
                         static_cast<std::size_t>(ix)]
                     : 0.0f;
  }
};

// Work item i of count * in_size: dx[n][c][iy][ix] gathers every cols entry copied from it.
struct Col2im {
  const float* cols;
  float* dx;
  Window2d g;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t ix = i % g.width, iy = (i / g.width) % g.height, c = (i / g.in_pixels()) % g.channels;
    const std::size_t n = i / g.in_size(), P = g.out_pixels();
    const float* sample = cols + n * g.patch() * P;
    float sum = 0.0f;
    for (std::size_t ki = 0; ki < g.window; ++ki) {
      const long long ty = static_cast<long long>(iy + g.padding) - static_cast<long long>(ki);
      if (ty < 0 || ty % static_cast<long long>(g.stride) != 0) continue;
      const std::size_t oy = static_cast<std::size_t>(ty) / g.stride;
      if (oy >= g.out_height) continue;
      for (std::size_t kj = 0; kj < g.window; ++kj) {
        const long long tx = static_cast<long long>(ix + g.padding) - static_cast<long long>(kj);
        if (tx < 0 || tx % static_cast<long long>(g.stride) != 0) continue;
        const std::size_t ox = static_cast<std::size_t>(tx) / g.stride;
        if (ox >= g.out_width) continue;
        sum += sample[((c * g.window + ki) * g.window + kj) * P + oy * g.out_width + ox];
      }
    }
    dx[i] = sum;
  }
};

struct ChannelBias {
  float* y;
  const float* bias;
  std::size_t channels, pixels;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const { y[i] += bias[(i / pixels) % channels]; }
};

struct ChannelSum {
  const float* dy;
  float* out;
  std::size_t count, channels, pixels;
  HPCPS_HOST_DEVICE void operator()(std::size_t c) const {
    float sum = 0.0f;
    for (std::size_t n = 0; n < count; ++n) {
      const float* plane = dy + (n * channels + c) * pixels;
      for (std::size_t p = 0; p < pixels; ++p) sum += plane[p];
    }
    out[c] = sum;
  }
};

// The window position of output element o (within a sample: c, oy, ox) and its input plane.
struct PoolWindow {
  std::size_t plane_offset, top, left;
  HPCPS_HOST_DEVICE static PoolWindow of(std::size_t i, const Window2d& g) {
    const std::size_t ox = i % g.out_width, oy = (i / g.out_width) % g.out_height;
    const std::size_t c = (i / g.out_pixels()) % g.channels, n = i / g.out_size();
    return PoolWindow{n * g.in_size() + c * g.in_pixels(), oy * g.stride, ox * g.stride};
  }
};

struct MaxPool {
  const float* x;
  float* y;
  std::int32_t* argmax;
  Window2d g;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const {
    const PoolWindow w = PoolWindow::of(i, g);
    const float* plane = x + w.plane_offset;
    std::size_t best = w.top * g.width + w.left;
    for (std::size_t wy = 0; wy < g.window; ++wy) {
      for (std::size_t wx = 0; wx < g.window; ++wx) {
        const std::size_t at = (w.top + wy) * g.width + w.left + wx;
        if (plane[at] > plane[best]) best = at;
      }
    }
    y[i] = plane[best];
    argmax[i] = static_cast<std::int32_t>(best);
  }
};

// The outputs whose window covers input row (or column) `at`: [first, last) in output units.
HPCPS_HOST_DEVICE inline void covering_windows(std::size_t at, std::size_t window, std::size_t stride,
                                               std::size_t outputs, std::size_t& first, std::size_t& last) {
  first = at + 1 > window ? (at + 1 - window + stride - 1) / stride : 0;
  last = at / stride + 1;
  if (last > outputs) last = outputs;
}

// Work item i of count * in_size: dx gathers dy from the windows whose maximum it was.
struct MaxPoolBackward {
  const float* dy;
  const std::int32_t* argmax;
  float* dx;
  Window2d g;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t ix = i % g.width, iy = (i / g.width) % g.height, plane = i / g.in_pixels();
    const std::size_t base = plane * g.out_pixels();  // (n, c) planes line up in x and y
    std::size_t y0, y1, x0, x1;
    covering_windows(iy, g.window, g.stride, g.out_height, y0, y1);
    covering_windows(ix, g.window, g.stride, g.out_width, x0, x1);
    const auto self = static_cast<std::int32_t>(iy * g.width + ix);
    float sum = 0.0f;
    for (std::size_t oy = y0; oy < y1; ++oy) {
      for (std::size_t ox = x0; ox < x1; ++ox) {
        const std::size_t o = base + oy * g.out_width + ox;
        if (argmax[o] == self) sum += dy[o];
      }
    }
    dx[i] = sum;
  }
};

struct AvgPool {
  const float* x;
  float* y;
  Window2d g;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const {
    const PoolWindow w = PoolWindow::of(i, g);
    float sum = 0.0f;
    for (std::size_t wy = 0; wy < g.window; ++wy) {
      const float* row = x + w.plane_offset + (w.top + wy) * g.width + w.left;
      for (std::size_t wx = 0; wx < g.window; ++wx) sum += row[wx];
    }
    y[i] = sum * (1.0f / static_cast<float>(g.window * g.window));
  }
};

struct AvgPoolBackward {
  const float* dy;
  float* dx;
  Window2d g;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const {
    const float inv = 1.0f / static_cast<float>(g.window * g.window);
    const std::size_t ix = i % g.width, iy = (i / g.width) % g.height, plane = i / g.in_pixels();
    const std::size_t base = plane * g.out_pixels();
    std::size_t y0, y1, x0, x1;
    covering_windows(iy, g.window, g.stride, g.out_height, y0, y1);
    covering_windows(ix, g.window, g.stride, g.out_width, x0, x1);
    float sum = 0.0f;
    for (std::size_t oy = y0; oy < y1; ++oy) {
      for (std::size_t ox = x0; ox < x1; ++ox) sum += dy[base + oy * g.out_width + ox] * inv;
    }
    dx[i] = sum;
  }
};

template <class Activation>
struct ActivationForward {
  const float* x;
  float* y;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const { y[i] = Activation::forward(x[i]); }
};

template <class Activation>
struct ActivationGradient {
  const float* dy;
  const float* y;
  float* dx;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const { dx[i] = dy[i] * Activation::derivative_from_output(y[i]); }
};

struct Multiply {
  const float* a;
  const float* b;
  float* out;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const { out[i] = a[i] * b[i]; }
};

template <class Act>
struct Add {
  const float* a;
  const float* b;
  float* out;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const { out[i] = Act::forward(a[i] + b[i]); }
};

struct DropoutMask {
  float* mask;
  float keep;
  std::uint64_t seed;
  std::size_t first;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const { mask[i] = dropout_mask_value(seed, first + i, keep); }
};

}  // namespace hpcps::backend::detail
