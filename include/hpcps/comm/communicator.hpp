#pragma once
// A communicator with typed calls. The element type is deduced from the buffer pointer and the
// count is a std::size_t, so a call site cannot pair a float buffer with MPI_DOUBLE or silently
// truncate a count above INT_MAX; both mistakes are easy with the C API and corrupt data quietly.
#include <hpcps/comm/datatype.hpp>
#include <hpcps/comm/detail/teardown.hpp>
#include <hpcps/comm/environment.hpp>
#include <hpcps/comm/error.hpp>
#include <hpcps/comm/request.hpp>

#include <fmt/format.h>
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <utility>

namespace hpcps::comm {

// Elements of T in a received or probed message. Throws if the message is not a whole number of
// T, which means sender and receiver disagree about the type.
template <class T>
std::size_t count_of(const MPI_Status& status) {
  int count = 0;
  check(MPI_Get_count(&status, datatype_of<T>(), &count), "MPI_Get_count", "{}", type_name<T>());
  if (count == MPI_UNDEFINED) {
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    fail(MPI_ERR_TYPE, "MPI_Get_count", "the message is not a whole number of elements of that type",
         "{} (message of {} bytes from source={}, tag={})", type_name<T>(), bytes, status.MPI_SOURCE,
         status.MPI_TAG);
  }
  return static_cast<std::size_t>(count);
}

struct Status {
  int source = MPI_ANY_SOURCE;
  int tag = MPI_ANY_TAG;
  // recv: elements of T received. probe/iprobe: bytes, since the type is not known yet; use
  // count_of<T>() for elements.
  std::size_t count = 0;
  MPI_Status native{};

  template <class T>
  std::size_t count_of() const {
    return comm::count_of<T>(native);
  }
};

namespace detail {

inline const char* op_name(MPI_Op op) noexcept {
  if (op == MPI_SUM) return "MPI_SUM";
  if (op == MPI_MAX) return "MPI_MAX";
  if (op == MPI_MIN) return "MPI_MIN";
  if (op == MPI_PROD) return "MPI_PROD";
  if (op == MPI_LAND) return "MPI_LAND";
  if (op == MPI_LOR) return "MPI_LOR";
  if (op == MPI_BAND) return "MPI_BAND";
  if (op == MPI_BOR) return "MPI_BOR";
  return "user-defined op";
}

// MPI counts are int. A larger count would wrap to garbage (or a negative count) in the C API.
template <class T>
int int_count(std::size_t count, const char* call) {
  if (HPCPS_COMM_UNLIKELY(count > static_cast<std::size_t>(INT_MAX))) {
    fail(MPI_ERR_COUNT, call, "count does not fit in int, the limit of one MPI call; transfer it in pieces",
         "count={} x {}", count, type_name<T>());
  }
  return static_cast<int>(count);
}

}  // namespace detail

// Move-only. world() refers to MPI_COMM_WORLD without owning it; split() and duplicate() return
// communicators that own their MPI_Comm and free it on destruction. rank() and size() are cached.
// All calls need MPI to be initialized (by an Environment), and report failure as MpiError.
class Communicator {
 public:
  static constexpr int any_source = MPI_ANY_SOURCE;
  static constexpr int any_tag = MPI_ANY_TAG;

  // A null communicator (also the state after a move); only is_null() and native() are meaningful.
  Communicator() noexcept = default;

  static Communicator world() {
    if (!Environment::initialized() || Environment::finalized()) {
      throw hpcps::Error(
          "hpcps::comm::Communicator::world() called outside MPI_Init..MPI_Finalize; construct an "
          "hpcps::comm::Environment (or use hpcps::comm::run) first");
    }
    return Communicator(MPI_COMM_WORLD, false);
  }

