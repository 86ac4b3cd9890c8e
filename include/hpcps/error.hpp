#pragma once
// The exception types hpcps throws. Every message names what failed and the values involved,
// so the line MPI_Abort prints is enough to act on.
#include <stdexcept>
#include <string>

namespace hpcps {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An error that every rank of a communicator raises with the same message, after agreeing on it
// collectively (a bad option, ranks that disagree on the composition). One of them reports it:
// comm::run prints the reporter's message alone, so a user reads one sentence, not one per rank.
class CollectiveError : public Error {
 public:
  CollectiveError(const std::string& what, bool reporter) : Error(what), reporter_(reporter) {}
  // Whether this rank prints the message (rank 0 of the communicator that agreed on it).
  bool reporter() const noexcept { return reporter_; }

 private:
  bool reporter_;
};

}  // namespace hpcps
