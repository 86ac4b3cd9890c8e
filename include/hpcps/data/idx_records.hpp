#pragma once
// Reads the records [begin, end) of an IDX file (a record: one sample, dims[1] x ... bytes) straight
// into memory the caller gives, such as a node's shared window. read_idx (idx.hpp) holds the whole
// file twice on the way (compressed, then inflated) before the caller converts it; this reader
// holds 64 KiB, so loading a set costs its own size and nothing more, and a range costs its size.
//
// A plain file is read from the range's offset, none of the rest. A gzip file cannot be entered
// in the middle: the reader inflates the records before the range and drops them (64 KiB at a
// time), and stops after the range. So a node that holds the last tenth of a compressed set still
// inflates the nine tenths before it; gunzip a large set once to let every node read only its part.
#include <hpcps/data/idx.hpp>

#include <fmt/format.h>
#include <zlib.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace hpcps::data {

// What an IDX file's header says, without its data.
struct IdxShape {
  std::vector<std::uint32_t> dims;  // dims[0]: the records
  std::size_t header_bytes = 0;
  bool gzip = false;

  std::size_t records() const { return dims.empty() ? 0 : dims[0]; }
  std::size_t record_bytes() const {
    std::size_t n = 1;
    for (std::size_t i = 1; i < dims.size(); ++i) n *= dims[i];
    return dims.empty() ? 0 : n;
  }
};

namespace detail {

// A file read front to back, inflated on the way when it is gzip (decided by content, as read_idx).
class IdxStream {
 public:
  explicit IdxStream(const std::string& path) : path_(path) {
    errno = 0;
    file_.reset(std::fopen(path.c_str(), "rb"));
    if (!file_) {
      const int err = errno;
      throw DataError(fmt::format("{}: cannot open: {}", path, std::strerror(err)));
    }
    unsigned char magic[2] = {0, 0};
    const std::size_t got = fill_raw(magic, 2);
    gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip_) {
      in_.resize(1 << 16);
      std::copy(magic, magic + 2, in_.begin());
      zs_ = std::make_unique<z_stream>();
      *zs_ = z_stream{};
      if (inflateInit2(zs_.get(), 16 + MAX_WBITS) != Z_OK) {
        zs_.reset();
        throw DataError(fmt::format("{}: gzip: inflateInit2 failed", path));
      }
      zs_->next_in = in_.data();
      zs_->avail_in = 2;
    } else {
      pending_.assign(magic, magic + got);
    }
  }
  IdxStream(const IdxStream&) = delete;
  IdxStream& operator=(const IdxStream&) = delete;
  ~IdxStream() {
    if (zs_) inflateEnd(zs_.get());
  }

  bool gzip() const { return gzip_; }
  std::size_t position() const { return position_; }

