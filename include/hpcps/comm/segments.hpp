#pragma once
// Several arrays sent as ONE message without packing them into a staging copy: an MPI
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

// Arrays of any element types as one message (a struct datatype): a gradient slice behind its fp32
// sample count, in fp32 or a 16-bit wire format. Receivable too, into the buffers it was built
// over, which must then be writable. A receive matches a shorter message whose types are a
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
