#pragma once
// What a checkpoint saves of an update rule: its per-parameter state arrays by name (momentum's
// velocity, Adam's two moments), and a description of its hyperparameters, so that a run resumes
// only with the rule and schedule it was written with. An update rule of one's own takes part by
// overloading state_arrays() for its State and describe() for itself in this namespace.
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hpcps/optim/adam.hpp"
#include "hpcps/optim/schedule.hpp"
#include "hpcps/optim/sgd.hpp"

namespace hpcps::optim {

struct StateArray {
  const char* name;
  std::vector<float>* values;  // one float per parameter of the shard
};

inline std::vector<StateArray> state_arrays(VanillaUpdate::State&) { return {}; }
inline std::vector<StateArray> state_arrays(MomentumUpdate::State& s) { return {{"velocity", &s.velocity}}; }
inline std::vector<StateArray> state_arrays(Adam::State& s) { return {{"adam_m", &s.m}, {"adam_v", &s.v}}; }

template <class State, class = void>
struct has_state_arrays : std::false_type {};
template <class State>
struct has_state_arrays<State, std::void_t<decltype(state_arrays(std::declval<State&>()))>> : std::true_type {};
template <class State>
inline constexpr bool has_state_arrays_v = has_state_arrays<State>::value;

inline std::string describe(const Schedule& s) {
  switch (s.kind()) {
    case Schedule::Kind::step:
      return fmt::format("step decay lr {} x {} every {} steps", s.base_rate(), s.gamma(), s.length());
    case Schedule::Kind::cosine:
      return fmt::format("cosine lr {} to {} over {} steps", s.base_rate(), s.floor(), s.length());
    case Schedule::Kind::constant:
    default:
      return fmt::format("constant lr {}", s.base_rate());
  }
}
inline std::string describe(const Sgd<VanillaUpdate>& o) {
  return fmt::format("sgd, {}, weight decay {}", describe(o.schedule()), o.weight_decay());
}
inline std::string describe(const Sgd<MomentumUpdate>& o) {
  return fmt::format("{} {}, {}, weight decay {}", o.update().nesterov() ? "nesterov" : "momentum", o.update().momentum(),
                     describe(o.schedule()), o.weight_decay());
}
inline std::string describe(const Adam& o) {
  return fmt::format("adam betas {} {} epsilon {}, {}, weight decay {}", o.beta1(), o.beta2(), o.epsilon(),
                     describe(o.schedule()), o.weight_decay());
}

template <class O, class = void>
struct has_describe : std::false_type {};
template <class O>
struct has_describe<O, std::void_t<decltype(describe(std::declval<const O&>()))>> : std::true_type {};

// describe(o), or the rule's name where it has no describe() of its own.
template <class Optimizer>
std::string description_of(const Optimizer& o) {
  if constexpr (has_describe<Optimizer>::value) {
    return describe(o);
  } else {
    return Optimizer::name;
  }
}

}  // namespace hpcps::optim
