#pragma once
// The checkpoint folder a run writes into: one directory per checkpoint, ckpt-<clock>, published
// complete by a rename from .partial-ckpt-<clock>; the newest `keep` are kept. Resuming from the
// folder takes the newest published one; a partial one (a crash while writing) is never read.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "hpcps/checkpoint/files.hpp"
#include "hpcps/checkpoint/manifest.hpp"

namespace hpcps::checkpoint {

inline std::string checkpoint_name(std::uint64_t clock) { return fmt::format("ckpt-{:012}", clock); }
inline std::string partial_name(std::uint64_t clock) { return fmt::format(".partial-ckpt-{:012}", clock); }

// The published checkpoints in `folder`, oldest first.
inline std::vector<std::string> published(const std::string& folder) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == 17 && name.compare(0, 5, "ckpt-") == 0 && entry.is_directory()) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// `path` itself if it is a checkpoint (has a MANIFEST), else the newest checkpoint inside it.
inline std::string resolve(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path)) throw BadCheckpoint(fmt::format("{}: not a checkpoint: no such directory", path));
  if (fs::exists(fs::path(path) / manifest_name)) return path;
  const auto names = published(path);
  if (names.empty()) {
    throw BadCheckpoint(fmt::format("{}: not a checkpoint: it has no {} file and no ckpt-* checkpoint inside", path,
                                    manifest_name));
  }
  return (fs::path(path) / names.back()).string();
}

// Removes all but the newest `keep` checkpoints, and partial ones left by a crash (except the one
// named `writing`, being written now).
inline void prune(const std::string& folder, std::size_t keep, const std::string& writing = {}) {
  namespace fs = std::filesystem;
  auto names = published(folder);
  if (names.size() > keep) {
    names.resize(names.size() - keep);
    for (const auto& n : names) fs::remove_all(fs::path(folder) / n);
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, 14, ".partial-ckpt-") == 0 && name != writing) fs::remove_all(entry.path(), ec);
  }
}

// Empty if a checkpoint of `bytes` bytes can be written into `folder` (created if missing): a
// file is created, fsync'd and removed, and the file system has the room. Else why not.
inline std::string writable_problem(const std::string& folder, std::uint64_t bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) return fmt::format("cannot create the checkpoint folder {}: {}", folder, ec.message());
  const std::string probe = (fs::path(folder) / fmt::format(".probe-{}", ::getpid())).string();
  try {
    DurableWriter w(probe);
    const char byte = 0;
    w.write(&byte, 1);
    w.finish();
  } catch (const Error& e) {
    fs::remove(probe, ec);
    return fmt::format("the checkpoint folder {} cannot be written: {}", folder, e.what());
  }
  fs::remove(probe, ec);
  const std::uint64_t free = free_bytes(folder);
  if (free < bytes) {
    return fmt::format("the checkpoint folder {} has {:.1f} MiB free, a checkpoint needs {:.1f} MiB", folder,
                       static_cast<double>(free) / (1 << 20), static_cast<double>(bytes) / (1 << 20));
  }
  return {};
}

}  // namespace hpcps::checkpoint
