// 16-bit wire formats (ps/wire_format.hpp): the conversions against known values and a reference
// rounding, then the parameter server with bf16/fp16 pushes and pulls: W workers with batch b
// still reproduce one worker with batch W*b, to the format's precision but not bitwise (the option
// really changes what travels); a bf16 pull delivers exactly the rounded fp32 master copy; the
// individual (asynchronous) loop converts too; and the steady-state step still allocates nothing.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "hpcps/hpcps.hpp"

#include "ps_reference.hpp"
#include "synthetic_data.hpp"
#include "train_clocks.hpp"

namespace {

using hpcps::ps::WireFormat;
namespace wire = hpcps::ps::wire;

float float_of(std::uint32_t u) { return wire::float_of(u); }

// The nearest value of a format to x, ties to the even encoding, found by brute comparison in
// double between the two candidates that bracket x (lo and lo + 1, same sign).
template <class Decode>
std::uint16_t nearest(float x, std::uint16_t lo, Decode decode) {
  const double a = decode(lo), b = decode(static_cast<std::uint16_t>(lo + 1)), v = x;
  const double da = std::abs(v - a), db = std::abs(v - b);
  if (da < db) return lo;
  if (db < da) return static_cast<std::uint16_t>(lo + 1);
  return (lo & 1u) == 0 ? lo : static_cast<std::uint16_t>(lo + 1);
}

}  // namespace

