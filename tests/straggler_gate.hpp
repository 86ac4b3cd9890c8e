#pragma once
// A straggler made by messages, not by sleeping: in TrainOptions::after_compute the other workers
// tell the straggler each value they reach (a clock), and the straggler holds until what it has
// heard satisfies the test's condition. A sleep decides nothing on a loaded machine (a slow rank
// descheduled for a while is not slow); a gate makes "the others got this far while the straggler
// computed one clock" certain, so an assertion that follows from it holds on any machine. The
// condition must be one the strategy lets the others reach while the straggler is held, or the job
// hangs until MPIEXEC_TIMEOUT.
//
// after_compute runs on the rank's MPI thread before that clock's push, so the gate may make MPI
// calls there, on a communicator of its own. Worker w is rank w of the world (ps::Layout::
// worker_rank). Fewer than two workers: there is nobody to wait for, and the gate does nothing.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/request.hpp"

namespace hpcps_test {

class StragglerGate {
 public:
  // Collective over `world`: every rank, workers and servers, builds it, and later calls finish().
  StragglerGate(const hpcps::comm::Communicator& world, int workers, int straggler)
      : comm_(world.duplicate()), workers_(workers), straggler_(workers >= 2 ? straggler : -1),
        reports_(static_cast<std::size_t>(workers)) {}
  StragglerGate(const StragglerGate&) = delete;
  StragglerGate& operator=(const StragglerGate&) = delete;

  bool is_straggler(int worker) const { return worker == straggler_; }

  // A worker other than the straggler, in after_compute: it has reached `value`. Values from one
  // worker arrive in the order sent (MPI does not overtake on one communicator and tag).
  void report(std::uint64_t value) {
    if (straggler_ < 0) return;
    values_.push_back(value);  // a deque: the buffers of sends in flight stay where they are
    sends_.add(comm_.isend(&values_.back(), 1, straggler_, tag));
  }

  // The straggler, in after_compute: receives reports until `released()` is true. Polls and yields
  // rather than blocking in MPI_Recv, which spins and would take a core from the ranks it waits for.
  template <class Released>
  void hold(Released&& released) {
    while (!released()) receive_one();
  }

  // What the straggler has heard so far, by worker, in the order sent (its own list stays empty).
  const std::vector<std::vector<std::uint64_t>>& reports() const { return reports_; }
  // The straggler: every other worker has reported at least `value`.
  bool others_reached(std::uint64_t value) const {
    for (std::size_t v = 0; v < reports_.size(); ++v) {
      if (static_cast<int>(v) != straggler_ && (reports_[v].empty() || reports_[v].back() < value)) return false;
    }
    return true;
  }
  // The straggler: reports from the other workers, in all (one per clock they computed).
  std::size_t others_reports() const { return received_; }

  // Collective over the world, after ps::train returned on every rank: the sends complete, the
  // straggler takes every report still on its way, and the communicator is freed here rather than
  // in a destructor, so nothing is left pending and no destructor makes a collective call.
  void finish() {
    sends_.wait_all();
    sends_.clear();
    const std::uint64_t sent = values_.size();
    std::vector<std::uint64_t> all(static_cast<std::size_t>(comm_.size()), 0);
    comm_.allgather(&sent, 1, all.data());
    std::uint64_t total = 0;
    for (std::uint64_t n : all) total += n;
    if (comm_.rank() == straggler_) {
      while (received_ < total) receive_one();
      for (std::size_t v = 0; v < reports_.size(); ++v) {
        if (reports_[v].size() != all[v]) {
          throw std::logic_error("StragglerGate: worker " + std::to_string(v) + " sent " + std::to_string(all[v]) +
                                 " reports, " + std::to_string(reports_[v].size()) + " arrived");
        }
      }
    }
    comm_ = hpcps::comm::Communicator();
  }

 private:
  static constexpr int tag = 0;

  void receive_one() {
    std::optional<hpcps::comm::Status> probed;
    while (!(probed = comm_.iprobe(hpcps::comm::Communicator::any_source, tag))) std::this_thread::yield();
    std::uint64_t value = 0;
    comm_.recv(&value, 1, probed->source, tag);
    if (probed->source < 0 || probed->source >= workers_ || probed->source == straggler_) {
      throw std::logic_error("StragglerGate: a report from rank " + std::to_string(probed->source));
    }
    reports_[static_cast<std::size_t>(probed->source)].push_back(value);
    ++received_;
  }

  hpcps::comm::Communicator comm_;
  int workers_, straggler_;
  std::deque<std::uint64_t> values_;  // sent
  hpcps::comm::RequestSet sends_;
  std::vector<std::vector<std::uint64_t>> reports_;  // received, by worker
  std::size_t received_ = 0;
};

}  // namespace hpcps_test
