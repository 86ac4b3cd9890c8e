#pragma once
// The network concept (docs/architecture.md#the-network-concept), as traits. Split in two so a
// composition can say which half is missing: the shape of the parameter vector, and the
// computation on a given backend.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "hpcps/nn/batch_stats.hpp"

namespace hpcps::nn {
namespace detail {

template <class N, class = void>
struct has_shape : std::false_type {};
template <class N>
struct has_shape<N, std::void_t<decltype(std::size_t{std::declval<const N&>().parameter_count()}),
                                decltype(std::size_t{std::declval<const N&>().input_size()}),
                                decltype(std::size_t{std::declval<const N&>().output_size()}),
                                decltype(std::declval<const N&>().initialize((float*)nullptr, std::uint64_t{}))>>
    : std::true_type {};

template <class N, class B, class = void>
struct computes_on : std::false_type {};
template <class N, class B>
struct computes_on<N, B,
                   std::void_t<typename N::template Workspace<B>,
                               decltype(std::declval<const N&>().make_workspace(std::declval<const B&>(), std::size_t{})),
                               decltype(BatchStats{std::declval<const N&>().gradient(
                                   std::declval<const B&>(), std::declval<typename N::template Workspace<B>&>(),
                                   (const float*)nullptr, (const float*)nullptr, (const std::int32_t*)nullptr,
                                   std::size_t{}, (float*)nullptr)}),
                               decltype(BatchStats{std::declval<const N&>().evaluate(
                                   std::declval<const B&>(), std::declval<typename N::template Workspace<B>&>(),
                                   (const float*)nullptr, (const float*)nullptr, (const std::int32_t*)nullptr,
                                   std::size_t{})})>> : std::true_type {};

// The optional half: gradient(..., grad, ready) calls ready(begin) as soon as grad[begin, P) is
// final, so a worker can push the last layers' slices while the first layers still backpropagate.
struct GradientReadyProbe {
  void operator()(std::size_t) const {}
};
template <class N, class B, class = void>
struct reports_progress : std::false_type {};
template <class N, class B>
struct reports_progress<N, B,
                        std::void_t<decltype(std::declval<const N&>().gradient(
                            std::declval<const B&>(), std::declval<typename N::template Workspace<B>&>(),
                            (const float*)nullptr, (const float*)nullptr, (const std::int32_t*)nullptr, std::size_t{},
                            (float*)nullptr, GradientReadyProbe{}))>> : std::true_type {};

}  // namespace detail

// parameter_count(), input_size(), output_size(), initialize(float*, uint64_t).
template <class N>
inline constexpr bool is_network_v = detail::has_shape<N>::value;

// Workspace<B>, make_workspace(B, max_batch), gradient(...), evaluate(...) for backend B.
template <class N, class B>
inline constexpr bool is_network_for_v = detail::computes_on<N, B>::value;

// Optional: gradient(backend, ws, params, inputs, labels, count, grad, ready) with ready(begin)
// called, in decreasing `begin`, once grad[begin, parameter_count()) will not change again in this
// call (docs/architecture.md#the-network-concept). A worker uses it to overlap its push with the
// rest of the backward pass; a network without it is pushed after its whole gradient.
template <class N, class B>
inline constexpr bool reports_gradient_progress_v = detail::reports_progress<N, B>::value;

}  // namespace hpcps::nn
