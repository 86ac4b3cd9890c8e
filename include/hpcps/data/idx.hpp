#pragma once
// Reader for IDX files (the MNIST / Fashion-MNIST container), plain or gzip-compressed.
// A training run fails minutes later and far from the cause if its input is silently wrong, so
// the reader checks every header field and insists the payload is exactly the size the header
// promises; each message starts with the path and gives the expected and found values.
#include <hpcps/error.hpp>

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace hpcps::data {

// Separate type so callers can tell bad input files from other failures, while a plain
// `catch (const hpcps::Error&)` still catches it.
class DataError : public hpcps::Error {
 public:
  using hpcps::Error::Error;
};

struct IdxArray {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> values;  // row-major, product(dims) elements
};

namespace detail {

inline std::vector<unsigned char> read_file_bytes(const std::string& path) {
  struct FileCloser {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  errno = 0;
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    int err = errno;
    throw DataError(fmt::format("{}: cannot open: {}", path, std::strerror(err)));
  }
  std::vector<unsigned char> bytes;
  unsigned char chunk[1 << 16];
  for (;;) {
    errno = 0;
    std::size_t got = std::fread(chunk, 1, sizeof chunk, file.get());
    bytes.insert(bytes.end(), chunk, chunk + got);
    if (got < sizeof chunk) {
      if (std::ferror(file.get())) {
        // A directory opens fine on Linux and only fails here, with EISDIR.
        int err = errno;
        throw DataError(fmt::format("{}: read error: {}", path, std::strerror(err)));
      }
      break;
    }
  }
  return bytes;
}

// Inflates in memory instead of gzopen/gzread because gzread passes a non-gzip file through
// unchanged and reports truncation inconsistently across zlib versions; inflate tells us exactly.
inline std::vector<unsigned char> gunzip(const std::string& path, const std::vector<unsigned char>& in) {
  std::vector<unsigned char> out;
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    throw DataError(fmt::format("{}: gzip: inflateInit2 failed: {}", path, zs.msg ? zs.msg : "unknown"));
  }
  struct InflateEnd {
    z_stream* zs;
    ~InflateEnd() { inflateEnd(zs); }
  } guard{&zs};

  std::size_t pos = 0;  // bytes of `in` consumed so far
  unsigned char buffer[1 << 16];
  for (;;) {
    // uInt is 32 bits; feed at most that much at a time so files over 4 GiB still work.
    std::size_t left = in.size() - pos;
    uInt feed = static_cast<uInt>(left < std::numeric_limits<uInt>::max() ? left : std::numeric_limits<uInt>::max());
    zs.next_in = const_cast<Bytef*>(in.data() + pos);  // zlib's API is not const-correct
    zs.avail_in = feed;
    zs.next_out = buffer;
    zs.avail_out = sizeof buffer;
    int rc = inflate(&zs, Z_NO_FLUSH);
    pos += feed - zs.avail_in;
    out.insert(out.end(), buffer, buffer + (sizeof buffer - zs.avail_out));
    if (rc == Z_STREAM_END) {
      if (pos == in.size()) break;
      // `gzip a b > c` writes several members; gunzip reads them all, so do we.
      if (in.size() - pos >= 2 && in[pos] == 0x1f && in[pos + 1] == 0x8b) {
        inflateReset(&zs);
        continue;
      }
      throw DataError(fmt::format("{}: gzip: {} bytes of garbage after the end of the compressed stream", path,
                                  in.size() - pos));
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && pos == in.size() && zs.avail_out != 0) {
      throw DataError(fmt::format("{}: gzip: corrupt or truncated stream: unexpected end of file after {} "
                                  "compressed bytes",
                                  path, in.size()));
    }
    throw DataError(fmt::format("{}: gzip: corrupt stream: {} (zlib error {})", path,
                                zs.msg ? zs.msg : zError(rc), rc));
  }
  return out;
}

inline const char* idx_type_name(unsigned type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "not an IDX type";
  }
}

}  // namespace detail

namespace detail {

// An IDX header's dimensions and size, checked field by field (type 0x08 only); shared by the
// whole-file reader below and the range reader (idx_records.hpp), so both say the same about a bad
// file. `bytes` holds the first `available` bytes of the (decompressed) file.
inline std::pair<std::vector<std::uint32_t>, std::size_t> parse_idx_header(const std::string& path,
                                                                           const unsigned char* bytes,
                                                                           std::size_t available) {
  if (available < 4) {
    throw DataError(fmt::format("{}: truncated header: expected at least 4 bytes, found {}", path, available));
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    throw DataError(fmt::format("{}: bad magic: expected first two bytes 00 00, found {:02x} {:02x} "
                                "(not an IDX file)",
                                path, bytes[0], bytes[1]));
  }
  unsigned type = bytes[2];
  if (type != 0x08) {
    throw DataError(fmt::format("{}: unsupported IDX type byte 0x{:02x} ({}); only 0x08 (unsigned byte) is "
                                "supported",
                                path, type, idx_type_name(type)));
  }
  unsigned ndims = bytes[3];
  if (ndims < 1 || ndims > 4) {
    throw DataError(fmt::format("{}: bad number of dimensions: expected 1..4, found {}", path, ndims));
  }
  std::size_t header = 4 + 4 * std::size_t{ndims};
  if (available < header) {
    throw DataError(fmt::format("{}: truncated header: expected {} bytes for {} dimensions, found {}", path,
                                header, ndims, available));
  }
  std::vector<std::uint32_t> dims(ndims);
  std::size_t count = 1;
  for (unsigned i = 0; i < ndims; ++i) {
    const unsigned char* p = bytes + 4 + 4 * i;
    std::uint32_t d = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
                      std::uint32_t{p[3]};
    if (d == 0) {
      throw DataError(fmt::format("{}: dimension {} of {} is 0; expected at least 1", path, i, ndims));
    }
    if (count > (std::numeric_limits<std::size_t>::max() - header) / d) {
      throw DataError(fmt::format("{}: product of dimensions overflows size_t at dimension {} (size {})", path,
                                  i, d));
    }
    count *= d;
    dims[i] = d;
  }
  return {std::move(dims), header};
}

// The payload must be exactly what the header promises.
inline void check_idx_payload(const std::string& path, std::size_t expected, std::size_t found) {
  if (found < expected) {
    throw DataError(fmt::format("{}: truncated: expected {} data bytes, found {}", path, expected, found));
  }
  if (found > expected) {
    throw DataError(fmt::format("{}: {} trailing bytes after the expected {} data bytes", path, found - expected,
                                expected));
  }
}

}  // namespace detail

inline IdxArray read_idx(const std::string& path) {
  std::vector<unsigned char> bytes = detail::read_file_bytes(path);
  // Decide by content, not by name: downloads are often renamed or already decompressed.
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) {
    bytes = detail::gunzip(path, bytes);
  }
  IdxArray array;
  std::size_t header = 0;
  std::tie(array.dims, header) = detail::parse_idx_header(path, bytes.data(), bytes.size());
  std::size_t count = 1;
  for (std::uint32_t d : array.dims) count *= d;
  detail::check_idx_payload(path, count, bytes.size() - header);
  array.values.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return array;
}

}  // namespace hpcps::data
