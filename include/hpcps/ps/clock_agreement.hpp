#pragma once
// What every rank must decide alike at the end of a clock, whatever happened on one of them: to
// stop (a signal arrived somewhere) or to write a checkpoint (rank 0's clock said so). Each rank
// contributes its flags to a nonblocking allreduce (bitwise or) at the end of clock c and reads
// the result at the end of clock c + 1, when every rank has long contributed (a bulk-synchronous
// clock passes through the servers): so the decision costs no round trip of its own, only one
// clock of delay. Servers take part from their serving loop, so a signal to a server counts too.
#include <mpi.h>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/request.hpp"

namespace hpcps::ps {

class ClockAgreement {
 public:
  enum Flag : int { stop = 1, checkpoint = 2 };

  // Collective over `world` (makes its own communicator).
  explicit ClockAgreement(const comm::Communicator& world) : comm_(world.duplicate()) {}
  ClockAgreement(const ClockAgreement&) = delete;
  ClockAgreement& operator=(const ClockAgreement&) = delete;

  // Every rank, once at the end of every clock: returns the flags all ranks raised one clock ago.
  int exchange(int flags) {
    int agreed = 0;
    if (active_) {
      comm::detail::poll_until([this] { return request_.test(); });
      agreed = result_;
    }
    mine_ = flags;
    request_ = comm_.iallreduce(&mine_, &result_, 1, MPI_BOR);
    active_ = true;
    return agreed;
  }
  // Every rank, after its last clock: completes the round in flight.
  void finish() {
    if (active_) comm::detail::poll_until([this] { return request_.test(); });
    active_ = false;
  }
  const comm::Communicator& communicator() const { return comm_; }

 private:
  comm::Communicator comm_;
  comm::Request request_;
  int mine_ = 0, result_ = 0;
  bool active_ = false;
};

}  // namespace hpcps::ps