TEST_CASE("bf16 conversion rounds to nearest even and passes inf and NaN through", "[wire]") {
  CHECK(wire::to_bf16(1.0f) == 0x3F80);
  CHECK(wire::to_bf16(-2.0f) == 0xC000);
  CHECK(wire::to_bf16(0.0f) == 0x0000);
  CHECK(wire::to_bf16(-0.0f) == 0x8000);
  // Ties: 1 + 2^-8 lies halfway between 0x3F80 and 0x3F81 and goes to the even 0x3F80;
  // 1 + 3 * 2^-8 lies halfway between 0x3F81 and 0x3F82 and goes to 0x3F82. Just above a tie
  // rounds up, just below down; negative values mirror.
  CHECK(wire::to_bf16(float_of(0x3F808000u)) == 0x3F80);
  CHECK(wire::to_bf16(float_of(0x3F818000u)) == 0x3F82);
  CHECK(wire::to_bf16(float_of(0x3F808001u)) == 0x3F81);
  CHECK(wire::to_bf16(float_of(0x3F807FFFu)) == 0x3F80);
  CHECK(wire::to_bf16(float_of(0xBF808000u)) == 0xBF80);
  CHECK(wire::to_bf16(float_of(0xBF818000u)) == 0xBF82);
  // Tiny: fp32 subnormals round like any other value (bf16 has the same exponent range).
  CHECK(wire::to_bf16(float_of(0x00000001u)) == 0x0000);
  CHECK(wire::to_bf16(float_of(0x00008000u)) == 0x0000);  // tie to even
  CHECK(wire::to_bf16(float_of(0x00018000u)) == 0x0002);  // tie to even
  CHECK(wire::to_bf16(std::numeric_limits<float>::min()) == 0x0080);
  CHECK(wire::from_bf16(0x0001) == float_of(0x00010000u));
  // Range: fp32's largest value is beyond bf16's largest plus half an ulp, so it rounds to inf.
  CHECK(wire::to_bf16(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(wire::to_bf16(float_of(0x7F7F7FFFu)) == 0x7F7F);
  CHECK(wire::to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(wire::to_bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(std::isinf(wire::from_bf16(0x7F80)));
  // A NaN stays a NaN, even one whose payload sits only in the bits that are dropped.
  CHECK(std::isnan(wire::from_bf16(wire::to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(wire::from_bf16(wire::to_bf16(float_of(0x7F800001u)))));
  CHECK(std::isnan(wire::from_bf16(wire::to_bf16(float_of(0xFFFFFFFFu)))));

  // Every bf16 value survives a round trip through fp32 bitwise.
  for (std::uint32_t h = 0; h <= 0xFFFFu; ++h) {
    const float x = wire::from_bf16(static_cast<std::uint16_t>(h));
    if (std::isnan(x)) continue;
    REQUIRE(wire::to_bf16(x) == h);
  }
  // Any finite float goes to the nearer of its two bf16 neighbours, ties to even: every 2^-16th
  // bit pattern with a spread of low bits, against the brute-force reference.
  for (std::uint32_t u = 0; u < 0x7F7F0000u; u += 0x10000u - 0x3u) {
    for (const std::uint32_t bits : {u, u | 0x8000u, u ^ 0x80000000u}) {
      const float x = float_of(bits);
      const auto lo = static_cast<std::uint16_t>(bits >> 16);
      INFO("bits " << std::hex << bits);
      REQUIRE(wire::to_bf16(x) == nearest(x, lo, wire::from_bf16));
    }
  }
}

TEST_CASE("fp16 conversion rounds to nearest even, saturates finite overflow, keeps inf and NaN", "[wire]") {
  CHECK(wire::to_fp16(1.0f) == 0x3C00);
  CHECK(wire::to_fp16(-2.0f) == 0xC000);
  CHECK(wire::to_fp16(-0.0f) == 0x8000);
  CHECK(wire::to_fp16(65504.0f) == 0x7BFF);
  CHECK(wire::from_fp16(0x7BFF) == 65504.0f);
  // Ties in the normal range: 1 + 2^-11 goes to 0x3C00, 1 + 3 * 2^-11 to 0x3C02.
  CHECK(wire::to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  CHECK(wire::to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);
  CHECK(wire::to_fp16(-(1.0f + 3 * std::ldexp(1.0f, -11))) == 0xBC02);
  // Subnormal and tiny: 2^-24 is the smallest half; half of it ties to 0, 3 * 2^-25 ties to 2.
  CHECK(wire::to_fp16(std::ldexp(1.0f, -14)) == 0x0400);
  CHECK(wire::to_fp16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(wire::to_fp16(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(wire::to_fp16(3 * std::ldexp(1.0f, -25)) == 0x0002);
  CHECK(wire::to_fp16(1e-10f) == 0x0000);
  CHECK(wire::to_fp16(-1e-10f) == 0x8000);
  CHECK(wire::from_fp16(0x0001) == std::ldexp(1.0f, -24));
  CHECK(wire::from_fp16(0x03FF) == 1023 * std::ldexp(1.0f, -24));
  // Finite overflow saturates (IEEE would round 65520 and above to inf); inf and NaN pass.
  CHECK(wire::to_fp16(65519.0f) == 0x7BFF);
  CHECK(wire::to_fp16(65520.0f) == 0x7BFF);
  CHECK(wire::to_fp16(1e30f) == 0x7BFF);
  CHECK(wire::to_fp16(-1e30f) == 0xFBFF);
  CHECK(wire::to_fp16(std::numeric_limits<float>::max()) == 0x7BFF);
  CHECK(wire::to_fp16(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(wire::to_fp16(-std::numeric_limits<float>::infinity()) == 0xFC00);
  CHECK(std::isinf(wire::from_fp16(0x7C00)));
  CHECK(std::isnan(wire::from_fp16(wire::to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(wire::from_fp16(wire::to_fp16(float_of(0x7F800001u)))));

  // Every half decodes to its exact value and round-trips bitwise.
  for (std::uint32_t h = 0; h <= 0xFFFFu; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float x = wire::from_fp16(half);
    const std::uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
    if (exponent == 0x1F) {
      CHECK((mantissa == 0 ? std::isinf(x) : std::isnan(x)));
      continue;
    }
    const double magnitude = exponent == 0 ? std::ldexp(static_cast<double>(mantissa), -24)
                                           : std::ldexp(1.0 + mantissa / 1024.0, static_cast<int>(exponent) - 15);
    REQUIRE(static_cast<double>(x) == ((h & 0x8000u) ? -magnitude : magnitude));
    REQUIRE(wire::to_fp16(x) == half);
  }
  // Any float within range goes to the nearer of its two half neighbours, ties to even.
  for (std::uint32_t u = 0; u < 0x477FE000u; u += 0x1000u - 0x7u) {
    const float x = float_of(u);
    const auto below = wire::to_fp16(x);  // the candidate pair is (below, below + 1) or (below - 1, below)
    const auto lo = static_cast<std::uint16_t>(wire::from_fp16(below) > x ? below - 1 : below);
    INFO("bits " << std::hex << u);
    REQUIRE(below == nearest(x, lo, wire::from_fp16));
  }
}

TEST_CASE("the array conversions equal the scalar ones", "[wire]") {
  std::vector<float> x(1000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * std::ldexp(1.0f, static_cast<int>(i % 40) - 20);
  x[3] = std::numeric_limits<float>::infinity();
  x[4] = 1e9f;
  std::vector<std::uint16_t> h(x.size());
  std::vector<float> back(x.size());
  for (const WireFormat format : {WireFormat::bf16, WireFormat::fp16}) {
    wire::encode(format, x.data(), x.size(), h.data());
    wire::decode(format, h.data(), h.size(), back.data());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const bool bf16 = format == WireFormat::bf16;
      REQUIRE(h[i] == (bf16 ? wire::to_bf16(x[i]) : wire::to_fp16(x[i])));
      const float expected = bf16 ? wire::from_bf16(h[i]) : wire::from_fp16(h[i]);
      REQUIRE(std::memcmp(&back[i], &expected, sizeof(float)) == 0);
    }
  }
  CHECK(hpcps::ps::parse_wire_format("bf16") == WireFormat::bf16);
  CHECK(std::string(hpcps::ps::wire_name(WireFormat::fp16)) == "fp16");
  CHECK_THROWS_WITH(hpcps::ps::parse_wire_format("fp8"), Catch::Contains("use fp32, bf16 or fp16"));
  CHECK_THROWS_WITH(wire::encode(WireFormat::fp32, x.data(), 1, h.data()), Catch::Contains("fp32 has no 16-bit"));
}

namespace {

using hpcps_test::max_relative_difference;
using hpcps_test::sequential_sgd;
using hpcps_test::synthetic;

// The same with the wire simulated: each worker's gradient sum rounded through `push` and the
// rounded sums added in worker order, gradients computed at the parameters rounded through `pull`
// (the fp32 master copy is what is updated), and the update done by the server's own rule and
// scale: rounding parameters to 16 bits amplifies any last-bit difference, so the arithmetic must
// be the server's. Returns what the worker receives last: the master, rounded through `pull`.
template <class Network>
std::vector<float> sequential_sgd_over_wire(const Network& net, const hpcps::data::Dataset& d, std::size_t workers,
                                            std::size_t b, std::size_t steps, float lr, std::uint64_t seed,
                                            WireFormat push, WireFormat pull) {
  const hpcps::backend::Cpu backend(1);
  const std::size_t n = net.parameter_count();
  std::vector<float> master(n), seen(n), grad(n), sum(n);
  std::vector<std::uint16_t> h(n);
  auto round_trip = [&](WireFormat format, const float* in, float* out) {
    if (format == WireFormat::fp32) {
      std::copy(in, in + n, out);
      return;
    }
    wire::encode(format, in, n, h.data());
    wire::decode(format, h.data(), n, out);
  };
  net.initialize(master.data(), seed);
  auto ws = net.make_workspace(backend, b);
  const hpcps::optim::StandardSgd sgd(lr);
  auto state = sgd.make_state(n);
  const auto scale = static_cast<float>(1.0 / static_cast<double>(workers * b));
  for (std::size_t t = 0; t < steps; ++t) {
    round_trip(pull, master.data(), seen.data());
    for (std::size_t w = 0; w < workers; ++w) {
      const std::size_t first = (t * workers + w) * b;
      net.gradient(backend, ws, seen.data(), d.images.data() + first * d.features, d.labels.data() + first, b, grad.data());
      round_trip(push, grad.data(), grad.data());
      for (std::size_t i = 0; i < n; ++i) sum[i] = w == 0 ? grad[i] : sum[i] + grad[i];
    }
    sgd.step(state, 0, master.data(), sum.data(), scale, n, t);
  }
  round_trip(pull, master.data(), seen.data());
  return seen;
}

// ||a - b|| / ||b||: the error of a whole vector, which a lossy format keeps small even where
// single parameters near zero see large relative errors.
double normwise_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double error = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    error += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(error / norm);
}

// W workers (or one worker, for the asynchronous strategy) train `steps` clocks of batch b.
template <class Sync, class Network>
hpcps_test::Trained train(const Network& net, const hpcps::data::Dataset& data, int servers, WireFormat push,
                          WireFormat pull, std::size_t piece_floats, std::size_t b, std::size_t steps, float lr,
                          bool shared_memory = true) {
  using Server = hpcps::ParameterServer<Network, hpcps::backend::Cpu, Sync, hpcps::optim::StandardSgd>;
  const auto world = hpcps::comm::Communicator::world();
  typename Server::Options options;
  options.servers = servers;
  options.max_batch = b;
  options.seed = 5;
  options.piece_floats = piece_floats;
  options.wire = push;
  options.pull_wire = pull;
  options.shared_memory = shared_memory;
  Server ps(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(lr));
  return hpcps_test::train_clocks(ps, data, b, steps);
}

// Worker 0's parameters on every rank (each server compares its own shard with them).
std::vector<float> broadcast_worker0(std::vector<float> params, std::size_t n) {
  const auto world = hpcps::comm::Communicator::world();
  params.resize(n);
  world.broadcast(params.data(), n, 0);
  return params;
}

template <class Network>
void check_wire_equivalence(const Network& net, WireFormat format, std::size_t piece_floats) {
  const auto world = hpcps::comm::Communicator::world();
  const float lr = 0.5f;
  const std::size_t b = 4, steps = 6;
  for (int servers = 0; servers < world.size(); ++servers) {
    const int workers = servers == 0 ? world.size() : world.size() - servers;
    const auto data = synthetic(steps * b * static_cast<std::size_t>(workers), net.input_size(), net.output_size(), 77);
    using Sync = hpcps::sync::Synchronous;
    const auto fp32 = train<Sync>(net, data, servers, WireFormat::fp32, WireFormat::fp32, piece_floats, b, steps, lr);
    const auto pushed = train<Sync>(net, data, servers, format, WireFormat::fp32, piece_floats, b, steps, lr);
    const auto both = train<Sync>(net, data, servers, format, format, piece_floats, b, steps, lr);
    // Every push in a message, as between nodes, none read in place through shared memory.
    const auto messages = train<Sync>(net, data, servers, format, format, piece_floats, b, steps, lr, false);
    const auto w = static_cast<std::size_t>(workers);
    const auto reference = sequential_sgd(net, data, b * w, steps, lr, 5);
    INFO(net.describe() << ", " << hpcps::ps::wire_name(format) << ", servers " << servers << ", pieces of "
                        << piece_floats);
    if (!fp32.worker.empty()) {
      CHECK(max_relative_difference(fp32.worker, reference) < 1e-4);
      // 16-bit gradients and parameters: exactly the rounding the format does, in the right
      // places (the simulated wire agrees as closely as fp32 agrees with plain SGD)...
      CHECK(max_relative_difference(pushed.worker, sequential_sgd_over_wire(net, data, w, b, steps, lr, 5, format,
                                                                            WireFormat::fp32)) < 1e-4);
      const auto over_wire = sequential_sgd_over_wire(net, data, w, b, steps, lr, 5, format, format);
      CHECK(max_relative_difference(both.worker, over_wire) < 1e-4);
      CHECK(max_relative_difference(messages.worker, over_wire) < 1e-4);
      // ... so close to plain SGD at the format's precision...
      const double pushed_error = normwise_relative_difference(pushed.worker, reference);
      const double both_error = normwise_relative_difference(both.worker, reference);
      INFO("relative error of the parameter vector: pushes " << pushed_error << ", pushes and pulls " << both_error);
      CHECK(pushed_error < 1e-2);
      CHECK(both_error < 1e-2);
      // ... but not equal to the fp32 run: the option changes what travels.
      CHECK(pushed.worker != fp32.worker);
      CHECK(both.worker != pushed.worker);
    }
    // A 16-bit pull delivers the fp32 master copy rounded, and nothing else.
    const auto delivered = broadcast_worker0(both.worker, net.parameter_count());
    if (!both.master.empty()) {
      for (std::size_t i = 0; i < both.master.size(); ++i) {
        const std::uint16_t h =
            format == WireFormat::bf16 ? wire::to_bf16(both.master[i]) : wire::to_fp16(both.master[i]);
        const float rounded = format == WireFormat::bf16 ? wire::from_bf16(h) : wire::from_fp16(h);
        REQUIRE(delivered[both.range.begin + i] == rounded);
      }
    }
    world.barrier();
  }
}

}  // namespace

TEST_CASE("16-bit pushes: W workers with batch b reproduce one worker with batch W*b to the format's precision",
          "[wire][mpi]") {
  using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;
  for (const std::size_t piece : {hpcps::ps::Layout::default_piece_floats, std::size_t{7}}) {
    SECTION("mlp, bf16, pieces of " + std::to_string(piece)) {
      check_wire_equivalence(Net({12, 10, 7, 3}), WireFormat::bf16, piece);
    }
    SECTION("softmax regression, bf16, pieces of " + std::to_string(piece)) {
      check_wire_equivalence(hpcps::nn::SoftmaxRegression(12, 3), WireFormat::bf16, piece);
    }
  }
  SECTION("mlp, fp16, pieces of 7") { check_wire_equivalence(Net({12, 10, 7, 3}), WireFormat::fp16, 7); }
}

TEST_CASE("the asynchronous loop converts 16-bit pushes and pulls too", "[wire][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  if (world.size() < 2) {
    WARN("needs at least 2 ranks (a worker and a server)");
    return;
  }
  // One worker: the asynchronous server applies its pushes in order, which is sequential SGD.
  using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;
  const Net net({12, 10, 7, 3});
  const std::size_t b = 4, steps = 6;
  const auto data = synthetic(steps * b, net.input_size(), net.output_size(), 78);
  const auto reference = sequential_sgd(net, data, b, steps, 0.5f, 5);
  const int servers = world.size() - 1;
  using Async = hpcps::sync::Asynchronous;
  const auto fp32 = train<Async>(net, data, servers, WireFormat::fp32, WireFormat::fp32, 7, b, steps, 0.5f);
  const auto bf16 = train<Async>(net, data, servers, WireFormat::bf16, WireFormat::bf16, 7, b, steps, 0.5f);
  if (!fp32.worker.empty()) {
    CHECK(max_relative_difference(fp32.worker, reference) < 1e-4);
    CHECK(max_relative_difference(bf16.worker, sequential_sgd_over_wire(net, data, 1, b, steps, 0.5f, 5, WireFormat::bf16,
                                                                        WireFormat::bf16)) < 1e-4);
    CHECK(normwise_relative_difference(bf16.worker, reference) < 1e-2);
    CHECK(bf16.worker != fp32.worker);
  }
}
