// Scaled-sign pushes with error feedback (ParameterServer Options::sign_push, ps/sign_push.hpp):
// the encoding keeps, element by element and exactly, new residual == fl(x - sent) with sent the
// +-scale the server adds; through the parameter server a piece of one element is the element
// itself, so such a run is the dense run bit for bit; with larger pieces what the servers applied
// plus what the workers hold back is what a dense run applied, up to the rounding of the
// residual's subtractions, in every strategy; with momentum correction and one-element pieces it
// is momentum SGD on the server (checks shared with top-k: error_feedback.hpp); the compositions
// it cannot serve are refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "hpcps/hpcps.hpp"

#include "error_feedback.hpp"
#include "ps_reference.hpp"
#include "synthetic_data.hpp"
#include "train_clocks.hpp"

namespace {

using hpcps_test::Accumulate;
using hpcps_test::FixedGradient;
using hpcps_test::summed_over_ranks;

template <class Sync, class Optimizer, class Network>
hpcps_test::Trained train(const Network& net, const hpcps::data::Dataset& data, int servers, bool sign,
                          std::size_t piece_floats, std::size_t b, std::size_t steps, Optimizer optimizer) {
  return hpcps_test::train_compressed<Sync>(net, data, servers, {0.0, sign, 0.0f}, piece_floats, b, steps, optimizer);
}

}  // namespace

TEST_CASE("a scaled sign sends each block's mean magnitude with each sign and keeps exactly the rest", "[sign]") {
  using hpcps::ps::sign_block;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const std::size_t n : {std::size_t{1}, std::size_t{31}, std::size_t{32}, std::size_t{33}, std::size_t{100},
                              sign_block, sign_block + 1, 2 * sign_block + 33}) {
    INFO("n = " << n);
    std::vector<float> gradient(n), residual(n);
    for (std::size_t i = 0; i < n; ++i) {
      // Blocks of very different magnitude: each must get its own scale.
      gradient[i] = normal(rng) * (i / sign_block % 2 == 0 ? 1.0f : 1e-3f);
      residual[i] = 0.25f * normal(rng) * (i / sign_block % 2 == 0 ? 1.0f : 1e-3f);
    }
    gradient[0] = -0.0f;
    residual[0] = 0.0f;  // x = -0 + 0 = +0 (IEEE): a zero sends +scale
    if (n > 2) residual[2] = -gradient[2] - 0.0f;
    std::vector<float> x(n);
    // Each block's magnitudes summed in double in the documented order: eight lanes (element i of
    // the block in lane i % 8), then pairwise.
    std::vector<std::array<double, 8>> lanes(hpcps::ps::sign_scales(n), std::array<double, 8>{});
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = gradient[i] + residual[i];
      lanes[i / sign_block][i % sign_block % 8] += std::fabs(static_cast<double>(x[i]));
    }
    std::vector<double> magnitude;
    for (const auto& l : lanes) magnitude.push_back(((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])));
    std::vector<std::uint32_t> words(hpcps::ps::sign_words(n), 0xFFFFFFFFu);
    std::vector<float> scales(hpcps::ps::sign_scales(n) + 1, -1.0f);  // one past the end: must stay untouched
    hpcps::ps::compress_sign(gradient.data(), residual.data(), n, scales.data(), words.data());
    CHECK(scales.back() == -1.0f);
    for (std::size_t b = 0; b < magnitude.size(); ++b) {
      const std::size_t size = std::min(sign_block, n - b * sign_block);
      CHECK(scales[b] == static_cast<float>(magnitude[b] / static_cast<double>(size)));
    }
    // What the server adds for this piece, into zeros.
    std::vector<float> sent(n, 0.0f);
    hpcps::ps::add_signs(scales.data(), words.data(), n, sent.data());
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float scale = scales[i / sign_block];
      const bool negative = std::signbit(x[i]);
      if (sent[i] != (negative ? -scale : scale)) ++wrong;  // the sign travelled, with its block's scale
      if (residual[i] != x[i] - sent[i]) ++wrong;           // the rest stayed, rounded once
    }
    CHECK(wrong == 0);
    // The bits past n in the last word stay clear: a word means the same on every run.
    if (n % 32 != 0) CHECK((words.back() >> (n % 32)) == 0u);
  }
}

TEST_CASE("a diverged piece stays visible through a scaled sign", "[sign]") {
  std::vector<float> gradient{1.0f, std::numeric_limits<float>::quiet_NaN(), -2.0f}, residual(3, 0.0f);
  std::uint32_t word = 0;
  float scale = 0.0f;
  hpcps::ps::compress_sign(gradient.data(), residual.data(), 3, &scale, &word);  // one block
  CHECK(std::isnan(scale));
  std::vector<float> sent(3, 0.0f);
  hpcps::ps::add_signs(&scale, &word, 3, sent.data());
  CHECK(std::isnan(sent[0]));
  CHECK(std::isnan(sent[2]));
}

