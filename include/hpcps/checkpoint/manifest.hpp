#pragma once
// A checkpoint's MANIFEST: what was trained (network, composition, update rule and schedule),
// where training stood (clock, epoch and batch position, the server's update count, the seeds),
// how the parameters were laid out (workers, and each server's shard), and every file with its
// size and CRC-32. Plain "key = value" text, so a user can read it, ending with the CRC-32 of
// everything above it. parse() accepts only what to_text() writes and explains anything else:
// it reads files that may be damaged or not a manifest at all (tests/fuzz_checkpoint.cpp).
#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hpcps/checkpoint/files.hpp"
#include "hpcps/error.hpp"

namespace hpcps::checkpoint {

// Raised by parse() and by the checks of a checkpoint against a run: `what` names the file.
class BadCheckpoint : public Error {
 public:
  using Error::Error;
};

// 2 adds data_order (a version 1 manifest has none: its runs used the global order); 3 adds the
// workers' top-k residuals (older manifests have none: their runs pushed dense gradients); 4 adds
// the workers' corrected-momentum velocities (older manifests have none: their runs had no
// momentum correction).
inline constexpr int format_version = 4;
inline constexpr const char* manifest_name = "MANIFEST";
inline constexpr std::size_t manifest_limit = std::size_t{1} << 24;

struct FileEntry {
  std::string name;
  std::uint64_t bytes = 0;
  std::uint32_t crc = 0;
};

struct Manifest {
  int version = format_version;
  // What was trained: a run resumes only a checkpoint of the same composition.
  std::string network;
  std::uint64_t parameters = 0;
  std::string backend, sync, optimizer, push_wire, pull_wire;
  std::vector<std::string> state_arrays;  // the update rule's per-parameter arrays, after the parameters
  // Where training stood after the clock the checkpoint was taken at.
  std::uint64_t clock = 0;  // clocks completed since the start of training
  std::uint64_t epoch = 0, batch = 0;  // the next clock is batch `batch` of epoch `epoch` (from 0)
  std::uint64_t clocks_per_epoch = 0, global_batch = 0, train_samples = 0;
  std::uint64_t server_updates = 0;  // what schedules and Adam's bias correction count
  std::uint64_t init_seed = 0, shuffle_seed = 0;
  std::string data_order;  // ps::DataOrder's name; empty in version 1 manifests, which were "global"
  // Layout: shard s of the parameters is shards[s] = [begin, end), in file shard_file(s).
  std::uint64_t workers = 0;
  std::uint64_t servers = 0;  // the layout's servers option (0: colocated)
  std::vector<std::pair<std::uint64_t, std::uint64_t>> shards;
  std::vector<FileEntry> files;
  // Top-k pushes: worker w's residual (what its pushes held back, `parameters` fp32 values) in
  // residuals[w], file residual_file(w); none for dense pushes.
  std::vector<FileEntry> residuals;
  // Compressed pushes with momentum correction: worker w's velocity (`parameters` fp32 values) in
  // velocities[w], file velocity_file(w); none without momentum correction.
  std::vector<FileEntry> velocities;
};

inline std::string shard_file(std::size_t s) { return fmt::format("shard-{:05}.bin", s); }
inline std::string residual_file(std::size_t w) { return fmt::format("residual-{:05}.bin", w); }
inline std::string velocity_file(std::size_t w) { return fmt::format("velocity-{:05}.bin", w); }

namespace detail {

// The single-valued fields, by key, in the order to_text() writes them.
struct TextField {
  const char* key;
  std::string Manifest::*member;
};
struct NumberField {
  const char* key;
  std::uint64_t Manifest::*member;
};
inline const TextField text_fields[] = {{"network", &Manifest::network},     {"backend", &Manifest::backend},
                                        {"sync", &Manifest::sync},           {"optimizer", &Manifest::optimizer},
                                        {"push_wire", &Manifest::push_wire}, {"pull_wire", &Manifest::pull_wire},
                                        {"data_order", &Manifest::data_order}};
inline const NumberField number_fields[] = {
    {"parameters", &Manifest::parameters},       {"clock", &Manifest::clock},
    {"epoch", &Manifest::epoch},                 {"batch", &Manifest::batch},
    {"clocks_per_epoch", &Manifest::clocks_per_epoch}, {"global_batch", &Manifest::global_batch},
    {"train_samples", &Manifest::train_samples}, {"server_updates", &Manifest::server_updates},
    {"init_seed", &Manifest::init_seed},         {"shuffle_seed", &Manifest::shuffle_seed},
    {"workers", &Manifest::workers},             {"servers", &Manifest::servers}};

}  // namespace detail

inline std::string to_text(const Manifest& m) {
  std::string t = fmt::format("hpcps-checkpoint {}\n", m.version);
  for (const auto& f : detail::text_fields) t += fmt::format("{} = {}\n", f.key, m.*f.member);
  for (const auto& a : m.state_arrays) t += fmt::format("state_array = {}\n", a);
  for (const auto& f : detail::number_fields) t += fmt::format("{} = {}\n", f.key, m.*f.member);
  for (const auto& [b, e] : m.shards) t += fmt::format("shard = {} {}\n", b, e);
  for (const auto& f : m.files) t += fmt::format("file = {} {} {:08x}\n", f.name, f.bytes, f.crc);
  for (const auto& f : m.residuals) t += fmt::format("residual = {} {} {:08x}\n", f.name, f.bytes, f.crc);
  for (const auto& f : m.velocities) t += fmt::format("velocity = {} {} {:08x}\n", f.name, f.bytes, f.crc);
  t += fmt::format("crc32 = {:08x}\n", crc32_update(0, t.data(), t.size()));
  return t;
}

namespace detail {

template <class T>
bool parse_number(std::string_view text, T& out, int base = 10) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, out, base);
  return ec == std::errc() && ptr == end && !text.empty();
}

