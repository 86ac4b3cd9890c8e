#pragma once
// Stale synchronous parallel (SSP; Petuum Bosen, Angel): updates are applied as they arrive, but
// a worker that has finished clock c gets parameters for its next clock only while the slowest
// active worker has finished at least c - s clocks. So a worker never runs more than s clocks
// ahead of the slowest; s = 0 is synchronous in that sense, and a large s approaches asynchronous.
#include <cstddef>

#include <fmt/format.h>

#include "hpcps/error.hpp"

namespace hpcps::sync {

class StaleSynchronous {
 public:
  static constexpr const char* name = "ssp";
  static constexpr bool aggregates = false;

  explicit StaleSynchronous(std::size_t staleness = 2) : staleness_(staleness) {}
  std::size_t staleness() const { return staleness_; }

 private:
  std::size_t staleness_;
};

using Ssp = StaleSynchronous;

}  // namespace hpcps::sync
