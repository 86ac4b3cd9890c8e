#pragma once
// Writing one checkpoint, collectively, at the end of a clock (ps::train calls it on every rank):
// rank 0 creates .partial-ckpt-<clock> in the folder; every server writes its shard file there,
// and with compressed pushes every worker its residual file (with momentum correction its
// velocity file too), fsync'd; rank 0 gathers their sizes and
// CRC-32s, writes the MANIFEST, fsyncs the directory and
// publishes it by renaming it to ckpt-<clock>, then removes all but the newest `keep`. A crash at
// any instant leaves either the previous checkpoints alone or the new one complete: a partial
// directory is never read (checkpoint/directory.hpp) and the next checkpoint clears it away.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "hpcps/checkpoint/directory.hpp"
#include "hpcps/checkpoint/files.hpp"
#include "hpcps/checkpoint/manifest.hpp"
#include "hpcps/comm/communicator.hpp"
#include "hpcps/optim/state_arrays.hpp"
#include "hpcps/ps/agreed_verdict.hpp"
#include "hpcps/ps/checkpoint_shards.hpp"
#include "hpcps/ps/wire_format.hpp"

namespace hpcps::ps {

// Where training stands after the clock being saved, and how it got there.
struct CheckpointPosition {
  std::uint64_t clock = 0;  // clocks completed
  std::uint64_t epoch = 0, batch = 0;  // of the next clock
  std::uint64_t clocks_per_epoch = 0, global_batch = 0, train_samples = 0, shuffle_seed = 0;
  std::string data_order = "global";  // which samples make up a clock (ps::DataOrder)
};

// Bytes of one checkpoint of a ParameterServer: the parameters and every state array, and with
// compressed pushes (top-k, scaled sign) each worker's residual, and with momentum correction its
// velocity.
template <class Server>
std::uint64_t checkpoint_bytes(const Server& ps) {
  const auto workers = static_cast<std::uint64_t>(ps.layout().workers());
  const std::uint64_t per_worker = (ps.keeps_residuals() ? workers : 0) + (ps.keeps_velocities() ? workers : 0);
  return static_cast<std::uint64_t>(ps.layout().parameters()) *
         (1 + ps.checkpoint_identity().state_arrays.size() + per_worker) * sizeof(float);
}

// Collective over `comm` (every rank of the ParameterServer's world, in rank order). Returns the
// published directory's path on every rank.
template <class Server>
std::string write_checkpoint(Server& ps, const comm::Communicator& comm, const std::string& folder, std::size_t keep,
                             const CheckpointPosition& at) {
  namespace fs = std::filesystem;
  const std::string partial = (fs::path(folder) / checkpoint::partial_name(at.clock)).string();
  const std::string final_dir = (fs::path(folder) / checkpoint::checkpoint_name(at.clock)).string();
  const bool root = comm.rank() == 0;
  std::string problem;
  if (root) {
    try {
      fs::remove_all(partial);
      fs::create_directories(partial);
    } catch (const std::exception& e) {
      problem = fmt::format("cannot create {}: {}", partial, e.what());
    }
  }
  throw_if_any_rank(comm, problem, "checkpoint");

  // Per rank: {server index + 1 (0: not a server), bytes, crc, update count, worker index + 1 (0:
  // no residual), its residual file's bytes, crc, its velocity file's bytes (0: none), crc}.
  constexpr std::size_t fields = 9;
  std::uint64_t mine[fields] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  if (ps.is_server()) {
    auto& server = ps.server();
    const std::size_t index = static_cast<std::size_t>(ps.layout().server_index(ps.world().rank()));
    std::vector<const float*> arrays;
    if constexpr (optim::has_state_arrays_v<typename Server::optimizer_type::State>) {
      for (const auto& a : optim::state_arrays(server.optimizer_state())) arrays.push_back(a.values->data());
    }
    try {
      const auto entry = write_shard(partial, checkpoint::shard_file(index), server.parameter_data(), arrays,
                                     server.range().size());
      mine[0] = index + 1;
      mine[1] = entry.bytes;
      mine[2] = entry.crc;
      mine[3] = server.stats().updates;
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  if (ps.is_worker() && ps.keeps_residuals() && problem.empty()) {
    const auto index = static_cast<std::size_t>(ps.worker_index());
    const auto write = [&](const std::vector<float>& values, const std::string& name, std::uint64_t* entry) {
      checkpoint::DurableWriter out((fs::path(partial) / name).string());
      out.write(values.data(), values.size() * sizeof(float));
      out.finish();
      entry[0] = out.bytes();
      entry[1] = out.crc();
    };
    try {
      write(ps.worker().residual(), checkpoint::residual_file(index), mine + 5);
      if (ps.keeps_velocities()) write(ps.worker().velocity(), checkpoint::velocity_file(index), mine + 7);
      mine[4] = index + 1;
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  throw_if_any_rank(comm, problem, "checkpoint");
  std::vector<std::uint64_t> all(root ? fields * static_cast<std::size_t>(comm.size()) : 0);
  comm.gather(mine, fields, all.data(), 0);

  if (root) {
    try {
      const auto& id = ps.checkpoint_identity();
      const auto& layout = ps.layout();
      checkpoint::Manifest m;
      m.network = id.network;
      m.parameters = layout.parameters();
      m.backend = Server::backend_type::name;
      m.sync = id.sync;
      m.optimizer = id.optimizer;
      m.push_wire = wire_name(ps.options().wire);
      m.pull_wire = wire_name(ps.options().pull_wire);
      m.state_arrays = id.state_arrays;
      m.clock = at.clock;
      m.epoch = at.epoch;
      m.batch = at.batch;
      m.clocks_per_epoch = at.clocks_per_epoch;
      m.global_batch = at.global_batch;
      m.train_samples = at.train_samples;
      m.init_seed = ps.options().seed;
      m.shuffle_seed = at.shuffle_seed;
      m.data_order = at.data_order;
      m.workers = static_cast<std::uint64_t>(layout.workers());
      m.servers = layout.colocated() ? 0 : static_cast<std::uint64_t>(layout.servers());
      m.files.resize(static_cast<std::size_t>(layout.servers()));
      for (int s = 0; s < layout.servers(); ++s) {
        const auto r = layout.shard(s);
        m.shards.emplace_back(r.begin, r.end);
      }
      if (ps.keeps_residuals()) m.residuals.resize(static_cast<std::size_t>(layout.workers()));
      if (ps.keeps_velocities()) m.velocities.resize(static_cast<std::size_t>(layout.workers()));
      for (int r = 0; r < comm.size(); ++r) {
        const std::uint64_t* e = all.data() + fields * static_cast<std::size_t>(r);
        if (e[4] != 0) m.residuals[e[4] - 1] = {checkpoint::residual_file(e[4] - 1), e[5], static_cast<std::uint32_t>(e[6])};
        if (e[4] != 0 && e[7] != 0) {
          m.velocities[e[4] - 1] = {checkpoint::velocity_file(e[4] - 1), e[7], static_cast<std::uint32_t>(e[8])};
        }
        if (e[0] == 0) continue;
        m.files[e[0] - 1] = {checkpoint::shard_file(e[0] - 1), e[1], static_cast<std::uint32_t>(e[2])};
        m.server_updates = e[3];
      }
      checkpoint::DurableWriter manifest((fs::path(partial) / checkpoint::manifest_name).string());
      const std::string text = checkpoint::to_text(m);
      manifest.write(text.data(), text.size());
      manifest.finish();
      checkpoint::sync_directory(partial);
      // A checkpoint of the same clock (a run resumed from an older one) is replaced.
      const std::string replaced = (fs::path(folder) / (".replaced-" + checkpoint::checkpoint_name(at.clock))).string();
      if (fs::exists(final_dir)) {
        fs::remove_all(replaced);
        checkpoint::publish(final_dir, replaced);
      }
      checkpoint::publish(partial, final_dir);
      fs::remove_all(replaced);
      checkpoint::prune(folder, keep);
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  throw_if_any_rank(comm, problem, "checkpoint");
  return final_dir;
}

}  // namespace hpcps::ps
