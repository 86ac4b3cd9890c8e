// Data augmentation (data/augment.hpp): the transformation against a per-pixel reference, the
// draws' determinism and spread, and the Batcher's augmented rows, which must not depend on how a
// batch is split among workers (that is what keeps a synchronous run layout-independent).
#include <hpcps/data/data.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

using hpcps::data::augment_draw;
using hpcps::data::augment_image;
using hpcps::data::AugmentDraw;
using hpcps::data::Augmentation;
using hpcps::data::Batcher;
using hpcps::data::BatchView;
using hpcps::data::Dataset;
using hpcps::data::Range;

namespace {

constexpr std::size_t C = 2, H = 5, W = 4, F = C * H * W;

Augmentation image_augmentation(std::size_t shift, bool flip) { return {C, H, W, shift, flip, -1.0f}; }

// Pixel (c, y, x) of sample `row`: distinct everywhere, and never the fill value -1.
float pixel(std::size_t row, std::size_t c, std::size_t y, std::size_t x) {
  return static_cast<float>(row * 1000 + c * 100 + y * 10 + x);
}

Dataset make_images(std::size_t count) {
  Dataset d;
  d.count = count;
  d.features = F;
  d.channels = C, d.height = H, d.width = W;
  d.classes = 3;
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t c = 0; c < C; ++c)
      for (std::size_t y = 0; y < H; ++y)
        for (std::size_t x = 0; x < W; ++x) d.images.push_back(pixel(i, c, y, x));
    d.labels.push_back(static_cast<std::int32_t>(i % 3));
  }
  return d;
}

// The definition, pixel by pixel: out(c, y, x) = in(c, y + dy, x' + dx), x' = W - 1 - x if mirrored.
std::vector<float> reference(const Augmentation& a, AugmentDraw d, std::size_t row) {
  std::vector<float> out;
  for (std::size_t c = 0; c < C; ++c)
    for (long y = 0; y < static_cast<long>(H); ++y)
      for (long x = 0; x < static_cast<long>(W); ++x) {
        const long mx = d.flip ? static_cast<long>(W) - 1 - x : x;
        const long sy = y + d.dy, sx = mx + d.dx;
        const bool inside = sy >= 0 && sy < static_cast<long>(H) && sx >= 0 && sx < static_cast<long>(W);
        out.push_back(inside ? pixel(row, c, static_cast<std::size_t>(sy), static_cast<std::size_t>(sx)) : a.fill);
      }
  return out;
}

std::vector<float> augmented(const Augmentation& a, AugmentDraw d, const Dataset& data, std::size_t row) {
  std::vector<float> out(F, 12345.0f);
  augment_image(a, d, data.images.data() + row * F, out.data());
  return out;
}

}  // namespace

TEST_CASE("augment_image shifts and mirrors as its definition says, for every draw", "[augment]") {
  const Dataset data = make_images(2);
  const Augmentation a = image_augmentation(3, true);
  for (long dy = -3; dy <= 3; ++dy)
    for (long dx = -3; dx <= 3; ++dx)
      for (bool flip : {false, true}) {
        INFO("dy " << dy << " dx " << dx << " flip " << flip);
        const AugmentDraw d{dy, dx, flip};
        CHECK(augmented(a, d, data, 1) == reference(a, d, 1));
      }
  // No shift and no mirror leaves the image as it is.
  CHECK(augmented(a, AugmentDraw{}, data, 1) == std::vector<float>(data.images.begin() + F, data.images.end()));
}

TEST_CASE("augment_draw depends on (seed, epoch, row) only, covers every shift and both mirrors", "[augment]") {
  const Augmentation a = image_augmentation(2, true);
  std::set<std::tuple<long, long, bool>> seen;
  std::size_t flips = 0, changed_by_epoch = 0, changed_by_seed = 0;
  const std::size_t rows = 2000;
  for (std::size_t row = 0; row < rows; ++row) {
    const AugmentDraw d = augment_draw(a, 7, 3, row);
    const AugmentDraw again = augment_draw(a, 7, 3, row);
    CHECK(std::tie(d.dy, d.dx, d.flip) == std::tie(again.dy, again.dx, again.flip));
    CHECK(d.dy >= -2);
    CHECK(d.dy <= 2);
    CHECK(d.dx >= -2);
    CHECK(d.dx <= 2);
    seen.emplace(d.dy, d.dx, d.flip);
    flips += d.flip ? 1 : 0;
    const AugmentDraw next_epoch = augment_draw(a, 7, 4, row), other_seed = augment_draw(a, 8, 3, row);
    changed_by_epoch += std::tie(d.dy, d.dx, d.flip) != std::tie(next_epoch.dy, next_epoch.dx, next_epoch.flip);
    changed_by_seed += std::tie(d.dy, d.dx, d.flip) != std::tie(other_seed.dy, other_seed.dx, other_seed.flip);
  }
  CHECK(seen.size() == 5 * 5 * 2);
  // 2000 fair coins: 1000 +- 4.5 standard deviations.
  CHECK(flips > 900);
  CHECK(flips < 1100);
  // Two independent draws agree with probability 1/50.
  CHECK(changed_by_epoch > rows * 9 / 10);
  CHECK(changed_by_seed > rows * 9 / 10);
  // Without flip, never mirrored; without shift, never moved.
  for (std::size_t row = 0; row < 200; ++row) {
    CHECK_FALSE(augment_draw(image_augmentation(2, false), 7, 0, row).flip);
    const AugmentDraw still = augment_draw(image_augmentation(0, true), 7, 0, row);
    CHECK(still.dy == 0);
    CHECK(still.dx == 0);
  }
}

