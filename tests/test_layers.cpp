// Layers and nn::Sequential: every layer's gradient against central finite differences (inputs
// and parameters), the backends against each other within a bound derived from the arithmetic,
// shape inference and its errors, dropout's repeatable mask, nn::Mlp's gradient from the same
// layers, no allocation in the steady-state step, and the user-written layer of docs/layers.md.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <type_traits>
#include <random>
#include <string>
#include <vector>

#include "hpcps/backend/backend_traits.hpp"
#include "hpcps/backend/cpu.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/nn/layers.hpp"
#include "hpcps/nn/mlp.hpp"
#include "hpcps/nn/network_traits.hpp"
#if defined(HPCPS_TEST_THRUST)
#include "hpcps/backend/thrust.hpp"
#endif

#include <omp.h>

#include "counting_new.hpp"
#include "layer_equivalence.hpp"

namespace nn = hpcps::nn;
using hpcps::backend::Cpu;
using hpcps_test::draw_layer_data;
using hpcps_test::fused_against_plain;
using hpcps_test::gradient_of;
using hpcps_test::Inputs;
using hpcps_test::LayerData;
using hpcps_test::LayerResult;
using hpcps_test::probe_loss;
using hpcps_test::run_layer;
using hpcps_test::Unfused;
using hpcps_test::worst_ratio;
using hpcps::backend::CpuEigen;
using nn::Shape;

// ---- The user-written layer of docs/layers.md ("Writing your own layer"), verbatim. ----
// [user-layer]
#include <hpcps/nn/layers.hpp>

// A learned offset per channel: y[n][c][p] = x[n][c][p] + b[c].
class Shift {
 public:
  struct Config {};
  static constexpr const char* name = "shift";

  Shift(hpcps::nn::Shape input, const Config&) : shape_(input) {}
  hpcps::nn::Shape output_shape() const { return shape_; }
  std::size_t parameter_count() const { return shape_.channels; }
  void initialize(float* params, hpcps::data::Rng&) const { std::fill(params, params + shape_.channels, 0.0f); }

  template <class B>
  struct Workspace {};
  template <class B>
  Workspace<B> make_workspace(const B&, std::size_t /*max_batch*/) const { return {}; }

  template <class B>
  void forward(const B& backend, Workspace<B>&, const float* params, const float* x, std::size_t count, float* y,
               bool /*training*/) const {
    backend.copy(x, count * shape_.size(), y);
    backend.channel_bias(y, params, count, shape_.channels, shape_.pixels());
  }
  template <class B>
  void backward(const B& backend, Workspace<B>&, const float* /*params*/, const float* /*x*/, const float* /*y*/,
                const float* dy, std::size_t count, float* dx, float* grad) const {
    backend.channel_sums(dy, count, shape_.channels, shape_.pixels(), grad);
    if (dx != nullptr) backend.copy(dy, count * shape_.size(), dx);
  }

 private:
  hpcps::nn::Shape shape_;
};
// [user-layer]

// The concepts, as the compiler sees them.
static_assert(nn::is_layer_v<nn::Dense> && nn::is_layer_v<nn::Conv2d> && nn::is_layer_v<nn::MaxPool2d>);
static_assert(nn::is_layer_v<nn::AvgPool2d> && nn::is_layer_v<nn::Flatten> && nn::is_layer_v<nn::Dropout>);
static_assert(nn::is_layer_v<nn::ActivationLayer<nn::Relu>> && nn::is_layer_v<Shift>);
static_assert(nn::is_layer_for_v<nn::Conv2d, Cpu> && nn::is_layer_for_v<Shift, CpuEigen>);
static_assert(!nn::is_layer_v<nn::Relu> && nn::is_activation_v<nn::Relu> && !nn::is_layer_v<int>);
static_assert(!nn::is_layer_v<nn::Mlp<>>);
static_assert(std::is_same_v<nn::layer_for_t<nn::Tanh>, nn::ActivationLayer<nn::Tanh>>);
static_assert(std::is_same_v<nn::layer_for_t<nn::Dense>, nn::Dense>);
static_assert(hpcps::backend::has_layer_kernels_v<Cpu> && hpcps::backend::has_layer_kernels_v<CpuEigen>);
static_assert(hpcps::backend::is_backend_v<Cpu> && !hpcps::backend::has_layer_kernels_v<int>);
using ExampleCnn = nn::Sequential<nn::Conv2d, nn::Relu, nn::MaxPool2d, nn::Conv2d, nn::Relu, nn::MaxPool2d,
                                  nn::Flatten, nn::Dense, nn::Relu, nn::Dense>;
static_assert(nn::is_network_v<ExampleCnn> && nn::is_network_for_v<ExampleCnn, Cpu>);
static_assert(nn::reports_gradient_progress_v<ExampleCnn, Cpu>);
#if defined(HPCPS_TEST_THRUST)
static_assert(hpcps::backend::has_layer_kernels_v<hpcps::backend::ThrustOmp>);
static_assert(hpcps::backend::is_backend_v<hpcps::backend::ThrustOmp>);
static_assert(nn::is_network_for_v<ExampleCnn, hpcps::backend::ThrustOmp>);
#endif

