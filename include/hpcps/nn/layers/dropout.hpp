#pragma once
// Inverted dropout: in training each value is kept with probability 1 - rate and scaled by
// 1 / (1 - rate); in evaluation the layer is the identity. The mask is a function of
// (Config::seed, the pass's SamplePosition, element) only, so a run repeats exactly: ps::train sets
// the position (the clock and the first sample's place in the global batch) before each gradient,
// and on its own a workspace counts its training passes as the step.
#include <cstddef>
#include <cstdint>

#include <fmt/format.h>

#include "hpcps/backend/detail/dropout_hash.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/layers/stateless.hpp"
#include "hpcps/nn/sample_position.hpp"
#include "hpcps/nn/shape.hpp"

namespace hpcps::nn {

class Dropout : public StatelessLayer {
 public:
  struct Config {
    float rate = 0.5f;  // probability of dropping a value, in [0, 1)
    std::uint64_t seed = 1;
  };
  static constexpr const char* name = "dropout";

  Dropout(Shape input, const Config& config) : shape_(input), rate_(config.rate), seed_(config.seed) {
    if (!(config.rate >= 0.0f && config.rate < 1.0f)) {
      throw Error(fmt::format("the dropout rate must be in [0, 1), got {}", config.rate));
    }
  }
  Shape output_shape() const { return shape_; }

  template <class Backend>
  struct Workspace {
    typename Backend::buffer_type mask;  // the last training pass's, read by backward
    SamplePosition position;             // of the next training pass; its step advances after it
  };
  template <class Backend>
  Workspace<Backend> make_workspace(const Backend& backend, std::size_t max_batch) const {
    return Workspace<Backend>{backend.make_buffer(max_batch * shape_.size()), {}};
  }

  template <class Backend>
  void forward(const Backend& backend, Workspace<Backend>& ws, const float*, const float* x, std::size_t count,
               float* y, bool training) const {
    const std::size_t n = count * shape_.size();
    if (!training) {
      backend.copy(x, n, y);
      return;
    }
    float* mask = Backend::data(ws.mask);
    backend.dropout_mask(mask, n, 1.0f - rate_, backend::detail::mix64(seed_, ws.position.step),
                         ws.position.first_sample * shape_.size());
    ++ws.position.step;
    backend.multiply(x, mask, n, y);
  }
  template <class Backend>
  void backward(const Backend& backend, Workspace<Backend>& ws, const float*, const float*, const float*,
                const float* dy, std::size_t count, float* dx, float*) const {
    if (dx != nullptr) backend.multiply(dy, Backend::data(ws.mask), count * shape_.size(), dx);
  }

 private:
  Shape shape_;
  float rate_;
  std::uint64_t seed_;
};

}  // namespace hpcps::nn
