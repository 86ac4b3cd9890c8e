#pragma once
// Nonblocking operations as owned objects. A Request remembers which operation it came from
// (call, peer, tag) only as a pointer and two ints, so waiting on it can fail with a message that
// names the transfer without the happy path paying for a string.
#include <hpcps/comm/error.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace hpcps::comm {

namespace detail {

// What a request was started by; `operation` and `peer_label` point at string literals.
struct RequestOrigin {
  const char* operation = "request";
  const char* peer_label = "peer";
  int peer = MPI_PROC_NULL;
  int tag = 0;
  // A nonblocking collective may be neither cancelled nor freed: abandoning one only forgets it
  // (the job is about to end: the error that unwinds it reaches MPI_Abort next).
  bool collective = false;
};

// Ends an active request that nobody will wait for. Waiting could hang: the matching operation on
// the other rank may never come, which is exactly the situation while an exception unwinds. So
// the request is cancelled, tested once (a cancelled receive completes locally, after which the
// buffer is certainly no longer used) and otherwise freed, which lets MPI finish it in the
// background. Errors are ignored: there is no one left to report them to.
inline void abandon(MPI_Request& request) noexcept {
  if (request == MPI_REQUEST_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    request = MPI_REQUEST_NULL;
    return;
  }
  MPI_Cancel(&request);
  int done = 0;
  if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) return;
  if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
  request = MPI_REQUEST_NULL;
}

}  // namespace detail

// How a rank waits for its messages. MPICH's MPI_Wait* spin at full speed: the fastest wait when
// every rank has a core of its own, a disaster when ranks share cores (3 workers + 1 server on 2
// cores: 1.8k samples/s with MPI_Waitall). `adaptive` polls with MPI_Test*, spinning for 50 us and
// then calling sched_yield between polls, so a waiting rank hands its core to a computing one but
// still drives MPI's progress engine: UCX moves a large message in pieces, one per progress call,
// so sleeping between polls starves the transfer (tried: 5-200 us sleeps were 2-4x slower than
// yielding). Measured on the Fashion-MNIST example, one epoch, 2 cores: adaptive 43k / 36k
// samples/s with 1 / 3 workers, spin 36k / 1.8k (docs/architecture.md#waiting).
// A yielding rank stays runnable, though, and the scheduler still gives it its share of a core:
// a dedicated server that waits tens of milliseconds for pushes, beside 2 computing workers on 2
// cores, made their CNN gradient 1.3x slower. `sleep` waits like `adaptive` for its first millisecond and then sleeps
// 50 us between polls, which suits waits that are long and transfers a slow link paces anyway
// (docs/architecture.md#waiting has the measurement).
enum class WaitMode { adaptive, spin, sleep };

// The process default: HPCPS_WAIT=adaptive, spin or sleep in the environment, else adaptive.
// Read once; an unknown value is an error rather than a silent fallback.
inline WaitMode parse_wait_mode(std::string_view value) {
  if (value.empty() || value == "adaptive") return WaitMode::adaptive;
  if (value == "spin") return WaitMode::spin;
  if (value == "sleep") return WaitMode::sleep;
  throw hpcps::Error(fmt::format("HPCPS_WAIT='{}': expected 'adaptive', 'spin' or 'sleep'", value));
}

inline WaitMode default_wait_mode() {
  static const WaitMode mode = [] {
    const char* value = std::getenv("HPCPS_WAIT");
    return parse_wait_mode(value == nullptr ? std::string_view() : std::string_view(value));
  }();
  return mode;
}

namespace detail {

// Polls `done()` (which drives MPI's progress engine) with the backoff described at WaitMode:
// spin for 50 us, then yield between polls, and from 1 ms on nap between them (WaitMode::sleep);
// WaitMode::spin never gives the core up.
template <class Done>
void poll_until(Done&& done, WaitMode mode = default_wait_mode()) {
  using clock = std::chrono::steady_clock;
  if (done()) return;
  const auto start = clock::now();
  const auto spin_until = start + std::chrono::microseconds(50);
  const auto nap_from = start + std::chrono::milliseconds(1);
  while (!done()) {
    const auto now = clock::now();
    if (mode == WaitMode::spin || now <= spin_until) continue;
    if (mode == WaitMode::sleep && now > nap_from) std::this_thread::sleep_for(std::chrono::microseconds(50));
    else std::this_thread::yield();
  }
}

}  // namespace detail

class Request;
inline void wait_all(Request* first, std::size_t n);

