#pragma once
// What ps::train does at the end of every clock of a synchronous run, on every rank (workers after
// their step, dedicated servers after serving the clock): keep track of where training stands,
// agree with the other ranks on stopping and checkpointing (ps/clock_agreement.hpp), and write the
// checkpoints the schedule, rank 0's wall clock, a stop or the end of training call for.
// Asynchronous and stale-synchronous ranks do not pass through clocks together; they meet only
// where every rank knows to (is_boundary) or when a signal's notice reached them
// (ps/stop_notice.hpp), the workers stopped and the servers done serving, and decide there (meet).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "hpcps/metrics/stopwatch.hpp"
#include "hpcps/ps/checkpoint_interval.hpp"
#include "hpcps/ps/checkpoint_writer.hpp"
#include "hpcps/ps/clock_agreement.hpp"
#include "hpcps/ps/stop_notice.hpp"
#include "hpcps/ps/stop_signals.hpp"

namespace hpcps::ps {

template <class Server>
class RunControl {
 public:
  struct Settings {
    std::string folder;  // empty: no checkpoints
    CheckpointInterval every;
    std::size_t keep = 2;
    bool stop_on_signals = false;
    std::uint64_t end_clock = 0;  // the clock training ends at
    // The ranks do not pass through clocks together (asynchronous, stale-synchronous, backup
    // workers) and meet only at boundaries: signals travel as notices.
    bool meets = !Server::sync_type::aggregates;
  };

  // Collective over the ParameterServer's world. `at`: where training starts.
  RunControl(Server& ps, Settings settings, const CheckpointPosition& at)
      : ps_(ps), settings_(std::move(settings)), at_(at), agreement_(ps.world()),
        last_checkpoint_(std::chrono::steady_clock::now()) {
    if (settings_.stop_on_signals) signals_ = std::make_unique<StopSignals>();
    if (settings_.stop_on_signals && settings_.meets) notice_.emplace(ps.world());
  }

  // Every rank, after each clock. True when the ranks have agreed to stop after this one.
  bool after_clock() {
    ++at_.clock;
    if (++at_.batch == at_.clocks_per_epoch) {
      at_.batch = 0;
      ++at_.epoch;
    }
    return decide(agreement_.exchange(flags()));
  }
  // Every rank, after its last clock.
  void finish() {
    agreement_.finish();
    if (notice_) notice_->finish();
  }

  // Asynchronous and stale-synchronous runs: whether the ranks meet after clock `clock` (the
  // workers stop pushing, the servers apply every push): at the end of training, and with
  // checkpoints at the end of every epoch (where rank 0's wall-clock interval is acted on) and
  // every N clocks of an interval in clocks.
  bool is_boundary(std::uint64_t clock) const {
    if (clock == settings_.end_clock) return true;
    if (settings_.folder.empty()) return false;
    return clock % at_.clocks_per_epoch == 0 || on_clock_interval(clock);
  }
  // The first clock after `clock` where is_boundary holds (end_clock at the latest).
  std::uint64_t next_boundary(std::uint64_t clock) const {
    std::uint64_t next = settings_.end_clock;
    if (!settings_.folder.empty()) {
      next = std::min(next, (clock / at_.clocks_per_epoch + 1) * at_.clocks_per_epoch);
      if (settings_.every.unit == CheckpointInterval::Unit::clocks) {
        const auto every = static_cast<std::uint64_t>(settings_.every.amount);
        next = std::min(next, (clock / every + 1) * every);
      }
    }
    return std::max(next, clock);
  }
  // A worker of such a run, after each clock: true when it must stop now and meet the others, a
  // signal having reached this rank (it tells every other rank) or another one.
  bool should_stop() {
    poll();
    return notice_ && (StopSignals::received() != 0 || notice_->heard() != 0);
  }
  // A server of such a run, after each push: tells every other rank of a signal it received.
  void poll() {
    if (notice_ && StopSignals::received() != 0) notice_->announce(StopSignals::received());
  }
  // Every rank where they meet, the workers stopped (`clock`: the clocks this worker completed;
  // none for a server) and the servers done serving: agree on where training stands (the fewest
  // clocks any worker completed: a stop reaches the workers at different clocks) and on stopping,
  // and write the checkpoint the interval, rank 0's wall clock, a stop or the end call for. True
  // when the ranks agreed to stop.
  bool meet(std::optional<std::uint64_t> clock) {
    const auto& comm = agreement_.communicator();
    // As signed: MPICH 4.0.2 compares MPI_UINT64_T as signed under MPI_MIN and MPI_MAX.
    const std::int64_t mine = clock ? static_cast<std::int64_t>(*clock) : std::numeric_limits<std::int64_t>::max();
    const auto agreed_clock = static_cast<std::uint64_t>(comm.allreduce_value(mine, MPI_MIN));
    at_.clock = agreed_clock;
    at_.epoch = agreed_clock / at_.clocks_per_epoch;
    at_.batch = agreed_clock % at_.clocks_per_epoch;
    return decide(comm.allreduce_value(flags(), MPI_BOR));
  }