namespace {

std::uint64_t fresh_seed() {
  if (const char* s = std::getenv("HPCPS_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
}

struct FiniteDifferenceErrors {
  double params = 0.0, inputs = 0.0;  // largest |analytic - numeric| / max(1, |numeric|)
  std::size_t checked = 0;
};

// Central differences of probe_loss against backward's grad and dx, on up to ~60 coordinates of
// each. `scale_analytic` != 1 corrupts the analytic values: the check must then fail.
template <class L>
FiniteDifferenceErrors finite_difference_errors(const L& layer, Shape in, std::size_t count, Inputs kind,
                                                std::uint64_t seed, double scale_analytic = 1.0) {
  LayerData d = draw_layer_data(layer, in, count, kind, seed);
  const LayerResult analytic = run_layer(layer, Cpu(1), in, count, d);
  const float h = 1e-2f;
  FiniteDifferenceErrors e;
  const auto check = [&](std::vector<float>& values, const std::vector<float>& derivative, double& worst) {
    for (std::size_t i = 0; i < values.size(); i += 1 + values.size() / 60) {
      const float saved = values[i];
      values[i] = saved + h;
      const double up = probe_loss(layer, in, count, d);
      values[i] = saved - h;
      const double down = probe_loss(layer, in, count, d);
      values[i] = saved;
      const double numeric = (up - down) / (2.0 * h);
      worst = std::max(worst, std::abs(numeric - scale_analytic * derivative[i]) / std::max(1.0, std::abs(numeric)));
      ++e.checked;
    }
  };
  check(d.params, analytic.grad, e.params);
  check(d.x, analytic.dx, e.inputs);
  return e;
}

template <class L>
void check_finite_differences(Shape in, const typename L::Config& config, Inputs kind, std::size_t count = 3) {
  const L layer(in, config);
  for (std::uint64_t seed : {11u, 12u}) {
    const FiniteDifferenceErrors e = finite_difference_errors(layer, in, count, kind, seed);
    INFO(L::name << " on " << nn::to_string(in) << ", seed " << seed << ": " << e.checked << " coordinates");
    CHECK(e.checked > 0);
    CHECK(e.params < 1e-2);
    CHECK(e.inputs < 1e-2);
  }
}

}  // namespace

// ---- Shapes ----------------------------------------------------------------------------------

TEST_CASE("shapes: size, equality and how they print", "[layers]") {
  CHECK(Shape{3, 4, 5}.size() == 60);
  CHECK(Shape{3, 4, 5}.pixels() == 20);
  CHECK(Shape{10, 1, 1}.flat());
  CHECK_FALSE(Shape{1, 28, 28}.flat());
  CHECK(Shape{2, 3, 4} == Shape{2, 3, 4});
  CHECK(Shape{2, 3, 4} != Shape{2, 4, 3});
  CHECK(nn::to_string(Shape{64, 7, 7}) == "64x7x7");
  CHECK(nn::to_string(Shape{128, 1, 1}) == "128");
  CHECK(fmt::format("{}", Shape{1, 28, 28}) == "1x28x28");
}

// ---- Shape inference and construction errors --------------------------------------------------

TEST_CASE("Sequential infers every shape of the example CNN", "[layers]") {
  const ExampleCnn net(Shape{1, 28, 28}, {{32, 5, 2}, {}, {2}, {64, 5, 2}, {}, {2}, {}, {128}, {}, {10}});
  CHECK(net.input_size() == 784);
  CHECK(net.output_size() == 10);
  CHECK(net.output_shape(0) == Shape{32, 28, 28});
  CHECK(net.output_shape(2) == Shape{32, 14, 14});
  CHECK(net.output_shape(3) == Shape{64, 14, 14});
  CHECK(net.output_shape(5) == Shape{64, 7, 7});
  CHECK(net.output_shape(6) == Shape{64 * 7 * 7, 1, 1});
  CHECK(net.output_shape(7) == Shape{128, 1, 1});
  // By hand: weights out x in x k x k plus one bias per output, per convolution; out x in + out
  // per dense layer.
  const std::size_t conv1 = 32 * 1 * 5 * 5 + 32, conv2 = 64 * 32 * 5 * 5 + 64;
  const std::size_t dense1 = 128 * 64 * 7 * 7 + 128, dense2 = 10 * 128 + 10;
  CHECK(net.parameter_count() == conv1 + conv2 + dense1 + dense2);
  CHECK(net.parameter_offset(3) == conv1);
  CHECK(net.parameter_offset(7) == conv1 + conv2);
  CHECK(net.parameter_offset(9) == conv1 + conv2 + dense1);
  CHECK_THAT(net.describe(), Catch::Contains("1x28x28 -> conv2d 32x28x28 -> relu 32x28x28 -> max_pool2d 32x14x14"));
  CHECK_THAT(net.describe(), Catch::Contains("flatten 3136 -> dense 128 -> relu 128 -> dense 10]"));
}

TEST_CASE("Conv2d output shapes with stride and padding", "[layers]") {
  // (H + 2p - k) / s + 1, per dimension.
  CHECK(nn::Conv2d(Shape{1, 28, 28}, {8, 3, 1, 2}).output_shape() == Shape{8, 14, 14});
  CHECK(nn::Conv2d(Shape{3, 7, 9}, {4, 3, 0, 2}).output_shape() == Shape{4, 3, 4});
  CHECK(nn::Conv2d(Shape{3, 5, 5}, {2, 5}).output_shape() == Shape{2, 1, 1});
  CHECK(nn::MaxPool2d(Shape{2, 7, 7}, {3, 2}).output_shape() == Shape{2, 3, 3});
  CHECK(nn::MaxPool2d(Shape{2, 7, 7}, {2}).output_shape() == Shape{2, 3, 3});
  CHECK(nn::AvgPool2d(Shape{16, 7, 7}, {7}).output_shape() == Shape{16, 1, 1});
}

TEST_CASE("construction errors name the layer and the shapes", "[layers]") {
  using hpcps::Error;
  SECTION("a dense layer fed a 4-D shape without Flatten") {
    using Net = nn::Sequential<nn::Conv2d, nn::Relu, nn::Dense>;
    CHECK_THROWS_AS(Net(Shape{1, 8, 8}, {{4, 3}, {}, {10}}), Error);
    CHECK_THROWS_WITH(Net(Shape{1, 8, 8}, {{4, 3}, {}, {10}}),
                      Catch::Contains("layer 2 (dense)") && Catch::Contains("4x6x6") && Catch::Contains("Flatten"));
    CHECK_THROWS_WITH(nn::Sequential<nn::Dense>(Shape{1, 28, 28}, {{10}}),
                      Catch::Contains("layer 0 (dense)") && Catch::Contains("1x28x28"));
  }
  SECTION("a pooling window larger than its input") {
    using Net = nn::Sequential<nn::Conv2d, nn::MaxPool2d, nn::Flatten, nn::Dense>;
    CHECK_THROWS_WITH(Net(Shape{1, 5, 5}, {{2, 3}, {4}, {}, {3}}),
                      Catch::Contains("layer 1 (max_pool2d)") && Catch::Contains("window 4x4") &&
                          Catch::Contains("2x3x3"));
    CHECK_THROWS_WITH(nn::Sequential<nn::AvgPool2d>(Shape{2, 3, 9}, {{4}}),
                      Catch::Contains("layer 0 (avg_pool2d)") && Catch::Contains("2x3x9"));
  }
  SECTION("a kernel larger than the padded input") {
    using Net = nn::Sequential<nn::Flatten, nn::Dense, nn::Conv2d>;
    // Dense output 6 is 6x1x1: a 3x3 kernel fits only with padding 1.
    CHECK_NOTHROW(Net(Shape{1, 2, 2}, {{}, {6}, {2, 3, 1}}));
    CHECK_THROWS_WITH(Net(Shape{1, 2, 2}, {{}, {6}, {2, 3, 0}}),
                      Catch::Contains("layer 2 (conv2d)") && Catch::Contains("kernel 3x3") &&
                          Catch::Contains("input 6"));
    CHECK_THROWS_WITH(nn::Sequential<nn::Conv2d>(Shape{1, 4, 4}, {{2, 7, 1}}),
                      Catch::Contains("layer 0 (conv2d)") && Catch::Contains("1x4x4") && Catch::Contains("6x6"));
  }
  SECTION("bad settings") {
    CHECK_THROWS_WITH(nn::Sequential<nn::Conv2d>(Shape{1, 4, 4}, {{2, 3, 0, 0}}), Catch::Contains("stride"));
    using FlatDense = nn::Sequential<nn::Flatten, nn::Dense>;
    CHECK_THROWS_WITH(FlatDense(Shape{3, 2, 2}, {{}, {0}}),
                      Catch::Contains("layer 1 (dense)") && Catch::Contains("units"));
    CHECK_THROWS_WITH(nn::Sequential<nn::Dropout>(Shape{3, 1, 1}, {{1.0f}}), Catch::Contains("layer 0 (dropout)"));
  }
}

// ---- Finite differences, layer by layer --------------------------------------------------------

TEST_CASE("every layer's gradient matches central finite differences", "[layers]") {
  SECTION("dense") { check_finite_differences<nn::Dense>(Shape{7, 1, 1}, {5}, Inputs::normal); }
  SECTION("conv2d, stride 1, no padding") { check_finite_differences<nn::Conv2d>(Shape{2, 5, 6}, {3, 3}, Inputs::normal); }
  SECTION("conv2d, stride 2, padding 1") {
    check_finite_differences<nn::Conv2d>(Shape{2, 7, 6}, {3, 3, 1, 2}, Inputs::normal);
  }
  SECTION("conv2d, stride 3, padding 2, 1x1 kernel") {
    check_finite_differences<nn::Conv2d>(Shape{3, 5, 5}, {2, 1, 2, 3}, Inputs::normal);
  }
  SECTION("conv2d, a larger input (several im2col chunks where a backend runs im2col)") {
    // 8 x 32 x 32 with a 5x5 kernel: 200 x 1024 im2col floats per sample, 5 samples per chunk.
    const nn::Conv2d conv(Shape{8, 32, 32}, {2, 5, 2});
    CHECK(hpcps::backend::Im2colConv2d<Cpu>(Cpu(1), conv.geometry(), 2, 7).chunk() < 7);
    check_finite_differences<nn::Conv2d>(Shape{8, 32, 32}, {2, 5, 2}, Inputs::normal, 7);
  }
  SECTION("max_pool2d") { check_finite_differences<nn::MaxPool2d>(Shape{2, 6, 6}, {2}, Inputs::distinct); }
  SECTION("max_pool2d, 2x2 windows tiling a plane 8 windows wide (backend::Cpu's write-once backward)") {
    check_finite_differences<nn::MaxPool2d>(Shape{2, 16, 18}, {2}, Inputs::distinct);
  }
  SECTION("max_pool2d, overlapping windows") {
    check_finite_differences<nn::MaxPool2d>(Shape{2, 7, 7}, {3, 2}, Inputs::distinct);
  }
  SECTION("avg_pool2d") { check_finite_differences<nn::AvgPool2d>(Shape{2, 6, 6}, {3}, Inputs::normal); }
  SECTION("avg_pool2d, overlapping windows") {
    check_finite_differences<nn::AvgPool2d>(Shape{2, 7, 5}, {3, 1}, Inputs::normal);
  }
  SECTION("relu") { check_finite_differences<nn::ActivationLayer<nn::Relu>>(Shape{2, 3, 3}, {}, Inputs::away_from_zero); }
  SECTION("tanh") { check_finite_differences<nn::ActivationLayer<nn::Tanh>>(Shape{2, 3, 3}, {}, Inputs::normal); }
  SECTION("sigmoid") { check_finite_differences<nn::ActivationLayer<nn::Sigmoid>>(Shape{2, 3, 3}, {}, Inputs::normal); }
  SECTION("identity") { check_finite_differences<nn::ActivationLayer<nn::Identity>>(Shape{5, 1, 1}, {}, Inputs::normal); }
  SECTION("flatten") { check_finite_differences<nn::Flatten>(Shape{2, 3, 4}, {}, Inputs::normal); }
  SECTION("dropout (training mode, a fixed mask)") {
    check_finite_differences<nn::Dropout>(Shape{4, 3, 3}, {0.3f, 7}, Inputs::normal);
  }
  SECTION("the user-written layer") { check_finite_differences<Shift>(Shape{3, 2, 2}, {}, Inputs::normal); }
}

TEST_CASE("the finite-difference check fails a wrong gradient", "[layers]") {
  // Guards the check itself: 10% off in either the input or the parameter gradient must fail.
  const Shape in{2, 5, 5};
  const nn::Conv2d conv(in, {3, 3, 1, 2});
  const auto right = finite_difference_errors(conv, in, 3, Inputs::normal, 5);
  const auto wrong = finite_difference_errors(conv, in, 3, Inputs::normal, 5, 1.1);
  CHECK(right.params < 1e-2);
  CHECK(right.inputs < 1e-2);
  CHECK(wrong.params > 1e-2);
  CHECK(wrong.inputs > 1e-2);
}

// ---- Finite differences through a whole network -----------------------------------------------

namespace {

// Max over (a sample of) parameters of |analytic - numeric| / max(1, |numeric|) of the network's
// summed cross-entropy, evaluate() giving the loss in double.
template <class Net>
double network_gradient_error(const Net& net, std::size_t count, std::uint64_t seed) {
  hpcps::data::Rng rng(seed);
  std::vector<float> params(net.parameter_count()), x(count * net.input_size()), grad(net.parameter_count());
  std::vector<std::int32_t> y(count);
  net.initialize(params.data(), seed);
  for (float& p : params) p += 0.05f * hpcps::data::normal_float(rng);
  for (float& v : x) v = hpcps::data::normal_float(rng);
  for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, net.output_size()));
  const Cpu backend(1);
  auto ws = net.make_workspace(backend, count);
  net.gradient(backend, ws, params.data(), x.data(), y.data(), count, grad.data());
  const float h = 1e-2f;
  double worst = 0.0;
  for (std::size_t i = 0; i < params.size(); i += 1 + params.size() / 150) {
    const float saved = params[i];
    params[i] = saved + h;
    const double up = net.evaluate(backend, ws, params.data(), x.data(), y.data(), count).loss_sum;
    params[i] = saved - h;
    const double down = net.evaluate(backend, ws, params.data(), x.data(), y.data(), count).loss_sum;
    params[i] = saved;
    const double numeric = (up - down) / (2.0 * h);
    worst = std::max(worst, std::abs(numeric - grad[i]) / std::max(1.0, std::abs(numeric)));
  }
  return worst;
}

}  // namespace

