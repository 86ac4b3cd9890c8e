#pragma once
// State in the parameter vector (docs/layers.md#state-batch-normalizations-running-statistics): a
// range of values that are not trained but averaged, batch normalization's running moments. Its
// "gradient" is a sum over the batch's samples of a per-sample value; the server replaces the
// optimizer's step there by a running average of the pushed mean,
//   state += momentum * (sum / samples - state),
// so the statistics travel, are checkpointed and exported with the parameters, and a
// synchronous run's statistics are those of the global batch on every layout.
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace hpcps::nn {

struct StateSlots {
  std::size_t begin = 0;  // within the owner's parameters (a layer's slice, a network's vector)
  std::size_t size = 0;
  float momentum = 0.1f;  // weight of the newest batch in the running average
};

namespace detail {
template <class T, class = void>
struct has_state_slots : std::false_type {};
template <class T>
struct has_state_slots<T, std::void_t<decltype(std::vector<StateSlots>{std::declval<const T&>().state_slots()})>>
    : std::true_type {};
}  // namespace detail

// Optional member of a layer or network: `std::vector<nn::StateSlots> state_slots() const`.
template <class T>
inline constexpr bool has_state_slots_v = detail::has_state_slots<T>::value;

// T's state slots, none where T has no such member.
template <class T>
std::vector<StateSlots> state_slots_of(const T& t) {
  if constexpr (has_state_slots_v<T>) {
    return t.state_slots();
  } else {
    return {};
  }
}

// Appends part's state slots, moved to where part's parameters begin in its owner's: what a layer
// or network made of parts (nn::Sequential, nn::Residual) reports as its own.
template <class T>
void append_state_slots(std::vector<StateSlots>& slots, const T& part, std::size_t offset) {
  for (StateSlots s : state_slots_of(part)) {
    s.begin += offset;
    slots.push_back(s);
  }
}

}  // namespace hpcps::nn
