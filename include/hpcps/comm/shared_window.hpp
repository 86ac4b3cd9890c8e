#pragma once
// An MPI-3 shared-memory window (MPI_Win_allocate_shared): every rank of a node communicator
// (Communicator::split_shared) contributes a segment that every other rank of it can load from and
// store to directly. Nothing moves through MPI: the ranks order their accesses themselves, with
// a message after the stores and sync() on both sides of it (MPI-3's shared-memory model,
// passive target: the window is locked for everyone from construction to destruction).
//
// Why: on one node, MPI's point-to-point copies every byte through the receiving process
// (UCX's CMA), so a receiver that also has to compute takes the copy on its own core. With a
// shared segment the reader copies, or computes on the data where it lies, and no one copies twice
// (bench/transports: 1.7x point-to-point for 25M floats, docs/performance.md).
#include <cstddef>
#include <cstdint>
#include <utility>

#include <mpi.h>
#include <sys/statvfs.h>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/detail/teardown.hpp"
#include "hpcps/comm/error.hpp"

namespace hpcps::comm {

class SharedWindow {
 public:
  // Each segment starts on its own page, so two ranks never write into one cache line. MPICH
  // page-aligns the segments of several processes but not a lone process's (measured: 1 rank,
  // offset 2512), so every segment carries one page of slack and segment() aligns up; a page
  // maps at the same offset in every process, so all of them find the same start.
  static constexpr std::size_t segment_alignment = 4096;

  SharedWindow() noexcept = default;

  // Bytes this rank passes to the constructor occupy this many in the node's shared memory.
  static std::size_t footprint(std::size_t bytes) {
    return (bytes + segment_alignment - 1) / segment_alignment * segment_alignment + segment_alignment;
  }

  // Whether `bytes` more fit in `filesystem`, where MPICH keeps shared segments on Linux (POSIX
  // shm_open: /dev/shm). A window that does not fit is not an error there: the process dies of
  // SIGBUS when it first touches a page past the end, so ask first. Unknown (no such filesystem):
  // true.
  static bool fits(std::size_t bytes, const char* filesystem = "/dev/shm") {
    struct statvfs info {};
    if (statvfs(filesystem, &info) != 0) return true;
    return static_cast<unsigned long long>(info.f_bavail) * info.f_frsize >= bytes;
  }

  // Collective over `node`, whose ranks must all share memory (split_shared). This rank's segment
  // holds `bytes` (rounded up to segment_alignment), uninitialized.
  SharedWindow(const Communicator& node, std::size_t bytes) {
    const std::size_t rounded = footprint(bytes);
    MPI_Info info = MPI_INFO_NULL;
    check(MPI_Info_create(&info), "MPI_Info_create");
    // Separate segments: MPICH then page-aligns each one and may place it near its owner.
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void* base = nullptr;
    const int code = MPI_Win_allocate_shared(static_cast<MPI_Aint>(rounded), 1, info, node.native(), &base, &win_);
    MPI_Info_free(&info);
    check(code, "MPI_Win_allocate_shared", "{} bytes on node rank {} of {}", rounded, node.rank(), node.size());
    check(MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler", "shared window");
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_), "MPI_Win_lock_all", "shared window");
    locked_ = true;
  }

  SharedWindow(SharedWindow&& other) noexcept
      : win_(std::exchange(other.win_, MPI_WIN_NULL)), locked_(std::exchange(other.locked_, false)),
        created_(other.created_) {}
  SharedWindow& operator=(SharedWindow&& other) noexcept {
    if (this != &other) {
      release();
      win_ = std::exchange(other.win_, MPI_WIN_NULL);
      locked_ = std::exchange(other.locked_, false);
      created_ = other.created_;
    }
    return *this;
  }
  SharedWindow(const SharedWindow&) = delete;
  SharedWindow& operator=(const SharedWindow&) = delete;
  // Collective (MPI_Win_free): every rank of the node destroys its window at the same point.
  // While an exception unwinds past it the window is left to MPI_Abort instead: the other ranks
  // may never reach MPI_Win_free, and waiting for them would hang the job (detail/teardown.hpp).
  ~SharedWindow() {
    if (created_.unwinding()) return;
    release();
  }

  bool is_null() const noexcept { return win_ == MPI_WIN_NULL; }

  // Where node rank `rank`'s segment lies in this process's address space (segment_alignment-aligned).
  void* segment(int rank) const {
    MPI_Aint size = 0;
    int unit = 0;
    void* base = nullptr;
    check(MPI_Win_shared_query(win_, rank, &size, &unit, &base), "MPI_Win_shared_query", "node rank {}", rank);
    const auto address = reinterpret_cast<std::uintptr_t>(base);
    return reinterpret_cast<void*>((address + segment_alignment - 1) / segment_alignment * segment_alignment);
  }

  // Bytes MPI allocated for node rank `rank`'s segment: footprint() of what it asked for (checked
  // from any rank of the node; a rank that asked for nothing has one page).
  std::size_t segment_size(int rank) const {
    MPI_Aint size = 0;
    int unit = 0;
    void* base = nullptr;
    check(MPI_Win_shared_query(win_, rank, &size, &unit, &base), "MPI_Win_shared_query", "node rank {}", rank);
    return static_cast<std::size_t>(size);
  }

  // Makes this process's stores visible to the others and theirs to it: call it after storing and
  // before the message that says so, and after receiving such a message and before loading.
  void sync() const { check(MPI_Win_sync(win_), "MPI_Win_sync", "shared window"); }

 private:
  void release() noexcept {
    if (win_ == MPI_WIN_NULL || Environment::finalized()) return;
    if (locked_) MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
    win_ = MPI_WIN_NULL;
    locked_ = false;
  }

  MPI_Win win_ = MPI_WIN_NULL;
  bool locked_ = false;
  detail::UnwindingProbe created_;
};

}  // namespace hpcps::comm
