#pragma once
// The top level of every hpcps program:
//
//   int main(int argc, char** argv) {
//     return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment& env) { ...; return 0; });
//   }
//
// An exception on one rank must end the whole job with its message. Left alone it would end only
// that process, while the others wait forever in a receive or collective it will never join, so
// the job hangs until a batch system kills it, often with the message lost.
#include <hpcps/comm/environment.hpp>
#include <hpcps/error.hpp>

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <thread>
#include <type_traits>

namespace hpcps::comm {

namespace detail {

// One fprintf so that messages from several ranks do not interleave mid-line, flushed because
// MPI_Abort kills the process before stdio would.
[[noreturn]] inline void abort_job(const char* what) noexcept {
  int rank = -1, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::fprintf(stderr, "hpcps: fatal error on rank %d of %d: %s\n", rank, size, what);
  std::fflush(stderr);
  // The line is in the pipe to Hydra's proxy, which forwards it when it next reads; MPI_Abort
  // makes the proxy kill the job, and measured here the line was lost in 2 of ~100 jobs where it
  // was the only one. A moment's pause lets the proxy forward it first.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort is not declared noreturn
}

// The same error raised on every rank: the reporter prints it and aborts the job; the others stay
// silent and give it a moment to do so, then abort too in case it never will (a bug elsewhere).
[[noreturn]] inline void abort_job(const CollectiveError& error) noexcept {
  if (error.reporter()) abort_job(error.what());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  abort_job(error.what());
}

}  // namespace detail

// Initializes MPI (ThreadLevel::funneled) and calls body(env), with env the Environment&, and
// returns what body returns (an int exit code; a body returning void counts as 0). Then MPI is
// finalized, after body's locals (communicators, requests) are gone.
//
// An exception escaping body on any rank prints "hpcps: fatal error on rank R of N: <what>" and
// calls MPI_Abort on MPI_COMM_WORLD, so the job ends with the message instead of hanging. A
// CollectiveError, raised alike on every rank, is printed by its reporter only. If MPI
// itself cannot be initialized, run prints the reason and returns 1.
template <class Body>
int run(int& argc, char**& argv, Body&& body) {
  static_assert(std::is_invocable_v<Body&, Environment&>,
                "hpcps::comm::run: body must be callable as body(hpcps::comm::Environment&)");
  using Result = std::invoke_result_t<Body&, Environment&>;
  static_assert(std::is_void_v<Result> || std::is_convertible_v<Result, int>,
                "hpcps::comm::run: body must return int (the exit code) or void");

  // Outside the try below: if env were destroyed by unwinding, MPI_Finalize would run while other
  // ranks still wait for this one, and it would hang instead of reaching MPI_Abort.
  std::optional<Environment> env;
  try {
    env.emplace(argc, argv, ThreadLevel::funneled);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpcps: fatal error: cannot start MPI: %s\n", e.what());
    std::fflush(stderr);
    return 1;
  }

  try {
    if constexpr (std::is_void_v<Result>) {
      body(*env);
      return 0;
    } else {
      return static_cast<int>(body(*env));
    }
  } catch (const CollectiveError& e) {
    detail::abort_job(e);
  } catch (const std::exception& e) {
    detail::abort_job(e.what());
  } catch (...) {
    detail::abort_job("unknown exception (not derived from std::exception)");
  }
}

}  // namespace hpcps::comm