// Move-only owner of one MPI_Request. Inactive when default-constructed, moved from, or completed.
// Destroying an active request abandons it (see detail::abandon): wait() first if the operation
// must finish.
class Request {
 public:
  Request() noexcept = default;
  // Adopts `native`, which must have come from a nonblocking call; `origin` is for error messages.
  Request(MPI_Request native, detail::RequestOrigin origin) noexcept : handle_(native), origin_(origin) {}

  Request(Request&& other) noexcept
      : handle_(std::exchange(other.handle_, MPI_REQUEST_NULL)), origin_(other.origin_) {}
  Request& operator=(Request&& other) noexcept {
    if (this != &other) {
      abandon();
      handle_ = std::exchange(other.handle_, MPI_REQUEST_NULL);
      origin_ = other.origin_;
    }
    return *this;
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request() { abandon(); }

  // Blocks until the operation completes; a no-op on an inactive request.
  void wait() {
    check(MPI_Wait(&handle_, MPI_STATUS_IGNORE), "MPI_Wait", "{} {}={}, tag={}", origin_.operation,
          origin_.peer_label, origin_.peer, origin_.tag);
  }

  // True once the operation has completed (then the request is inactive); true if already inactive.
  bool test() {
    int done = 0;
    check(MPI_Test(&handle_, &done, MPI_STATUS_IGNORE), "MPI_Test", "{} {}={}, tag={}", origin_.operation,
          origin_.peer_label, origin_.peer, origin_.tag);
    return done != 0;
  }

  bool active() const noexcept { return handle_ != MPI_REQUEST_NULL; }
  MPI_Request native() const noexcept { return handle_; }
  const detail::RequestOrigin& origin() const noexcept { return origin_; }

 private:
  void abandon() noexcept {
    if (origin_.collective) handle_ = MPI_REQUEST_NULL;
    else detail::abandon(handle_);
  }
  friend class RequestSet;
  friend void wait_all(Request* first, std::size_t n);

  MPI_Request handle_ = MPI_REQUEST_NULL;
  detail::RequestOrigin origin_;
};

namespace detail {

// After MPI_Waitall/Waitany failed with MPI_ERR_IN_STATUS: the first request whose own status
// carries an error (MPI_ERR_PENDING means "not completed", not "failed").
[[noreturn]] HPCPS_COMM_COLD inline void raise_in_status(int code, const char* call, const MPI_Status* statuses,
                                                         const RequestOrigin* origins, std::size_t n,
                                                         std::size_t offset, std::size_t total) {
  if (code == MPI_ERR_IN_STATUS) {
    for (std::size_t i = 0; i < n; ++i) {
      const int error = statuses[i].MPI_ERROR;
      if (error != MPI_SUCCESS && error != MPI_ERR_PENDING) {
        const RequestOrigin& o = origins[i];
        const std::size_t index = offset + i;
        detail::raise(error, call, "request {} of {}: {} {}={}, tag={}",
                      fmt::make_format_args(index, total, o.operation, o.peer_label, o.peer, o.tag));
      }
    }
  }
  detail::raise(code, call, "{} requests", fmt::make_format_args(total));
}

}  // namespace detail

// Waits for n requests without allocating: the native handles go through a fixed stack buffer in
// chunks. Waiting chunk by chunk is the same as one MPI_Waitall, since every operation is
// already started and MPI progresses all of them while it waits on any.
inline void wait_all(Request* first, std::size_t n) {
  constexpr std::size_t chunk = 64;
  MPI_Request handles[chunk];
  MPI_Status statuses[chunk];
  detail::RequestOrigin origins[chunk];
  for (std::size_t begin = 0; begin < n; begin += chunk) {
    const std::size_t m = std::min(chunk, n - begin);
    for (std::size_t i = 0; i < m; ++i) {
      handles[i] = first[begin + i].handle_;
      origins[i] = first[begin + i].origin_;
    }
    const int code = MPI_Waitall(static_cast<int>(m), handles, statuses);
    // Write back before any throw, so completed requests are inactive and failed ones still owned.
    for (std::size_t i = 0; i < m; ++i) first[begin + i].handle_ = handles[i];
    if (HPCPS_COMM_UNLIKELY(code != MPI_SUCCESS)) {
      detail::raise_in_status(code, "MPI_Waitall", statuses, origins, m, begin, n);
    }
  }
}

inline void wait_all(std::vector<Request>& requests) { wait_all(requests.data(), requests.size()); }

// A reusable batch of requests for a loop that starts and completes the same kind of batch every
// round (one training step). Its buffers grow to the largest batch and are kept by clear(), so
// once reserve() or the first rounds have reached capacity, add/wait_all/wait_any/clear do not
// allocate. Indices are the order of add() and stay valid until clear().
class RequestSet {
 public:
  RequestSet() = default;
  explicit RequestSet(std::size_t capacity) { reserve(capacity); }
  RequestSet(RequestSet&&) noexcept = default;
  RequestSet& operator=(RequestSet&& other) noexcept {
    if (this != &other) {
      clear();
      handles_ = std::move(other.handles_);
      origins_ = std::move(other.origins_);
      statuses_ = std::move(other.statuses_);
    }
    return *this;
  }
  RequestSet(const RequestSet&) = delete;
  RequestSet& operator=(const RequestSet&) = delete;
  ~RequestSet() { clear(); }

