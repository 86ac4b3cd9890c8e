#pragma once
// A server owns one contiguous shard of the parameter vector and the optimizer state for it.
// Per clock it receives one push from every active worker, sums the slices in worker-rank order
// (so the result does not depend on arrival order), applies the update rule once, and sends the
// new shard to every active worker: data flows worker -> server -> worker, nothing is requested.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/request.hpp"
#include "hpcps/metrics/stopwatch.hpp"
#include "hpcps/ps/layout.hpp"

namespace hpcps::ps {

struct ServerStats {
  std::size_t updates = 0;                      // times the update rule ran
  std::vector<std::size_t> pushes_per_worker;   // gradient slices applied, by worker
  double wait = 0.0;                            // waiting for pushes
  double update = 0.0;                          // summing and applying
};

template <class Sync, class Optimizer>
class Server {
  static_assert(Sync::aggregates,
                "hpcps::ps::Server: this build only has the aggregating (bulk-synchronous) server loop; "
                "see docs/architecture.md#the-synchronization-concept");

 public:
  Server(const comm::Communicator& world, const Layout& layout, int index, const float* initial_parameters,
         Sync sync, Optimizer optimizer)
      : world_(world),
        layout_(layout),
        range_(layout.shard(index)),
        sync_(sync),
        optimizer_(optimizer),
        params_(initial_parameters + range_.begin, initial_parameters + range_.end),
        sum_(range_.size(), 0.0f),
        inbox_(static_cast<std::size_t>(layout.workers()) * (range_.size() + 1), 0.0f),
        state_(optimizer_.make_state(range_.size())) {
    stats_.pushes_per_worker.assign(static_cast<std::size_t>(layout.workers()), 0);
    receives_.reserve(static_cast<std::size_t>(layout.workers()));
    replies_.reserve(static_cast<std::size_t>(layout.workers()));
  }

  // Serves until every worker has sent its stop marker.
  void run() {
    const auto workers = static_cast<std::size_t>(layout_.workers());
    std::vector<char> active(workers, 1);
    std::size_t remaining = workers;
    for (std::size_t w = 0; w < workers; ++w) reply_and_listen(w);
    metrics::PhaseClock clock;
    while (remaining > 0) {
      clock.start();
      receives_.wait_all();
      receives_.clear();
      clock.charge(stats_.wait);

      double total = 0.0;
      bool first = true;
      for (std::size_t w = 0; w < workers; ++w) {
        if (!active[w]) continue;
        const float* message = inbox(w);
        if (message[0] == push_count::stop) {
          active[w] = 0;
          --remaining;
          continue;
        }
        if (message[0] <= 0.0f) continue;  // idle at this clock
        ++stats_.pushes_per_worker[w];
        total += message[0];
        accumulate(message + 1, first);
        first = false;
      }
      // The previous clock's replies read params_: they must be out before params_ changes.
      replies_.wait_all();
      replies_.clear();
      if (total > 0.0) {
        const auto scale = static_cast<float>(1.0 / total);
        for (float& g : sum_) g *= scale;
        optimizer_.step(state_, params_.data(), sum_.data(), params_.size(), stats_.updates);
        ++stats_.updates;
      }
      for (std::size_t w = 0; w < workers; ++w) {
        if (active[w]) reply_and_listen(w);
      }
      clock.charge(stats_.update);
    }
    replies_.wait_all();
    replies_.clear();
  }

  const std::vector<float>& parameters() const { return params_; }
  data::Range range() const { return range_; }
  const ServerStats& stats() const { return stats_; }
  const Sync& sync() const { return sync_; }

 private:
  float* inbox(std::size_t worker) { return inbox_.data() + worker * (range_.size() + 1); }

  void accumulate(const float* slice, bool first) {
    if (first) {
      std::copy(slice, slice + sum_.size(), sum_.begin());
      return;
    }
    float* sum = sum_.data();
    const std::size_t n = sum_.size();
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) sum[i] += slice[i];
  }

  void reply_and_listen(std::size_t worker) {
    const int rank = layout_.worker_rank(static_cast<int>(worker));
    replies_.add(world_.isend(params_.data(), params_.size(), rank, tags::params));
    receives_.add(world_.irecv(inbox(worker), range_.size() + 1, rank, tags::push));
  }

  const comm::Communicator& world_;
  Layout layout_;
  data::Range range_;
  Sync sync_;
  Optimizer optimizer_;
  std::vector<float> params_, sum_, inbox_;
  typename Optimizer::State state_;
  comm::RequestSet receives_, replies_;
  ServerStats stats_;
};

}  // namespace hpcps::ps
