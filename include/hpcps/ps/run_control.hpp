#pragma once
// What ps::train does at the end of every clock of a synchronous run, on every rank (workers after
// their step, dedicated servers after serving the clock): keep track of where training stands,
// agree with the other ranks on stopping and checkpointing (ps/clock_agreement.hpp), and write the
// checkpoints the schedule, rank 0's wall clock, a stop or the end of training call for.
// Asynchronous and stale-synchronous ranks do not pass through clocks together; they meet only at
// boundaries that every rank computes alike (is_boundary), where the workers have stopped pushing
// and the servers have applied every push, and decide there (at_boundary).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "hpcps/metrics/stopwatch.hpp"
#include "hpcps/ps/checkpoint_interval.hpp"
#include "hpcps/ps/checkpoint_writer.hpp"
#include "hpcps/ps/clock_agreement.hpp"
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
  };

  // Collective over the ParameterServer's world. `at`: where training starts.
  RunControl(Server& ps, Settings settings, const CheckpointPosition& at)
      : ps_(ps), settings_(std::move(settings)), at_(at), agreement_(ps.world()),
        last_checkpoint_(std::chrono::steady_clock::now()) {
    if (settings_.stop_on_signals) signals_ = std::make_unique<StopSignals>();
  }

  // Every rank, after each clock. True when the ranks have agreed to stop after this one.
  bool after_clock() {
    ++at_.clock;
    if (++at_.batch == at_.clocks_per_epoch) {
      at_.batch = 0;
      ++at_.epoch;
    }
    const int agreed = agreement_.exchange(flags());
    const auto every = static_cast<std::uint64_t>(settings_.every.amount);
    using Unit = CheckpointInterval::Unit;
    const bool scheduled = (settings_.every.unit == Unit::clocks && at_.clock % every == 0) ||
                           (settings_.every.unit == Unit::epochs && at_.batch == 0 && at_.epoch % every == 0);
    return decide(agreed, scheduled);
  }
  // Every rank, after its last clock.
  void finish() { agreement_.finish(); }

  // Asynchronous and stale-synchronous runs: whether the ranks meet after clock `clock`: at the end
  // of training, of every epoch (where a signal or rank 0's wall-clock interval is acted on), and
  // every N clocks of an interval in clocks.
  bool is_boundary(std::uint64_t clock) const {
    const bool every_clocks = settings_.every.unit == CheckpointInterval::Unit::clocks &&
                              clock % static_cast<std::uint64_t>(settings_.every.amount) == 0;
    return clock == settings_.end_clock || clock % at_.clocks_per_epoch == 0 || every_clocks;
  }
  // The first boundary after the current position.
  std::uint64_t next_boundary() const {
    std::uint64_t clock = at_.clock + 1;
    while (!is_boundary(clock)) ++clock;
    return clock;
  }
  // Every rank at boundary `clock`, the workers stopped and the servers done serving: agree on
  // stopping (one blocking allreduce), write the checkpoint the interval, rank 0's wall clock, a
  // stop or the end call for. True when the ranks agreed to stop.
  bool at_boundary(std::uint64_t clock) {
    at_.clock = clock;
    at_.epoch = clock / at_.clocks_per_epoch;
    at_.batch = clock % at_.clocks_per_epoch;
    const int agreed = agreement_.communicator().allreduce_value(flags(), MPI_BOR);
    const auto every = static_cast<std::uint64_t>(settings_.every.amount);
    using Unit = CheckpointInterval::Unit;
    const bool scheduled = (settings_.every.unit == Unit::clocks && clock % every == 0) ||
                           (settings_.every.unit == Unit::epochs && at_.batch == 0 && at_.epoch % every == 0);
    return decide(agreed, scheduled);
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
    if (signals_ && StopSignals::received() != 0) mine |= ClockAgreement::stop | (StopSignals::received() << 8);
    if (!settings_.folder.empty() && settings_.every.unit == CheckpointInterval::Unit::seconds &&
        ps_.world().rank() == 0 && metrics::seconds_since(last_checkpoint_) >= settings_.every.amount) {
      mine |= ClockAgreement::checkpoint;
      last_checkpoint_ = std::chrono::steady_clock::now();  // raised once, not again while it is agreed
    }
    return mine;
  }
  // On the flags every rank agreed on: write a checkpoint if one is due; true to stop.
  bool decide(int agreed, bool scheduled) {
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
  std::chrono::steady_clock::time_point last_checkpoint_;
  int signal_ = 0;
  std::size_t checkpoints_ = 0;
  double seconds_ = 0.0;
  std::string last_;
};

}  // namespace hpcps::ps
