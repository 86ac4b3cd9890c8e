#pragma once
// A Dataset kept in the type its IDX files store (one byte per pixel and per label): described from
// the headers alone, then some or all of its rows read into memory the caller gives (a node's
// shared window: ps/node_dataset.hpp) or into a private copy. A batch converts the bytes as it
// copies them (data/rows.hpp), so the set takes a quarter of the memory of floats and the network
// sees the same floats as with load_idx_pair.
#include <hpcps/data/dataset.hpp>
#include <hpcps/data/idx_records.hpp>
#include <hpcps/data/shard.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hpcps::data {

// An image file and its label file.
struct IdxPairFiles {
  std::string images;
  std::string labels;
  std::size_t classes = 10;
};

// count, features, classes and layout from the two headers (checked against each other, with the
// same messages as load_idx_pair); no samples.
inline Dataset describe_idx_pair(const IdxPairFiles& files) {
  detail::check_classes(files.labels, files.classes);
  const IdxShape images = read_idx_shape(files.images);
  if (images.dims.size() < 2) {
    throw DataError(fmt::format("{}: images need at least 2 dimensions (count, features...), found {}",
                                files.images, images.dims.size()));
  }
  const IdxShape labels = read_idx_shape(files.labels);
  if (labels.dims.size() != 1) {
    throw DataError(fmt::format("{}: labels need exactly 1 dimension, found {}", files.labels, labels.dims.size()));
  }
  if (labels.records() != images.records()) {
    throw DataError(fmt::format("{}: label count {} does not match image count {} in {}", files.labels,
                                labels.records(), images.records(), files.images));
  }
  Dataset data;
  data.count = images.records();
  data.features = images.record_bytes();
  data.classes = files.classes;
  detail::set_layout(data, images.dims);
  return data;
}

// Bytes that rows `rows` of `set` take: their pixels, then their labels.
inline std::size_t stored_bytes(const Dataset& set, Range rows) { return rows.size() * (set.features + 1); }

// The rows `rows` of the set `description` describes, viewed in `memory` (stored_bytes of them,
// filled by read_stored_rows, here or in another process); `memory` must outlive the view.
inline Dataset stored_view(const Dataset& description, Range rows, const std::uint8_t* memory) {
  Dataset view = description.description();
  view.pixel_bytes = memory;
  view.label_bytes = memory + rows.size() * description.features;
  view.rows = rows;
  if (rows.size() == 0) view.pixel_bytes = nullptr, view.label_bytes = nullptr;  // holds none
  return view;
}

// Reads rows `rows` of `files` (described by `description`) into `memory` (stored_bytes of them)
// and checks their labels.
inline void read_stored_rows(const IdxPairFiles& files, const Dataset& description, Range rows, std::uint8_t* memory) {
  if (rows.begin > rows.end || rows.end > description.count) {
    throw DataError(fmt::format("{}: rows [{}, {}) are not inside its {} samples", files.images, rows.begin, rows.end,
                                description.count));
  }
  // The headers again (cheap): a file changed since the description was made is noticed.
  const IdxShape images = read_idx_shape(files.images);
  if (images.records() < description.count || images.record_bytes() != description.features) {
    throw DataError(fmt::format("{}: the file changed while it was being read: {} records of {} bytes, expected {} "
                                "or more of {}",
                                files.images, images.records(), images.record_bytes(), description.count,
                                description.features));
  }
  read_idx_records(files.images, images, rows.begin, rows.end, memory);
  std::uint8_t* labels = memory + rows.size() * description.features;
  read_idx_records(files.labels, read_idx_shape(files.labels), rows.begin, rows.end, labels);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (labels[i] >= description.classes) {
      throw DataError(fmt::format("{}: label at index {} is {}; expected a value below {} classes", files.labels,
                                  rows.begin + i, unsigned{labels[i]}, description.classes));
    }
  }
}

// A private copy of rows `rows` (all by default) as stored bytes.
inline Dataset load_stored(const IdxPairFiles& files, std::optional<Range> rows = std::nullopt) {
  const Dataset description = describe_idx_pair(files);
  const Range r = rows ? *rows : Range{0, description.count};
  auto memory = std::make_shared<std::vector<std::uint8_t>>(stored_bytes(description, r));
  read_stored_rows(files, description, r, memory->data());
  Dataset data = stored_view(description, r, memory->data());
  data.storage = std::move(memory);
  return data;
}

}  // namespace hpcps::data
