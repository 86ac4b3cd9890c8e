#pragma once
// What a layer without parameters or scratch memory declares, so it can inherit it and write
// only its shapes, forward and backward.
#include <cmath>
#include <cstddef>

#include "hpcps/data/random.hpp"

namespace hpcps::nn {

struct StatelessLayer {
  std::size_t parameter_count() const { return 0; }
  void initialize(float*, data::Rng&) const {}
  template <class Backend>
  struct Workspace {};
  template <class Backend>
  Workspace<Backend> make_workspace(const Backend&, std::size_t /*max_batch*/) const {
    return {};
  }
};

// He-uniform weights, U(-sqrt(6 / fan_in), +sqrt(6 / fan_in)): keeps the activations' variance
// through ReLU layers. Used for every dense and convolutional layer (the layer does not know
// which activation follows it; for tanh and sigmoid it is a slightly wide start, still trains).
inline void he_uniform(float* w, std::size_t n, std::size_t fan_in, data::Rng& rng) {
  const auto limit = static_cast<float>(std::sqrt(6.0 / static_cast<double>(fan_in)));
  for (std::size_t i = 0; i < n; ++i) w[i] = (2.0f * data::uniform_float(rng) - 1.0f) * limit;
}

}  // namespace hpcps::nn
