#pragma once
// Training-time data augmentation of images: a random translation (a crop of the image padded by
// `shift` pixels on each side, the usual "random crop with padding") and a random horizontal
// mirror. Each sample's draw depends only on (seed, epoch, the sample's row in the dataset), so
// it is the same on any number of workers, in any strategy, and after a resume from a checkpoint:
// augmentation keeps a synchronous run reproducible and layout-independent. The Batcher applies it
// to the rows it stages (Batcher::set_augmentation), in buffers allocated once.
#include <hpcps/data/random.hpp>
#include <hpcps/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hpcps::data {

struct Augmentation {
  // The layout of a row: channels x height x width, row-major (NCHW without the N).
  std::size_t channels = 1;
  std::size_t height = 0;
  std::size_t width = 0;
  std::size_t shift = 0;  // translate by -shift..shift pixels in each direction, uniformly
  bool flip = false;      // mirror left-right with probability 1/2
  float fill = 0.0f;      // the value of the pixels shifted in (the background: 0 for pixel / 255)

  bool active() const noexcept { return shift > 0 || flip; }
  std::size_t features() const noexcept { return channels * height * width; }
};

// One sample's transformation: out(c, y, x) = in(c, y + dy, x' + dx), where x' = width - 1 - x if
// mirrored, else x; `fill` where that falls outside the image.
struct AugmentDraw {
  long dy = 0;
  long dx = 0;
  bool flip = false;
};

// Why `a` cannot apply to rows of `features` floats, or "" if it can.
inline std::string augmentation_problem(const Augmentation& a, std::size_t features) {
  if (!a.active()) return {};
  if (a.features() != features) {
    return fmt::format("data augmentation: an image of {} x {} x {} is {} values, but a sample has {}", a.channels,
                       a.height, a.width, a.features(), features);
  }
  if (a.shift >= a.height || a.shift >= a.width) {
    return fmt::format("data augmentation: a shift of {} pixels leaves nothing of a {} x {} image", a.shift, a.height,
                       a.width);
  }
  return {};
}

// The draw of sample `row` in `epoch`. Hashing (seed, epoch, row) in turn rather than summing them
// keeps different triples from sharing a draw.
inline AugmentDraw augment_draw(const Augmentation& a, std::uint64_t seed, std::size_t epoch, std::size_t row) noexcept {
  std::uint64_t state = seed ^ 0x6175676D656E74ULL;  // "augment": a stream apart from the shuffle's
  std::uint64_t h = splitmix64(state);
  h ^= static_cast<std::uint64_t>(epoch);
  h = splitmix64(h);
  h ^= static_cast<std::uint64_t>(row);
  const std::uint64_t bits = splitmix64(h);
  AugmentDraw d;
  const std::uint64_t span = 2 * a.shift + 1;
  // Three parts of one hash: dy from all 64 bits, dx from bits 20-63, the mirror from bit 63 (the
  // modulo bias is below span / 2^44).
  d.dy = static_cast<long>(bits % span) - static_cast<long>(a.shift);
  d.dx = static_cast<long>((bits >> 20) % span) - static_cast<long>(a.shift);
  d.flip = a.flip && ((bits >> 63) != 0);
  return d;
}

// Writes the transformed image of `in` into `out` (features() floats each; they must not overlap).
inline void augment_image(const Augmentation& a, AugmentDraw d, const float* in, float* out) noexcept {
  const long h = static_cast<long>(a.height), w = static_cast<long>(a.width);
  // The columns x with 0 <= x + dx < w (before the mirror): the others are filled.
  const long x_begin = std::max(0L, -d.dx), x_end = std::min(w, w - d.dx);
  for (std::size_t c = 0; c < a.channels; ++c) {
    const float* src = in + c * a.height * a.width;
    float* dst = out + c * a.height * a.width;
    for (long y = 0; y < h; ++y) {
      float* line = dst + y * w;
      const long sy = y + d.dy;
      if (sy < 0 || sy >= h || x_begin >= x_end) {
        std::fill(line, line + w, a.fill);
        continue;
      }
      const float* from = src + sy * w;
      std::fill(line, line + x_begin, a.fill);
      std::fill(line + x_end, line + w, a.fill);
      for (long x = x_begin; x < x_end; ++x) line[x] = from[x + d.dx];
      if (d.flip) std::reverse(line, line + w);
    }
  }
}

}  // namespace hpcps::data
