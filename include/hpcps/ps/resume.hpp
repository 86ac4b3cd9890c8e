#pragma once
// Reading a checkpoint to resume from (ParameterServer::Options::resume): every rank reads and
// checks the manifest against its own composition, each server reads its shard's parameters and
// state arrays (from whichever old shard files hold them: the layout may differ), each worker of a
// compressed-push run its residual and, with momentum correction, its velocity (each the sum of
// the old workers' that fall to it), and the ranks
// agree on the verdict, so a bad checkpoint stops every rank with one sentence naming the file and
// the reason, before anything is trained or written.
#include <cstddef>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "hpcps/checkpoint/directory.hpp"
#include "hpcps/checkpoint/manifest.hpp"
#include "hpcps/comm/communicator.hpp"
#include "hpcps/data/shard.hpp"
#include "hpcps/ps/agreed_verdict.hpp"
#include "hpcps/ps/checkpoint_shards.hpp"

namespace hpcps::ps {

// What this run is, to compare with what the checkpoint was written by.
struct ResumeExpectation {
  std::string network;
  std::size_t parameters = 0;
  std::string sync, optimizer;
  std::vector<std::string> state_arrays;
  bool residuals = false;   // compressed pushes (top-k, scaled sign), whose workers keep residuals
  bool velocities = false;  // and with momentum correction, velocities
};

struct ResumedCheckpoint {
  std::string path;  // the checkpoint directory read (the newest one when a folder was given)
  checkpoint::Manifest manifest;
  std::vector<float> parameters;          // a server's shard, else empty
  std::vector<std::vector<float>> state;  // the same for each state array
  std::vector<float> residual;            // a compressed-push worker's, else empty (none saved: start from zero)
  std::vector<float> velocity;            // the same with momentum correction
};

// Empty if the checkpoint fits the run, else why not.
inline std::string mismatch(const checkpoint::Manifest& m, const ResumeExpectation& e) {
  const auto differs = [](const char* what, const std::string& theirs, const std::string& ours) {
    return fmt::format("written for {} {}, but this run has {}", what, theirs, ours);
  };
  if (m.network != e.network) return differs("the network", m.network, e.network);
  if (m.parameters != e.parameters) return differs("a parameter count of", std::to_string(m.parameters), std::to_string(e.parameters));
  if (m.sync != e.sync) return differs("the synchronization", m.sync, e.sync);
  if (m.optimizer != e.optimizer) return differs("the update rule", m.optimizer, e.optimizer);
  if (m.state_arrays != e.state_arrays) {
    return differs("state arrays", fmt::format("[{}]", fmt::join(m.state_arrays, ", ")),
                   fmt::format("[{}]", fmt::join(e.state_arrays, ", ")));
  }
  if (!m.residuals.empty() && !e.residuals) {
    // Either compression takes a residual: it is gradient not yet sent, whatever sends it next.
    return fmt::format("written with compressed pushes: its {} workers' residuals hold gradient not yet applied, "
                       "which uncompressed pushes would lose; resume with top-k pushes (Options::top_k, --top-k) or "
                       "scaled-sign pushes (Options::sign_push, --sign-push)",
                       m.residuals.size());
  }
  if (!m.velocities.empty() && !e.velocities) {
    // The server's rule has no momentum then: the velocity is the run's only momentum.
    return fmt::format("written with momentum correction: its {} workers' velocities hold the momentum, which a "
                       "run without it would drop; resume with momentum correction (Options::top_k_momentum, "
                       "--top-k-momentum)",
                       m.velocities.size());
  }
  return {};
}

// The residual (or velocity: `files` names which) of worker `worker` of `workers` resuming from
// checkpoint `dir`: the sum, in old-worker order, of the old workers w's with w % workers ==
// worker, so that the workers together still hold all the checkpoint's workers held (with as many
// workers, each its own, exactly). Summing keeps a velocity's rule too: the workers' velocities
// add up to m * (their sum) + (the gradients' sum) clock by clock, however they are split.
inline std::vector<float> read_worker_sum(const std::string& dir, const checkpoint::Manifest& m,
                                          const std::vector<checkpoint::FileEntry>& files, int worker, int workers) {
  std::vector<float> sum(m.parameters, 0.0f), one(m.parameters);
  for (std::size_t w = static_cast<std::size_t>(worker); w < files.size(); w += static_cast<std::size_t>(workers)) {
    const std::string path = (std::filesystem::path(dir) / files[w].name).string();
    // Read once: the checksum is of the bytes just read.
    check_shard_present(path, files[w]);
    checkpoint::ReadFile(path).read(0, one.data(), one.size() * sizeof(float));
    check_checksum(path, checkpoint::crc32_update(0, one.data(), one.size() * sizeof(float)), files[w]);
    for (std::size_t i = 0; i < one.size(); ++i) sum[i] += one[i];
  }
  return sum;
}

// Collective over `world`. `shard`: this rank's server shard, if it serves; `worker`: this rank's
// worker index, if it works, of `workers`.
inline ResumedCheckpoint load_checkpoint(const comm::Communicator& world, const std::string& where,
                                         const ResumeExpectation& expected, std::optional<data::Range> shard,
                                         std::optional<int> worker, int workers) {
  ResumedCheckpoint r;
  std::string problem;
  try {
    r.path = checkpoint::resolve(where);
    r.manifest = checkpoint::read_manifest(r.path);
    const std::string path = (std::filesystem::path(r.path) / checkpoint::manifest_name).string();
    if (const std::string why = mismatch(r.manifest, expected); !why.empty()) {
      throw checkpoint::BadCheckpoint(fmt::format("{}: {}", path, why));
    }
    if (world.rank() == 0) {
      // Missing and cut-short shard files are named here whoever reads them.
      for (const auto& f : r.manifest.files) check_shard_present((std::filesystem::path(r.path) / f.name).string(), f);
      for (const auto* list : {&r.manifest.residuals, &r.manifest.velocities}) {
        for (const auto& f : *list) check_shard_present((std::filesystem::path(r.path) / f.name).string(), f);
      }
    }
    if (shard) {
      ShardReader reader(r.path, r.manifest);
      r.parameters.resize(shard->size());
      reader.read(0, *shard, r.parameters.data());
      r.state.resize(r.manifest.state_arrays.size());
      for (std::size_t a = 0; a < r.state.size(); ++a) {
        r.state[a].resize(shard->size());
        reader.read(a + 1, *shard, r.state[a].data());
      }
    }
    if (worker && expected.residuals && !r.manifest.residuals.empty()) {
      r.residual = read_worker_sum(r.path, r.manifest, r.manifest.residuals, *worker, workers);
    }
    if (worker && expected.velocities && !r.manifest.velocities.empty()) {
      r.velocity = read_worker_sum(r.path, r.manifest, r.manifest.velocities, *worker, workers);
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }
  throw_if_any_rank(world, problem, fmt::format("cannot resume from {}", where), "another rank refused the checkpoint");
  return r;
}

}  // namespace hpcps::ps
