#pragma once
// NumPy's .npz: a zip archive of .npy arrays, which numpy.load reads without hpcps. Written
// uncompressed ("stored"), fp32 little-endian arrays in C order plus text as a 0-d unicode array;
// read back only in the form written here, every length checked against the file before it is
// used. No MPI, no model.
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "hpcps/checkpoint/files.hpp"
#include "hpcps/error.hpp"

namespace hpcps::io {

struct NpzArray {
  std::string name;                // the key numpy.load gives it
  std::vector<std::size_t> shape;  // C order
  std::vector<float> values;
};

namespace detail {

inline void put16(std::string& out, std::uint16_t v) { out += static_cast<char>(v & 0xff), out += static_cast<char>(v >> 8); }
inline void put32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
inline std::uint32_t get(const std::string& in, std::size_t at, int bytes) {
  std::uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(in[at + static_cast<std::size_t>(i)]);
  return v;
}

// A .npy file (format 1.0): magic, header length, a Python dict literal padded to 64 bytes, data.
inline std::string npy(const std::string& descr, const std::vector<std::size_t>& shape, const void* data, std::size_t bytes) {
  std::string dims;
  for (std::size_t d : shape) dims += fmt::format("{}, ", d);
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  put16(out, static_cast<std::uint16_t>(header.size()));
  out += header;
  out.append(static_cast<const char*>(data), bytes);
  return out;
}

}  // namespace detail

// Writes `arrays` and the text `description` (key "description") to `path`, durably.
inline void write_npz(const std::string& path, const std::vector<NpzArray>& arrays, const std::string& description) {
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& a : arrays) {
    entries.emplace_back(a.name + ".npy", detail::npy("<f4", a.shape, a.values.data(), a.values.size() * sizeof(float)));
  }
  // The text as UCS-4, numpy's unicode dtype.
  std::vector<std::uint32_t> text(description.begin(), description.end());
  entries.emplace_back("description.npy",
                       detail::npy(fmt::format("<U{}", std::max<std::size_t>(1, text.size())), {}, text.data(),
                                   text.size() * 4));
  std::string zip, central;
  for (const auto& entry : entries) {
    // Named references, not a structured binding: a lambda below captures them, which C++17
    // allows only for variables (nvcc warns, C++20 made it legal).
    const std::string& name = entry.first;
    const std::string& data = entry.second;
    if (data.size() >= 0xffffffffu || zip.size() >= 0xffffffffu) {
      throw Error(fmt::format("{}: more than 4 GiB; this writer makes no ZIP64 archives", path));
    }
    const std::uint32_t crc = checkpoint::crc32_update(0, data.data(), data.size());
    const auto offset = static_cast<std::uint32_t>(zip.size());
    const auto record = [&](std::string& out, bool local) {
      detail::put32(out, local ? 0x04034b50 : 0x02014b50);
      if (!local) detail::put16(out, 20);  // made by
      detail::put16(out, 20);              // needed to extract
      detail::put16(out, 0);               // flags
      detail::put16(out, 0);               // stored
      detail::put16(out, 0);               // time
      detail::put16(out, 0x21);            // date: 1980-01-01
      detail::put32(out, crc);
      detail::put32(out, static_cast<std::uint32_t>(data.size()));
      detail::put32(out, static_cast<std::uint32_t>(data.size()));
      detail::put16(out, static_cast<std::uint16_t>(name.size()));
      detail::put16(out, 0);  // extra
      if (!local) {
        detail::put16(out, 0);  // comment
        detail::put16(out, 0);  // disk
        detail::put16(out, 0);  // internal attributes
        detail::put32(out, 0);  // external attributes
        detail::put32(out, offset);
      }
      out += name;
    };
    record(zip, true);
    zip += data;
    record(central, false);
  }
  const auto central_offset = static_cast<std::uint32_t>(zip.size());
  zip += central;
  detail::put32(zip, 0x06054b50);
  detail::put16(zip, 0);
  detail::put16(zip, 0);
  detail::put16(zip, static_cast<std::uint16_t>(entries.size()));
  detail::put16(zip, static_cast<std::uint16_t>(entries.size()));
  detail::put32(zip, static_cast<std::uint32_t>(central.size()));
  detail::put32(zip, central_offset);
  detail::put16(zip, 0);
  checkpoint::DurableWriter out(path);
  out.write(zip.data(), zip.size());
  out.finish();
}

