#pragma once
// A server owns one contiguous shard of the parameter vector and the optimizer state for it.
// Data flows worker -> server -> worker: a worker pushes [count, gradient slice], and the server
// answers with its parameter slice when the synchronization rule allows; nothing is requested.
//
// Two loops, chosen by the strategy's `aggregates`:
// - aggregating (bulk-synchronous): per clock, one push from every active worker, summed in
//   worker-rank order (the result does not depend on arrival order), one update, then every
//   active worker gets the new shard;
// - individual (asynchronous, stale-bounded): each push is applied as it arrives, in arrival
//   order; the worker that sent it is answered once it is at most `staleness()` clocks ahead of the
//   slowest active worker, else it waits until the slowest catches up.
#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/request.hpp"
#include "hpcps/metrics/stopwatch.hpp"
#include "hpcps/ps/layout.hpp"

namespace hpcps::ps {

struct ServerStats {
  std::size_t updates = 0;                     // times the update rule ran
  std::vector<std::size_t> pushes_per_worker;  // gradient slices applied, by worker (idle ones excluded)
  std::vector<std::size_t> clocks_per_worker;  // pushes received, idle ones included
  std::size_t max_staleness = 0;               // largest clock gap between an answered worker and the slowest
  double wait = 0.0;                           // waiting for pushes
  double update = 0.0;                         // summing, applying, answering
};

template <class Sync, class Optimizer>
class Server {
 public:
  Server(const comm::Communicator& world, const Layout& layout, int index, const float* initial_parameters,
         Sync sync, Optimizer optimizer)
      : world_(world),
        layout_(layout),
        range_(layout.shard(index)),
        sync_(sync),
        optimizer_(optimizer),
        params_(initial_parameters + range_.begin, initial_parameters + range_.end),
        sum_(Sync::aggregates ? range_.size() : 0, 0.0f),  // only the aggregating loop sums slices
        inbox_(static_cast<std::size_t>(layout.workers()) * (range_.size() + 1), 0.0f),
        state_(optimizer_.make_state(range_.size())) {
    const auto workers = static_cast<std::size_t>(layout.workers());
    stats_.pushes_per_worker.assign(workers, 0);
    stats_.clocks_per_worker.assign(workers, 0);
    active_.assign(workers, 1);
    waiting_.assign(workers, 0);
    receives_.reserve(workers);
    replies_.reserve(workers);
  }

  // Serves until every worker has sent its stop marker.
  void run() {
    if constexpr (Sync::aggregates) {
      run_aggregating();
    } else {
      run_individual();
    }
    replies_.wait_all();
    replies_.clear();
  }

  const std::vector<float>& parameters() const { return params_; }
  data::Range range() const { return range_; }
  const ServerStats& stats() const { return stats_; }
  const Sync& sync() const { return sync_; }

 private:
  void run_aggregating() {
    start_aggregating();
    while (serve_clock()) {
    }
  }

 public:
  // The aggregating loop one clock at a time, for a colocated rank whose worker drives it:
  // start_aggregating() once (initial parameters out, receives posted), then serve_clock() after
  // the rank's own push of each clock; it returns false once every worker has stopped.
  void start_aggregating() {
    static_assert(Sync::aggregates, "ps::Server: only the aggregating strategy is served clock by clock");
    remaining_ = active_.size();
    for (std::size_t w = 0; w < active_.size(); ++w) {
      reply(w);
      receives_.add(listen(w));
    }
  }

  bool serve_clock() {
    const std::size_t workers = active_.size();
    metrics::PhaseClock clock;
    clock.start();
    receives_.wait_all();
    receives_.clear();
    clock.charge(stats_.wait);
    double total = 0.0;
    const float* single = nullptr;  // the only contributor's slice, used in place
    std::size_t contributors = 0;
    for (std::size_t w = 0; w < workers; ++w) {
      if (!active_[w]) continue;
      const float* message = inbox(w);
      if (message[0] == push_count::stop) {
        active_[w] = 0;
        --remaining_;
        continue;
      }
      ++stats_.clocks_per_worker[w];
      if (message[0] <= 0.0f) continue;  // idle at this clock
      ++stats_.pushes_per_worker[w];
      total += message[0];
      if (contributors == 0) {
        single = message + 1;
      } else {
        accumulate(contributors == 1 ? single : nullptr, message + 1);
      }
      ++contributors;
    }
    // The previous clock's replies read params_: they must be out before params_ changes.
    replies_.wait_all();
    replies_.clear();
    if (total > 0.0) apply(contributors == 1 ? single : sum_.data(), static_cast<float>(1.0 / total));
    if (remaining_ > 0) {
      const std::size_t slowest = slowest_active_clock();
      for (std::size_t w = 0; w < workers; ++w) {
        if (!active_[w]) continue;
        note_staleness(stats_.clocks_per_worker[w] - slowest);
        reply(w);
        receives_.add(listen(w));
      }
    } else {
      replies_.wait_all();
      replies_.clear();
    }
    clock.charge(stats_.update);
    return remaining_ > 0;
  }