TEST_CASE("a small CNN's gradient matches central finite differences", "[layers]") {
  // Smooth activations and average pooling, so no kink sits within a step of any value; the
  // kinked layers are checked on their own above.
  using Net = nn::Sequential<nn::Conv2d, nn::Tanh, nn::AvgPool2d, Shift, nn::Conv2d, nn::Sigmoid, nn::Flatten,
                             nn::Dense, nn::Tanh, nn::Dense>;
  const Net net(Shape{2, 8, 8}, {{3, 3, 1}, {}, {2}, {}, {4, 3, 1, 2}, {}, {}, {6}, {}, {3}});
  CHECK(net.output_shape(4) == Shape{4, 2, 2});
  CHECK(network_gradient_error(net, 4, 3) < 1e-2);
  CHECK(network_gradient_error(net, 4, 4) < 1e-2);
}

TEST_CASE("Sequential reports each trainable layer's gradient as final, last layer first", "[layers]") {
  using Net = nn::Sequential<nn::Conv2d, nn::Relu, nn::MaxPool2d, nn::Flatten, nn::Dense, nn::Relu, nn::Dense>;
  const Net net(Shape{1, 6, 6}, {{2, 3, 1}, {}, {2}, {}, {5}, {}, {3}});
  const Cpu backend(1);
  hpcps::data::Rng rng(8);
  std::vector<float> params(net.parameter_count()), x(4 * net.input_size());
  std::vector<std::int32_t> y{0, 1, 2, 1};
  net.initialize(params.data(), 2);
  for (float& v : x) v = hpcps::data::normal_float(rng);
  auto ws = net.make_workspace(backend, 4);
  std::vector<float> plain(net.parameter_count()), reported(net.parameter_count(), 123.0f);
  net.gradient(backend, ws, params.data(), x.data(), y.data(), 4, plain.data());
  std::vector<std::size_t> begins;
  std::vector<std::vector<float>> snapshots;
  net.gradient(backend, ws, params.data(), x.data(), y.data(), 4, reported.data(), [&](std::size_t begin) {
    begins.push_back(begin);
    snapshots.emplace_back(reported.begin() + static_cast<std::ptrdiff_t>(begin), reported.end());
  });
  CHECK(reported == plain);
  const std::vector<std::size_t> expected{net.parameter_offset(6), net.parameter_offset(4), 0};
  CHECK(begins == expected);
  for (std::size_t i = 0; i < begins.size(); ++i) {
    INFO("report " << i << " at " << begins[i]);
    CHECK(std::equal(snapshots[i].begin(), snapshots[i].end(), plain.begin() + static_cast<std::ptrdiff_t>(begins[i])));
  }
}

