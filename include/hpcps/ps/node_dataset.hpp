#pragma once
// One read-only copy of a data set per node, in the type its files store (data/stored_dataset.hpp),
// in an MPI-3 shared-memory window (comm::SharedWindow): the lowest rank of the node that needs the
// set reads it into its segment, the others wait for it and read from there. Every rank that needs
// the set sees every row the node holds, so an assignment of samples to workers that changes from
// clock to clock needs no copying; a rank that needs none (a server) takes part in the collective
// calls, but holds nothing and reads nothing.
//
// Why: with a private copy per rank, memory grows as ranks x set; a node of 16 ranks does not hold
// 16 copies of a set of a few GB. Where the node's /dev/shm cannot hold the set (a container's is
// often 64 MiB; MPICH would allocate the window anyway and the job would die of SIGBUS on a page
// past the end), every rank reads a private copy of what it needs instead, and the filling rank
// says why in one line.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <mpi.h>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/shared_window.hpp"
#include "hpcps/data/dataset.hpp"
#include "hpcps/data/shard.hpp"
#include "hpcps/data/stored_dataset.hpp"
#include "hpcps/ps/agreed_verdict.hpp"

namespace hpcps::ps {

struct NodeDatasetOptions {
  // false: every rank that needs the set reads a private copy (no window).
  bool share = true;
  // Free bytes to assume in /dev/shm instead of asking statvfs (tests of the fallback).
  std::optional<std::uint64_t> shm_free_bytes;
};

class NodeDataset {
 public:
  using Options = NodeDatasetOptions;

  // Collective over `world`. `description` (describe_idx_pair, possibly shortened to its first
  // rows) is the same on every rank; `rows` are the rows this rank reads, nullopt for none. The
  // node holds the union of its ranks' rows: their ranges, merged where they touch or overlap.
  NodeDataset(const comm::Communicator& world, const data::IdxPairFiles& files, const data::Dataset& description,
              std::optional<data::Range> rows, Options options = {})
      : set_(description.description()) {
    if (rows && (rows->begin > rows->end || rows->end > description.count)) {
      throw Error(fmt::format("NodeDataset: rows [{}, {}) are not inside the {} samples of {}", rows->begin,
                              rows->end, description.count, files.images));
    }
    const bool needs = rows && rows->size() > 0;
    {
      const comm::Communicator node = world.split_shared(world.rank());
      users_ = node.split(needs ? 0 : MPI_UNDEFINED, node.rank());
    }
    if (!needs) return;
    // Every user's range, in node-rank order, then merged into the blocks the node holds.
    std::vector<std::uint64_t> ranges(2 * static_cast<std::size_t>(users_.size()));
    const std::uint64_t mine[2] = {rows->begin, rows->end};
    users_.allgather(mine, 2, ranges.data());
    for (std::size_t r = 0; r < ranges.size(); r += 2) blocks_.push_back({ranges[r], ranges[r + 1]});
    std::sort(blocks_.begin(), blocks_.end(), [](data::Range a, data::Range b) { return a.begin < b.begin; });
    std::vector<data::Range> merged;
    for (const data::Range& b : blocks_) {
      if (!merged.empty() && b.begin <= merged.back().end) merged.back().end = std::max(merged.back().end, b.end);
      else merged.push_back(b);
    }
    blocks_ = merged;
    std::size_t bytes = 0;
    for (const data::Range& b : blocks_) bytes += data::stored_bytes(description, b);
    bytes_ = bytes;
    std::vector<int> members(static_cast<std::size_t>(users_.size()));
    const int me = world.rank();
    users_.allgather(&me, 1, members.data());
    owner_ = members[0];

    // A rank alone with the set on its node shares with nobody: a private copy is the node's one.
    bool share = options.share && users_.size() > 1;
    if (share) {
      int fits = 1;
      if (users_.rank() == 0) {
        const std::uint64_t needed = comm::SharedWindow::footprint(bytes);
        fits = (options.shm_free_bytes ? *options.shm_free_bytes >= needed : comm::SharedWindow::fits(needed)) ? 1 : 0;
        if (!fits) {
          std::fprintf(stderr,
                       "hpcps: %s: one copy for this node's %d ranks needs %.1f MiB and /dev/shm has less free; each "
                       "rank reads a private copy of its rows instead (docs/architecture.md#the-data-path)\n",
                       files.images.c_str(), users_.size(), static_cast<double>(needed) / (1 << 20));
          std::fflush(stderr);
        }
      }
      users_.broadcast(&fits, 1, 0);
      share = fits != 0;
      fell_back_ = !fits;
    }
    if (!share) {
      owner_ = -1;
      set_ = data::load_stored(files, data::Range{rows->begin, rows->end});
      set_.count = description.count;
      return;
    }

    window_ = comm::SharedWindow(users_, users_.rank() == 0 ? bytes : 0);
    auto* base = static_cast<std::uint8_t*>(window_.segment(0));
    std::string problem;
    if (users_.rank() == 0) {
      try {
        std::size_t at = 0;
        for (const data::Range& b : blocks_) {
          data::read_stored_rows(files, description, b, base + at);
          at += data::stored_bytes(description, b);
        }
      } catch (const Error& e) {
        problem = e.what();
      }
      window_.sync();  // the stores, before the verdict that tells the others they are done
    }
    // The verdict is also the barrier the others wait at while the owner reads: a file the owner
    // cannot read ends every rank of the node with its message instead of leaving them waiting.
    throw_if_any_rank(users_, problem, "NodeDataset", fmt::format("rank {} could not read {}", owner_, files.images));
    window_.sync();
    std::size_t at = 0;
    for (const data::Range& b : blocks_) {
      if (rows->begin >= b.begin && rows->end <= b.end) {
        set_ = data::stored_view(description, b, base + at);
        break;
      }
      at += data::stored_bytes(description, b);
    }
  }

  NodeDataset(const NodeDataset&) = delete;
  NodeDataset& operator=(const NodeDataset&) = delete;

  // The set: its rows this rank asked for (and the rest of the node's block around them) as stored
  // bytes; a description without samples on a rank that asked for none.
  const data::Dataset& set() const noexcept { return set_; }
  // Whether this rank's rows lie in the node's window.
  bool shared() const noexcept { return !window_.is_null(); }
  // Whether the window did not fit /dev/shm and the rows were read privately.
  bool fell_back() const noexcept { return fell_back_; }
  // The world rank that read the node's copy into its segment; -1 without a window.
  int owner() const noexcept { return owner_; }
  // The ranges the node holds (merged), and their bytes; empty on a rank that asked for none.
  const std::vector<data::Range>& node_rows() const noexcept { return blocks_; }
  std::size_t node_bytes() const noexcept { return bytes_; }
  // The ranks of this node that asked for rows (null on the others), and the window (null without).
  const comm::Communicator& users() const noexcept { return users_; }
  const comm::SharedWindow& window() const noexcept { return window_; }

 private:
  // Declared before the window: MPI frees the window before its communicator.
  comm::Communicator users_;
  comm::SharedWindow window_;
  data::Dataset set_;
  std::vector<data::Range> blocks_;
  std::size_t bytes_ = 0;
  int owner_ = -1;
  bool fell_back_ = false;
};

}  // namespace hpcps::ps
