#pragma once
// Top-k sparsification with error feedback (Stich, Cordonnier and Jaggi 2018, "Sparsified SGD with
// memory"; Lin et al. 2018, "Deep Gradient Compression"): of a gradient piece plus what earlier
// pushes held back (the worker's residual), only the k elements of largest magnitude travel, as
// (index, value) pairs; the others stay in the residual and join the next gradient. Nothing of a
// gradient is lost, only delayed: every element of gradient + residual (their fp32 sum) goes whole
// either into the message or into the new residual, so, element by element and exactly,
//
//     sent + new residual == fl(gradient + old residual).
//
// Here: the selection on the worker and the server's sum of sparse pieces, with no MPI in them.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "hpcps/error.hpp"
#include "hpcps/ps/wire_format.hpp"

namespace hpcps::ps {

// Refuses top-k pushes that cannot travel: a ratio outside (0, 1] (0, dense pushes, is not top-k),
// or values in a 16-bit push wire. `who` names the caller in the message.
inline void check_top_k(double ratio, WireFormat push_wire, const char* who) {
  if (!(ratio > 0.0 && ratio <= 1.0)) {
    throw Error(fmt::format("{}: the top-k ratio (Options::top_k) must be in (0, 1], or 0 for dense pushes; got {}",
                            who, ratio));
  }
  if (push_wire != WireFormat::fp32) {
    throw Error(fmt::format("{}: top-k pushes send fp32 values; the push wire (Options::wire) is {}", who,
                            wire_name(push_wire)));
  }
}

// Elements a piece of n sends at `ratio` (in (0, 1]): ceil(ratio * n), at least one of a non-empty
// piece, so every piece's message has a size both sides know before it travels.
inline std::size_t top_k_count(double ratio, std::size_t n) {
  if (!(ratio > 0.0 && ratio <= 1.0)) {
    throw Error(fmt::format("ps::top_k_count: the ratio must be in (0, 1], got {}", ratio));
  }
  if (n == 0) return 0;
  const auto k = static_cast<std::size_t>(std::ceil(ratio * static_cast<double>(n)));
  return std::clamp<std::size_t>(k, 1, n);
}

// Selects and sends the top k of pieces up to `max_piece` elements, with buffers sized once: a
// selection allocates nothing. A radix selection over the magnitudes' bits: one pass adds the
// gradient and counts the elements by their 16 high magnitude bits, a second counts the low 15
// bits of those in the bucket where the k-th largest falls, which fixes the k-th magnitude T; a
// third sends every element above T and the first of those equal to T, in index order. Three
// streaming passes instead of a comparison selection over indices (bench/top_k_rates.cpp).
class TopKSelector {
 public:
  explicit TopKSelector(std::size_t max_piece = 0)
      : max_piece_(max_piece), high_(max_piece > 0 ? high_buckets : 0), low_(max_piece > 0 ? low_buckets : 0) {}

  // residual[i] += gradient[i] for i < n, then the k elements of largest magnitude leave: their
  // indices plus `base` into indices[0, k) in ascending order, their values into values[0, k),
  // and 0 where they were in the residual. Ties in magnitude go to the lower index, and a NaN
  // counts as larger than any number, so a diverged gradient still travels. k <= n.
  void compress(const float* gradient, float* residual, std::size_t n, std::size_t k, std::uint32_t base,
                std::uint32_t* indices, float* values) {
    if (k > n) throw Error(fmt::format("ps::TopKSelector: {} of {} elements asked for", k, n));
    if (n > max_piece_) {
      throw Error(fmt::format("ps::TopKSelector: a piece of {} elements exceeds the {} it was made for", n,
                              max_piece_));
    }
    if (static_cast<std::uint64_t>(base) + n > std::numeric_limits<std::uint32_t>::max()) {
      throw Error(fmt::format("ps::TopKSelector: indices up to {} do not fit 32 bits", base + n));
    }
    if (k == 0) {
      for (std::size_t i = 0; i < n; ++i) residual[i] += gradient[i];
      return;
    }
    // The bits of |x| order magnitudes as unsigned integers (NaNs above inf); with the index as
    // tie-break that is a strict total order, so the selected set depends on the values alone.
    std::uint32_t* high = high_.data();
    std::fill(high, high + high_buckets, 0u);
    for (std::size_t i = 0; i < n; ++i) residual[i] += gradient[i];
    for (std::size_t i = 0; i < n; ++i) ++high[magnitude(residual[i]) >> low_bits];
    std::size_t above = 0;  // elements in buckets above the k-th largest's
    std::uint32_t bucket = high_buckets - 1;
    while (above + high[bucket] < k) above += high[bucket--];
    std::uint32_t* low = low_.data();
    std::fill(low, low + low_buckets, 0u);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t m = magnitude(residual[i]);
      if ((m >> low_bits) == bucket) ++low[m & (low_buckets - 1)];
    }
    std::uint32_t rest = low_buckets - 1;
    while (above + low[rest] < k) above += low[rest--];
    const std::uint32_t threshold = (bucket << low_bits) | rest;
    std::size_t equal = k - above;  // of the elements equal to the threshold, the lowest-indexed go
    std::size_t j = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t m = magnitude(residual[i]);
      if (m > threshold || (m == threshold && equal > 0)) {
        if (m == threshold) --equal;
        indices[j] = base + static_cast<std::uint32_t>(i);
        values[j] = residual[i];
        residual[i] = 0.0f;
        ++j;
      }
    }
  }

 private:
  static constexpr unsigned low_bits = 15;
  static constexpr std::uint32_t high_buckets = std::uint32_t{1} << (31 - low_bits), low_buckets = std::uint32_t{1} << low_bits;
  static std::uint32_t magnitude(float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u & 0x7FFFFFFFu;
  }
  std::size_t max_piece_ = 0;
  std::vector<std::uint32_t> high_, low_;  // counts by the magnitude's high and low bits
};

// Momentum correction (Lin et al. 2018, "Deep Gradient Compression", section 3.2): momentum on the
// server acts on an element only in the clocks it travels, so with top-k pushes an element's
// momentum is lost while it waits in the residual. The workers keep the velocity instead,
// u <- m u + g, and u takes the gradient's place in error feedback; the server applies a rule
// without momentum to the sum. Each gradient then reaches the parameters with the weights
// 1, m, m^2, ... of momentum SGD, only later; with every element sent it is momentum SGD up to
// the order of the fp32 sums. Without DGC's momentum factor masking (its section 3.3: zero u
// where an element travelled), which in bench/compression_accuracy.py lost accuracy here.
inline void accumulate_velocity(const float* gradient, float* velocity, std::size_t n, float momentum) {
  for (std::size_t i = 0; i < n; ++i) velocity[i] = momentum * velocity[i] + gradient[i];
}

// dense[indices[j] - base] += values[j] for j < k: one sparse piece added into a dense sum. Adding
// each worker's piece in worker-rank order gives, element by element, the sum of the dense
// vectors the pieces stand for in that order (an element a piece does not name is a zero, and
// adding zero changes no sum but the sign of a zero), so a sparse sum reproduces the dense one.
inline void scatter_add(const std::uint32_t* indices, const float* values, std::size_t k, std::uint32_t base,
                        float* dense) {
  for (std::size_t j = 0; j < k; ++j) dense[indices[j] - base] += values[j];
}

}  // namespace hpcps::ps