// Reads an archive written by write_npz: the fp32 arrays in order, and the description.
inline std::vector<NpzArray> read_npz(const std::string& path, std::string* description = nullptr) {
  const std::string zip = checkpoint::read_small_file(path, std::size_t{1} << 34);
  const auto bad = [&path](const std::string& why) { return Error(fmt::format("{}: {}", path, why)); };
  std::vector<NpzArray> arrays;
  std::size_t at = 0;
  while (at + 4 <= zip.size() && detail::get(zip, at, 4) == 0x04034b50) {
    if (at + 30 > zip.size()) throw bad("truncated entry header");
    const std::uint32_t method = detail::get(zip, at + 8, 2), crc = detail::get(zip, at + 14, 4);
    const std::size_t size = detail::get(zip, at + 18, 4), name_len = detail::get(zip, at + 26, 2),
                      extra = detail::get(zip, at + 28, 2);
    if (method != 0) throw bad("a compressed entry (this reader takes the uncompressed archives --save-model writes)");
    const std::size_t data_at = at + 30 + name_len + extra;
    if (data_at > zip.size() || size > zip.size() - data_at) throw bad("an entry runs past the end of the file");
    std::string name = zip.substr(at + 30, name_len);
    const std::string npy = zip.substr(data_at, size);
    if (checkpoint::crc32_update(0, npy.data(), npy.size()) != crc) throw bad(fmt::format("{}: checksum mismatch", name));
    at = data_at + size;
    if (name.size() < 5 || name.compare(name.size() - 4, 4, ".npy") != 0) throw bad(fmt::format("{}: not a .npy entry", name));
    name.resize(name.size() - 4);
    if (npy.size() < 10 || npy.compare(0, 6, "\x93NUMPY") != 0) throw bad(fmt::format("{}: not a .npy array", name));
    const std::size_t header_len = detail::get(npy, 8, 2);
    if (10 + header_len > npy.size()) throw bad(fmt::format("{}: truncated .npy header", name));
    const std::string header = npy.substr(10, header_len);
    const std::size_t shape_at = header.find("'shape': (");
    const std::size_t shape_end = shape_at == std::string::npos ? shape_at : header.find(')', shape_at);
    if (shape_end == std::string::npos) throw bad(fmt::format("{}: .npy header without a shape", name));
    const std::size_t payload = npy.size() - 10 - header_len;
    if (name == "description" && header.find("'<U") != std::string::npos) {
      if (description) {
        description->clear();
        for (std::size_t i = 0; i + 4 <= payload; i += 4) *description += static_cast<char>(detail::get(npy, 10 + header_len + i, 4));
      }
      continue;
    }
    if (header.find("'descr': '<f4'") == std::string::npos || header.find("'fortran_order': False") == std::string::npos) {
      throw bad(fmt::format("{}: not a C-ordered float32 array", name));
    }
    NpzArray a;
    a.name = name;
    std::size_t count = 1;
    for (std::size_t p = shape_at + 10; p < shape_end;) {
      while (p < shape_end && (header[p] == ' ' || header[p] == ',')) ++p;
      if (p >= shape_end) break;
      std::size_t d = 0;
      const std::size_t begin = p;
      while (p < shape_end && header[p] >= '0' && header[p] <= '9' && d < (std::size_t{1} << 40)) d = d * 10 + static_cast<std::size_t>(header[p++] - '0');
      if (p == begin) throw bad(fmt::format("{}: unreadable shape", name));
      a.shape.push_back(d);
      count *= d;
      if (count > payload) throw bad(fmt::format("{}: shape larger than its data", name));
    }
    if (count * sizeof(float) != payload) throw bad(fmt::format("{}: {} bytes of data for {} floats", name, payload, count));
    a.values.resize(count);
    std::memcpy(a.values.data(), npy.data() + 10 + header_len, payload);
    arrays.push_back(std::move(a));
  }
  if (arrays.empty()) throw bad("not an .npz archive of float32 arrays");
  return arrays;
}

}  // namespace hpcps::io
