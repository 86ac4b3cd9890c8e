#pragma once
// Loss and accuracy of a network over a whole Dataset, in either of its forms: floats go to the
// network as they are; stored bytes are converted chunk by chunk into a buffer the caller keeps
// (EvaluationBuffer), in chunks of the workspace's batch, which is how the network chunks floats
// too: the same sums in the same order, so the same figures to the last bit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hpcps/data/dataset.hpp"
#include "hpcps/data/rows.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/batch_stats.hpp"

namespace hpcps::ps {

// The floats and labels of one chunk; sized once, before the first evaluation, so evaluating
// inside training allocates nothing.
struct EvaluationBuffer {
  std::vector<float> inputs;
  std::vector<std::int32_t> labels;

  void reserve(std::size_t chunk, std::size_t features) {
    if (inputs.size() < chunk * features) inputs.resize(chunk * features);
    if (labels.size() < chunk) labels.resize(chunk);
  }
};

namespace detail {

template <class W, class = void>
struct has_max_batch : std::false_type {};
template <class W>
struct has_max_batch<W, std::void_t<decltype(std::declval<const W&>().max_batch)>> : std::true_type {};

}  // namespace detail

// Samples per chunk for a workspace: its batch where it says (every hpcps network), else 256.
template <class Workspace>
std::size_t evaluation_chunk(const Workspace& ws) {
  if constexpr (detail::has_max_batch<Workspace>::value) {
    return ws.max_batch > 0 ? static_cast<std::size_t>(ws.max_batch) : 256;
  } else {
    return 256;
  }
}

template <class Network, class Backend, class Workspace>
nn::BatchStats evaluate_dataset(const Network& network, const Backend& backend, Workspace& ws, const float* params,
                                const data::Dataset& set, EvaluationBuffer& buffer) {
  if (!set.holds_samples()) {
    throw Error("evaluate_dataset: the set describes " + std::to_string(set.count) + " samples but holds none");
  }
  if (!set.holds_bytes()) {
    return network.evaluate(backend, ws, params, set.images.data(), set.labels.data(), set.count);
  }
  const data::Range held = set.held();
  if (held.begin != 0 || held.end < set.count) {
    throw Error("evaluate_dataset: the set holds only some of its rows; evaluation needs all of them");
  }
  const std::size_t chunk = evaluation_chunk(ws);
  buffer.reserve(chunk, set.features);
  nn::BatchStats total;
  for (std::size_t begin = 0; begin < set.count; begin += chunk) {
    const std::size_t n = std::min(chunk, set.count - begin);
    data::stage_range(set, begin, n, buffer.inputs.data(), buffer.labels.data());
    total += network.evaluate(backend, ws, params, buffer.inputs.data(), buffer.labels.data(), n);
  }
  return total;
}

}  // namespace hpcps::ps
