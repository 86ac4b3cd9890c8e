#pragma once
// The update-rule concept (docs/architecture.md#the-optimizer-concept).
#include <cstddef>
#include <type_traits>
#include <utility>

namespace hpcps::optim {
namespace detail {

template <class O, class = void>
struct is_optimizer : std::false_type {};
template <class O>
struct is_optimizer<O, std::void_t<typename O::State, decltype(O::name),
                                   decltype(std::declval<const O&>().make_state(std::size_t{})),
                                   decltype(std::declval<const O&>().step(std::declval<typename O::State&>(),
                                                                          std::size_t{}, (float*)nullptr,
                                                                          (const float*)nullptr, 1.0f, std::size_t{},
                                                                          std::size_t{}))>>
    : std::true_type {};

}  // namespace detail

// State, name, make_state(shard_size), step(state, offset, params, grad_sum, scale, n, step_count)
// on elements [offset, offset + n) of the shard (params and grad_sum point at element offset); the
// mean gradient is grad_sum * scale, so a server hands over what it summed without a scaling pass,
// and it can apply its shard piece by piece as the pieces arrive.
template <class O>
inline constexpr bool is_optimizer_v = detail::is_optimizer<O>::value;

}  // namespace hpcps::optim