TEST_CASE("Batcher augments each row by its own draw, however a batch is split among workers", "[augment][batcher]") {
  const Dataset data = make_images(23);
  const Augmentation a = image_augmentation(2, true);
  const std::uint64_t seed = 5;
  Batcher whole(data, Range{0, 23}, 6, 77);
  whole.set_augmentation(a, seed);
  std::vector<float> reference_rows;
  for (std::size_t epoch : {0u, 1u}) {
    whole.start_epoch(epoch);
    for (std::size_t c = 0; c < whole.batches_per_epoch(); ++c) {
      const BatchView v = whole.batch(c);
      for (std::size_t j = 0; j < v.count; ++j) {
        // The unaugmented row's origin: the batcher without augmentation serves the same order.
        Batcher plain(data, Range{0, 23}, 6, 77);
        plain.start_epoch(epoch);
        const auto row = static_cast<std::size_t>(plain.batch(c).inputs[j * F] / 1000.0f);
        INFO("epoch " << epoch << " batch " << c << " sample " << j << " row " << row);
        const std::vector<float> got(v.inputs + j * F, v.inputs + (j + 1) * F);
        CHECK(got == reference(a, augment_draw(a, seed, epoch, row), row));
        CHECK(v.labels[j] == static_cast<std::int32_t>(row % 3));
        reference_rows.insert(reference_rows.end(), got.begin(), got.end());
      }
    }
  }
  for (std::size_t workers : {2u, 3u, 5u}) {
    INFO(workers << " workers");
    std::vector<Batcher> batchers(workers, Batcher(data, Range{0, 23}, 6, 77));
    for (auto& b : batchers) b.set_augmentation(a, seed);
    std::vector<float> rows;
    for (std::size_t epoch : {0u, 1u}) {
      for (auto& b : batchers) b.start_epoch(epoch);
      for (std::size_t c = 0; c < whole.batches_per_epoch(); ++c) {
        for (std::size_t w = 0; w < workers; ++w) {
          const Range mine = hpcps::data::shard_range(batchers[w].batch_count(c), w, workers);
          const BatchView v = batchers[w].part(c, mine);
          rows.insert(rows.end(), v.inputs, v.inputs + v.count * F);
        }
      }
    }
    CHECK(rows == reference_rows);
  }
  // Turned off again, the rows are served as stored.
  whole.set_augmentation(Augmentation{}, seed);
  whole.start_epoch(0);
  const BatchView v = whole.batch(0);
  const auto row = static_cast<std::size_t>(v.inputs[0] / 1000.0f);
  CHECK(std::vector<float>(v.inputs, v.inputs + F) ==
        std::vector<float>(data.images.begin() + row * F, data.images.begin() + (row + 1) * F));
}

TEST_CASE("An augmentation that does not fit the samples is refused with the shapes", "[augment][errors]") {
  const Dataset data = make_images(4);
  Batcher b(data, Range{0, 4}, 2, 1);
  CHECK_THROWS_WITH(b.set_augmentation(Augmentation{1, 5, 5, 1, false, 0.0f}, 1),
                    Catch::Contains("an image of 1 x 5 x 5 is 25 values, but a sample has 40"));
  CHECK_THROWS_WITH(b.set_augmentation(Augmentation{C, H, W, 4, false, 0.0f}, 1),
                    Catch::Contains("a shift of 4 pixels leaves nothing of a 5 x 4 image"));
  // An inactive one never looks at the shape.
  CHECK_NOTHROW(b.set_augmentation(Augmentation{1, 1, 1, 0, false, 0.0f}, 1));
}
