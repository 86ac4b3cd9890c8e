#pragma once
// An in-memory labelled dataset and the loader that builds one from an IDX image file and an IDX
// label file. Images are stored as float once, at load time, so batching is a plain row copy.
#include <hpcps/data/idx.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace hpcps::data {

struct Dataset {
  std::size_t count = 0;     // number of samples
  std::size_t features = 0;  // floats per sample
  std::size_t classes = 0;   // labels lie in [0, classes)
  std::vector<float> images;  // count * features, row-major, scaled to [0,1] by /255
  std::vector<std::int32_t> labels;  // count
};

inline Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path,
                             std::size_t classes = 10) {
  if (classes == 0 || classes > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw DataError(fmt::format("{}: classes must be in 1..{}, got {}", labels_path,
                                std::numeric_limits<std::int32_t>::max(), classes));
  }
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
