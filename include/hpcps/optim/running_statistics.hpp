#pragma once
// The update rule of a shard that holds state (nn/state_slots.hpp: batch normalization's running
// moments) besides parameters: Optimizer's step on the parameters, and on each state range the
// running average of the pushed mean, state += momentum (sum * scale - state). The server asks the
// rule, as for any other; ps::ParameterServer composes it for a network with state slots. Optimizer
// state (momentum, Adam's moments) is kept for the whole shard, state ranges included but unused
// there, so checkpoints and resume see the same arrays as with Optimizer alone.
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hpcps/error.hpp"

namespace hpcps::optim {

// A range of state within a shard, [begin, end), and its running average's momentum.
struct StateRange {
  std::size_t begin = 0, end = 0;
  float momentum = 0.1f;
};

template <class Optimizer>
class RunningStatistics {
 public:
  static constexpr const char* name = Optimizer::name;
  using State = typename Optimizer::State;

  // `ranges`: within the shard, in increasing order, not overlapping.
  RunningStatistics(Optimizer optimizer, std::vector<StateRange> ranges)
      : optimizer_(std::move(optimizer)), ranges_(std::move(ranges)) {
    for (std::size_t i = 0; i < ranges_.size(); ++i) {
      const StateRange& r = ranges_[i];
      if (r.begin >= r.end || (i > 0 && r.begin < ranges_[i - 1].end) || !(r.momentum > 0.0f && r.momentum <= 1.0f)) {
        throw Error(fmt::format("optim::RunningStatistics: state range {} [{}, {}) momentum {} is empty, out of order "
                                "or its momentum outside (0, 1]",
                                i, r.begin, r.end, r.momentum));
      }
    }
  }

  const Optimizer& optimizer() const { return optimizer_; }
  const std::vector<StateRange>& ranges() const { return ranges_; }
  State make_state(std::size_t shard_size) const { return optimizer_.make_state(shard_size); }

  // Elements [offset, offset + n) of the shard: the optimizer on the stretches between state
  // ranges, the running average inside them.
  void step(State& state, std::size_t offset, float* params, const float* sum, float scale, std::size_t n,
            std::size_t step) const {
    const std::size_t end = offset + n;
    std::size_t at = offset;
    for (const StateRange& r : ranges_) {
      if (r.end <= at) continue;
      if (r.begin >= end) break;
      const std::size_t lo = std::max(r.begin, at), hi = std::min(r.end, end);
      if (lo > at) optimizer_.step(state, at, params + (at - offset), sum + (at - offset), scale, lo - at, step);
      float* p = params + (lo - offset);
      const float* s = sum + (lo - offset);
      const float m = r.momentum;
      for (std::size_t i = 0; i < hi - lo; ++i) p[i] += m * (s[i] * scale - p[i]);
      at = hi;
    }
    if (at < end) optimizer_.step(state, at, params + (at - offset), sum + (at - offset), scale, end - at, step);
  }
  void step(State& state, float* params, const float* sum, float scale, std::size_t n, std::size_t step) const {
    this->step(state, 0, params, sum, scale, n, step);
  }

 private:
  Optimizer optimizer_;
  std::vector<StateRange> ranges_;
};

}  // namespace hpcps::optim
