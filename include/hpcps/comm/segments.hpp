#pragma once
// Several float arrays sent as ONE message without packing them into a staging copy: an MPI
// struct-of-segments datatype over absolute addresses (MPI_BOTTOM). The parameter server uses it to
// send a gradient slice together with its sample count. Built once, reused every step, because the
// addresses of the buffers it describes never change.
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <utility>
#include <vector>

#include <mpi.h>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/datatype.hpp"
#include "hpcps/comm/error.hpp"
#include "hpcps/comm/request.hpp"

namespace hpcps::comm {

class FloatSegments {
 public:
  struct Segment {
    const float* data;
    std::size_t count;
  };

  FloatSegments() = default;
  FloatSegments(std::initializer_list<Segment> segments) {
    std::vector<int> lengths;
    std::vector<MPI_Aint> displacements;
    for (const Segment& s : segments) {
      if (s.count == 0) continue;
      MPI_Aint address = 0;
      check(MPI_Get_address(s.data, &address), "MPI_Get_address");
      lengths.push_back(checked_int(s.count));
      displacements.push_back(address);
      total_ += s.count;
    }
    check(MPI_Type_create_hindexed(static_cast<int>(lengths.size()), lengths.data(), displacements.data(), MPI_FLOAT,
                                   &type_),
          "MPI_Type_create_hindexed", "segments={}", lengths.size());
    check(MPI_Type_commit(&type_), "MPI_Type_commit");
  }
  FloatSegments(FloatSegments&& other) noexcept
      : type_(std::exchange(other.type_, MPI_DATATYPE_NULL)), total_(other.total_) {}
  FloatSegments& operator=(FloatSegments&& other) noexcept {
    std::swap(type_, other.type_);
    std::swap(total_, other.total_);
    return *this;
  }
  FloatSegments(const FloatSegments&) = delete;
  FloatSegments& operator=(const FloatSegments&) = delete;
  ~FloatSegments() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (type_ != MPI_DATATYPE_NULL && !finalized) MPI_Type_free(&type_);
  }

  MPI_Datatype native() const { return type_; }
  // Floats in the message; the receiver posts a plain float receive of (at least) this many.
  std::size_t total() const { return total_; }

  [[nodiscard]] Request isend(const Communicator& comm, int dest, int tag) const {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Isend(MPI_BOTTOM, 1, type_, dest, tag, comm.native(), &request), "MPI_Isend",
          "dest={}, tag={}, count={} x float in segments", dest, tag, total_);
    return Request(request, {"MPI_Isend", "dest", dest, tag});
  }

 private:
  static int checked_int(std::size_t n) {
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw Error(fmt::format("comm::FloatSegments: segment of {} floats exceeds MPI's int count", n));
    }
    return static_cast<int>(n);
  }

  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  std::size_t total_ = 0;
};

// FloatSegments' sibling for arrays of different element types in one message (a struct datatype):
// a 16-bit gradient slice behind its fp32 sample count. Receivable too, into the buffers it was
// built over, which must then be writable. A receive matches a shorter message whose types are a
// prefix of its own (a count alone, say): MPI fills the leading segments and leaves the rest.
class Segments {
 public:
  struct Segment {
    template <class T>
    Segment(const T* data, std::size_t count) : data(data), count(count), type(datatype_of<T>()) {}
    const void* data;
    std::size_t count;
    MPI_Datatype type;
  };

  Segments() = default;
  Segments(std::initializer_list<Segment> segments) {
    std::vector<int> lengths;
    std::vector<MPI_Aint> displacements;
    std::vector<MPI_Datatype> types;
    for (const Segment& s : segments) {
      if (s.count == 0) continue;
      MPI_Aint address = 0;
      check(MPI_Get_address(s.data, &address), "MPI_Get_address");
      if (s.count > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
        throw Error(fmt::format("comm::Segments: segment of {} elements exceeds MPI's int count", s.count));
      }
      lengths.push_back(static_cast<int>(s.count));
      displacements.push_back(address);
      types.push_back(s.type);
      elements_ += s.count;
    }
    check(MPI_Type_create_struct(static_cast<int>(lengths.size()), lengths.data(), displacements.data(), types.data(),
                                 &type_),
          "MPI_Type_create_struct", "segments={}", lengths.size());
    check(MPI_Type_commit(&type_), "MPI_Type_commit");
  }
  Segments(Segments&& other) noexcept
      : type_(std::exchange(other.type_, MPI_DATATYPE_NULL)), elements_(other.elements_) {}
  Segments& operator=(Segments&& other) noexcept {
    std::swap(type_, other.type_);
    std::swap(elements_, other.elements_);
    return *this;
  }
  Segments(const Segments&) = delete;
  Segments& operator=(const Segments&) = delete;
  ~Segments() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (type_ != MPI_DATATYPE_NULL && !finalized) MPI_Type_free(&type_);
  }

  MPI_Datatype native() const { return type_; }
  // Elements in the message, all segments together.
  std::size_t elements() const { return elements_; }

  [[nodiscard]] Request isend(const Communicator& comm, int dest, int tag) const {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Isend(MPI_BOTTOM, 1, type_, dest, tag, comm.native(), &request), "MPI_Isend",
          "dest={}, tag={}, {} elements in segments", dest, tag, elements_);
    return Request(request, {"MPI_Isend", "dest", dest, tag});
  }
  [[nodiscard]] Request irecv(const Communicator& comm, int source, int tag) const {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Irecv(MPI_BOTTOM, 1, type_, source, tag, comm.native(), &request), "MPI_Irecv",
          "source={}, tag={}, {} elements in segments", source, tag, elements_);
    return Request(request, {"MPI_Irecv", "source", source, tag});
  }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  std::size_t elements_ = 0;
};

}  // namespace hpcps::comm
