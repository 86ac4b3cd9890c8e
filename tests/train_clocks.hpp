#pragma once
// Drives a built ParameterServer through a fixed number of clocks on consecutive rows of a data
// set, and collects what each rank ends with: the tests that compare one configuration's run with
// another's (wire formats, top-k pushes) share it.
#include <cstddef>
#include <vector>

#include "hpcps/data/dataset.hpp"
#include "hpcps/data/shard.hpp"

namespace hpcps_test {

struct Trained {
  std::vector<float> worker;    // the worker's parameters after its last pull (empty on a pure server)
  std::vector<float> residual;  // what its top-k pushes still hold back (empty without top-k)
  std::vector<float> master;    // this rank's server shard, fp32 (empty elsewhere)
  hpcps::data::Range range;
};

// Collective: worker w trains clock t on rows [(t W + w) b, (t W + w + 1) b) of `data` for `steps`
// clocks, takes part in `idle` more clocks without a batch, and finishes; the servers serve until
// every worker has.
template <class Server>
Trained train_clocks(Server& ps, const hpcps::data::Dataset& data, std::size_t b, std::size_t steps,
                     std::size_t idle = 0) {
  const auto workers = static_cast<std::size_t>(ps.layout().workers());
  Trained out;
  if (ps.is_worker()) {
    auto& worker = ps.worker();
    worker.start();
    for (std::size_t t = 0; t < steps; ++t) {
      const std::size_t first = (t * workers + static_cast<std::size_t>(ps.worker_index())) * b;
      worker.step(data.images.data() + first * data.features, data.labels.data() + first, b);
    }
    for (std::size_t t = 0; t < idle; ++t) worker.step(nullptr, nullptr, 0);
    worker.finish();
    out.worker = worker.parameters();
    out.residual = worker.residual();
  } else {
    ps.server().run();
  }
  if (ps.is_server()) {
    out.master = ps.server().parameters();
    out.range = ps.server().range();
  }
  ps.world().barrier();
  return out;
}

}  // namespace hpcps_test
