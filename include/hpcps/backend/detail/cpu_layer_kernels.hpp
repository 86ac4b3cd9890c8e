#pragma once
// backend::BasicCpu's convolution and pooling work for ONE sample; the backend runs them over the
// batch (in parallel when it has threads), so each sample is written by one thread and the
// scatter-adds of the backward passes need no atomics.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hpcps/backend/window.hpp"

namespace hpcps::backend::detail {

// cols[(c * k + ki) * k + kj][oy * ow + ox] = x[c][oy * s + ki - p][ox * s + kj - p], 0 outside.
inline void im2col_sample(const float* x, const Window2d& g, float* cols) {
  const std::size_t k = g.window, P = g.out_pixels();
  const auto H = static_cast<std::ptrdiff_t>(g.height), W = static_cast<std::ptrdiff_t>(g.width);
  const auto pad = static_cast<std::ptrdiff_t>(g.padding), s = static_cast<std::ptrdiff_t>(g.stride);
  for (std::size_t c = 0; c < g.channels; ++c) {
    const float* plane = x + c * g.in_pixels();
    for (std::size_t ki = 0; ki < k; ++ki) {
      for (std::size_t kj = 0; kj < k; ++kj) {
        float* row = cols + ((c * k + ki) * k + kj) * P;
        for (std::size_t oy = 0; oy < g.out_height; ++oy) {
          float* out = row + oy * g.out_width;
          const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy) * s + static_cast<std::ptrdiff_t>(ki) - pad;
          if (iy < 0 || iy >= H) {
            std::fill(out, out + g.out_width, 0.0f);
            continue;
          }
          const float* in = plane + iy * W;
          for (std::size_t ox = 0; ox < g.out_width; ++ox) {
            const std::ptrdiff_t ix = static_cast<std::ptrdiff_t>(ox) * s + static_cast<std::ptrdiff_t>(kj) - pad;
            out[ox] = ix >= 0 && ix < W ? in[ix] : 0.0f;
          }
        }
      }
    }
  }
}

// The adjoint of im2col: dx[c][iy][ix] = sum of the cols entries im2col copied from it.
inline void col2im_sample(const float* cols, const Window2d& g, float* dx) {
  const std::size_t k = g.window, P = g.out_pixels();
  const auto H = static_cast<std::ptrdiff_t>(g.height), W = static_cast<std::ptrdiff_t>(g.width);
  const auto pad = static_cast<std::ptrdiff_t>(g.padding), s = static_cast<std::ptrdiff_t>(g.stride);
  std::fill(dx, dx + g.in_size(), 0.0f);
  for (std::size_t c = 0; c < g.channels; ++c) {
    float* plane = dx + c * g.in_pixels();
    for (std::size_t ki = 0; ki < k; ++ki) {
      for (std::size_t kj = 0; kj < k; ++kj) {
        const float* row = cols + ((c * k + ki) * k + kj) * P;
        for (std::size_t oy = 0; oy < g.out_height; ++oy) {
          const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy) * s + static_cast<std::ptrdiff_t>(ki) - pad;
          if (iy < 0 || iy >= H) continue;
          const float* in = row + oy * g.out_width;
          float* out = plane + iy * W;
          for (std::size_t ox = 0; ox < g.out_width; ++ox) {
            const std::ptrdiff_t ix = static_cast<std::ptrdiff_t>(ox) * s + static_cast<std::ptrdiff_t>(kj) - pad;
            if (ix >= 0 && ix < W) out[ix] += in[ox];
          }
        }
      }
    }
  }
}

