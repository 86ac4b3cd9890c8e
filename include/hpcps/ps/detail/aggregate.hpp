#pragma once
// The server's arithmetic for one piece of its shard: sum the contributors' gradient slices in
// worker-rank order and apply the update rule, block by block, so the sum of a block is still in
// cache when the rule reads it. Memory traffic is then the minimum: each slice read once, the
// parameters and the rule's state read and written once; the sum never goes to memory.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hpcps/ps/wire_format.hpp"

namespace hpcps::ps::detail {

// Floats per block: 64 KiB of sum stays in L2 beside the streams that pass through it, and the
// per-block call of the update rule (a schedule lookup, Adam's bias corrections) is amortised
// over 16k elements.
inline constexpr std::size_t aggregate_block = 16384;

// params[0, n) <- rule(params, sum over slices[0..count) of slices[c][0, n), scale); `offset` is
// where params[0] sits in the shard (the rule's state is indexed by it); `block` holds
// aggregate_block floats. Addition order is slices[0] + slices[1] + ... for every element, so the
// result does not depend on the block size or on how the shard is cut into pieces.
template <class Optimizer, class State>
void aggregate_and_step(const Optimizer& optimizer, State& state, std::size_t offset, float* params,
                        const float* const* slices, std::size_t count, float scale, std::size_t n, std::size_t step,
                        float* block) {
  if (count == 0 || n == 0) return;
  if (count == 1) {
    // A lone contributor's slice is the sum: the rule reads it where it arrived.
    optimizer.step(state, offset, params, slices[0], scale, n, step);
    return;
  }
  for (std::size_t begin = 0; begin < n; begin += aggregate_block) {
    const std::size_t m = std::min(aggregate_block, n - begin);
    const float* a = slices[0] + begin;
    const float* b = slices[1] + begin;
#pragma omp simd
    for (std::size_t i = 0; i < m; ++i) block[i] = a[i] + b[i];
    for (std::size_t c = 2; c < count; ++c) {
      const float* s = slices[c] + begin;
#pragma omp simd
      for (std::size_t i = 0; i < m; ++i) block[i] += s[i];
    }
    optimizer.step(state, offset + begin, params + begin, block, scale, m, step);
  }
}

// The same for slices that arrived in a 16-bit wire format (ps/wire_format.hpp): each element is
// converted to fp32 as the sum reads it, and the sum, its order and the update stay fp32, so the
// only difference from fp32 slices is the rounding the wire did. A lone contributor's slice is
// converted into `block` (the rule cannot read 16-bit values).
template <class Codec, class Optimizer, class State>
void aggregate_and_step(Codec, const Optimizer& optimizer, State& state, std::size_t offset, float* params,
                        const std::uint16_t* const* slices, std::size_t count, float scale, std::size_t n,
                        std::size_t step, float* block) {
  if (count == 0 || n == 0) return;
  for (std::size_t begin = 0; begin < n; begin += aggregate_block) {
    const std::size_t m = std::min(aggregate_block, n - begin);
    const std::uint16_t* a = slices[0] + begin;
#pragma omp simd
    for (std::size_t i = 0; i < m; ++i) block[i] = Codec::decode(a[i]);
    for (std::size_t c = 1; c < count; ++c) {
      const std::uint16_t* s = slices[c] + begin;
#pragma omp simd
      for (std::size_t i = 0; i < m; ++i) block[i] += Codec::decode(s[i]);
    }
    optimizer.step(state, offset + begin, params + begin, block, scale, m, step);
  }
}

// Dispatches a run-time 16-bit WireFormat to the loop compiled for it, once per piece.
template <class Optimizer, class State>
void aggregate_and_step(WireFormat format, const Optimizer& optimizer, State& state, std::size_t offset, float* params,
                        const std::uint16_t* const* slices, std::size_t count, float scale, std::size_t n,
                        std::size_t step, float* block) {
  wire::with_codec(format, [&](auto codec) {
    aggregate_and_step(codec, optimizer, state, offset, params, slices, count, scale, n, step, block);
  });
}

}  // namespace hpcps::ps::detail
