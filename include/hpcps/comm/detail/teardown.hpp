#pragma once
// Whether a destructor runs because an exception is unwinding the stack past the object.
//
// Freeing a communicator or a shared-memory window is collective: every rank must call it. When an
// error is raised on some ranks only, their destructors would wait in MPI_Win_free for ranks that
// are still computing or waiting for a message, and the job would hang with the message unprinted
// (docs/running.md#errors). An object that owns such a handle records the count of uncaught
// exceptions when it is created and, if the count is higher when it is destroyed, leaves the handle
// to MPI_Abort, which comm::run calls next, instead of freeing it.
#include <exception>

namespace hpcps::comm::detail {

class UnwindingProbe {
 public:
  UnwindingProbe() noexcept : at_creation_(std::uncaught_exceptions()) {}
  bool unwinding() const noexcept { return std::uncaught_exceptions() > at_creation_; }

 private:
  int at_creation_;
};

}  // namespace hpcps::comm::detail
