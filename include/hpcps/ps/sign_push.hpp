#pragma once
// Scaled-sign pushes with error feedback (Seide et al. 2014, "1-bit stochastic gradient descent";
// Karimireddy, Rebjock, Stich and Jaggi 2019, "Error feedback fixes SignSGD and other gradient
// compression schemes"): of a gradient piece plus what earlier pushes held back (the worker's
// residual), x = g + r, one bit per element travels, its sign, and one fp32 scale for each block of
// sign_block elements, their mean magnitude s = |x|_1 / n; the server adds s or -s for each
// element. The worker keeps what the message did not carry, element by element
//
//     new residual = fl(x - sent),      sent = +-s,
//
// so nothing of a gradient is lost but the rounding of that one subtraction (at most half an ulp
// of the new residual): the rest is only delayed. With the mean magnitude as scale the message
// carries |x|_1 of the block's mass, and the residual stays bounded (the scaled sign is a
// contraction, a delta-approximate compressor in the paper's terms), unlike plain signSGD's.
//
// Why blocks: a piece (up to Layout::default_piece_floats, 2^20 elements) spans layers whose
// gradients differ in scale by orders of magnitude, and one mean for all of them sends the small
// ones far too large a step, every clock. Measured on the MLP example (2 workers + 1 server, BSP,
// 10 epochs, 5 paired seeds; docs/performance.md): one scale per 2^20-element piece ended 2.97
// points below fp32; one per 1024 elements, 3% more bytes than the bits alone, 0.54 below (0.11
// with momentum correction on the workers).
//
// 32 elements a word and a scale per block: 1/31 of fp32's bytes, and unlike top-k
// every element moves at every clock, so a server rule with momentum acts on all of them. Here:
// the encoding on the worker and the server's sum, with no MPI in them.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hpcps/ps/wire_format.hpp"

namespace hpcps::ps {

// Elements that share a scale: a whole number of words, so a block's signs start a word.
constexpr std::size_t sign_block = 1024;
static_assert(sign_block % 32 == 0, "ps::sign_block: a block's signs fill whole words");

// 32-bit words of signs a piece of n elements sends (beside its scales).
constexpr std::size_t sign_words(std::size_t n) { return (n + 31) / 32; }
// fp32 scales a piece of n elements sends: one a block, the last one maybe short.
constexpr std::size_t sign_scales(std::size_t n) { return (n + sign_block - 1) / sign_block; }

// +s where the bit is 0, -s where it is 1: the scale's own bits with the sign bit set, exact.
inline float signed_scale(float scale, std::uint32_t bit) { return wire::float_of(wire::bits_of(scale) ^ (bit << 31)); }

namespace detail {

// One block (n <= sign_block): see compress_sign.
inline void compress_sign_block(const float* gradient, float* residual, std::size_t n, float* scale, std::uint32_t* words) {
  // Eight partial sums, element i in lane i % 8, added pairwise at the end: a fixed order (the
  // same scale on every run) that the compiler can vectorize, where one running sum cannot be.
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const std::size_t eights = n / 8 * 8;
  for (std::size_t i = 0; i < eights; i += 8) {
    for (std::size_t j = 0; j < 8; ++j) {
      residual[i + j] += gradient[i + j];
      lane[j] += std::fabs(static_cast<double>(residual[i + j]));
    }
  }
  for (std::size_t i = eights; i < n; ++i) {
    residual[i] += gradient[i];
    lane[i % 8] += std::fabs(static_cast<double>(residual[i]));
  }
  const double total = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  const float s = n > 0 ? static_cast<float>(total / static_cast<double>(n)) : 0.0f;
  *scale = s;
  const std::size_t full = n / 32;
  for (std::size_t w = 0; w < full; ++w) {
    // A fixed count of 32, as in add_signs_block.
    float* x = residual + w * 32;
    std::uint32_t word = 0;
    for (std::uint32_t j = 0; j < 32; ++j) {
      const std::uint32_t bit = wire::bits_of(x[j]) >> 31;
      word |= bit << j;
      x[j] -= signed_scale(s, bit);
    }
    words[w] = word;
  }
  if (full * 32 < n) {
    std::uint32_t word = 0;
    for (std::size_t i = full * 32; i < n; ++i) {
      const std::uint32_t bit = wire::bits_of(residual[i]) >> 31;
      word |= bit << (i - full * 32);
      residual[i] -= signed_scale(s, bit);
    }
    words[full] = word;
  }
}

// One block (n <= sign_block): see add_signs.
inline void add_signs_block(float scale, const std::uint32_t* words, std::size_t n, float* sum) {
  const std::size_t full = n / 32;
  for (std::size_t w = 0; w < full; ++w) {
    // A fixed count of 32: the compiler unrolls and vectorizes it (variable shifts).
    const std::uint32_t word = words[w];
    float* out = sum + w * 32;
    for (std::uint32_t j = 0; j < 32; ++j) out[j] += signed_scale(scale, (word >> j) & 1u);
  }
  for (std::size_t i = full * 32; i < n; ++i) sum[i] += signed_scale(scale, (words[full] >> (i - full * 32)) & 1u);
}

}  // namespace detail

// residual[i] += gradient[i] for i < n; scales[b] <- the mean magnitude of the sums in block b
// (elements b * sign_block on), bit i % 32 of words[i / 32] <- their sign bits (a -0 sends -s),
// and residual[i] <- fl(residual[i] - sent). The magnitudes are summed in double, in a fixed
// order: the same scale on every run. A NaN or an inf makes its block's scale NaN or inf, so a diverged
// gradient still shows on the server.
inline void compress_sign(const float* gradient, float* residual, std::size_t n, float* scales, std::uint32_t* words) {
  for (std::size_t b = 0, begin = 0; begin < n; ++b, begin += sign_block) {
    const std::size_t size = n - begin < sign_block ? n - begin : sign_block;
    detail::compress_sign_block(gradient + begin, residual + begin, size, scales + b, words + begin / 32);
  }
}

// sum[i] += +-scales[i / sign_block] for i < n, the sign from bit i % 32 of words[i / 32]: one
// worker's piece added into a dense sum. Adding each worker's piece in worker-rank order gives
// the same sum on every run, whatever the order the pieces arrived in.
inline void add_signs(const float* scales, const std::uint32_t* words, std::size_t n, float* sum) {
  for (std::size_t b = 0, begin = 0; begin < n; ++b, begin += sign_block) {
    const std::size_t size = n - begin < sign_block ? n - begin : sign_block;
    detail::add_signs_block(scales[b], words + begin / 32, size, sum + begin);
  }
}

}  // namespace hpcps::ps
