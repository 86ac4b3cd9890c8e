#pragma once
// Learning-rate schedules over server steps (one step = one update of a shard). A plain value type
// rather than a policy: the rate is computed once per update, so a runtime choice costs nothing
// and keeps the composition's type list short.
#include <cmath>
#include <cstddef>

#include <fmt/format.h>

#include "hpcps/error.hpp"

namespace hpcps::optim {

class Schedule {
 public:
  enum class Kind { constant, step, cosine };

  static Schedule constant(float rate) { return Schedule(Kind::constant, rate, 0, 1.0f, 0.0f); }
  // rate * gamma^floor(step / every)
  static Schedule step_decay(float rate, std::size_t every, float gamma) {
    if (every == 0) throw Error("optim::Schedule::step_decay: the interval must be at least one step");
    if (!(gamma > 0.0f && gamma <= 1.0f)) throw Error(fmt::format("optim::Schedule::step_decay: gamma must be in (0, 1], got {}", gamma));
    return Schedule(Kind::step, rate, every, gamma, 0.0f);
  }
  // From rate down to floor along half a cosine over `steps` steps, then floor.
  static Schedule cosine(float rate, std::size_t steps, float floor = 0.0f) {
    if (steps == 0) throw Error("optim::Schedule::cosine: the length must be at least one step");
    if (!(floor >= 0.0f && floor <= rate)) throw Error(fmt::format("optim::Schedule::cosine: floor must be in [0, {}], got {}", rate, floor));
    return Schedule(Kind::cosine, rate, steps, 1.0f, floor);
  }

  float at(std::size_t step) const {
    switch (kind_) {
      case Kind::step:
        return rate_ * std::pow(gamma_, static_cast<float>(step / length_));
      case Kind::cosine: {
        if (step >= length_) return floor_;
        const double progress = static_cast<double>(step) / static_cast<double>(length_);
        return floor_ + static_cast<float>(0.5 * (1.0 + std::cos(3.14159265358979323846 * progress))) * (rate_ - floor_);
      }
      case Kind::constant:
      default:
        return rate_;
    }
  }

  Kind kind() const { return kind_; }
  float base_rate() const { return rate_; }
  std::size_t length() const { return length_; }  // steps of a step decay or cosine; 0 when constant
  float gamma() const { return gamma_; }
  float floor() const { return floor_; }
  const char* name() const { return kind_ == Kind::constant ? "constant" : kind_ == Kind::step ? "step" : "cosine"; }

 private:
  Schedule(Kind kind, float rate, std::size_t length, float gamma, float floor)
      : kind_(kind), rate_(rate), length_(length), gamma_(gamma), floor_(floor) {
    if (!(rate > 0.0f)) throw Error(fmt::format("optim::Schedule: learning rate must be > 0, got {}", rate));
  }

  Kind kind_;
  float rate_;
  std::size_t length_;
  float gamma_, floor_;
};

}  // namespace hpcps::optim