// ---- Backends agree ----------------------------------------------------------------------------

namespace {

// `terms`: the longest sum any output, input gradient or parameter gradient of the layer is.
template <class L, class B>
void check_layer_against_cpu(const B& backend, const L& layer, Shape in, Inputs kind, std::size_t terms,
                             std::size_t count, std::uint64_t seed) {
  const hpcps_test::LayerRatios r = hpcps_test::compare_layer(backend, layer, in, kind, terms, count, seed);
  INFO(L::name << " on " << nn::to_string(in) << ", batch " << count << ", " << terms << "-term sums");
  CHECK(r.y <= 1.0);
  CHECK(r.dx <= 1.0);
  CHECK(r.grad <= 1.0);
  CHECK(r.nonzero);  // not vacuous: the outputs are not all zero
}

}  // namespace

#if defined(HPCPS_TEST_THRUST)
#define HPCPS_LAYER_BACKENDS Cpu, CpuEigen, hpcps::backend::ThrustOmp
#else
#define HPCPS_LAYER_BACKENDS Cpu, CpuEigen
#endif

TEMPLATE_TEST_CASE("backends agree with backend::Cpu on every layer", "[layers][backend]", HPCPS_LAYER_BACKENDS) {
  const std::uint64_t base = fresh_seed();
  INFO("HPCPS_TEST_SEED=" << base << " reproduces this run");
  for (int threads : {1, 2}) {
    const TestType backend(threads);
    for (std::uint64_t seed = base; seed < base + 4; ++seed) {
      INFO("threads " << threads << ", seed " << seed);
      const std::size_t n = 5;
      hpcps_test::every_layer_case(
          [&](const auto& layer, Shape in, Inputs kind, std::size_t terms, std::size_t count) {
            check_layer_against_cpu(backend, layer, in, kind, terms, count, seed);
          },
          n);
      const Shape in{3, 4, 4};
      check_layer_against_cpu(backend, nn::Dropout(in, {0.4f, seed}), in, Inputs::normal, 1, n, seed);
      check_layer_against_cpu(backend, Shift(in, {}), in, Inputs::normal, n * 16, n, seed);
    }
  }
}

// ---- backend::Cpu's convolution method (oneDNN) against im2col + GEMM ---------------------------

// The convolution method is chosen by the backend's type.
static_assert(std::is_same_v<hpcps::backend::conv2d_method_t<Cpu>, hpcps::backend::detail::DnnlConv2d>);
static_assert(std::is_same_v<hpcps::backend::conv2d_method_t<CpuEigen>, hpcps::backend::detail::DnnlConv2d>);
#if defined(HPCPS_TEST_THRUST)
static_assert(std::is_same_v<hpcps::backend::conv2d_method_t<hpcps::backend::ThrustOmp>,
                             hpcps::backend::Im2colConv2d<hpcps::backend::ThrustOmp>>);
#endif

namespace {

// One forward and one backward pass of a convolution method on host arrays.
template <class Method>
LayerResult run_conv_method(Method& method, const Cpu& backend, const nn::Conv2d& layer, std::size_t count,
                            const LayerData& d) {
  LayerResult r{std::vector<float>(count * layer.output_shape().size()),
                std::vector<float>(count * layer.geometry().in_size()), std::vector<float>(d.params.size())};
  method.forward(backend, d.params.data(), d.x.data(), count, r.y.data());
  method.backward(backend, d.params.data(), d.x.data(), d.dy.data(), count, r.dx.data(), r.grad.data());
  return r;
}

}  // namespace

TEST_CASE("backend::Cpu's oneDNN convolution agrees with im2col + GEMM at the CNN's shapes", "[layers][backend]") {
  const std::uint64_t seed = fresh_seed();
  INFO("HPCPS_TEST_SEED=" << seed << " reproduces this run");
  struct Case {
    Shape in;
    std::size_t out;
  };
  // The first and second convolutions of the CNN in docs/layers.md, and the second at width 16.
  for (const Case& c : {Case{Shape{1, 28, 28}, 32}, Case{Shape{32, 14, 14}, 64}, Case{Shape{16, 14, 14}, 32}}) {
    const nn::Conv2d layer(c.in, {c.out, 5, 2});
    const std::size_t max_batch = 12;
    for (int threads : {1, 2}) {
      const Cpu backend(threads);
      hpcps::backend::Im2colConv2d<Cpu> im2col(backend, layer.geometry(), c.out, max_batch);
      hpcps::backend::detail::DnnlConv2d onednn(backend, layer.geometry(), c.out, max_batch);
      // A full batch, then a partial one through the same primitives (zero-padded staging).
      for (std::size_t count : {max_batch, std::size_t{5}}) {
        INFO(nn::to_string(c.in) << " -> " << c.out << " channels, threads " << threads << ", batch " << count);
        const LayerData d = draw_layer_data(layer, c.in, count, Inputs::normal, seed + count);
        const LayerData magnitudes = hpcps_test::absolute(d);
        const LayerResult reference = run_conv_method(im2col, backend, layer, count, d);
        const LayerResult bound = run_conv_method(im2col, backend, layer, count, magnitudes);
        const LayerResult got = run_conv_method(onednn, backend, layer, count, d);
        // Longest sums: an output C k k + 1 terms, a weight gradient count P, an input gradient out k k.
        const std::size_t terms =
            std::max({layer.geometry().patch() + 1, count * layer.geometry().out_pixels(), c.out * 25});
        CHECK(worst_ratio(got.y, reference.y, bound.y, terms) <= 1.0);
        CHECK(worst_ratio(got.dx, reference.dx, bound.dx, terms) <= 1.0);
        CHECK(worst_ratio(got.grad, reference.grad, bound.grad, terms) <= 1.0);
        CHECK(std::any_of(got.grad.begin(), got.grad.end(), [](float v) { return v != 0.0f; }));
        CHECK(std::any_of(got.dx.begin(), got.dx.end(), [](float v) { return v != 0.0f; }));
      }
    }
  }
}