  Communicator(Communicator&& other) noexcept
      : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
        owned_(std::exchange(other.owned_, false)),
        rank_(std::exchange(other.rank_, -1)),
        size_(std::exchange(other.size_, 0)),
        created_(other.created_) {}
  Communicator& operator=(Communicator&& other) noexcept {
    if (this != &other) {
      release();
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
      owned_ = std::exchange(other.owned_, false);
      rank_ = std::exchange(other.rank_, -1);
      size_ = std::exchange(other.size_, 0);
      created_ = other.created_;
    }
    return *this;
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  // MPI_Comm_free is collective in the standard; while an exception unwinds past the object the
  // handle is left to MPI_Abort, as for a shared window (detail/teardown.hpp).
  ~Communicator() {
    if (created_.unwinding()) return;
    release();
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm native() const noexcept { return comm_; }
  bool is_null() const noexcept { return comm_ == MPI_COMM_NULL; }

  // The largest tag this MPI accepts (MPI_TAG_UB; the standard guarantees at least 32767).
  int tag_upper_bound() const {
    void* value = nullptr;
    int found = 0;
    check(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &value, &found), "MPI_Comm_get_attr", "MPI_TAG_UB");
    return found != 0 && value != nullptr ? *static_cast<int*>(value) : 32767;
  }

  // Collective. Ranks with the same color form one new communicator, ordered by key (ties by rank
  // here). A rank passing MPI_UNDEFINED as color gets a null communicator.
  Communicator split(int color, int key) const {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split", "color={}, key={}", color, key);
    return adopt(out);
  }

  // Collective. The ranks that can share memory with this one (MPI_COMM_TYPE_SHARED: in practice
  // the node), ordered by key (ties by rank here).
  Communicator split_shared(int key) const {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &out), "MPI_Comm_split_type",
          "MPI_COMM_TYPE_SHARED, key={}", key);
    return adopt(out);
  }

