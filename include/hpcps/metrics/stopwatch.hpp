#pragma once
#include <chrono>

namespace hpcps::metrics {

// Splits a sequence of phases into buckets with one clock read per phase boundary: charge(bucket)
// adds the time since the previous boundary to `bucket`.
class PhaseClock {
 public:
  using clock = std::chrono::steady_clock;
  void start() { last_ = clock::now(); }
  void charge(double& bucket) {
    const auto now = clock::now();
    bucket += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  clock::time_point last_ = clock::now();
};

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace hpcps::metrics