TEST_CASE("the oneDNN convolution leaves the caller's OpenMP thread count as it was", "[layers][backend]") {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  const Cpu backend(2);
  const nn::Conv2d layer(Shape{2, 6, 6}, {3, 3, 1});
  auto ws = layer.make_workspace(backend, 4);
  const LayerData d = draw_layer_data(layer, Shape{2, 6, 6}, 4, Inputs::normal, 1);
  std::vector<float> y(4 * layer.output_shape().size());
  layer.forward(backend, ws, d.params.data(), d.x.data(), 4, y.data(), true);
  CHECK(omp_get_max_threads() == 3);
  omp_set_num_threads(saved);
}

TEST_CASE("the backend comparison's bound catches a real error", "[layers][backend]") {
  // A convolution whose result is off in one output element by 1e-4 of its magnitude must fail.
  const Shape in{3, 9, 8};
  const nn::Conv2d layer(in, {4, 3, 1, 2});
  const LayerData d = draw_layer_data(layer, in, 5, Inputs::normal, 3);
  const LayerData magnitudes = hpcps_test::absolute(d);
  const LayerResult reference = run_layer(layer, Cpu(1), in, 5, d);
  const LayerResult bound = run_layer(layer, Cpu(1), in, 5, magnitudes);
  std::vector<float> wrong = reference.y;
  wrong[17] += 1e-4f * bound.y[17];
  CHECK(worst_ratio(reference.y, reference.y, bound.y, 100) == 0.0);
  CHECK(worst_ratio(wrong, reference.y, bound.y, 100) > 1.0);
}

// ---- Max pooling's ties -------------------------------------------------------------------------

TEST_CASE("max pooling routes ties to the first maximum in row-major order, on every path", "[layers]") {
  // ReLU outputs are full of zeros, so ties are the common case in a CNN. Values from {0, 1}: each
  // window's argmax must be its first element equal to the window's maximum. Even widths take
  // backend::Cpu's vectorized 2x2 path, odd widths its row loop, 3x3 windows the general loop.
  const Cpu backend(1);
  hpcps::data::Rng rng(fresh_seed());
  for (const auto& [height, width, window, stride] :
       {std::array<std::size_t, 4>{8, 8, 2, 2}, {28, 28, 2, 2}, {9, 14, 2, 2}, {7, 9, 2, 2}, {9, 9, 3, 2}}) {
    const auto g = hpcps::backend::Window2d::make(3, height, width, window, stride, 0);
    std::vector<float> x(2 * g.in_size()), y(2 * g.out_size());
    std::vector<std::int32_t> argmax(y.size());
    for (float& v : x) v = hpcps::data::uniform_below(rng, 4) == 0 ? 1.0f : 0.0f;
    backend.max_pool(x.data(), 2, g, y.data(), argmax.data());
    std::size_t checked = 0, tied = 0;
    for (std::size_t n = 0; n < 2; ++n) {
      for (std::size_t c = 0; c < g.channels; ++c) {
        const float* plane = x.data() + n * g.in_size() + c * g.in_pixels();
        for (std::size_t oy = 0; oy < g.out_height; ++oy) {
          for (std::size_t ox = 0; ox < g.out_width; ++ox) {
            float best = -1.0f;
            std::size_t first = 0, count = 0;
            for (std::size_t wy = 0; wy < window; ++wy) {
              for (std::size_t wx = 0; wx < window; ++wx) {
                const std::size_t at = (oy * stride + wy) * width + ox * stride + wx;
                if (plane[at] > best) best = plane[at], first = at, count = 0;
                if (plane[at] == best) ++count;
              }
            }
            const std::size_t o = n * g.out_size() + (c * g.out_height + oy) * g.out_width + ox;
            INFO(height << "x" << width << ", window " << window << ", output " << o);
            CHECK(y[o] == best);
            CHECK(static_cast<std::size_t>(argmax[o]) == first);
            ++checked;
            tied += count > 1 ? 1 : 0;
          }
        }
      }
    }
    CHECK(tied > checked / 4);  // not vacuous: many windows hold a tie
  }
}

// ---- Dropout -----------------------------------------------------------------------------------

TEST_CASE("dropout: the same seed repeats the mask, evaluation is the identity", "[layers]") {
  const Shape in{4, 25, 25};
  const Cpu backend(1);
  const std::size_t count = 4, n = count * in.size();
  std::vector<float> x(n);
  hpcps::data::Rng rng(1);
  for (float& v : x) v = 1.0f + hpcps::data::uniform_float(rng);  // never 0: a 0 output means dropped
  const auto passes = [&](const nn::Dropout& layer, int how_many, bool training) {
    auto ws = layer.make_workspace(backend, count);
    std::vector<std::vector<float>> outputs;
    for (int t = 0; t < how_many; ++t) {
      std::vector<float> y(n);
      layer.forward(backend, ws, nullptr, x.data(), count, y.data(), training);
      outputs.push_back(y);
    }
    return outputs;
  };
  const nn::Dropout a(in, {0.25f, 42}), b(in, {0.25f, 42}), other(in, {0.25f, 43});
  const auto first = passes(a, 2, true), again = passes(b, 2, true), different = passes(other, 1, true);
  CHECK(first == again);              // same seed, same sequence of masks
  CHECK(first[0] != first[1]);        // a new mask each training pass
  CHECK(first[0] != different[0]);    // another seed, another mask
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (first[0][i] == 0.0f) {
      ++dropped;
    } else {
      CHECK(first[0][i] == Approx(x[i] / 0.75f));
    }
  }
  // Binomial(10000, 0.25): mean 2500, standard deviation ~43; 6 sigma either way.
  CHECK(dropped > 2500 - 260);
  CHECK(dropped < 2500 + 260);
  const auto evaluation = passes(a, 1, false);
  CHECK(evaluation[0] == x);
}

