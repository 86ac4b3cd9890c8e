#pragma once
// Copies samples of a Dataset into a float batch buffer: the one copy a batch makes anyway, with the
// conversion of stored bytes fused into it (pixel / 255.0f: a division, not a multiplication by
// 1/255, so the floats are those load_idx_pair makes, bit for bit). The form is decided once per
// call, outside the loop over rows.
#include <hpcps/data/dataset.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace hpcps::data {

namespace detail {

inline void bytes_to_floats(const std::uint8_t* src, std::size_t n, float* out) {
  for (std::size_t j = 0; j < n; ++j) out[j] = static_cast<float>(src[j]) / 255.0f;
}

}  // namespace detail

// Rows rows[0..n) of `data` (absolute indices, inside data.held()) into `out` (n * features floats)
// and `labels` (n).
inline void stage_rows(const Dataset& data, const std::size_t* rows, std::size_t n, float* out, std::int32_t* labels) {
  const std::size_t features = data.features;
  if (data.holds_bytes()) {
    const std::size_t first = data.held().begin;
    const std::uint8_t* pixels = data.pixel_bytes;
    const std::uint8_t* label_bytes = data.label_bytes;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t at = rows[i] - first;
      detail::bytes_to_floats(pixels + at * features, features, out + i * features);
      labels[i] = static_cast<std::int32_t>(label_bytes[at]);
    }
    return;
  }
  const float* images = data.images.data();
  for (std::size_t i = 0; i < n; ++i) {
    const float* src = images + rows[i] * features;
    std::copy(src, src + features, out + i * features);
    labels[i] = data.labels[rows[i]];
  }
}

// The consecutive rows [first, first + n).
inline void stage_range(const Dataset& data, std::size_t first, std::size_t n, float* out, std::int32_t* labels) {
  const std::size_t features = data.features;
  if (data.holds_bytes()) {
    const std::size_t at = first - data.held().begin;
    detail::bytes_to_floats(data.pixel_bytes + at * features, n * features, out);
    for (std::size_t i = 0; i < n; ++i) labels[i] = static_cast<std::int32_t>(data.label_bytes[at + i]);
    return;
  }
  std::copy(data.images.data() + first * features, data.images.data() + (first + n) * features, out);
  std::copy(data.labels.data() + first, data.labels.data() + first + n, labels);
}

}  // namespace hpcps::data