  const CheckpointPosition& position() const { return at_; }
  int stop_signal() const { return signal_; }  // the signal that stopped training, or 0
  std::size_t checkpoints() const { return checkpoints_; }
  double checkpoint_seconds() const { return seconds_; }
  const std::string& last_checkpoint() const { return last_; }

 private:
  // This rank's flags: a signal it received, and on rank 0 a wall-clock checkpoint due.
  int flags() {
    int mine = 0;
    const int signal = StopSignals::received() != 0 ? StopSignals::received() : (notice_ ? notice_->heard() : 0);
    if (signals_ && signal != 0) mine |= ClockAgreement::stop | (signal << 8);
    if (!settings_.folder.empty() && settings_.every.unit == CheckpointInterval::Unit::seconds &&
        ps_.world().rank() == 0 && metrics::seconds_since(last_checkpoint_) >= settings_.every.amount) {
      mine |= ClockAgreement::checkpoint;
      last_checkpoint_ = std::chrono::steady_clock::now();  // raised once, not again while it is agreed
    }
    return mine;
  }
  // Whether an interval in clocks falls after clock `clock`.
  bool on_clock_interval(std::uint64_t clock) const {
    return settings_.every.unit == CheckpointInterval::Unit::clocks &&
           clock % static_cast<std::uint64_t>(settings_.every.amount) == 0;
  }
  // At the current position, on the flags every rank agreed on: write a checkpoint if one is due
  // (the interval, a stop, the end, rank 0's wall clock); true to stop.
  bool decide(int agreed) {
    const bool scheduled = on_clock_interval(at_.clock) ||
                           (settings_.every.unit == CheckpointInterval::Unit::epochs && at_.batch == 0 &&
                            at_.epoch % static_cast<std::uint64_t>(settings_.every.amount) == 0);
    const bool stop = (agreed & ClockAgreement::stop) != 0;
    if (!settings_.folder.empty() &&
        (scheduled || stop || at_.clock == settings_.end_clock || (agreed & ClockAgreement::checkpoint))) {
      write();
    }
    if (stop) signal_ = agreed >> 8;
    return stop;
  }

  void write() {
    const auto started = std::chrono::steady_clock::now();
    last_ = write_checkpoint(ps_, agreement_.communicator(), settings_.folder, settings_.keep, at_);
    seconds_ += metrics::seconds_since(started);
    ++checkpoints_;
    last_checkpoint_ = std::chrono::steady_clock::now();
  }

  Server& ps_;
  Settings settings_;
  CheckpointPosition at_;
  ClockAgreement agreement_;
  std::unique_ptr<StopSignals> signals_;
  std::optional<StopNotice> notice_;  // asynchronous and stale-synchronous runs
  std::chrono::steady_clock::time_point last_checkpoint_;
  int signal_ = 0;
  std::size_t checkpoints_ = 0;
  double seconds_ = 0.0;
  std::string last_;
};

}  // namespace hpcps::ps