TEST_CASE("dropout in a network: on in gradient, off in evaluate, repeatable", "[layers]") {
  using Net = nn::Sequential<nn::Dense, nn::Relu, nn::Dropout, nn::Dense>;
  const Net net(Shape{12, 1, 1}, {{40}, {}, {0.5f, 9}, {4}});
  using Plain = nn::Sequential<nn::Dense, nn::Relu, nn::Dense>;
  const Plain plain(Shape{12, 1, 1}, {{40}, {}, {4}});
  REQUIRE(net.parameter_count() == plain.parameter_count());
  const Cpu backend(1);
  hpcps::data::Rng rng(3);
  std::vector<float> params(net.parameter_count()), x(8 * 12);
  std::vector<std::int32_t> y(8);
  net.initialize(params.data(), 5);
  for (float& v : x) v = hpcps::data::normal_float(rng);
  for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, 4));
  auto ws = net.make_workspace(backend, 8);
  auto plain_ws = plain.make_workspace(backend, 8);
  // Evaluation: exactly the network without the dropout layer.
  CHECK(net.evaluate(backend, ws, params.data(), x.data(), y.data(), 8).loss_sum ==
        plain.evaluate(backend, plain_ws, params.data(), x.data(), y.data(), 8).loss_sum);
  std::vector<float> g1(params.size()), g2(params.size()), g_repeat(params.size()), g_plain(params.size());
  net.gradient(backend, ws, params.data(), x.data(), y.data(), 8, g1.data());
  net.gradient(backend, ws, params.data(), x.data(), y.data(), 8, g2.data());
  auto fresh = net.make_workspace(backend, 8);
  net.gradient(backend, fresh, params.data(), x.data(), y.data(), 8, g_repeat.data());
  plain.gradient(backend, plain_ws, params.data(), x.data(), y.data(), 8, g_plain.data());
  CHECK(g1 == g_repeat);  // the same seed and pass: the same gradient
  CHECK(g1 != g2);        // the next step draws a new mask
  CHECK(g1 != g_plain);   // and dropout is active in gradient()
}

// ps::train sets each gradient's SamplePosition (the clock, the first sample's place in the global
// batch): the mask of a sample is then the same whichever worker, in whichever part, computes it,
// and a resumed run draws the masks the uninterrupted one drew.
TEST_CASE("dropout masks follow the samples' position in training", "[layers]") {
  using Net = nn::Sequential<nn::Dense, nn::Relu, nn::Dropout, nn::Dense>;
  const Net net(Shape{12, 1, 1}, {{40}, {}, {0.5f, 9}, {4}});
  static_assert(nn::takes_sample_position_v<Net, Cpu>);
  static_assert(!nn::takes_sample_position_v<nn::Mlp<nn::Relu>, Cpu>);
  const Cpu backend(1);
  hpcps::data::Rng rng(4);
  std::vector<float> params(net.parameter_count()), x(8 * 12);
  std::vector<std::int32_t> y(8);
  net.initialize(params.data(), 5);
  for (float& v : x) v = hpcps::data::normal_float(rng);
  for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, 4));
  // The gradient of samples [first, first + count) of the batch at `step`, from a fresh workspace.
  const auto gradient = [&](std::uint64_t step, std::size_t first, std::size_t count) {
    auto ws = net.make_workspace(backend, 8);
    nn::set_sample_position(net, ws, {step, first});
    std::vector<float> g(params.size());
    net.gradient(backend, ws, params.data(), x.data() + first * 12, y.data() + first, count, g.data());
    return g;
  };
  // Two workers' parts add up to the whole batch's gradient, up to the order of the sums.
  const auto whole = gradient(7, 0, 8), left = gradient(7, 0, 3), right = gradient(7, 3, 5);
  double worst = 0.0;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(left[i]) + right[i] - whole[i]) /
                                std::max(1.0, std::abs(static_cast<double>(whole[i]))));
  }
  CHECK(worst < 1e-5);
  // Placed at the batch's start instead, the second part would take the first rows' masks.
  auto ws = net.make_workspace(backend, 8);
  nn::set_sample_position(net, ws, {7, 0});
  std::vector<float> misplaced(params.size());
  net.gradient(backend, ws, params.data(), x.data() + 3 * 12, y.data() + 3, 5, misplaced.data());
  CHECK(misplaced != right);
  // A fresh workspace placed at step 7 repeats the step-7 mask; another step draws another.
  CHECK(gradient(7, 3, 5) == right);
  CHECK(gradient(8, 3, 5) != right);
}

// ---- nn::Mlp from layers ------------------------------------------------------------------------

TEMPLATE_TEST_CASE("Sequential<Dense, Relu, Dense, Relu, Dense> computes what nn::Mlp<Relu> does", "[layers]", Cpu,
                   CpuEigen) {
  const TestType backend(1);
  const nn::Mlp<nn::Relu> mlp({20, 16, 8, 4});
  using Net = nn::Sequential<nn::Dense, nn::Relu, nn::Dense, nn::Relu, nn::Dense>;
  const Net net(Shape{20, 1, 1}, {{16}, {}, {8}, {}, {4}});
  REQUIRE(net.parameter_count() == mlp.parameter_count());
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    hpcps::data::Rng rng(seed);
    std::vector<float> params(mlp.parameter_count()), x(6 * 20);
    std::vector<std::int32_t> y(6);
    mlp.initialize(params.data(), seed);
    for (float& p : params) p += 0.05f * hpcps::data::normal_float(rng);
    for (float& v : x) v = hpcps::data::normal_float(rng);
    for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, 4));
    auto mlp_ws = mlp.make_workspace(backend, 6);
    auto net_ws = net.make_workspace(backend, 6);
    std::vector<float> mlp_grad(params.size()), net_grad(params.size());
    std::vector<std::size_t> mlp_ready, net_ready;
    const auto mlp_stats = mlp.gradient(backend, mlp_ws, params.data(), x.data(), y.data(), 6, mlp_grad.data(),
                                        [&](std::size_t b) { mlp_ready.push_back(b); });
    const auto net_stats = net.gradient(backend, net_ws, params.data(), x.data(), y.data(), 6, net_grad.data(),
                                        [&](std::size_t b) { net_ready.push_back(b); });
    CHECK(net_stats.loss_sum == Approx(mlp_stats.loss_sum).epsilon(1e-6));
    CHECK(net_stats.correct == mlp_stats.correct);
    CHECK(net_ready == mlp_ready);
    for (std::size_t i = 0; i < params.size(); ++i) {
      INFO("parameter " << i);
      CHECK(std::abs(net_grad[i] - mlp_grad[i]) <= 1e-6f * std::max(1.0f, std::abs(mlp_grad[i])));
    }
    CHECK(net.evaluate(backend, net_ws, params.data(), x.data(), y.data(), 6).loss_sum ==
          Approx(mlp.evaluate(backend, mlp_ws, params.data(), x.data(), y.data(), 6).loss_sum).epsilon(1e-6));
  }
}

// ---- Fusion with activations ------------------------------------------------------------------------

