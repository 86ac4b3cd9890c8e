#pragma once
// Several arrays as ONE message: an MPI struct-of-segments datatype over absolute addresses
// (MPI_BOTTOM). The parameter server uses it to send a gradient slice together with its sample
// count. Built once, reused every step, because the addresses of the buffers it describes never
// change.
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

// Arrays of any element types as one message (a struct datatype): a gradient slice behind its fp32
// sample count, in fp32 or a 16-bit wire format. Receivable too, into the buffers it was built
// over, which must then be writable. A receive matches a shorter message whose types are a
// prefix of its own (a count alone, say): MPI fills the leading segments and leaves the rest.
// isend_packed packs the segments into one contiguous buffer first, for a receiver that takes
// the message as one array: across pretend nodes on 1 Gbit/s, MPICH 4.0's UCX device let the two
// directions of an exchange of struct messages take turns, and a colocated clock of two ranks
// (235k floats) took 15.0 ms with a struct send, 8.0 ms packed (docs/performance.md, 2026-12-06).
// Not for a struct receive: packed into one, fp16 pushes slowed (24k -> 17k samples/s). One
// packed send at a time: the next packs into the same buffer.
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
    auto commit_struct = [&](MPI_Datatype* out) {
      check(MPI_Type_create_struct(static_cast<int>(lengths.size()), lengths.data(), displacements.data(),
                                   types.data(), out),
            "MPI_Type_create_struct", "segments={}", lengths.size());
      check(MPI_Type_commit(out), "MPI_Type_commit");
    };
    commit_struct(&type_);
    if (lengths.size() > 1) {
      // MPICH 4.0.2's MPI_Pack refuses MPI_BOTTOM: packing reads from the first segment instead.
      base_ = displacements[0];
      for (MPI_Aint& d : displacements) d = MPI_Aint_diff(d, base_);
      commit_struct(&pack_type_);
    }
  }
  Segments(Segments&& other) noexcept
      : type_(std::exchange(other.type_, MPI_DATATYPE_NULL)),
        pack_type_(std::exchange(other.pack_type_, MPI_DATATYPE_NULL)),
        base_(other.base_),
        elements_(other.elements_),
        packed_(std::move(other.packed_)) {}
  Segments& operator=(Segments&& other) noexcept {
    std::swap(type_, other.type_);
    std::swap(pack_type_, other.pack_type_);
    std::swap(base_, other.base_);
    std::swap(elements_, other.elements_);
    std::swap(packed_, other.packed_);
    return *this;
  }
  Segments(const Segments&) = delete;
  Segments& operator=(const Segments&) = delete;
  ~Segments() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (type_ != MPI_DATATYPE_NULL && !finalized) MPI_Type_free(&type_);
    if (pack_type_ != MPI_DATATYPE_NULL && !finalized) MPI_Type_free(&pack_type_);
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
  // A packed message matches a receive of the same type signature: one contiguous array where
  // every segment has the array's type, or this struct.
  [[nodiscard]] Request isend_packed(const Communicator& comm, int dest, int tag) {
    if (pack_type_ == MPI_DATATYPE_NULL) return isend(comm, dest, tag);  // one segment: contiguous already
    MPI_Request request = MPI_REQUEST_NULL;
    if (packed_.empty()) {  // the first send; the steady state allocates nothing
      int bytes = 0;
      check(MPI_Pack_size(1, pack_type_, comm.native(), &bytes), "MPI_Pack_size", "{} elements in segments", elements_);
      packed_.resize(static_cast<std::size_t>(bytes));
    }
    int position = 0;
    check(MPI_Pack(reinterpret_cast<const void*>(base_), 1, pack_type_, packed_.data(), static_cast<int>(packed_.size()),
                   &position, comm.native()),
          "MPI_Pack", "{} elements in segments", elements_);
    check(MPI_Isend(packed_.data(), position, MPI_PACKED, dest, tag, comm.native(), &request), "MPI_Isend",
          "dest={}, tag={}, {} elements in segments, packed into {} bytes", dest, tag, elements_, position);
    return Request(request, {"MPI_Isend", "dest", dest, tag});
  }
  [[nodiscard]] Request irecv(const Communicator& comm, int source, int tag) const {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Irecv(MPI_BOTTOM, 1, type_, source, tag, comm.native(), &request), "MPI_Irecv",
          "source={}, tag={}, {} elements in segments", source, tag, elements_);
    return Request(request, {"MPI_Irecv", "source", source, tag});
  }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;       // absolute addresses (MPI_BOTTOM): struct sends, receives
  MPI_Datatype pack_type_ = MPI_DATATYPE_NULL;  // relative to base_: packing several; null for one
  MPI_Aint base_ = 0;
  std::size_t elements_ = 0;
  std::vector<char> packed_;
};

}  // namespace hpcps::comm
