#pragma once
// The synchronization-strategy concept (docs/architecture.md#the-synchronization-concept).
#include <cstddef>
#include <type_traits>
#include <utility>

namespace hpcps::sync {
namespace detail {

template <class S, class = void>
struct is_sync : std::false_type {};
template <class S>
struct is_sync<S, std::void_t<decltype(S::name), decltype(bool{S::aggregates}),
                              decltype(std::size_t{std::declval<const S&>().staleness()})>> : std::true_type {};

}  // namespace detail

// name, aggregates (bool), staleness() -> size_t.
template <class S>
inline constexpr bool is_sync_v = detail::is_sync<S>::value;

}  // namespace hpcps::sync