TEMPLATE_TEST_CASE("fusing a layer with its activation changes nothing but the speed", "[layers]",
                   HPCPS_LAYER_BACKENDS) {
  const TestType backend(1);
  const Shape in{2, 8, 8};
  // ReLU fused into both convolutions and the dense layer, and its backward folded into max pooling:
  // the same arithmetic in another order of passes, so the same floats.
  using ReluNet = nn::Sequential<nn::Conv2d, nn::Relu, nn::MaxPool2d, nn::Conv2d, nn::Relu, nn::MaxPool2d,
                                 nn::Flatten, nn::Dense, nn::Relu, nn::Dense>;
  using ReluPlain = nn::Sequential<nn::Conv2d, Unfused<nn::Relu>, nn::MaxPool2d, nn::Conv2d, Unfused<nn::Relu>,
                                   nn::MaxPool2d, nn::Flatten, nn::Dense, Unfused<nn::Relu>, nn::Dense>;
  const ReluNet::Configs relu_configs{{4, 3, 1}, {}, {2}, {6, 3, 1}, {}, {2}, {}, {7}, {}, {3}};
  // tanh and sigmoid: oneDNN's post-ops round differently from std::tanh and std::exp (measured:
  // gradients within 2-8e-5 of the plain network's, relative, or absolute below 1e-3).
  using SmoothNet = nn::Sequential<nn::Conv2d, nn::Tanh, nn::MaxPool2d, nn::Conv2d, nn::Sigmoid, nn::Flatten,
                                   nn::Dense, nn::Tanh, nn::Dense>;
  using SmoothPlain = nn::Sequential<nn::Conv2d, Unfused<nn::Tanh>, nn::MaxPool2d, nn::Conv2d, Unfused<nn::Sigmoid>,
                                     nn::Flatten, nn::Dense, Unfused<nn::Tanh>, nn::Dense>;
  const SmoothNet::Configs smooth_configs{{4, 3, 1}, {}, {2}, {6, 3, 1}, {}, {}, {7}, {}, {3}};
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    INFO("seed " << seed);
    CHECK(fused_against_plain<ReluNet, ReluPlain>(backend, in, relu_configs, seed) == 0.0);
    CHECK(fused_against_plain<SmoothNet, SmoothPlain>(backend, in, smooth_configs, seed) < 5e-4);
  }
}

TEST_CASE("backend::Cpu's convolution applies the ReLU after it itself", "[layers]") {
  // The convolution's own output slot is never written when the activation is fused into it.
  using Net = nn::Sequential<nn::Conv2d, nn::Relu, nn::MaxPool2d, nn::Flatten, nn::Dense>;
  const Net net(Shape{1, 6, 6}, {{2, 3, 1}, {}, {2}, {}, {3}});
  const Cpu backend(1);
  auto ws = net.make_workspace(backend, 2);
  std::vector<float> params(net.parameter_count()), x(2 * net.input_size(), 0.5f), grad(params.size());
  std::vector<std::int32_t> y{0, 2};
  net.initialize(params.data(), 1);
  std::fill(ws.activations[0].begin(), ws.activations[0].end(), std::numeric_limits<float>::quiet_NaN());
  net.gradient(backend, ws, params.data(), x.data(), y.data(), 2, grad.data());
  CHECK(std::all_of(ws.activations[0].begin(), ws.activations[0].end(), [](float v) { return std::isnan(v); }));
  CHECK(std::none_of(ws.activations[1].begin(), ws.activations[1].end(), [](float v) { return std::isnan(v) || v < 0; }));
  CHECK(std::all_of(grad.begin(), grad.end(), [](float v) { return std::isfinite(v); }));
}

// Which compositions run the pooling inside the convolution: backend::Cpu, an activation oneDNN
// has a post-op for, a max pooling; nothing else.
static_assert(nn::detail::has_forward_pooled<nn::Conv2d, Cpu, nn::Relu, nn::MaxPool2d>::value &&
              nn::detail::has_backward_pooled<nn::Conv2d, CpuEigen, nn::Tanh, nn::MaxPool2d>::value);
static_assert(!nn::detail::has_forward_pooled<nn::Conv2d, Cpu, nn::Relu, nn::AvgPool2d>::value);
static_assert(!nn::detail::has_forward_pooled<nn::Conv2d, Cpu, nn::Identity, nn::MaxPool2d>::value);
static_assert(!nn::detail::has_forward_pooled<nn::Dense, Cpu, nn::Relu, nn::MaxPool2d>::value);
#if defined(HPCPS_TEST_THRUST)
static_assert(!nn::detail::has_forward_pooled<nn::Conv2d, hpcps::backend::ThrustOmp, nn::Relu, nn::MaxPool2d>::value);
#endif

TEST_CASE("backend::Cpu pools a convolution's output in oneDNN's layout, with the floats of pooling it apart",
          "[layers]") {
  // Conv2d, Relu, MaxPool2d runs as one on backend::Cpu: oneDNN's max pooling reads the
  // convolution's blocked output and writes its gradient in that layout. The same network pooled
  // by backend.max_pool (pool_in_library(false)) and with nothing fused (Unfused<Relu>) must give
  // the same floats: maxima and their routing are exact, and the convolutions see the same values.
  // The example's input and kernels, a full and a partial batch, 1 and 2 threads.
  using Net = nn::Sequential<nn::Conv2d, nn::Relu, nn::MaxPool2d, nn::Conv2d, nn::Relu, nn::MaxPool2d, nn::Flatten,
                             nn::Dense>;
  using Plain = nn::Sequential<nn::Conv2d, Unfused<nn::Relu>, nn::MaxPool2d, nn::Conv2d, Unfused<nn::Relu>,
                               nn::MaxPool2d, nn::Flatten, nn::Dense>;
  const Net::Configs configs{{8, 5, 2}, {}, {2}, {16, 5, 2}, {}, {2}, {}, {10}};
  const Net net(Shape{1, 28, 28}, configs);
  const Plain plain(Shape{1, 28, 28}, configs);
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  hpcps::data::Rng rng(seed);
  constexpr std::size_t max_batch = 4;
  std::vector<float> params(net.parameter_count()), x(max_batch * net.input_size());
  std::vector<std::int32_t> labels(max_batch);
  net.initialize(params.data(), seed);
  for (float& v : x) v = hpcps::data::normal_float(rng);
  for (auto& l : labels) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, 10));
  const auto is_nan = [](float v) { return std::isnan(v); };
  for (int threads : {1, 2}) {
    const Cpu backend(threads);
    auto in_library = net.make_workspace(backend, max_batch);
    auto apart = net.make_workspace(backend, max_batch);
    auto unfused = plain.make_workspace(backend, max_batch);
    std::get<0>(apart.layers).method.pool_in_library(false);
    std::get<3>(apart.layers).method.pool_in_library(false);
    for (std::size_t i : {0, 1, 3, 4}) {
      std::fill(in_library.activations[i].begin(), in_library.activations[i].end(), std::nanf(""));
    }
    for (std::size_t count : {max_batch, max_batch - 1}) {
      INFO(threads << " threads, " << count << " samples");
      std::vector<float> a(params.size()), b(params.size()), c(params.size());
      const double loss_a = net.gradient(backend, in_library, params.data(), x.data(), labels.data(), count, a.data()).loss_sum;
      const double loss_b = net.gradient(backend, apart, params.data(), x.data(), labels.data(), count, b.data()).loss_sum;
      const double loss_c = plain.gradient(backend, unfused, params.data(), x.data(), labels.data(), count, c.data()).loss_sum;
      CHECK(loss_a == loss_b);
      CHECK(loss_a == loss_c);
      CHECK(a == b);
      CHECK(a == c);
      CHECK(std::count_if(a.begin(), a.end(), [](float v) { return v != 0.0f; }) > static_cast<long>(a.size() / 2));
      CHECK(net.evaluate(backend, in_library, params.data(), x.data(), labels.data(), count).loss_sum == loss_a);
    }
    // The convolutions' and activations' own slots are never written: the pooled output is all.
    for (std::size_t i : {0, 1, 3, 4}) CHECK(std::all_of(in_library.activations[i].begin(), in_library.activations[i].end(), is_nan));
    CHECK(std::get<0>(in_library.layers).method.max_pooling_impl() != "backend");
    CHECK(std::get<3>(in_library.layers).method.max_pooling_impl() != "");
    CHECK(std::get<0>(apart.layers).method.max_pooling_impl() == "backend");
    CHECK_THROWS_AS(std::get<0>(in_library.layers).method.pool_in_library(false), hpcps::Error);
  }
}

