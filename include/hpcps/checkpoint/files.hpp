#pragma once
// The file operations a checkpoint needs to survive a crash at any instant: every byte written
// and fsync'd before a checkpoint is published, publication by one rename of its directory (then
// an fsync of the parent, so the rename itself is on disk), and reads that name the file and the
// reason when they fail. A CRC-32 (zlib's) of every file written lets a reader tell a flipped byte
// from a good file. POSIX only; no MPI.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "hpcps/error.hpp"

namespace hpcps::checkpoint {

// CRC-32 of `bytes` bytes continuing from `crc` (0 to start), in chunks zlib's uInt can count.
inline std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (bytes > 0) {
    const auto n = static_cast<uInt>(std::min<std::size_t>(bytes, std::size_t{1} << 30));
    c = ::crc32(c, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<std::uint32_t>(c);
}

// One file written from start to end, then flushed to the disk by finish(). A writer destroyed
// before finish() closes the file and leaves it as it is: only a published directory counts.
class DurableWriter {
 public:
  explicit DurableWriter(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create it");
  }
  DurableWriter(const DurableWriter&) = delete;
  DurableWriter& operator=(const DurableWriter&) = delete;
  ~DurableWriter() {
    if (fd_ >= 0) ::close(fd_);
  }

  void write(const void* data, std::size_t bytes) {
    crc_ = crc32_update(crc_, data, bytes);
    const auto* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::write(fd_, p, std::min<std::size_t>(bytes, std::size_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(fmt::format("cannot write {} more bytes after {}", bytes, written_));
      p += n;
      bytes -= static_cast<std::size_t>(n);
      written_ += static_cast<std::size_t>(n);
    }
  }
  // fsync, then close: once this returns, the bytes survive a crash of the machine.
  void finish() {
    if (::fsync(fd_) != 0) fail("fsync failed");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close failed");
  }
  std::size_t bytes() const { return written_; }
  std::uint32_t crc() const { return crc_; }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("checkpoint file {}: {}: {}", path_, what, std::strerror(errno)));
  }
  std::string path_;
  int fd_ = -1;
  std::size_t written_ = 0;
  std::uint32_t crc_ = 0;
};

// fsync of a directory: makes the names created, renamed or removed in it durable.
inline void sync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("checkpoint directory {}: cannot open it: {}", path, std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error(fmt::format("checkpoint directory {}: fsync failed: {}", path, std::strerror(err)));
}

// Renames `from` to `to` (same file system) and makes the rename durable.
inline void publish(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    throw Error(fmt::format("checkpoint: cannot rename {} to {}: {}", from, to, std::strerror(errno)));
  }
  sync_directory(std::filesystem::path(to).parent_path().string());
}

// Bytes of the file at `path`; throws naming it when it cannot be read.
inline std::size_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(fmt::format("{}: {}", path, std::strerror(errno)));
  return static_cast<std::size_t>(st.st_size);
}

// A file opened for reading, read by byte ranges.
class ReadFile {
 public:
  explicit ReadFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw Error(fmt::format("{}: cannot open it: {}", path_, std::strerror(errno)));
  }
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  ~ReadFile() { ::close(fd_); }

  // Exactly `bytes` bytes at `offset`, or an error naming the file (a truncated file ends early).
  void read(std::size_t offset, void* out, std::size_t bytes) const {
    auto* p = static_cast<char*>(out);
    while (bytes > 0) {
      const ssize_t n = ::pread(fd_, p, std::min<std::size_t>(bytes, std::size_t{1} << 30), static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error(fmt::format("{}: read failed at byte {}: {}", path_, offset, std::strerror(errno)));
      if (n == 0) throw Error(fmt::format("{}: ends at byte {}, {} bytes short", path_, offset, bytes));
      p += n;
      bytes -= static_cast<std::size_t>(n);
      offset += static_cast<std::size_t>(n);
    }
  }
  // CRC-32 of the whole file, read in blocks.
  std::uint32_t crc() const {
    std::string block(std::size_t{1} << 20, '\0');
    std::uint32_t c = 0;
    for (std::size_t offset = 0;;) {
      const ssize_t n = ::pread(fd_, block.data(), block.size(), static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error(fmt::format("{}: read failed at byte {}: {}", path_, offset, std::strerror(errno)));
      if (n == 0) return c;
      c = crc32_update(c, block.data(), static_cast<std::size_t>(n));
      offset += static_cast<std::size_t>(n);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// The whole file as a string, at most `limit` bytes (a manifest is small; a huge file is not one).
inline std::string read_small_file(const std::string& path, std::size_t limit) {
  const std::size_t size = file_size(path);
  if (size > limit) throw Error(fmt::format("{}: {} bytes, more than a manifest ever has ({})", path, size, limit));
  std::string text(size, '\0');
  ReadFile(path).read(0, text.data(), size);
  return text;
}

// Bytes free for an unprivileged writer on the file system of `path`.
inline std::uint64_t free_bytes(const std::string& path) {
  struct statvfs fs {};
  if (::statvfs(path.c_str(), &fs) != 0) return 0;
  return static_cast<std::uint64_t>(fs.f_bavail) * static_cast<std::uint64_t>(fs.f_frsize);
}

}  // namespace hpcps::checkpoint
