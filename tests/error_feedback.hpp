#pragma once
// What the error-feedback tests of compressed pushes (top-k, scaled sign) share: a network whose
// gradient does not depend on the parameters, the rule that adds what it is given, dyadic data
// whose sums are exact, a sum over ranks of what the workers still hold back, training with a
// given compression, and the check that momentum correction with every element sent whole is
// momentum SGD on the server.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hpcps/hpcps.hpp"

#include "ps_reference.hpp"
#include "synthetic_data.hpp"
#include "train_clocks.hpp"

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

// How a test's pushes travel: a top-k ratio (0: off), scaled signs, momentum correction (0: off).
struct Compression {
  double top_k = 0.0;
  bool sign = false;
  float momentum_correction = 0.0f;
};

// Collective: `steps` clocks of a ParameterServer with `servers` servers, pushes compressed as
// `compression`, pieces of `piece_floats` (train_clocks.hpp).
template <class Sync, class Optimizer, class Network>
Trained train_compressed(const Network& net, const hpcps::data::Dataset& data, int servers, Compression compression,
                         std::size_t piece_floats, std::size_t b, std::size_t steps, Optimizer optimizer) {
  using Server = hpcps::ParameterServer<Network, hpcps::backend::Cpu, Sync, Optimizer>;
  const auto world = hpcps::comm::Communicator::world();
  typename Server::Options options;
  options.servers = servers;
  options.max_batch = b;
  options.seed = 5;
  options.piece_floats = piece_floats;
  options.top_k = compression.top_k;
  options.sign_push = compression.sign;
  options.top_k_momentum = compression.momentum_correction;
  Server ps(world, net, hpcps::backend::Cpu(1), options, Sync{}, optimizer);
  return train_clocks(ps, data, b, steps);
}

// Collective: with `whole` a compression that sends every element whole in pieces of
// `piece_floats` (top-k of ratio 1, or scaled signs of one-element pieces), a run trains to the
// dense run's parameters bit for bit on every layout of the world, and holds nothing back.
template <class Network>
void check_whole_is_dense(const Network& net, Compression whole, std::size_t piece_floats, std::uint64_t data_seed) {
  const auto world = hpcps::comm::Communicator::world();
  const std::size_t b = 4, steps = 6;
  for (int servers = 0; servers < world.size(); ++servers) {
    const auto workers = static_cast<std::size_t>(servers == 0 ? world.size() : world.size() - servers);
    const auto data = synthetic(steps * b * workers, net.input_size(), net.output_size(), data_seed);
    using Sync = hpcps::sync::Synchronous;
    const hpcps::optim::MomentumSgd rule(0.1f);
    const auto dense = train_compressed<Sync>(net, data, servers, {}, piece_floats, b, steps, rule);
    const auto all = train_compressed<Sync>(net, data, servers, whole, piece_floats, b, steps, rule);
    INFO("servers " << servers << ", pieces of " << piece_floats);
    CHECK(all.worker == dense.worker);
    CHECK(all.master == dense.master);
    if (!all.residual.empty()) CHECK(all.residual == std::vector<float>(net.parameter_count(), 0.0f));
  }
}

// Collective: with `whole` as above, worker w sends
// u_w = m u_w + g_w with momentum correction and the server applies plain SGD to the sum; momentum
// SGD on the server keeps v = m v + sum_w g_w. The same, summed in another order: equal to 1e-5,
// on every layout of the world; plain SGD without the correction is not.
template <class Network>
void check_correction_is_server_momentum(const Network& net, Compression whole, std::size_t piece_floats,
                                         std::uint64_t data_seed) {
  const auto world = hpcps::comm::Communicator::world();
  const std::size_t b = 4, steps = 6;
  for (int servers = 0; servers < world.size(); ++servers) {
    const auto workers = static_cast<std::size_t>(servers == 0 ? world.size() : world.size() - servers);
    const auto data = synthetic(steps * b * workers, net.input_size(), net.output_size(), data_seed);
    using Sync = hpcps::sync::Synchronous;
    const hpcps::optim::StandardSgd plain(0.1f);
    Compression corrected_pushes = whole;
    corrected_pushes.momentum_correction = 0.9f;
    const auto momentum =
        train_compressed<Sync>(net, data, servers, {}, piece_floats, b, steps, hpcps::optim::MomentumSgd(0.1f));
    const auto corrected = train_compressed<Sync>(net, data, servers, corrected_pushes, piece_floats, b, steps, plain);
    const auto uncorrected = train_compressed<Sync>(net, data, servers, whole, piece_floats, b, steps, plain);
    INFO("servers " << servers);
    if (!corrected.master.empty()) {
      CHECK(difference_over_largest(corrected.master, momentum.master) < 1e-5);
      CHECK(difference_over_largest(uncorrected.master, momentum.master) > 1e-3);  // plain SGD
    }
    if (!corrected.worker.empty()) CHECK(difference_over_largest(corrected.worker, momentum.worker) < 1e-5);
  }
}

}  // namespace hpcps_test