  void reserve(std::size_t n) {
    handles_.reserve(n);
    origins_.reserve(n);
    if (statuses_.size() < n) statuses_.resize(n);
  }

  // Takes ownership of `request` (active or not) and returns its index.
  std::size_t add(Request&& request) {
    handles_.push_back(MPI_REQUEST_NULL);  // may throw: nothing taken from `request` yet
    origins_.push_back(request.origin_);
    handles_.back() = std::exchange(request.handle_, MPI_REQUEST_NULL);
    return handles_.size() - 1;
  }

  // Puts `request` in slot `index`, which must be inactive (completed by wait_any, say): a server
  // keeps one receive slot per worker and reposts it there, so slot index == worker.
  void replace(std::size_t index, Request&& request) {
    if (index >= handles_.size() || handles_[index] != MPI_REQUEST_NULL) {
      throw hpcps::Error(fmt::format("RequestSet::replace: slot {} of {} is {}", index, handles_.size(),
                                     index >= handles_.size() ? "out of range" : "still active"));
    }
    origins_[index] = request.origin_;
    handles_[index] = std::exchange(request.handle_, MPI_REQUEST_NULL);
  }

  std::size_t size() const noexcept { return handles_.size(); }
  bool empty() const noexcept { return handles_.empty(); }
  std::size_t capacity() const noexcept { return handles_.capacity(); }
  bool active(std::size_t index) const noexcept { return handles_[index] != MPI_REQUEST_NULL; }

  // Completes every request; they stay in the set, inactive, until clear().
  void wait_all(WaitMode mode = default_wait_mode()) {
    if (handles_.empty()) return;
    if (statuses_.size() < handles_.size()) statuses_.resize(handles_.size());
    const int n = static_cast<int>(handles_.size());
    int code = MPI_SUCCESS;
    if (mode == WaitMode::spin) {
      code = MPI_Waitall(n, handles_.data(), statuses_.data());
    } else {
      detail::poll_until([&] {
        int flag = 0;
        code = MPI_Testall(n, handles_.data(), &flag, statuses_.data());
        return flag != 0 || code != MPI_SUCCESS;
      }, mode);
    }
    if (HPCPS_COMM_UNLIKELY(code != MPI_SUCCESS)) {
      detail::raise_in_status(code, mode == WaitMode::spin ? "MPI_Waitall" : "MPI_Testall", statuses_.data(),
                              origins_.data(), handles_.size(), 0, handles_.size());
    }
  }

  // Completes one active request and returns its index (it becomes inactive), or -1 if none is
  // active. Lets a caller consume results in arrival order.
  int wait_any(WaitMode mode = default_wait_mode()) {
    int index = MPI_UNDEFINED;
    MPI_Status status;
    const int n = static_cast<int>(handles_.size());
    int code = MPI_SUCCESS;
    if (mode == WaitMode::spin) {
      code = MPI_Waitany(n, handles_.data(), &index, &status);
    } else {
      detail::poll_until([&] {
        int flag = 0;
        code = MPI_Testany(n, handles_.data(), &index, &flag, &status);
        return flag != 0 || code != MPI_SUCCESS;
      }, mode);
    }
    if (HPCPS_COMM_UNLIKELY(code != MPI_SUCCESS)) {
      if (index != MPI_UNDEFINED && index >= 0) {
        const detail::RequestOrigin& o = origins_[static_cast<std::size_t>(index)];
        check(code, "MPI_Waitany", "request {} of {}: {} {}={}, tag={}", index, handles_.size(), o.operation,
              o.peer_label, o.peer, o.tag);
      }
      check(code, "MPI_Waitany", "{} requests", handles_.size());
    }
    return index == MPI_UNDEFINED ? -1 : index;
  }


  // Empties the set, abandoning (cancelling) requests still active; keeps the capacity.
  void clear() noexcept {
    for (MPI_Request& handle : handles_) detail::abandon(handle);
    handles_.clear();
    origins_.clear();
  }

 private:
  std::vector<MPI_Request> handles_;
  std::vector<detail::RequestOrigin> origins_;
  std::vector<MPI_Status> statuses_;
};

}  // namespace hpcps::comm
