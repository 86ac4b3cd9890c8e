#pragma once
// An in-memory labelled dataset and the loader that builds one from an IDX image file and an IDX
// label file. A Dataset holds its samples in one of two forms:
// - as floats in `images` and `labels` (load_idx_pair, and sets built by hand, as in the tests);
// - as the bytes the IDX files store (`pixel_bytes`, `label_bytes`: 4x smaller than floats), in
//   memory it owns (`storage`) or in memory someone else keeps, such as the node's shared window
//   (ps/node_dataset.hpp). Every copy of its samples then converts them, pixel / 255.0f, exactly as
//   load_idx_pair does (data/rows.hpp), so both forms give a network the same floats.
#include <hpcps/data/idx.hpp>
#include <hpcps/data/shard.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace hpcps::data {

struct Dataset {
  std::size_t count = 0;     // number of samples
  std::size_t features = 0;  // floats per sample
  std::size_t classes = 0;   // labels lie in [0, classes)
  std::vector<float> images;  // count * features, row-major, scaled to [0,1] by /255
  std::vector<std::int32_t> labels;  // count
  // A sample's layout, channels x height x width (channel planes one after another), from the IDX
  // dimensions: [count, H, W] is 1 x H x W, [count, C, H, W] is C x H x W, [count, F] is F x 1 x 1.
  // All zero in a Dataset built by hand without them: its samples are then known only as `features`.
  std::size_t channels = 0, height = 0, width = 0;

  // The samples as stored bytes, when `images` and `labels` are empty: the rows `rows` (all
  // `count` of them unless a node holds only the ranges its workers read), row-major from the
  // first of them; labels already checked against `classes`.
  const std::uint8_t* pixel_bytes = nullptr;
  const std::uint8_t* label_bytes = nullptr;
  Range rows{};  // {0, 0}: all of [0, count)
  // Owns the bytes of a private copy; empty where they lie in memory the caller keeps alive.
  std::shared_ptr<const void> storage;

  // Whether the layout above is known (and consistent with `features`).
  bool has_layout() const { return channels * height * width == features && features > 0; }
  bool holds_bytes() const { return pixel_bytes != nullptr; }
  // Whether it holds any samples: a Dataset may describe a set (count, features, classes) without
  // them, as it does on a rank that trains on none (a server).
  bool holds_samples() const { return holds_bytes() || !images.empty() || count == 0; }
  // The rows whose samples it holds.
  Range held() const {
    if (!holds_samples()) return Range{0, 0};
    return holds_bytes() && rows.end != 0 ? rows : Range{0, count};
  }
  // The same set without its samples.
  Dataset description() const {
    Dataset d;
    d.count = count, d.features = features, d.classes = classes;
    d.channels = channels, d.height = height, d.width = width;
    return d;
  }
};

namespace detail {

// The layout an IDX image file's dimensions give (see Dataset).
inline void set_layout(Dataset& data, const std::vector<std::uint32_t>& d) {
  if (d.size() == 2) {
    data.channels = d[1], data.height = 1, data.width = 1;
  } else if (d.size() == 3) {
    data.channels = 1, data.height = d[1], data.width = d[2];
  } else if (d.size() == 4) {
    data.channels = d[1], data.height = d[2], data.width = d[3];
  }  // more dimensions: no layout, only `features`
}

inline void check_classes(const std::string& labels_path, std::size_t classes) {
  if (classes == 0 || classes > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw DataError(fmt::format("{}: classes must be in 1..{}, got {}", labels_path,
                                std::numeric_limits<std::int32_t>::max(), classes));
  }
}

}  // namespace detail

inline Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path,
                             std::size_t classes = 10) {
  detail::check_classes(labels_path, classes);
  IdxArray images = read_idx(images_path);
  if (images.dims.size() < 2) {
    throw DataError(fmt::format("{}: images need at least 2 dimensions (count, features...), found {}",
                                images_path, images.dims.size()));
  }
  IdxArray labels = read_idx(labels_path);
  if (labels.dims.size() != 1) {
    throw DataError(fmt::format("{}: labels need exactly 1 dimension, found {}", labels_path,
                                labels.dims.size()));
  }
  std::size_t count = images.dims[0];
  if (labels.dims[0] != count) {
    throw DataError(fmt::format("{}: label count {} does not match image count {} in {}", labels_path,
                                labels.dims[0], count, images_path));
  }

  Dataset data;
  data.count = count;
  data.features = images.values.size() / count;  // read_idx guarantees an exact product, count >= 1
  detail::set_layout(data, images.dims);
  data.classes = classes;
  data.labels.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint8_t label = labels.values[i];
    if (label >= classes) {
      throw DataError(fmt::format("{}: label at index {} is {}; expected a value below {} classes", labels_path,
                                  i, unsigned{label}, classes));
    }
    data.labels[i] = static_cast<std::int32_t>(label);
  }
  data.images.resize(images.values.size());
  for (std::size_t i = 0; i < images.values.size(); ++i) {
    // Division, not multiplication by 1/255, so 255 maps to exactly 1.0f.
    data.images[i] = static_cast<float>(images.values[i]) / 255.0f;
  }
  return data;
}

}  // namespace hpcps::data
