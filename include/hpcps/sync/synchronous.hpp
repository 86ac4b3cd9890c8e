#pragma once
// Bulk-synchronous parallel: a server updates its shard once per clock, after the gradients of
// every active worker for that clock are in, summed in worker-rank order so a run is reproducible
// for a fixed seed and rank layout. Workers therefore always compute on the newest parameters.
#include <cstddef>

namespace hpcps::sync {

struct Synchronous {
  static constexpr const char* name = "bsp";
  // Buffer pushes until the clock is complete, then aggregate (rather than apply one by one).
  static constexpr bool aggregates = true;
  // Largest clock gap a worker may run ahead of the slowest one; BSP allows none.
  std::size_t staleness() const { return 0; }
};

using Bsp = Synchronous;

}  // namespace hpcps::sync
