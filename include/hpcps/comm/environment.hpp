#pragma once
// MPI's lifetime as an object. The Environment that initializes MPI finalizes it; one that finds
// MPI already running (a test main, a host application) leaves both steps to whoever owns it, so
// hpcps can be embedded without double initialization or an early MPI_Finalize.
#include <hpcps/comm/error.hpp>

#include <fmt/format.h>
#include <mpi.h>

namespace hpcps::comm {

// Ordered like MPI_THREAD_*, so "at least" is operator<.
enum class ThreadLevel { single, funneled, serialized, multiple };

inline const char* to_string(ThreadLevel level) noexcept {
  switch (level) {
    case ThreadLevel::single: return "single";
    case ThreadLevel::funneled: return "funneled";
    case ThreadLevel::serialized: return "serialized";
    case ThreadLevel::multiple: return "multiple";
  }
  return "unknown";
}

namespace detail {

inline int to_mpi(ThreadLevel level) noexcept {
  switch (level) {
    case ThreadLevel::single: return MPI_THREAD_SINGLE;
    case ThreadLevel::funneled: return MPI_THREAD_FUNNELED;
    case ThreadLevel::serialized: return MPI_THREAD_SERIALIZED;
    case ThreadLevel::multiple: return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_SINGLE;
}

// The MPI constants are only guaranteed to be monotonic, not to equal 0..3.
inline ThreadLevel from_mpi(int level) noexcept {
  if (level >= MPI_THREAD_MULTIPLE) return ThreadLevel::multiple;
  if (level >= MPI_THREAD_SERIALIZED) return ThreadLevel::serialized;
  if (level >= MPI_THREAD_FUNNELED) return ThreadLevel::funneled;
  return ThreadLevel::single;
}

}  // namespace detail

class Environment {
 public:
  // Initializes MPI unless it already is. Throws MpiError if MPI cannot be initialized or has
  // already been finalized (MPI cannot restart), and hpcps::Error if the thread level MPI provides
  // is below `required`; in that case an MPI this constructor initialized is finalized again first.
  explicit Environment(int& argc, char**& argv, ThreadLevel required = ThreadLevel::funneled) {
    if (finalized()) {
      fail(MPI_ERR_OTHER, "MPI_Init_thread", "MPI has already been finalized and cannot be initialized again",
           "required={}", to_string(required));
    }
    int provided = MPI_THREAD_SINGLE;
    if (initialized()) {
      check(MPI_Query_thread(&provided), "MPI_Query_thread");
    } else {
      check(MPI_Init_thread(&argc, &argv, detail::to_mpi(required), &provided), "MPI_Init_thread", "required={}",
            to_string(required));
      owns_ = true;
    }
    provided_ = detail::from_mpi(provided);
    if (provided_ < required) {
      if (owns_) MPI_Finalize();
      throw hpcps::Error(fmt::format("MPI provides thread level {} but hpcps needs at least {}; use an MPI "
                                     "built with thread support or ask for a lower level",
                                     to_string(provided_), to_string(required)));
    }
    // Without this the default handler (MPI_ERRORS_ARE_FATAL) aborts before check() can add
    // context. MPI_COMM_SELF receives the errors not tied to a communicator (MPI 4.0).
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
          "MPI_COMM_WORLD");
    check(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
          "MPI_COMM_SELF");
  }

  // MPI_Finalize if this object initialized MPI. Errors are ignored: a destructor cannot report
  // them, and the process is about to end anyway.
  ~Environment() {
    if (owns_ && !finalized()) MPI_Finalize();
  }

  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  Environment(Environment&&) = delete;
  Environment& operator=(Environment&&) = delete;

  ThreadLevel provided() const noexcept { return provided_; }
  // Whether this object called MPI_Init_thread (and so will call MPI_Finalize).
  bool owns_mpi() const noexcept { return owns_; }

  static bool initialized() noexcept {
    int flag = 0;
    MPI_Initialized(&flag);
    return flag != 0;
  }
  static bool finalized() noexcept {
    int flag = 0;
    MPI_Finalized(&flag);
    return flag != 0;
  }

 private:
  ThreadLevel provided_ = ThreadLevel::single;
  bool owns_ = false;
};

}  // namespace hpcps::comm