// 2x2 windows, stride 2, even width: the maxima of horizontal pairs first, over many rows at once
// (one long vectorized loop; a loop per output row is only 7 or 14 long at the CNN's sizes and
// ran at half the speed), then of vertical pairs of those. Left beats right and top beats bottom
// on ties, which is the row-major first-maximum rule.
// Horizontal maxima per pass, on the stack; a row wider than this takes the general loop.
inline constexpr std::size_t max_pool_2x2_block = 2048;
inline void max_pool_2x2_sample(const float* x, const Window2d& g, float* y, std::int32_t* argmax) {
  constexpr std::size_t block = max_pool_2x2_block;
  float pair_max[block];
  std::int32_t pair_at[block];
  const std::size_t ow = g.out_width, rows = std::max<std::size_t>(1, block / (2 * ow));
  for (std::size_t c = 0; c < g.channels; ++c) {
    const float* plane = x + c * g.in_pixels();
    float* out = y + c * g.out_pixels();
    std::int32_t* where = argmax + c * g.out_pixels();
    for (std::size_t oy0 = 0; oy0 < g.out_height; oy0 += rows) {
      const std::size_t n = std::min(rows, g.out_height - oy0), pairs = 2 * n * ow;
      const float* in = plane + 2 * oy0 * g.width;
      const auto first = static_cast<std::int32_t>(2 * oy0 * g.width);
#pragma omp simd
      for (std::size_t j = 0; j < pairs; ++j) {
        const float a = in[2 * j], b = in[2 * j + 1];
        const bool right = b > a;
        pair_max[j] = right ? b : a;
        pair_at[j] = first + 2 * static_cast<std::int32_t>(j) + (right ? 1 : 0);
      }
      for (std::size_t r = 0; r < n; ++r) {
        const float* top = pair_max + 2 * r * ow;
        const float* bottom = top + ow;
        const std::int32_t* top_at = pair_at + 2 * r * ow;
        const std::int32_t* bottom_at = top_at + ow;
        float* o = out + (oy0 + r) * ow;
        std::int32_t* w = where + (oy0 + r) * ow;
#pragma omp simd
        for (std::size_t ox = 0; ox < ow; ++ox) {
          const bool lower = bottom[ox] > top[ox];
          o[ox] = lower ? bottom[ox] : top[ox];
          w[ox] = lower ? bottom_at[ox] : top_at[ox];
        }
      }
    }
  }
}

// y = the largest element of each window (the first one on ties), argmax = its index in the plane.
// Comparisons are selects, not branches: with a branch each, random data mispredicted about half
// of them and the CNN's first pooling took ~7 ns per input element (12 ms of a 42 ms step).
inline void max_pool_sample(const float* x, const Window2d& g, float* y, std::int32_t* argmax) {
  const std::size_t ow = g.out_width;
  if (g.window == 2 && g.stride == 2 && g.width % 2 == 0 && g.width <= max_pool_2x2_block) {
    max_pool_2x2_sample(x, g, y, argmax);
    return;
  }
  if (g.window == 2 && g.stride == 2) {
    // Odd (or very large) widths: one output row from two input rows.
    const auto W = static_cast<std::int32_t>(g.width);
    for (std::size_t c = 0; c < g.channels; ++c) {
      const float* plane = x + c * g.in_pixels();
      for (std::size_t oy = 0; oy < g.out_height; ++oy) {
        const auto top = static_cast<std::int32_t>(2 * oy * g.width);
        const float* r0 = plane + top;
        const float* r1 = r0 + W;
        float* out = y + (c * g.out_height + oy) * ow;
        std::int32_t* where = argmax + (c * g.out_height + oy) * ow;
#pragma omp simd
        for (std::size_t ox = 0; ox < ow; ++ox) {
          const auto at = top + 2 * static_cast<std::int32_t>(ox);
          float best = r0[2 * ox];
          std::int32_t index = at;
          const float b = r0[2 * ox + 1], c0 = r1[2 * ox], d = r1[2 * ox + 1];
          index = b > best ? at + 1 : index;
          best = b > best ? b : best;
          index = c0 > best ? at + W : index;
          best = c0 > best ? c0 : best;
          index = d > best ? at + W + 1 : index;
          best = d > best ? d : best;
          out[ox] = best;
          where[ox] = index;
        }
      }
    }
    return;
  }
  for (std::size_t c = 0; c < g.channels; ++c) {
    const float* plane = x + c * g.in_pixels();
    for (std::size_t oy = 0; oy < g.out_height; ++oy) {
      for (std::size_t ox = 0; ox < ow; ++ox) {
        std::size_t best = oy * g.stride * g.width + ox * g.stride;
        for (std::size_t wy = 0; wy < g.window; ++wy) {
          for (std::size_t wx = 0; wx < g.window; ++wx) {
            const std::size_t at = (oy * g.stride + wy) * g.width + ox * g.stride + wx;
            best = plane[at] > plane[best] ? at : best;
          }
        }
        const std::size_t o = (c * g.out_height + oy) * ow + ox;
        y[o] = plane[best];
        argmax[o] = static_cast<std::int32_t>(best);
      }
    }
  }
}

