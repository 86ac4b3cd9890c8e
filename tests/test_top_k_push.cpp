// Top-k pushes through the parameter server (ParameterServer Options::top_k, ps/top_k.hpp): a ratio
// of 1 sends every element and trains to the dense run's parameters bit for bit in every layout;
// below 1, what the servers applied plus what the workers still hold back is exactly what a dense
// run applied (nothing of a gradient lost, only delayed), in the synchronous strategy and in the
// ones that apply each push alone; the compositions top-k cannot serve are refused with a message.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "hpcps/hpcps.hpp"

#include "error_feedback.hpp"
#include "ps_reference.hpp"
#include "synthetic_data.hpp"
#include "train_clocks.hpp"

namespace {

using hpcps_test::Accumulate;
using hpcps_test::dyadic;
using hpcps_test::FixedGradient;
using hpcps_test::summed_over_ranks;
using hpcps_test::synthetic;

template <class Sync, class Optimizer, class Network>
hpcps_test::Trained train(const Network& net, const hpcps::data::Dataset& data, int servers, double top_k,
                          std::size_t piece_floats, std::size_t b, std::size_t steps, Optimizer optimizer) {
  return hpcps_test::train_compressed<Sync>(net, data, servers, {top_k, false, 0.0f}, piece_floats, b, steps, optimizer);
}

}  // namespace

TEST_CASE("top-k of every element trains to the dense run's parameters bit for bit", "[top_k][mpi]") {
  using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;
  for (const std::size_t piece : {hpcps::ps::Layout::default_piece_floats, std::size_t{7}}) {
    hpcps_test::check_whole_is_dense(Net({12, 10, 7, 3}), {1.0, false, 0.0f}, piece, 77);
  }
}

TEST_CASE("momentum correction with every element sent is momentum SGD on the server, up to the order of sums",
          "[top_k][mpi]") {
  using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;
  hpcps_test::check_correction_is_server_momentum(Net({12, 10, 7, 3}), {1.0, false, 0.0f}, 7, 78);
}

TEST_CASE("top-k loses nothing: applied plus held back is what a dense run applied, exactly", "[top_k][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  const FixedGradient net(53, 8);
  const std::size_t b = 3, steps = 9, n = net.parameter_count();
  for (const double ratio : {0.05, 0.3}) {
    for (const std::size_t piece : {std::size_t{53}, std::size_t{10}}) {
      for (int servers = 0; servers < world.size(); ++servers) {
        const auto workers = static_cast<std::size_t>(servers == 0 ? world.size() : world.size() - servers);
        const auto data = dyadic(steps * b * workers, net.input_size());
        using Sync = hpcps::sync::Synchronous;
        const auto dense = train<Sync>(net, data, servers, 0.0, piece, b, steps, Accumulate{});
        const auto sparse = train<Sync>(net, data, servers, ratio, piece, b, steps, Accumulate{});
        INFO("ratio " << ratio << ", servers " << servers << ", pieces of " << piece);
        const auto held = summed_over_ranks(sparse.residual, n);
        // Something was held back, so the test is not the ratio-1 case in disguise...
        double held_back = 0.0;
        for (float h : held) held_back += h != 0.0f ? 1.0 : 0.0;
        CHECK(held_back > 0);
        // ... and what the servers applied plus that is the dense run's, element by element.
        if (!sparse.master.empty()) {
          std::size_t lost = 0;
          for (std::size_t i = 0; i < sparse.master.size(); ++i) {
            if (sparse.master[i] + held[sparse.range.begin + i] != dense.master[i]) ++lost;
          }
          CHECK(lost == 0);
        }
        world.barrier();
      }
    }
  }
}

TEST_CASE("top-k pushes are applied one by one by the asynchronous strategy, losing nothing", "[top_k][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  if (world.size() < 2) return;  // a dedicated server and a worker
  const FixedGradient net(40, 8);
  const std::size_t b = 2, steps = 7, n = net.parameter_count();
  const auto workers = static_cast<std::size_t>(world.size() - 1);
  const auto data = dyadic(steps * b * workers, net.input_size());
  using Sync = hpcps::sync::Asynchronous;
  // Sums of exact values in any order are exact: the arrival order does not matter here.
  const auto dense = train<Sync>(net, data, 1, 0.0, 9, b, steps, Accumulate{});
  const auto sparse = train<Sync>(net, data, 1, 0.2, 9, b, steps, Accumulate{});
  const auto held = summed_over_ranks(sparse.residual, n);
  if (!sparse.master.empty()) {
    std::size_t lost = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (sparse.master[i] + held[i] != dense.master[i]) ++lost;
    }
    CHECK(lost == 0);
  }
  world.barrier();
}

TEST_CASE("top-k refuses 16-bit values and a ratio outside (0, 1] on every rank", "[top_k][mpi]") {
  using Server = hpcps::ParameterServer<hpcps::nn::Mlp<hpcps::nn::Relu>, hpcps::backend::Cpu,
                                        hpcps::sync::Synchronous, hpcps::optim::StandardSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::nn::Mlp<hpcps::nn::Relu> net({6, 4, 2});
  Server::Options options;
  options.servers = world.size() > 1 ? 1 : 0;
  options.max_batch = 4;
  options.top_k = 0.5;
  options.wire = hpcps::ps::WireFormat::bf16;
  CHECK_THROWS_WITH(Server(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.1f)),
                    Catch::Contains("top-k pushes") && Catch::Contains("bf16"));
  options.wire = hpcps::ps::WireFormat::fp32;
  options.top_k = 1.5;
  CHECK_THROWS_WITH(Server(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.1f)),
                    Catch::Contains("top-k ratio") && Catch::Contains("must be in (0, 1]"));
  options.top_k = 0.0;
  options.top_k_momentum = 0.9f;  // without top-k
  CHECK_THROWS_WITH(Server(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.1f)),
                    Catch::Contains("momentum correction") && Catch::Contains("with compressed pushes"));
  options.top_k = 0.5;
  options.top_k_momentum = 1.0f;
  CHECK_THROWS_WITH(Server(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.1f)),
                    Catch::Contains("must be in (0, 1)"));
  world.barrier();
}