  // Bytes of the (inflated) file: `n`, or fewer at its end.
  std::size_t read(unsigned char* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n && !pending_.empty()) {  // the magic bytes of a plain file
      out[done++] = pending_.front();
      pending_.erase(pending_.begin());
    }
    done += gzip_ ? inflate_into(out + done, n - done) : fill_raw(out + done, n - done);
    position_ += done;
    return done;
  }

  // Moves `n` bytes on: a seek in a plain file, inflating and dropping them in a gzip one.
  std::size_t skip(std::size_t n) {
    if (!gzip_ && pending_.empty() && n > 0) {
      struct stat info {};
      if (fstat(fileno(file_.get()), &info) != 0) throw DataError(fmt::format("{}: cannot stat", path_));
      const std::size_t size = static_cast<std::size_t>(info.st_size);
      const std::size_t to = std::min(size, position_ + n);
      if (fseeko(file_.get(), static_cast<off_t>(to), SEEK_SET) != 0) {
        const int err = errno;
        throw DataError(fmt::format("{}: cannot seek to byte {}: {}", path_, to, std::strerror(err)));
      }
      const std::size_t moved = to - position_;
      position_ = to;
      return moved;
    }
    unsigned char scratch[1 << 16];
    std::size_t done = 0;
    while (done < n) {
      const std::size_t got = read(scratch, std::min(n - done, sizeof scratch));
      if (got == 0) break;
      done += got;
    }
    return done;
  }

  // Bytes of a plain file in all (its size, from fstat): checks the payload without reading it.
  std::size_t plain_size() const {
    struct stat info {};
    if (fstat(fileno(file_.get()), &info) != 0) throw DataError(fmt::format("{}: cannot stat", path_));
    return static_cast<std::size_t>(info.st_size);
  }

 private:
  struct Closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };

  std::size_t fill_raw(unsigned char* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      errno = 0;
      const std::size_t got = std::fread(out + done, 1, n - done, file_.get());
      done += got;
      if (got == 0) {
        if (std::ferror(file_.get())) {
          const int err = errno;  // a directory opens on Linux and fails here, with EISDIR
          throw DataError(fmt::format("{}: read error: {}", path_, std::strerror(err)));
        }
        break;
      }
    }
    return done;
  }

  // The same checks as gunzip (idx.hpp): several members are read in turn, anything else after the
  // end of the stream and a stream cut short are errors.
  std::size_t inflate_into(unsigned char* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n && !finished_) {
      if (zs_->avail_in == 0) {
        zs_->next_in = in_.data();
        zs_->avail_in = static_cast<uInt>(fill_raw(in_.data(), in_.size()));
        compressed_ += zs_->avail_in;
        input_ended_ = zs_->avail_in == 0;
      }
      const std::size_t want = std::min<std::size_t>(n - done, std::numeric_limits<uInt>::max());
      zs_->next_out = out + done;
      zs_->avail_out = static_cast<uInt>(want);
      const int rc = inflate(zs_.get(), Z_NO_FLUSH);
      done += want - zs_->avail_out;
      if (rc == Z_STREAM_END) {
        if (zs_->avail_in == 0) {
          zs_->next_in = in_.data();
          zs_->avail_in = static_cast<uInt>(fill_raw(in_.data(), in_.size()));
          compressed_ += zs_->avail_in;
        }
        if (zs_->avail_in == 0) {
          finished_ = true;
        } else if (zs_->avail_in >= 2 && zs_->next_in[0] == 0x1f && zs_->next_in[1] == 0x8b) {
          inflateReset(zs_.get());  // `gzip a b > c` writes several members
        } else {
          throw DataError(fmt::format("{}: gzip: garbage after the end of the compressed stream", path_));
        }
        continue;
      }
      if (rc == Z_OK) continue;
      if (rc == Z_BUF_ERROR && input_ended_) {
        throw DataError(fmt::format("{}: gzip: corrupt or truncated stream: unexpected end of file after {} "
                                    "compressed bytes",
                                    path_, compressed_ + 2));
      }
      if (rc == Z_BUF_ERROR) continue;  // needs more input: the next round reads it
      throw DataError(fmt::format("{}: gzip: corrupt stream: {} (zlib error {})", path_,
                                  zs_->msg ? zs_->msg : zError(rc), rc));
    }
    return done;
  }

  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
  bool gzip_ = false;
  std::vector<unsigned char> pending_;  // bytes read to tell gzip from plain, not yet handed out
  std::vector<unsigned char> in_;       // compressed input
  std::unique_ptr<z_stream> zs_;
  bool finished_ = false, input_ended_ = false;
  std::size_t position_ = 0, compressed_ = 0;
};

inline IdxShape read_shape(const std::string& path, IdxStream& stream) {
  unsigned char header[4 + 4 * 4] = {};
  std::size_t got = stream.read(header, 4);
  if (got == 4 && header[3] >= 1 && header[3] <= 4) got += stream.read(header + 4, 4 * std::size_t{header[3]});
  IdxShape shape;
  std::tie(shape.dims, shape.header_bytes) = parse_idx_header(path, header, got);
  shape.gzip = stream.gzip();
  if (!shape.gzip) {  // a plain file's payload is checked whole from its size, without reading it
    std::size_t count = shape.records() * shape.record_bytes();
    check_idx_payload(path, count, stream.plain_size() - shape.header_bytes);
  }
  return shape;
}

}  // namespace detail

// The header alone (for a gzip file, only its first bytes are inflated). A plain file's size must
// match the header; a gzip file's payload is checked as it is read.
inline IdxShape read_idx_shape(const std::string& path) {
  detail::IdxStream stream(path);
  return detail::read_shape(path, stream);
}

// Records [begin, end) of `path` into `out` (at least (end - begin) * record_bytes() bytes); the
// file must still have the shape `expected` (read before, e.g. on another rank). Reading up to the
// last record also checks that nothing follows it.
inline void read_idx_records(const std::string& path, const IdxShape& expected, std::size_t begin, std::size_t end,
                             std::uint8_t* out) {
  if (begin > end || end > expected.records()) {
    throw DataError(fmt::format("{}: records [{}, {}) are not inside the file's {} records", path, begin, end,
                                expected.records()));
  }
  detail::IdxStream stream(path);
  const IdxShape shape = detail::read_shape(path, stream);
  if (shape.dims != expected.dims) {
    throw DataError(fmt::format("{}: the file changed while it was being read: its header now says {} records of "
                                "{} bytes, before {} of {}",
                                path, shape.records(), shape.record_bytes(), expected.records(),
                                expected.record_bytes()));
  }
  const std::size_t record = shape.record_bytes();
  const std::size_t payload = shape.records() * record;
  const std::size_t skipped = stream.skip(begin * record);
  const std::size_t want = (end - begin) * record;
  const std::size_t got = skipped == begin * record ? stream.read(out, want) : 0;
  if (got < want) detail::check_idx_payload(path, payload, skipped + got);  // throws: truncated
  if (end == shape.records() && shape.gzip) {
    unsigned char extra[1 << 12];
    std::size_t trailing = 0;
    for (std::size_t n; (n = stream.read(extra, sizeof extra)) > 0;) trailing += n;
    detail::check_idx_payload(path, payload, payload + trailing);
  }
}

}  // namespace hpcps::data
