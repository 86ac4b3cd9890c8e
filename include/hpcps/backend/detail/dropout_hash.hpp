#pragma once
// Dropout's mask as a pure function of (seed, element index): every backend draws the same mask,
// on any number of threads or GPU blocks, with no generator state to share between them.
#include <cstddef>
#include <cstdint>

#include "hpcps/nn/activation.hpp"  // HPCPS_HOST_DEVICE

namespace hpcps::backend::detail {

// SplitMix64's finaliser over seed and index: consecutive indices give independent-looking bits.
HPCPS_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// 1/keep with probability keep, else 0: inverted dropout, so evaluation needs no rescaling.
HPCPS_HOST_DEVICE inline float dropout_mask_value(std::uint64_t seed, std::size_t index, float keep) {
  const float u = static_cast<float>(mix64(seed, index) >> 40) * (1.0f / 16777216.0f);
  return u < keep ? 1.0f / keep : 0.0f;
}

}  // namespace hpcps::backend::detail