// ---- No allocation per step ------------------------------------------------------------------------

namespace {

// Allocations (operator new calls) of each of `steps` training steps after the warm-up, full and
// partial batches in turn, then of one evaluation.
template <class Net, class B>
std::vector<long> allocations_per_step(const Net& net, const B& backend, std::size_t max_batch, std::size_t steps) {
  hpcps::data::Rng rng(1);
  std::vector<float> params(net.parameter_count()), x(max_batch * net.input_size());
  std::vector<std::int32_t> y(max_batch);
  net.initialize(params.data(), 1);
  for (float& v : x) v = hpcps::data::normal_float(rng);
  for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, net.output_size()));
  auto ws = net.make_workspace(backend, max_batch);
  auto device_params = backend.make_buffer(params.size());
  auto grad = backend.make_buffer(params.size());
  backend.upload(params.data(), params.size(), B::data(device_params));
  net.gradient(backend, ws, B::data(device_params), x.data(), y.data(), max_batch, B::data(grad));  // warm-up
  net.evaluate(backend, ws, B::data(device_params), x.data(), y.data(), max_batch);
  std::vector<long> counts;
  for (std::size_t step = 0; step < steps; ++step) {
    const std::size_t count = max_batch - step % 3;  // full and partial batches
    const long before = hpcps_test::allocations.load();
    net.gradient(backend, ws, B::data(device_params), x.data(), y.data(), count, B::data(grad), [](std::size_t) {});
    counts.push_back(hpcps_test::allocations.load() - before);
  }
  const long before = hpcps_test::allocations.load();
  net.evaluate(backend, ws, B::data(device_params), x.data(), y.data(), max_batch);
  counts.push_back(hpcps_test::allocations.load() - before);
  return counts;
}

long total(const std::vector<long>& counts) { return std::accumulate(counts.begin(), counts.end(), 0L); }

using AllocationCnn = nn::Sequential<nn::Conv2d, nn::Relu, nn::MaxPool2d, nn::Conv2d, nn::Tanh, nn::AvgPool2d,
                                     nn::Flatten, nn::Dropout, nn::Dense, nn::Sigmoid, nn::Dense>;
const nn::Shape allocation_cnn_input{1, 12, 12};
const AllocationCnn::Configs allocation_cnn_configs{{4, 3, 1}, {}, {2}, {6, 3, 1}, {}, {2}, {}, {0.2f}, {16}, {}, {5}};

}  // namespace

TEST_CASE("no allocation in a Sequential training step after make_workspace", "[layers]") {
  const AllocationCnn cnn(allocation_cnn_input, allocation_cnn_configs);
  // Every layer but the convolutions, on backend::Cpu: nothing at all.
  using NoConv = nn::Sequential<nn::Relu, nn::MaxPool2d, nn::Tanh, nn::AvgPool2d, nn::Flatten, nn::Dropout, nn::Dense,
                                nn::Sigmoid, nn::Dense>;
  const NoConv no_conv(Shape{4, 12, 12}, {{}, {2}, {}, {2}, {}, {0.2f}, {16}, {}, {5}});
  CHECK(total(allocations_per_step(no_conv, Cpu(1), 8, 5)) == 0);
  CHECK(total(allocations_per_step(no_conv, Cpu(2), 8, 5)) == 0);
#if defined(HPCPS_TEST_THRUST)
  // The im2col convolution (the Thrust backends' method) allocates nothing either.
  CHECK(total(allocations_per_step(cnn, hpcps::backend::ThrustOmp(2), 8, 5)) == 0);
#endif
  // backend::Cpu's convolutions run on oneDNN, whose every primitive call allocates a few small
  // bookkeeping objects (its argument map; no buffers, nothing we can hand it). What must hold:
  // the count is the same for every step, full batch or partial, so nothing is sized by the data
  // or grows, and it stays small (~10 primitive calls per convolution and step).
  for (int threads : {1, 2}) {
    INFO("backend::Cpu(" << threads << ")");
    const std::vector<long> counts = allocations_per_step(cnn, Cpu(threads), 8, 6);
    const std::vector<long> steps(counts.begin(), counts.end() - 1);
    CHECK(std::all_of(steps.begin(), steps.end(), [&](long c) { return c == steps.front(); }));
    CHECK(steps.front() <= 2 * 10 * 16);  // 2 convolutions, ~10 calls, <= 16 allocations per call
    // A larger batch through the same network allocates no more per step.
    CHECK(allocations_per_step(cnn, Cpu(threads), 64, 3).front() == steps.front());
  }
  // The counter is live.
  const long before = hpcps_test::allocations.load();
  std::vector<int> v(10);
  CHECK(hpcps_test::allocations.load() > before);
}

// ---- The user-written layer in a network ------------------------------------------------------------

TEST_CASE("a user-written layer composes like a shipped one", "[layers]") {
  using Net = nn::Sequential<nn::Conv2d, Shift, nn::Relu, nn::Flatten, nn::Dense>;
  const Net net(Shape{1, 6, 6}, {{3, 3}, {}, {}, {}, {4}});
  CHECK(net.output_shape(1) == Shape{3, 4, 4});
  CHECK(net.parameter_count() == (3 * 9 + 3) + 3 + (4 * 48 + 4));
  CHECK_THAT(net.describe(), Catch::Contains("conv2d 3x4x4 -> shift 3x4x4 -> relu 3x4x4"));
}
