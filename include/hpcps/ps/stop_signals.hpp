#pragma once
// SIGTERM and SIGINT as a request to stop (Slurm sends SIGTERM at a job's time limit, mpiexec
// forwards both): the handler only records the signal, and training, on the main thread, finishes
// the clock it is in, agrees with the other ranks to stop (ps/clock_agreement.hpp), writes a
// checkpoint if asked to, and returns. A second signal ends the process at once, as if there
// were no handler. No MPI here.
#include <signal.h>

#include <atomic>

namespace hpcps::ps {

namespace detail {

inline std::atomic<int> pending_stop_signal{0};

extern "C" inline void record_stop_signal(int sig) {
  int none = 0;
  if (!pending_stop_signal.compare_exchange_strong(none, sig)) {
    // The second one: the default action (termination), now. Both calls are async-signal-safe.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

}  // namespace detail

// Handles SIGTERM and SIGINT while it exists; the previous handlers come back after.
class StopSignals {
 public:
  StopSignals() {
    detail::pending_stop_signal.store(0);
    struct sigaction action {};
    action.sa_handler = detail::record_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // system calls in flight (a write, a poll) carry on
    ::sigaction(SIGTERM, &action, &old_term_);
    ::sigaction(SIGINT, &action, &old_int_);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  ~StopSignals() {
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGINT, &old_int_, nullptr);
  }
  // The first signal received, or 0.
  static int received() { return detail::pending_stop_signal.load(); }

 private:
  struct sigaction old_term_ {}, old_int_ {};
};

}  // namespace hpcps::ps
