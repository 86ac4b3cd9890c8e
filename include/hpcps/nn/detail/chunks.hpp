#pragma once
// Helpers every network type needs around its workspace: a batch must fit it, and an evaluation
// over any number of samples runs in workspace-sized chunks.
#include <algorithm>
#include <cstddef>

#include <fmt/format.h>

#include "hpcps/error.hpp"
#include "hpcps/nn/batch_stats.hpp"

namespace hpcps::nn::detail {

// Takes the network, not its name: describe() formats a string, which the training step must
// not pay for unless the check fails.
template <class Network>
void check_batch_fits(const Network& network, std::size_t count, std::size_t max_batch) {
  if (count == 0 || count > max_batch) {
    throw Error(fmt::format("{}: batch of {} samples does not fit the workspace (1..{})", network.describe(), count,
                            max_batch));
  }
}

// Sums chunk(begin, n) over consecutive chunks of at most `chunk_size` of `count` samples.
template <class Chunk>
BatchStats sum_over_chunks(std::size_t count, std::size_t chunk_size, Chunk&& chunk) {
  BatchStats total;
  for (std::size_t begin = 0; begin < count; begin += chunk_size) total += chunk(begin, std::min(chunk_size, count - begin));
  return total;
}

}  // namespace hpcps::nn::detail