  // Collective. The same group with a separate message space: a component that communicates on its
  // own duplicate cannot have its tags matched by anyone else's receives.
  Communicator duplicate() const {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_dup(comm_, &out), "MPI_Comm_dup");
    return adopt(out);
  }

  // ---- point-to-point -------------------------------------------------------------------------

  template <class T>
  void send(const T* data, std::size_t count, int dest, int tag) const {
    const int n = detail::int_count<T>(count, "MPI_Send");
    check(MPI_Send(data, n, datatype_of<T>(), dest, tag, comm_), "MPI_Send", "dest={}, tag={}, count={} x {}", dest,
          tag, count, type_name<T>());
  }

  // `count` is the capacity of `data`; Status::count is how many elements arrived.
  template <class T>
  Status recv(T* data, std::size_t count, int source, int tag) const {
    const int n = detail::int_count<T>(count, "MPI_Recv");
    Status status;
    check(MPI_Recv(data, n, datatype_of<T>(), source, tag, comm_, &status.native), "MPI_Recv",
          "source={}, tag={}, count={} x {}", source, tag, count, type_name<T>());
    status.source = status.native.MPI_SOURCE;
    status.tag = status.native.MPI_TAG;
    status.count = comm::count_of<T>(status.native);
    return status;
  }

  // `data` must stay valid and unmodified until the request completes.
  template <class T>
  [[nodiscard]] Request isend(const T* data, std::size_t count, int dest, int tag) const {
    const int n = detail::int_count<T>(count, "MPI_Isend");
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Isend(data, n, datatype_of<T>(), dest, tag, comm_, &request), "MPI_Isend",
          "dest={}, tag={}, count={} x {}", dest, tag, count, type_name<T>());
    return Request(request, {"MPI_Isend", "dest", dest, tag});
  }

  // `data` must stay valid and untouched until the request completes.
  template <class T>
  [[nodiscard]] Request irecv(T* data, std::size_t count, int source, int tag) const {
    const int n = detail::int_count<T>(count, "MPI_Irecv");
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Irecv(data, n, datatype_of<T>(), source, tag, comm_, &request), "MPI_Irecv",
          "source={}, tag={}, count={} x {}", source, tag, count, type_name<T>());
    return Request(request, {"MPI_Irecv", "source", source, tag});
  }

  // Blocks until a matching message is pending; Status::count is in bytes (see Status).
  Status probe(int source, int tag) const {
    Status status;
    check(MPI_Probe(source, tag, comm_, &status.native), "MPI_Probe", "source={}, tag={}", source, tag);
    return probed(status);
  }

  std::optional<Status> iprobe(int source, int tag) const {
    Status status;
    int flag = 0;
    check(MPI_Iprobe(source, tag, comm_, &flag, &status.native), "MPI_Iprobe", "source={}, tag={}", source, tag);
    if (!flag) return std::nullopt;
    return probed(status);
  }

  // ---- collectives ----------------------------------------------------------------------------

  void barrier() const { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  template <class T>
  void broadcast(T* data, std::size_t count, int root) const {
    const int n = detail::int_count<T>(count, "MPI_Bcast");
    check(MPI_Bcast(data, n, datatype_of<T>(), root, comm_), "MPI_Bcast", "root={}, count={} x {}", root, count,
          type_name<T>());
  }

  template <class T>
  void allreduce(const T* in, T* out, std::size_t count, MPI_Op op) const {
    const int n = detail::int_count<T>(count, "MPI_Allreduce");
    check(MPI_Allreduce(in, out, n, datatype_of<T>(), op, comm_), "MPI_Allreduce", "count={} x {}, op={}", count,
          type_name<T>(), detail::op_name(op));
  }

  template <class T>
  void allreduce_in_place(T* data, std::size_t count, MPI_Op op) const {
    const int n = detail::int_count<T>(count, "MPI_Allreduce");
    check(MPI_Allreduce(MPI_IN_PLACE, data, n, datatype_of<T>(), op, comm_), "MPI_Allreduce",
          "MPI_IN_PLACE, count={} x {}, op={}", count, type_name<T>(), detail::op_name(op));
  }

  template <class T>
  T allreduce_value(T value, MPI_Op op) const {
    T result{};
    allreduce(&value, &result, 1, op);
    return result;
  }

  // Nonblocking: `in` and `out` must stay valid until the request completes. Every rank of the
  // communicator must start its nonblocking collectives in the same order.
  template <class T>
  [[nodiscard]] Request iallreduce(const T* in, T* out, std::size_t count, MPI_Op op) const {
    const int n = detail::int_count<T>(count, "MPI_Iallreduce");
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(in, out, n, datatype_of<T>(), op, comm_, &request), "MPI_Iallreduce",
          "count={} x {}, op={}", count, type_name<T>(), detail::op_name(op));
    return Request(request, {"MPI_Iallreduce", "root", -1, 0, true});
  }

  // `count` elements from every rank into `out` at root, rank r's at out + r * count; `out` must
  // hold size() * count elements on the root and is not used elsewhere (may be null there).
  template <class T>
  void gather(const T* in, std::size_t count, T* out, int root) const {
    const int n = detail::int_count<T>(count, "MPI_Gather");
    check(MPI_Gather(in, n, datatype_of<T>(), out, n, datatype_of<T>(), root, comm_), "MPI_Gather",
          "root={}, count={} x {}", root, count, type_name<T>());
  }

  // Like gather, with the result on every rank.
  template <class T>
  void allgather(const T* in, std::size_t count, T* out) const {
    const int n = detail::int_count<T>(count, "MPI_Allgather");
    check(MPI_Allgather(in, n, datatype_of<T>(), out, n, datatype_of<T>(), comm_), "MPI_Allgather",
          "count={} x {}", count, type_name<T>());
  }

  // Ends every process of this communicator's job (MPI_Abort usually takes down the whole job).
  [[noreturn]] void abort(int code) const {
    MPI_Abort(is_null() ? MPI_COMM_WORLD : comm_, code);
    std::abort();  // MPI_Abort is not declared noreturn and an implementation might return
  }

 private:
  Communicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }

  // Takes ownership of a communicator MPI just created, and makes its errors reach check().
  static Communicator adopt(MPI_Comm comm) {
    if (comm == MPI_COMM_NULL) return Communicator();
    Communicator result;  // owns `comm` from here on, so a throw below still frees it
    result.comm_ = comm;
    result.owned_ = true;
    check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm, &result.rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm, &result.size_), "MPI_Comm_size");
    return result;
  }

  static Status probed(Status status) {
    status.source = status.native.MPI_SOURCE;
    status.tag = status.native.MPI_TAG;
    int bytes = 0;
    check(MPI_Get_count(&status.native, MPI_BYTE, &bytes), "MPI_Get_count", "MPI_BYTE");
    status.count = static_cast<std::size_t>(bytes);
    return status;
  }

  void release() noexcept {
    if (owned_ && comm_ != MPI_COMM_NULL && !Environment::finalized()) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
    owned_ = false;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = -1;
  int size_ = 0;
  detail::UnwindingProbe created_;
};

}  // namespace hpcps::comm
