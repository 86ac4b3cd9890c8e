#pragma once
// A signal seen by one rank of an asynchronous or stale-synchronous run, told to every other rank
// at once. Those ranks do not pass through clocks together, so no collective can carry it (the
// synchronous strategy's does, ps/clock_agreement.hpp): the rank that sees it sends each other
// rank a one-int notice, and every rank keeps a receive posted and tests it once per clock (a
// worker) or per push (a server). At the end the ranks count the notices sent to each and receive
// those still in flight, so no message outlives the run.
#include <cstddef>
#include <vector>

#include <mpi.h>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/request.hpp"

namespace hpcps::ps {

class StopNotice {
 public:
  // Collective over `world` (makes its own communicator).
  explicit StopNotice(const comm::Communicator& world)
      : comm_(world.duplicate()), sent_(static_cast<std::size_t>(world.size()), 0) {
    incoming_ = comm_.irecv(&received_, 1, MPI_ANY_SOURCE, tag);
  }
  StopNotice(const StopNotice&) = delete;
  StopNotice& operator=(const StopNotice&) = delete;

  // Sends every other rank the notice of `signal`, once.
  void announce(int signal) {
    if (announced_) return;
    announced_ = true;
    signal_ = signal;
    for (int r = 0; r < comm_.size(); ++r) {
      if (r == comm_.rank()) continue;
      sends_.push_back(comm_.isend(&signal_, 1, r, tag));
      sent_[static_cast<std::size_t>(r)] = 1;
    }
  }
  // The signal another rank announced, or 0.
  int heard() {
    if (heard_ == 0 && !arrived_ && incoming_.test()) {
      arrived_ = true;
      heard_ = received_;
    }
    return heard_;
  }
  // Every rank, once, after training: takes in the notices sent to it and completes its own.
  void finish() {
    comm_.allreduce_in_place(sent_.data(), sent_.size(), MPI_SUM);
    const int expected = sent_[static_cast<std::size_t>(comm_.rank())];
    if (expected == 0) {
      incoming_ = comm::Request();  // never matched: cancelled
    } else {
      if (!arrived_) incoming_.wait();
      for (int got = 1; got < expected; ++got) comm_.recv(&received_, 1, MPI_ANY_SOURCE, tag);
    }
    for (auto& send : sends_) send.wait();
    sends_.clear();
  }

 private:
  static constexpr int tag = 0;
  comm::Communicator comm_;
  std::vector<int> sent_;  // sent_[r]: notices this rank sent to rank r
  comm::Request incoming_;
  std::vector<comm::Request> sends_;
  int received_ = 0, signal_ = 0, heard_ = 0;
  bool arrived_ = false, announced_ = false;
};

}  // namespace hpcps::ps
