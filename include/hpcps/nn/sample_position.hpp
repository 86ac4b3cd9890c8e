#pragma once
// Where a gradient's samples sit in training: the step (the clock, counted from the start of
// training) and the index of the first sample within that step's global minibatch. A network whose
// layers draw random numbers (nn::Dropout) takes it, so the numbers depend on the samples' place
// in training, not on which worker computes them or how often a workspace was used: a run repeats
// on another number of workers and after a resume from a checkpoint.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace hpcps::nn {

struct SamplePosition {
  std::uint64_t step = 0;
  std::size_t first_sample = 0;
};

namespace detail {
template <class N, class W, class = void>
struct takes_sample_position : std::false_type {};
template <class N, class W>
struct takes_sample_position<N, W,
                             std::void_t<decltype(std::declval<const N&>().set_sample_position(
                                 std::declval<W&>(), SamplePosition{}))>> : std::true_type {};
}  // namespace detail

// Optional member of the network concept: set_sample_position(Workspace<B>&, SamplePosition),
// called by ps::train before each gradient.
template <class N, class B>
inline constexpr bool takes_sample_position_v =
    detail::takes_sample_position<N, typename N::template Workspace<B>>::value;

// Tells `net` where the next gradient's samples are, if it wants to know.
template <class N, class Workspace>
void set_sample_position(const N& net, Workspace& ws, SamplePosition position) {
  if constexpr (detail::takes_sample_position<N, Workspace>::value) net.set_sample_position(ws, position);
}

}  // namespace hpcps::nn
