#pragma once
// Who is who: ranks [0, W) are workers and ranks [W, W+S) are servers, so rank 0 is always a
// worker (it holds the whole model and can report test accuracy). Server s owns the contiguous
// range shard_range(P, s, S) of the flat parameter vector.
//
// A shard travels as pieces of at most piece_floats floats, each its own message, in both
// directions: the server sums and updates piece k while piece k+1 of the push is still arriving
// and piece k-1 of the pull is already on its way back (BytePS partitions large tensors the same
// way). Both sides derive the same pieces from the numbers, so no message says how it was cut.
#include <algorithm>
#include <cstddef>

#include <fmt/format.h>

#include "hpcps/data/shard.hpp"
#include "hpcps/error.hpp"

namespace hpcps::ps {

enum class Role { worker, server };

// Message tags between workers and servers. Per (source, tag) pair MPI delivers in order, so the
// clock of a message is implicit: the k-th push from a worker is its clock k.
namespace tags {
inline constexpr int params = 12;  // server -> worker: parameter pieces 0, 1, ... in order
// worker -> server, with every push where the workers draw their work (ps::train with
// Balance::speed, asynchronous and stale-synchronous): the global clock the push completes, as
// one std::uint64_t, so a stale-synchronous bound counts in the clocks of the data, not in pushes.
inline constexpr int push_clock = 13;
// server 0 -> worker, with every reply where the workers draw their work: the worker's next ticket
// (part t % W of global clock t / W), one std::uint64_t.
inline constexpr int ticket = 14;
// server 0 -> worker, with every reply of a balanced synchronous run (ps::Server::time_responses):
// the seconds from the previous clock's release until that worker's push came in, one double.
inline constexpr int response = 15;
// worker -> server: piece k of a push ([sample count, piece 0], then pieces 1, 2, ...) has tag
// push + k, so each piece finds its receive whatever order the pieces leave in (a worker that
// overlaps its push with backpropagation sends the last pieces first).
inline constexpr int push = 1000;
inline constexpr int push_piece(std::size_t k) { return push + static_cast<int>(k); }
}  // namespace tags

// Leading float of a push: number of samples summed into the slice, or one of these markers.
namespace push_count {
inline constexpr float idle = 0.0f;   // this worker had no batch at this clock
inline constexpr float stop = -1.0f;  // this worker has finished: send it nothing more
}  // namespace push_count

class Layout {
 public:
  // servers == 0 selects the colocated layout: every rank is a worker and also the server of
  // shard `rank` (BytePS's and MXNet's colocated mode), so W ranks use W cores and one rank trains
  // alone.
  static constexpr std::size_t default_piece_floats = std::size_t{1} << 20;  // 4 MiB messages

  Layout(int world_size, int servers, std::size_t parameters, std::size_t piece_floats = default_piece_floats)
      : colocated_(servers == 0),
        servers_(servers == 0 ? world_size : servers),
        parameters_(parameters),
        piece_floats_(piece_floats) {
    if (piece_floats == 0) throw Error("ps::Layout: pieces of 0 floats; give at least 1 float per message");
    if (colocated_) {
      workers_ = world_size;
      if (parameters < static_cast<std::size_t>(world_size)) {
        throw Error(fmt::format("ps::Layout: {} colocated shards for only {} parameters", world_size, parameters));
      }
      return;
    }
    if (servers < 0 || servers >= world_size) {
      throw Error(fmt::format("ps::Layout: {} server(s) leave no worker among {} rank(s); "
                              "run with more ranks (mpiexec -n {}) or fewer --servers",
                              servers, world_size, servers + 1));
    }
    if (parameters < static_cast<std::size_t>(servers)) {
      throw Error(fmt::format("ps::Layout: {} servers for only {} parameters", servers, parameters));
    }
    workers_ = world_size - servers;
  }

  int workers() const { return workers_; }
  int servers() const { return servers_; }
  bool colocated() const { return colocated_; }
  std::size_t parameters() const { return parameters_; }
  // The role that drives a rank's loop; a colocated rank is a worker that also serves its shard.
  Role role(int rank) const { return rank < workers_ ? Role::worker : Role::server; }
  int worker_rank(int worker) const { return worker; }
  int server_rank(int server) const { return colocated_ ? server : workers_ + server; }
  int server_index(int rank) const { return colocated_ ? rank : rank - workers_; }
  data::Range shard(int server) const {
    return data::shard_range(parameters_, static_cast<std::size_t>(server), static_cast<std::size_t>(servers_));
  }
  std::size_t piece_floats() const { return piece_floats_; }
  // Messages a shard travels as (at least one, even for an empty shard).
  std::size_t pieces(int server) const {
    const std::size_t n = shard(server).size();
    return n == 0 ? 1 : (n + piece_floats_ - 1) / piece_floats_;
  }
  std::size_t max_pieces() const {
    std::size_t most = 0;
    for (int s = 0; s < servers_; ++s) most = std::max(most, pieces(s));
    return most;
  }
  // Piece k of server s's shard, in absolute parameter indices.
  data::Range piece(int server, std::size_t k) const {
    const data::Range r = shard(server);
    const std::size_t begin = std::min(r.end, r.begin + k * piece_floats_);
    return {begin, std::min(r.end, begin + piece_floats_)};
  }

 private:
  bool colocated_ = false;
  int workers_ = 0, servers_ = 0;
  std::size_t parameters_ = 0;
  std::size_t piece_floats_ = default_piece_floats;
};

}  // namespace hpcps::ps
