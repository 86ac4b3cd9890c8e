#pragma once
// Asynchronous updates (Hogwild!/Downpour SGD, MXNet dist_async): a server applies each gradient
// slice as it arrives and answers at once with its current parameters. Workers never wait for
// each other; the price is staleness without bound: a worker may compute on parameters that miss
// many updates of others.
#include <cstddef>
#include <limits>

namespace hpcps::sync {

struct Asynchronous {
  static constexpr const char* name = "async";
  static constexpr bool aggregates = false;
  std::size_t staleness() const { return std::numeric_limits<std::size_t>::max(); }
};

using Async = Asynchronous;

}  // namespace hpcps::sync
