#pragma once
// Balanced contiguous partition of [0, total) into `parts` ranges. Used both to give each worker
// its slice of the training set and to give each server its slice of the flat parameter vector,
// so every rank must compute the same answer from the same three numbers, without communication.
#include <hpcps/error.hpp>

#include <fmt/format.h>

#include <cstddef>

namespace hpcps::data {

struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;
  constexpr std::size_t size() const noexcept { return end - begin; }
};

constexpr bool operator==(const Range& a, const Range& b) noexcept { return a.begin == b.begin && a.end == b.end; }
constexpr bool operator!=(const Range& a, const Range& b) noexcept { return !(a == b); }

namespace detail {

// Out of line so shard_range stays usable in constant expressions on its valid path.
[[noreturn]] inline void throw_bad_shard(std::size_t total, std::size_t part, std::size_t parts) {
  throw hpcps::Error(fmt::format("shard_range: part {} of {} parts is invalid (total {}); need parts >= 1 and "
                                 "part < parts",
                                 part, parts, total));
}

}  // namespace detail

// The first total % parts parts get one element more than the rest, so sizes differ by at most 1
// and part p's range is a closed formula (no prefix sum over the other parts).
constexpr Range shard_range(std::size_t total, std::size_t part, std::size_t parts) {
  if (parts == 0 || part >= parts) detail::throw_bad_shard(total, part, parts);
  std::size_t base = total / parts;
  std::size_t extra = total % parts;
  // part * base <= total and the min term <= extra, so neither sum can overflow.
  std::size_t begin = part * base + (part < extra ? part : extra);
  return Range{begin, begin + base + (part < extra ? 1 : 0)};
}

}  // namespace hpcps::data
