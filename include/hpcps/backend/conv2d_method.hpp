#pragma once
// Which convolution method a backend runs nn::Conv2d with, chosen by the backend's type: a backend
// names its own as `using conv2d_method_type = ...;` (backend::BasicCpu: oneDNN), any other runs
// im2col + GEMM on its primitives (the Thrust backends). A method is constructed once per layer
// workspace, `Method(backend, Window2d, out_channels, max_batch)`, and offers
// `forward(backend, params, x, count, y)`, `forward_activated<Act>(backend, params, x, count, y)`
// (y = Act(conv(x))) and `backward(backend, params, x, dy, count, dx, grad)`. A method may also
// fuse a max pooling after the activation: `pools_after<Act>()`, `forward_max_pooled<Act>(backend,
// params, x, count, pool, y)` and `backward_max_pooled<Act>(backend, params, x, y, dy, count, pool,
// dx, grad)`, with y and dy the pooling's output and its gradient (backend::BasicCpu's oneDNN method).
#include <type_traits>

#include "hpcps/backend/conv2d_im2col.hpp"

namespace hpcps::backend {

template <class Backend, class = void>
struct conv2d_method {
  using type = Im2colConv2d<Backend>;
};
template <class Backend>
struct conv2d_method<Backend, std::void_t<typename Backend::conv2d_method_type>> {
  using type = typename Backend::conv2d_method_type;
};
template <class Backend>
using conv2d_method_t = typename conv2d_method<Backend>::type;

// Whether convolution method M runs activation Act and a max pooling after the convolution itself.
template <class M, class Act, class = void>
struct conv2d_pools_after : std::false_type {};
template <class M, class Act>
struct conv2d_pools_after<M, Act, std::void_t<decltype(M::template pools_after<Act>())>>
    : std::bool_constant<M::template pools_after<Act>()> {};
template <class M, class Act>
inline constexpr bool conv2d_pools_after_v = conv2d_pools_after<M, Act>::value;

// Whether convolution method M can keep its output channel-blocked (the members above).
template <class M, class = void>
struct conv2d_hands_blocked : std::false_type {};
template <class M>
struct conv2d_hands_blocked<M, std::void_t<decltype(ChannelBlocked{std::declval<const M&>().blocked_output()})>>
    : std::true_type {};
template <class M>
inline constexpr bool conv2d_hands_blocked_v = conv2d_hands_blocked<M>::value;

}  // namespace hpcps::backend