// 2x2 windows, stride 2, even height and width: the windows tile the plane, so every element of
// dx is written once, with dy or 0, instead of cleared and then scattered into. Measured at batch
// 128, 32 x 28 x 28: 0.93 ms against 2.06; at 64 x 14 x 14 (rows of 7 windows, too short for the
// vector loop) 0.94 against 0.68, so narrower planes keep the clear-and-scatter loop.
inline void max_pool_2x2_backward_sample(const float* dy, const std::int32_t* argmax, const Window2d& g, float* dx) {
  const std::size_t W = g.width, ow = g.out_width;
  for (std::size_t c = 0; c < g.channels; ++c) {
    for (std::size_t oy = 0; oy < g.out_height; ++oy) {
      const std::size_t o = (c * g.out_height + oy) * ow;
      const auto top = static_cast<std::int32_t>(2 * oy * W);
      float* r0 = dx + c * g.in_pixels() + 2 * oy * W;
      float* r1 = r0 + W;
      const float* d = dy + o;
      const std::int32_t* at = argmax + o;
#pragma omp simd
      for (std::size_t ox = 0; ox < ow; ++ox) {
        const std::int32_t where = at[ox] - top - 2 * static_cast<std::int32_t>(ox);
        const float v = d[ox];
        r0[2 * ox] = where == 0 ? v : 0.0f;
        r0[2 * ox + 1] = where == 1 ? v : 0.0f;
        r1[2 * ox] = where == static_cast<std::int32_t>(W) ? v : 0.0f;
        r1[2 * ox + 1] = where == static_cast<std::int32_t>(W) + 1 ? v : 0.0f;
      }
    }
  }
}

inline void max_pool_backward_sample(const float* dy, const std::int32_t* argmax, const Window2d& g, float* dx) {
  if (g.window == 2 && g.stride == 2 && g.width % 2 == 0 && g.height % 2 == 0 && g.out_width >= 8) {
    max_pool_2x2_backward_sample(dy, argmax, g, dx);
    return;
  }
  std::fill(dx, dx + g.in_size(), 0.0f);
  const std::size_t P = g.out_pixels();
  for (std::size_t c = 0; c < g.channels; ++c) {
    float* plane = dx + c * g.in_pixels();
    for (std::size_t o = 0; o < P; ++o) plane[argmax[c * P + o]] += dy[c * P + o];
  }
}

inline void avg_pool_sample(const float* x, const Window2d& g, float* y) {
  const float inv = 1.0f / static_cast<float>(g.window * g.window);
  for (std::size_t c = 0; c < g.channels; ++c) {
    const float* plane = x + c * g.in_pixels();
    for (std::size_t oy = 0; oy < g.out_height; ++oy) {
      for (std::size_t ox = 0; ox < g.out_width; ++ox) {
        float sum = 0.0f;
        for (std::size_t wy = 0; wy < g.window; ++wy) {
          const float* row = plane + (oy * g.stride + wy) * g.width + ox * g.stride;
          for (std::size_t wx = 0; wx < g.window; ++wx) sum += row[wx];
        }
        y[(c * g.out_height + oy) * g.out_width + ox] = sum * inv;
      }
    }
  }
}

inline void avg_pool_backward_sample(const float* dy, const Window2d& g, float* dx) {
  const float inv = 1.0f / static_cast<float>(g.window * g.window);
  std::fill(dx, dx + g.in_size(), 0.0f);
  for (std::size_t c = 0; c < g.channels; ++c) {
    float* plane = dx + c * g.in_pixels();
    for (std::size_t oy = 0; oy < g.out_height; ++oy) {
      for (std::size_t ox = 0; ox < g.out_width; ++ox) {
        const float d = dy[(c * g.out_height + oy) * g.out_width + ox] * inv;
        for (std::size_t wy = 0; wy < g.window; ++wy) {
          float* row = plane + (oy * g.stride + wy) * g.width + ox * g.stride;
          for (std::size_t wx = 0; wx < g.window; ++wx) row[wx] += d;
        }
      }
    }
  }
}

}  // namespace hpcps::backend::detail