// A file name inside a checkpoint: no path, nothing hidden.
inline bool plain_name(std::string_view name) {
  if (name.empty() || name.size() > 255 || name.front() == '.') return false;
  for (const char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

}  // namespace detail

template <class Field, std::size_t N>
const Field* find_field(const Field (&fields)[N], std::string_view key) {
  for (const auto& f : fields) {
    if (key == f.key) return &f;
  }
  return nullptr;
}

// `text` was read from `path` (named in every error).
inline Manifest parse(std::string_view text, const std::string& path) {
  const auto bad = [&path](const std::string& why) { return BadCheckpoint(fmt::format("{}: {}", path, why)); };
  constexpr std::string_view magic = "hpcps-checkpoint ";
  if (text.substr(0, magic.size()) != magic) throw bad("not an hpcps checkpoint manifest (no 'hpcps-checkpoint' header)");
  Manifest m;
  std::size_t at = 0, line_no = 0;
  bool sealed = false;
  std::vector<std::string_view> seen;
  while (at < text.size()) {
    const std::size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) throw bad(fmt::format("line {} is not terminated: the file is truncated", line_no + 1));
    const std::string_view line = text.substr(at, nl - at);
    const std::size_t line_start = at;
    at = nl + 1;
    ++line_no;
    if (sealed) throw bad(fmt::format("line {}: text after the crc32 line", line_no));
    if (line_no == 1) {
      if (!detail::parse_number(line.substr(magic.size()), m.version) || m.version < 1) {
        throw bad(fmt::format("line 1: '{}' is not a format version", line.substr(magic.size())));
      }
      if (m.version > format_version) {
        throw bad(fmt::format("written in checkpoint format version {}, newer than this hpcps reads ({}); resume it "
                              "with a newer hpcps",
                              m.version, format_version));
      }
      continue;
    }
    const std::size_t eq = line.find(" = ");
    if (eq == std::string_view::npos) throw bad(fmt::format("line {} is not 'key = value'", line_no));
    const std::string_view key = line.substr(0, eq), value = line.substr(eq + 3);
    const auto number = [&](auto& out) {
      if (!detail::parse_number(value, out)) throw bad(fmt::format("line {}: {} '{}' is not a number", line_no, key, value));
    };
    const bool repeatable = key == "state_array" || key == "shard" || key == "file" || key == "residual" ||
                            key == "velocity";
    if (!repeatable) {
      for (const auto& k : seen) {
        if (k == key) throw bad(fmt::format("line {}: {} given twice", line_no, key));
      }
      seen.push_back(key);
    }
    if (key == "crc32") {
      std::uint32_t crc = 0;
      if (!detail::parse_number(value, crc, 16)) throw bad(fmt::format("line {}: crc32 '{}' is not hexadecimal", line_no, value));
      const std::uint32_t actual = crc32_update(0, text.data(), line_start);
      if (crc != actual) {
        throw bad(fmt::format("checksum mismatch (the file says {:08x}, its contents give {:08x}): the manifest is "
                              "damaged",
                              crc, actual));
      }
      sealed = true;
    } else if (const auto* f = find_field(detail::text_fields, key)) {
      m.*f->member = value;
    } else if (const auto* f = find_field(detail::number_fields, key)) {
      number(m.*f->member);
    } else if (key == "state_array") {
      m.state_arrays.emplace_back(value);
    } else if (key == "shard") {
      const std::size_t sp = value.find(' ');
      std::uint64_t b = 0, e = 0;
      if (sp == std::string_view::npos || !detail::parse_number(value.substr(0, sp), b) ||
          !detail::parse_number(value.substr(sp + 1), e) || b > e) {
        throw bad(fmt::format("line {}: shard '{}' is not 'begin end'", line_no, value));
      }
      m.shards.emplace_back(b, e);
    } else if (key == "file" || key == "residual" || key == "velocity") {
      const std::size_t a = value.find(' '), b = a == std::string_view::npos ? a : value.find(' ', a + 1);
      FileEntry f;
      if (b == std::string_view::npos || !detail::plain_name(value.substr(0, a)) ||
          !detail::parse_number(value.substr(a + 1, b - a - 1), f.bytes) ||
          !detail::parse_number(value.substr(b + 1), f.crc, 16)) {
        throw bad(fmt::format("line {}: {} '{}' is not 'name bytes crc32'", line_no, key, value));
      }
      f.name = value.substr(0, a);
      (key == "file" ? m.files : key == "residual" ? m.residuals : m.velocities).push_back(std::move(f));
    } else {
      throw bad(fmt::format("line {}: unknown key '{}'", line_no, key));
    }
  }
  if (!sealed) throw bad("no crc32 line: the file is truncated");
  // The shards must tile [0, parameters), each in a file of the right size.
  if (m.workers < 1) throw bad(fmt::format("{} workers and {} servers is no layout", m.workers, m.servers));
  if (m.shards.empty() || m.files.size() != m.shards.size()) {
    throw bad(fmt::format("{} shards but {} files", m.shards.size(), m.files.size()));
  }
  std::uint64_t next = 0;
  const std::uint64_t arrays = 1 + m.state_arrays.size();
  for (std::size_t s = 0; s < m.shards.size(); ++s) {
    if (m.shards[s].first != next) throw bad(fmt::format("shard {} starts at {}, not at {}", s, m.shards[s].first, next));
    next = m.shards[s].second;
    if (m.files[s].name != shard_file(s)) throw bad(fmt::format("file {} is '{}', not '{}'", s, m.files[s].name, shard_file(s)));
    const std::uint64_t size = m.shards[s].second - m.shards[s].first;
    if (size > (std::uint64_t{1} << 40) || m.files[s].bytes != size * arrays * sizeof(float)) {
      throw bad(fmt::format("{} is listed with {} bytes; {} parameters and {} state arrays need {}", m.files[s].name,
                            m.files[s].bytes, size, arrays - 1, size * arrays * sizeof(float)));
    }
  }
  if (next != m.parameters) throw bad(fmt::format("the shards cover {} of the {} parameters", next, m.parameters));
  // One file per worker, `parameters` floats each, or none.
  const auto per_worker = [&](const std::vector<FileEntry>& list, const char* what, std::string (*name)(std::size_t)) {
    if (!list.empty() && list.size() != m.workers) {
      throw bad(fmt::format("{} {} files for {} workers", list.size(), what, m.workers));
    }
    for (std::size_t w = 0; w < list.size(); ++w) {
      if (list[w].name != name(w)) throw bad(fmt::format("{} {} is '{}', not '{}'", what, w, list[w].name, name(w)));
      if (list[w].bytes != m.parameters * sizeof(float)) {
        throw bad(fmt::format("{} is listed with {} bytes; {} parameters need {}", list[w].name, list[w].bytes,
                              m.parameters, m.parameters * sizeof(float)));
      }
    }
  };
  per_worker(m.residuals, "residual", residual_file);
  per_worker(m.velocities, "velocity", velocity_file);
  if (!m.velocities.empty() && m.residuals.empty()) {
    throw bad("velocity files without residual files: momentum correction is for compressed pushes");
  }
  if (m.clocks_per_epoch == 0 || m.batch >= m.clocks_per_epoch) {
    throw bad(fmt::format("batch position {} is outside an epoch of {} clocks", m.batch, m.clocks_per_epoch));
  }
  return m;
}

// Reads and checks the MANIFEST of checkpoint directory `dir`.
inline Manifest read_manifest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / manifest_name).string();
  if (!std::filesystem::is_directory(dir)) {
    throw BadCheckpoint(fmt::format("{}: not a checkpoint: no such directory", dir));
  }
  if (!std::filesystem::exists(path)) {
    throw BadCheckpoint(fmt::format("{}: not a checkpoint: it has no {} file", dir, manifest_name));
  }
  std::string text;
  try {
    text = read_small_file(path, manifest_limit);
  } catch (const Error& e) {
    throw BadCheckpoint(e.what());
  }
  return parse(text, path);
}

}  // namespace hpcps::checkpoint
