#pragma once
// What the error-feedback tests of compressed pushes (top-k, scaled sign) share: a network whose
// gradient does not depend on the parameters, the rule that adds what it is given, dyadic data
// whose sums are exact, and a sum over ranks of what the workers still hold back.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hpcps/hpcps.hpp"

#include "synthetic_data.hpp"

namespace hpcps_test {

// A network whose gradient does not depend on the parameters: sample s adds element
// (3 i + s) % features of its input row to gradient element i. So the gradient of every clock is
// the same whatever the parameters, in a dense run and a compressed one alike, and with inputs that are
// multiples of 1/64 every sum of them is exact.
class FixedGradient {
 public:
  template <class Backend>
  struct Workspace {};
  FixedGradient(std::size_t parameters, std::size_t features) : parameters_(parameters), features_(features) {}
  std::size_t parameter_count() const { return parameters_; }
  std::size_t input_size() const { return features_; }
  std::size_t output_size() const { return 2; }
  void initialize(float* params, std::uint64_t) const {
    for (std::size_t i = 0; i < parameters_; ++i) params[i] = static_cast<float>(i % 7) / 8.0f;
  }
  template <class Backend>
  Workspace<Backend> make_workspace(const Backend&, std::size_t) const {
    return {};
  }
  template <class Backend>
  hpcps::nn::BatchStats gradient(const Backend&, Workspace<Backend>&, const float*, const float* inputs,
                                 const std::int32_t*, std::size_t count, float* grad) const {
    for (std::size_t i = 0; i < parameters_; ++i) {
      float g = 0.0f;
      for (std::size_t s = 0; s < count; ++s) g += inputs[s * features_ + (3 * i + s) % features_];
      grad[i] = g;
    }
    return {0.0, 0, count};
  }
  template <class Backend>
  hpcps::nn::BatchStats evaluate(const Backend&, Workspace<Backend>&, const float*, const float*,
                                 const std::int32_t*, std::size_t count) const {
    return {0.0, 0, count};
  }

 private:
  std::size_t parameters_, features_;
};

// The rule that adds what it is given, unscaled: the parameters then hold their start plus the
// exact sum of every gradient element the servers received.
struct Accumulate {
  static constexpr const char* name = "accumulate";
  struct State {};
  State make_state(std::size_t) const { return {}; }
  void step(State&, std::size_t, float* params, const float* sum, float, std::size_t n, std::size_t) const {
    for (std::size_t i = 0; i < n; ++i) params[i] += sum[i];
  }
};

inline hpcps::data::Dataset dyadic(std::size_t count, std::size_t features) {
  auto d = hpcps_test::synthetic(count, features, 2, 91);
  for (float& v : d.images) v = static_cast<float>(static_cast<int>(v * 64.0f) - 32) / 64.0f;
  return d;
}

// The element-wise sum over all ranks of `v` (n floats; a rank without one adds zeros), in rank
// order on rank 0 and then everywhere: exact for the dyadic values these tests use.
inline std::vector<float> summed_over_ranks(std::vector<float> v, std::size_t n) {
  const auto world = hpcps::comm::Communicator::world();
  v.resize(n, 0.0f);
  std::vector<float> all(world.rank() == 0 ? n * static_cast<std::size_t>(world.size()) : 0);
  world.gather(v.data(), n, all.data(), 0);
  std::vector<float> sum(n, 0.0f);
  if (world.rank() == 0) {
    for (int r = 0; r < world.size(); ++r) {
      for (std::size_t i = 0; i < n; ++i) sum[i] += all[static_cast<std::size_t>(r) * n + i];
    }
  }
  world.broadcast(sum.data(), n, 0);
  return sum;
}

}  // namespace hpcps_test