TEST_CASE("scaled-sign pushes of one element a piece train to the dense run's parameters bit for bit",
          "[sign][mpi]") {
  // A piece of one element: the scale is its magnitude, so the element travels exactly and the
  // residual stays zero; a difference anywhere in the path (counts, scales, order) shows here.
  using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;
  hpcps_test::check_whole_is_dense(Net({8, 6, 3}), {0.0, true, 0.0f}, 1, 79);
}

TEST_CASE("scaled-sign pushes with momentum correction of one-element pieces are momentum SGD on the server",
          "[sign][mpi]") {
  // A piece of one element sends its velocity exactly: the scale is its magnitude.
  using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;
  hpcps_test::check_correction_is_server_momentum(Net({8, 6, 3}), {0.0, true, 0.0f}, 1, 81);
}

// What the servers applied plus what the workers hold back, against a dense run, in strategy
// Sync: equal up to the rounding of each residual subtraction (ulps of the values summed), and far
// from equal without the residual, so the comparison can fail.
template <class Sync>
void check_nothing_lost(std::size_t parameters, std::size_t piece) {
  const auto world = hpcps::comm::Communicator::world();
  const FixedGradient net(parameters, 8);
  const std::size_t b = 3, steps = 9, n = net.parameter_count();
  const int servers = Sync::aggregates ? 0 : 1;
  const auto workers = static_cast<std::size_t>(servers == 0 ? world.size() : world.size() - servers);
  const auto data = hpcps_test::dyadic(steps * b * workers, net.input_size());
  const auto dense = train<Sync>(net, data, servers, false, piece, b, steps, Accumulate{});
  const auto sign = train<Sync>(net, data, servers, true, piece, b, steps, Accumulate{});
  const auto held = summed_over_ranks(sign.residual, n);
  INFO(Sync::name << ", " << parameters << " parameters in pieces of " << piece);
  if (!sign.master.empty()) {
    // Compared as what was added to the start, so the start's magnitude hides nothing.
    std::vector<float> start(n);
    net.initialize(start.data(), 0);
    std::vector<float> dense_added(dense.master), applied(sign.master), applied_and_held(sign.master);
    for (std::size_t i = 0; i < sign.master.size(); ++i) {
      const std::size_t at = sign.range.begin + i;
      dense_added[i] -= start[at];
      applied[i] -= start[at];
      applied_and_held[i] = applied[i] + held[at];
    }
    CHECK(hpcps_test::difference_over_largest(applied_and_held, dense_added) < 1e-5);
    CHECK(hpcps_test::difference_over_largest(applied, dense_added) > 1e-2);
  }
  world.barrier();
}

TEST_CASE("scaled-sign pushes lose nothing but roundings in every strategy", "[sign][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  // Pieces of one block, of a fraction of one, and of several (a short block last).
  constexpr std::size_t block = hpcps::ps::sign_block;
  const std::pair<std::size_t, std::size_t> shapes[] = {{53, 53}, {53, 10}, {2 * block + 77, 3 * block}};
  for (const auto& [parameters, piece] : shapes) {
    check_nothing_lost<hpcps::sync::Synchronous>(parameters, piece);
    if (world.size() < 2) continue;  // a dedicated server and a worker
    check_nothing_lost<hpcps::sync::Asynchronous>(parameters, piece);
    check_nothing_lost<hpcps::sync::StaleSynchronous>(parameters, piece);
  }
}

TEST_CASE("scaled-sign pushes refuse top-k and a 16-bit push wire on every rank", "[sign][mpi]") {
  using Server = hpcps::ParameterServer<hpcps::nn::Mlp<hpcps::nn::Relu>, hpcps::backend::Cpu,
                                        hpcps::sync::Synchronous, hpcps::optim::StandardSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::nn::Mlp<hpcps::nn::Relu> net({6, 4, 2});
  Server::Options options;
  options.servers = world.size() > 1 ? 1 : 0;
  options.max_batch = 4;
  options.sign_push = true;
  options.top_k = 0.5;
  CHECK_THROWS_WITH(Server(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.1f)),
                    Catch::Contains("either top-k") && Catch::Contains("or scaled-sign"));
  options.top_k = 0.0;
  options.wire = hpcps::ps::WireFormat::fp16;
  CHECK_THROWS_WITH(Server(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.1f)),
                    Catch::Contains("scaled-sign pushes") && Catch::Contains("not fp16"));
  options.wire = hpcps::ps::WireFormat::fp32;
  // A 16-bit pull wire is fine: only the push is compressed.
  options.pull_wire = hpcps::ps::WireFormat::fp16;
  CHECK_NOTHROW(Server(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.1f)));
  world.barrier();
}
