#pragma once
// The one checked wrapper every MPI call in hpcps goes through (Boost.MPI's model). MPI reports
// failure as an int that is easy to drop on the floor; check() turns it into an exception that
// says which call failed, with which arguments, on which rank, and what MPI said about it.
//
// Environment installs MPI_ERRORS_RETURN, so error codes reach check() instead of the default
// handler aborting the job with MPI's text alone.
#include <hpcps/error.hpp>

#include <fmt/format.h>
#include <mpi.h>

#include <iterator>
#include <string>
#include <string_view>

#if defined(__GNUC__)
#define HPCPS_COMM_COLD [[gnu::cold, gnu::noinline]]
#define HPCPS_COMM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define HPCPS_COMM_COLD
#define HPCPS_COMM_UNLIKELY(x) (x)
#endif

namespace hpcps::comm {

// An MPI call returned an error, or hpcps refused to make a call MPI could not represent (a count
// above INT_MAX). code() is the MPI error code, so callers can ask MPI_Error_class about it.
class MpiError : public hpcps::Error {
 public:
  MpiError(int code, const std::string& message) : hpcps::Error(message), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

namespace detail {

// The calling process's rank in MPI_COMM_WORLD, or -1 outside MPI_Init..MPI_Finalize. World rank,
// not the communicator's, because it is what identifies the process in mpiexec's output.
inline int world_rank_or_unknown() noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int rank = -1;
  if (initialized && !finalized && MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS) rank = -1;
  return rank;
}

inline std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error code {}", code);
  std::string_view view(text, static_cast<std::size_t>(length));
  while (!view.empty() && (view.back() == '\n' || view.back() == ' ')) view.remove_suffix(1);
  return std::string(view);
}

// Out of line and cold so that the success path of check() is one compare and a not-taken branch.
[[noreturn]] HPCPS_COMM_COLD inline void raise_with_text(int code, const char* call, fmt::string_view context,
                                                         fmt::format_args args, std::string_view text) {
  std::string message = fmt::format("{}(", call);
  fmt::vformat_to(std::back_inserter(message), context, args);
  message += ") failed";
  const int rank = world_rank_or_unknown();
  if (rank >= 0) fmt::format_to(std::back_inserter(message), " on rank {}", rank);
  message += ": ";
  message += text;
  throw MpiError(code, message);
}

[[noreturn]] HPCPS_COMM_COLD inline void raise(int code, const char* call, fmt::string_view context,
                                               fmt::format_args args) {
  raise_with_text(code, call, context, args, error_string(code));
}

}  // namespace detail

// check(MPI_Isend(...), "MPI_Isend", "dest={}, tag={}", dest, tag) throws
//   MpiError("MPI_Isend(dest=3, tag=2) failed on rank 1: <MPI_Error_string text>").
// The context is formatted only when code != MPI_SUCCESS; the arguments are taken by reference.
template <class... Args>
inline void check(int code, const char* call, fmt::format_string<Args...> context, const Args&... args) {
  if (HPCPS_COMM_UNLIKELY(code != MPI_SUCCESS)) {
    detail::raise(code, call, context, fmt::make_format_args(args...));
  }
}

inline void check(int code, const char* call) {
  if (HPCPS_COMM_UNLIKELY(code != MPI_SUCCESS)) detail::raise(code, call, "", fmt::format_args());
}

// For preconditions hpcps checks itself before calling MPI (MPI would misreport them or not catch
// them at all); the message has the same shape as check()'s, with `reason` in place of MPI's text.
template <class... Args>
[[noreturn]] HPCPS_COMM_COLD inline void fail(int code, const char* call, std::string_view reason,
                                              fmt::format_string<Args...> context, const Args&... args) {
  detail::raise_with_text(code, call, context, fmt::make_format_args(args...), reason);
}

}  // namespace hpcps::comm