 private:
  void run_individual() {
    const std::size_t workers = active_.size();
    std::size_t remaining = workers;
    for (std::size_t w = 0; w < workers; ++w) {
      reply(w);
      receives_.add(listen(w));  // slot w belongs to worker w
    }
    metrics::PhaseClock clock;
    while (remaining > 0) {
      clock.start();
      const int slot = receives_.wait_any();
      clock.charge(stats_.wait);
      const auto w = static_cast<std::size_t>(slot);
      const float* message = inbox(w);
      // Answers in flight read params_, and the reply set stays within its capacity.
      replies_.wait_all();
      replies_.clear();
      if (message[0] == push_count::stop) {
        active_[w] = 0;
        waiting_[w] = 0;
        --remaining;
      } else {
        ++stats_.clocks_per_worker[w];
        if (message[0] > 0.0f) {
          ++stats_.pushes_per_worker[w];
          apply(message + 1, 1.0f / message[0]);
        }
        waiting_[w] = 1;
        receives_.replace(w, listen(w));
      }
      answer_waiting_workers();
      clock.charge(stats_.update);
    }
  }

  // Answers every waiting worker that is within the staleness bound of the slowest active one.
  void answer_waiting_workers() {
    const std::size_t slowest = slowest_active_clock();
    for (std::size_t w = 0; w < active_.size(); ++w) {
      if (!waiting_[w]) continue;
      const std::size_t ahead = stats_.clocks_per_worker[w] - slowest;
      if (ahead > sync_.staleness()) continue;
      note_staleness(ahead);
      waiting_[w] = 0;
      reply(w);
    }
  }

  // Clocks completed by the slowest worker still training (a waiting worker is at least there).
  std::size_t slowest_active_clock() const {
    std::size_t slowest = std::numeric_limits<std::size_t>::max();
    for (std::size_t w = 0; w < active_.size(); ++w) {
      if (active_[w]) slowest = std::min(slowest, stats_.clocks_per_worker[w]);
    }
    return slowest;
  }

  // How far ahead of the slowest active worker a worker is when it gets parameters.
  void note_staleness(std::size_t ahead) { stats_.max_staleness = std::max(stats_.max_staleness, ahead); }

  float* inbox(std::size_t worker) { return inbox_.data() + worker * (range_.size() + 1); }

  // sum_ += slice, in worker-rank order; with `first` (the first contributor's slice) given, the
  // first two are added in one pass: sum_ = first + slice.
  void accumulate(const float* first, const float* slice) {
    float* sum = sum_.data();
    const std::size_t n = sum_.size();
    if (first != nullptr) {
#pragma omp simd
      for (std::size_t i = 0; i < n; ++i) sum[i] = first[i] + slice[i];
    } else {
#pragma omp simd
      for (std::size_t i = 0; i < n; ++i) sum[i] += slice[i];
    }
  }

  // params_ <- update rule with the mean gradient gradient_sum * scale, in one pass.
  void apply(const float* gradient_sum, float scale) {
    optimizer_.step(state_, params_.data(), gradient_sum, scale, params_.size(), stats_.updates);
    ++stats_.updates;
  }

  void reply(std::size_t worker) {
    replies_.add(world_.isend(params_.data(), params_.size(), layout_.worker_rank(static_cast<int>(worker)), tags::params));
  }
  comm::Request listen(std::size_t worker) {
    return world_.irecv(inbox(worker), range_.size() + 1, layout_.worker_rank(static_cast<int>(worker)), tags::push);
  }

  const comm::Communicator& world_;
  Layout layout_;
  data::Range range_;
  Sync sync_;
  Optimizer optimizer_;
  std::vector<float> params_, sum_, inbox_;
  typename Optimizer::State state_;
  std::vector<char> active_, waiting_;
  std::size_t remaining_ = 0;
  comm::RequestSet receives_, replies_;
  ServerStats stats_;
};

}  // namespace hpcps::ps
