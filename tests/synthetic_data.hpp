#pragma once
// A random classification data set for tests that need a Dataset but not real data.
#include <cstdint>

#include "hpcps/data/dataset.hpp"
#include "hpcps/data/random.hpp"

namespace hpcps_test {

inline hpcps::data::Dataset synthetic(std::size_t count, std::size_t features, std::size_t classes, std::uint64_t seed) {
  hpcps::data::Rng rng(seed);
  hpcps::data::Dataset d;
  d.count = count;
  d.features = features;
  d.classes = classes;
  d.images.resize(count * features);
  d.labels.resize(count);
  for (float& v : d.images) v = hpcps::data::uniform_float(rng);
  for (auto& l : d.labels) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, classes));
  return d;
}

}  // namespace hpcps_test
