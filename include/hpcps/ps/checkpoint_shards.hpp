#pragma once
// A server's shard in a checkpoint: one file of [parameters | state array 1 | ...], each as many
// fp32 values as the shard has parameters, in the machine's byte order. A run on another layout
// reads the byte ranges of its new shard out of the old shards' files (checkpoint/manifest.hpp
// says which file holds which range), after checking each file's size and CRC-32.
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "hpcps/checkpoint/files.hpp"
#include "hpcps/checkpoint/manifest.hpp"
#include "hpcps/data/shard.hpp"

namespace hpcps::ps {

// Writes shard file `name` in `dir` from the shard's parameters and state arrays (each `n` floats).
inline checkpoint::FileEntry write_shard(const std::string& dir, const std::string& name, const float* parameters,
                                         const std::vector<const float*>& arrays, std::size_t n) {
  checkpoint::DurableWriter out((std::filesystem::path(dir) / name).string());
  out.write(parameters, n * sizeof(float));
  for (const float* a : arrays) out.write(a, n * sizeof(float));
  out.finish();
  return {name, out.bytes(), out.crc()};
}

// Throws checkpoint::BadCheckpoint naming the file when it is missing or not of the listed size.
inline void check_shard_present(const std::string& path, const checkpoint::FileEntry& entry) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw checkpoint::BadCheckpoint(fmt::format("{}: missing: the manifest lists this file", path));
  }
  const std::size_t size = checkpoint::file_size(path);
  if (size != entry.bytes) {
    throw checkpoint::BadCheckpoint(fmt::format("{}: {} bytes, the manifest says {}: the file is {}", path, size,
                                                entry.bytes, size < entry.bytes ? "truncated" : "too long"));
  }
}

// Throws checkpoint::BadCheckpoint naming the file when `crc`, its contents' CRC-32, is not the
// manifest's.
inline void check_checksum(const std::string& path, std::uint32_t crc, const checkpoint::FileEntry& entry) {
  if (crc != entry.crc) {
    throw checkpoint::BadCheckpoint(fmt::format("{}: checksum mismatch (CRC-32 {:08x}, the manifest says {:08x}): "
                                                "the file is damaged",
                                                path, crc, entry.crc));
  }
}

// check_shard_present, then the whole file's CRC-32 against the manifest's.
inline void check_file_intact(const std::string& path, const checkpoint::FileEntry& entry) {
  check_shard_present(path, entry);
  check_checksum(path, checkpoint::ReadFile(path).crc(), entry);
}

// Reads element ranges of a checkpoint's arrays (0: parameters, 1..: the state arrays), whatever
// the layout that wrote it. Every file read from is checked once, whole, against its CRC-32.
class ShardReader {
 public:
  ShardReader(std::string dir, const checkpoint::Manifest& manifest)
      : dir_(std::move(dir)), manifest_(manifest), checked_(manifest.files.size(), 0) {}

  // Elements [range.begin, range.end) of array `array` into `out`.
  void read(std::size_t array, data::Range range, float* out) {
    for (std::size_t s = 0; s < manifest_.shards.size() && range.begin < range.end; ++s) {
      const auto [first, last] = manifest_.shards[s];
      const std::size_t begin = std::max<std::size_t>(range.begin, first), end = std::min<std::size_t>(range.end, last);
      if (begin >= end) continue;
      const std::string path = (std::filesystem::path(dir_) / manifest_.files[s].name).string();
      check(s, path);
      const std::size_t n = last - first;
      checkpoint::ReadFile(path).read((array * n + (begin - first)) * sizeof(float), out + (begin - range.begin),
                                      (end - begin) * sizeof(float));
    }
  }

 private:
  // Throws checkpoint::BadCheckpoint naming the file: missing, of another size, or damaged.
  void check(std::size_t s, const std::string& path) {
    if (checked_[s]) return;
    check_file_intact(path, manifest_.files[s]);
    checked_[s] = 1;
  }

  std::string dir_;
  const checkpoint::Manifest& manifest_;
  std::vector<char> checked_;
};

}  // namespace hpcps::ps
