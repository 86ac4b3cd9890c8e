// nn::Residual: y = body(x) + shortcut(x) as one layer; its gradient (inputs and parameters)
// against central finite differences with the identity and a convolution shortcut, batch
// normalization inside, a whole small ResNet's gradient, shapes and their errors, the state slots
// of nested blocks, and the backends against backend::Cpu.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hpcps/backend/cpu.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/nn/layers.hpp"
#include "hpcps/nn/network_traits.hpp"
#if defined(HPCPS_TEST_THRUST)
#include "hpcps/backend/thrust.hpp"
#endif

#include "layer_equivalence.hpp"

namespace nn = hpcps::nn;
using hpcps::backend::Cpu;
using hpcps_test::draw_layer_data;
using hpcps_test::Inputs;
using hpcps_test::LayerData;
using hpcps_test::LayerResult;
using hpcps_test::probe_loss;
using hpcps_test::run_layer;
using nn::Shape;

// The blocks of docs/layers.md#residual-blocks.
using Block = nn::Residual<nn::Sequential<nn::Conv2d, nn::BatchNorm2d, nn::Relu, nn::Conv2d, nn::BatchNorm2d>>;
using Down = nn::Residual<nn::Sequential<nn::Conv2d, nn::BatchNorm2d, nn::Relu, nn::Conv2d, nn::BatchNorm2d>,
                          nn::Sequential<nn::Conv2d, nn::BatchNorm2d>>;
// Smooth ones for finite differences: no kink within a step of any value.
using SmoothBlock = nn::Residual<nn::Sequential<nn::Conv2d, nn::Tanh, nn::Conv2d>>;
using SmoothDown = nn::Residual<nn::Sequential<nn::Conv2d, nn::Tanh, nn::Conv2d>, nn::Sequential<nn::Conv2d>>;
using SmoothBnBody = nn::Sequential<nn::Conv2d, nn::BatchNorm2d, nn::Tanh, nn::Conv2d, nn::BatchNorm2d>;
using SmoothBnBlock = nn::Residual<SmoothBnBody>;
using SmoothBnDown = nn::Residual<SmoothBnBody, nn::Sequential<nn::Conv2d, nn::BatchNorm2d>>;

static_assert(nn::is_layer_v<Block> && nn::is_layer_for_v<Block, Cpu> && nn::is_layer_for_v<Down, Cpu>);
static_assert(nn::has_state_slots_v<Block> && !nn::has_state_slots_v<SmoothBlock>);
using SmallResNet = nn::Sequential<nn::Conv2d, nn::BatchNorm2d, nn::Relu, Block, nn::Relu, Down, nn::Relu,
                                   nn::AvgPool2d, nn::Flatten, nn::Dense>;
static_assert(nn::is_network_for_v<SmallResNet, Cpu> && nn::has_state_slots_v<SmallResNet>);

namespace {

const Block::Config block_config{{{4, 3, 1}, {}, {}, {4, 3, 1}, {}}};
const Down::Config down_config{{{6, 3, 1, 2}, {}, {}, {6, 3, 1}, {}}, {{6, 1, 0, 2}, {}}};

SmallResNet small_resnet() {
  return SmallResNet(Shape{2, 8, 8}, {{4, 3, 1}, {}, {}, block_config, {}, down_config, {}, {4}, {}, {3}});
}

bool in_state(const std::vector<nn::StateSlots>& slots, std::size_t i) {
  return std::any_of(slots.begin(), slots.end(), [&](const nn::StateSlots& s) { return i >= s.begin && i < s.begin + s.size; });
}

// Largest |analytic - numeric| / max(1, |numeric|) over (a sample of) the parameters outside the
// state and the inputs; `checked` counts the coordinates.
template <class L>
double layer_finite_difference_error(const L& layer, Shape in, std::size_t count, std::uint64_t seed,
                                     std::size_t& checked) {
  LayerData d = draw_layer_data(layer, in, count, Inputs::normal, seed);
  const LayerResult analytic = run_layer(layer, Cpu(1), in, count, d);
  const std::vector<nn::StateSlots> slots = nn::state_slots_of(layer);
  const float h = 1e-2f;
  double worst = 0.0;
  const auto check = [&](std::vector<float>& values, const std::vector<float>& derivative, bool parameters) {
    for (std::size_t i = 0; i < values.size(); i += 1 + values.size() / 80) {
      if (parameters && in_state(slots, i)) continue;
      const float saved = values[i];
      values[i] = saved + h;
      const double up = probe_loss(layer, in, count, d);
      values[i] = saved - h;
      const double down = probe_loss(layer, in, count, d);
      values[i] = saved;
      const double numeric = (up - down) / (2.0 * h);
      worst = std::max(worst, std::abs(numeric - derivative[i]) / std::max(1.0, std::abs(numeric)));
      ++checked;
    }
  };
  check(d.params, analytic.grad, true);
  check(d.x, analytic.dx, false);
  return worst;
}

}  // namespace

TEST_CASE("a residual block adds its body's output to its input", "[residual]") {
  const Shape in{3, 5, 5};
  using Body = nn::Sequential<nn::Conv2d, nn::Tanh, nn::Conv2d>;
  const nn::Residual<Body> block(in, {{{3, 3, 1}, {}, {3, 3, 1}}});
  const Body body(in, {{3, 3, 1}, {}, {3, 3, 1}});
  CHECK(block.output_shape() == in);
  CHECK(block.parameter_count() == body.parameter_count());
  const std::size_t count = 4;
  const LayerData d = draw_layer_data(block, in, count, Inputs::normal, 3);
  const LayerResult r = run_layer(block, Cpu(1), in, count, d, false);
  const Cpu cpu(1);
  auto ws = body.make_workspace(cpu, count);
  body.forward(cpu, ws, d.params.data(), d.x.data(), count, true);
  const std::vector<float>& from_body = ws.activations.back();
  for (std::size_t i = 0; i < r.y.size(); ++i) CHECK(r.y[i] == from_body[i] + d.x[i]);
}

TEST_CASE("a residual block's gradient matches central finite differences", "[residual]") {
  std::size_t checked = 0;
  for (std::uint64_t seed : {11u, 12u}) {
    INFO("seed " << seed);
    SECTION("identity shortcut") {
      const Shape in{3, 5, 5};
      CHECK(layer_finite_difference_error(SmoothBlock(in, {{{3, 3, 1}, {}, {3, 3, 1}}}), in, 3, seed, checked) < 1e-2);
    }
    SECTION("strided convolution shortcut") {
      const Shape in{2, 6, 6};
      const SmoothDown down(in, {{{4, 3, 1, 2}, {}, {4, 3, 1}}, {{4, 1, 0, 2}}});
      CHECK(down.output_shape() == Shape{4, 3, 3});
      CHECK(layer_finite_difference_error(down, in, 3, seed, checked) < 1e-2);
    }
    SECTION("batch normalization in both branches (training mode)") {
      const Shape in{2, 6, 6};
      const SmoothBnDown down(in, {{{3, 3, 1, 2}, {}, {}, {3, 3, 1}, {}}, {{3, 1, 0, 2}, {}}});
      CHECK(layer_finite_difference_error(down, in, 4, seed, checked) < 1e-2);
    }
  }
  CHECK(checked > 0);
}

TEST_CASE("a small ResNet's gradient matches central finite differences of its training loss", "[residual]") {
  // Training mode throughout (batch statistics): the loss gradient() reports is the one it
  // differentiates. The state slots have no derivative and are skipped. Tanh for ReLU: a batch
  // normalization moves every value of a channel when one input moves, so some ReLU input would
  // cross its kink within the step.
  using SmoothResNet = nn::Sequential<nn::Conv2d, nn::BatchNorm2d, nn::Tanh, SmoothBnBlock, nn::Tanh, SmoothBnDown,
                                      nn::Tanh, nn::AvgPool2d, nn::Flatten, nn::Dense>;
  const SmoothResNet net(Shape{2, 8, 8}, {{4, 3, 1}, {}, {}, {{{4, 3, 1}, {}, {}, {4, 3, 1}, {}}}, {},
                                         {{{6, 3, 1, 2}, {}, {}, {6, 3, 1}, {}}, {{6, 1, 0, 2}, {}}}, {}, {4}, {}, {3}});
  const std::size_t count = 4;
  hpcps::data::Rng rng(7);
  std::vector<float> params(net.parameter_count()), x(count * net.input_size()), grad(net.parameter_count()),
      scratch(net.parameter_count());
  std::vector<std::int32_t> y(count);
  net.initialize(params.data(), 7);
  for (float& p : params) p += 0.05f * hpcps::data::normal_float(rng);
  for (float& v : x) v = hpcps::data::normal_float(rng);
  for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, net.output_size()));
  const Cpu cpu(1);
  auto ws = net.make_workspace(cpu, count);
  net.gradient(cpu, ws, params.data(), x.data(), y.data(), count, grad.data());
  const auto slots = net.state_slots();
  const float h = 1e-2f;
  double worst = 0.0;
  std::size_t checked = 0;
  for (std::size_t i = 0; i < params.size(); i += 1 + params.size() / 200) {
    if (in_state(slots, i)) continue;
    const float saved = params[i];
    params[i] = saved + h;
    const double up = net.gradient(cpu, ws, params.data(), x.data(), y.data(), count, scratch.data()).loss_sum;
    params[i] = saved - h;
    const double down = net.gradient(cpu, ws, params.data(), x.data(), y.data(), count, scratch.data()).loss_sum;
    params[i] = saved;
    const double numeric = (up - down) / (2.0 * h);
    worst = std::max(worst, std::abs(numeric - grad[i]) / std::max(1.0, std::abs(numeric)));
    ++checked;
  }
  CHECK(checked > 100);
  CHECK(worst < 2e-2);
}

TEST_CASE("a residual block's shapes and their errors", "[residual]") {
  const SmallResNet net = small_resnet();
  CHECK(net.output_shape(3) == Shape{4, 8, 8});
  CHECK(net.output_shape(5) == Shape{6, 4, 4});
  CHECK(net.describe().find("residual 6x4x4") != std::string::npos);
  // A body that changes the shape needs a shortcut that does too.
  CHECK_THROWS_WITH((nn::Sequential<nn::Conv2d, Block>(Shape{1, 8, 8}, {{4, 3, 1}, {{{5, 3, 1}, {}, {}, {5, 3, 1}, {}}}})),
                    Catch::Contains("layer 1 (residual), input 4x8x8") &&
                        Catch::Contains("the body's output 5x8x8 differs from the shortcut's 4x8x8") &&
                        Catch::Contains("give the block a shortcut chain"));
  CHECK_THROWS_WITH(Down(Shape{2, 8, 8}, {{{4, 3, 1, 2}, {}, {}, {4, 3, 1}, {}}, {{4, 1, 0, 1}, {}}}),
                    Catch::Contains("the body's output 4x4x4 differs from the shortcut's 4x8x8"));
}

TEST_CASE("nested blocks' state slots point at every batch normalization's running moments", "[residual]") {
  const SmallResNet net = small_resnet();
  std::vector<float> params(net.parameter_count(), -1.0f);
  net.initialize(params.data(), 1);
  const auto slots = net.state_slots();
  // The stem's, two in the block, two in the down block's body and one in its shortcut.
  REQUIRE(slots.size() == 6);
  std::size_t previous_end = 0;
  for (const nn::StateSlots& s : slots) {
    INFO("slot at " << s.begin << ", " << s.size << " values");
    CHECK(s.begin >= previous_end);
    previous_end = s.begin + s.size;
    // E[x] 0 for each channel, then E[x^2] 1: the initial running moments, and nothing else is.
    for (std::size_t i = 0; i < s.size / 2; ++i) CHECK(params[s.begin + i] == 0.0f);
    for (std::size_t i = s.size / 2; i < s.size; ++i) CHECK(params[s.begin + i] == 1.0f);
    // Preceded by beta (0) and gamma (1).
    CHECK(params[s.begin - 1] == 0.0f);
    CHECK(params[s.begin - s.size / 2 - 1] == 1.0f);
  }
  CHECK(previous_end <= net.parameter_count());
  CHECK(slots[0].begin == net.parameter_offset(1) + 8);  // the stem's batch norm: 4 channels
}

// Fusion (docs/layers.md#fusion): batch normalization runs the activation after it both ways, a
// block's sum the one after the block forward only (both branches read its gradient).
static_assert(nn::detail::activates_backward<nn::BatchNorm2d, nn::ActivationLayer<nn::Relu>, Cpu>::value);
static_assert(nn::detail::has_forward_activated<Block, Cpu, nn::Relu>::value &&
              !nn::detail::has_backward_activated<Block, Cpu, nn::Relu>::value);

#if defined(HPCPS_TEST_THRUST)
#define HPCPS_RESIDUAL_BACKENDS Cpu, hpcps::backend::CpuEigen, hpcps::backend::ThrustOmp
#else
#define HPCPS_RESIDUAL_BACKENDS Cpu, hpcps::backend::CpuEigen
#endif

TEMPLATE_TEST_CASE("backends agree with backend::Cpu on residual blocks", "[residual][backend]",
                   HPCPS_RESIDUAL_BACKENDS) {
  // Convolutions differ by summation order between backends (oneDNN, im2col + GEMM), and batch
  // normalization divides by a standard deviation of order 1: differences stay at float rounding
  // of values of order 1-10.
  for (int threads : {1, 2}) {
    const TestType backend(threads);
    const Shape in{2, 6, 6};
    const std::size_t count = 5;
    const Down down(in, {{{3, 3, 1, 2}, {}, {}, {3, 3, 1}, {}}, {{3, 1, 0, 2}, {}}});
    const LayerData d = draw_layer_data(down, in, count, Inputs::normal, 31);
    const LayerResult reference = run_layer(down, Cpu(1), in, count, d);
    const LayerResult got = run_layer(down, backend, in, count, d);
    INFO("threads " << threads);
    CHECK(hpcps_test::worst_scaled_difference(got.y, reference.y) < 1e-4);
    CHECK(hpcps_test::worst_scaled_difference(got.dx, reference.dx) < 1e-4);
    CHECK(hpcps_test::worst_scaled_difference(got.grad, reference.grad) < 1e-4);
    CHECK(std::any_of(got.dx.begin(), got.dx.end(), [](float v) { return v != 0.0f; }));
  }
}

TEMPLATE_TEST_CASE("batch normalization and a block's sum fused with the activation after them change no float",
                   "[residual][fusion]", HPCPS_RESIDUAL_BACKENDS) {
  // The fused passes compute the activation's input with the same expression as the layers apart
  // (the ReLU's in the backward pass recomputed from x), so the ResNet's loss and gradient are the
  // same floats. tanh after batch normalization: the same functions, within a rounding of the
  // derivative's product.
  using Unfused = hpcps_test::Unfused<nn::Relu>;
  using PlainBody = nn::Sequential<nn::Conv2d, nn::BatchNorm2d, Unfused, nn::Conv2d, nn::BatchNorm2d>;
  using PlainBlock = nn::Residual<PlainBody>;
  using PlainDown = nn::Residual<PlainBody, nn::Sequential<nn::Conv2d, nn::BatchNorm2d>>;
  using Plain = nn::Sequential<nn::Conv2d, nn::BatchNorm2d, Unfused, PlainBlock, Unfused, PlainDown, Unfused,
                               nn::AvgPool2d, nn::Flatten, nn::Dense>;
  const SmallResNet::Configs configs{{4, 3, 1}, {}, {}, block_config, {}, down_config, {}, {4}, {}, {3}};
  const Plain::Configs plain_configs{{4, 3, 1},
                                     {},
                                     {},
                                     PlainBlock::Config{{{4, 3, 1}, {}, {}, {4, 3, 1}, {}}},
                                     {},
                                     PlainDown::Config{{{6, 3, 1, 2}, {}, {}, {6, 3, 1}, {}}, {{6, 1, 0, 2}, {}}},
                                     {},
                                     {4},
                                     {},
                                     {3}};
  using SmoothNet = nn::Sequential<nn::Conv2d, nn::BatchNorm2d, nn::Tanh, nn::Flatten, nn::Dense>;
  using SmoothPlain = nn::Sequential<nn::Conv2d, nn::BatchNorm2d, hpcps_test::Unfused<nn::Tanh>, nn::Flatten, nn::Dense>;
  for (int threads : {1, 2}) {
    const TestType backend(threads);
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      INFO("threads " << threads << ", seed " << seed);
      CHECK(hpcps_test::fused_against_plain<SmallResNet, Plain>(backend, Shape{2, 8, 8}, configs, plain_configs,
                                                                seed) == 0.0);
      CHECK(hpcps_test::fused_against_plain<SmoothNet, SmoothPlain>(backend, Shape{2, 6, 6},
                                                                    {{3, 3, 1}, {}, {}, {}, {4}}, seed) < 1e-5);
    }
  }
}

namespace {

// Batch normalization that never reads a convolution's channel-blocked output: nn::Sequential finds
// no blocked pass (the name hides nn::BatchNorm's), so the layers run as they do without the
// hand-over, the convolution's output converted to NCHW and its gradient back.
struct NchwBatchNorm : nn::BatchNorm {
  using nn::BatchNorm::BatchNorm;
  void forward_from_blocked() = delete;
};
static_assert(nn::detail::consumes_blocked<nn::BatchNorm, Cpu, nn::Relu>::value &&
              !nn::detail::consumes_blocked<NchwBatchNorm, Cpu, nn::Relu>::value &&
              nn::detail::produces_blocked<nn::Conv2d, Cpu>::value);

template <class BN>
using WideBody = nn::Sequential<nn::Conv2d, BN, nn::Relu, nn::Conv2d, BN>;
template <class BN>
using WideResNet = nn::Sequential<nn::Conv2d, BN, nn::Relu, nn::Residual<WideBody<BN>>, nn::Relu,
                                  nn::Residual<WideBody<BN>, nn::Sequential<nn::Conv2d, BN>>, nn::Relu,
                                  nn::AvgPool2d, nn::Flatten, nn::Dense>;
// The example's stages at 16 and 32 channels (oneDNN's blocks of 16) on 1 x 10 x 10 inputs.
template <class BN>
WideResNet<BN> wide_resnet() {
  using Net = WideResNet<BN>;
  using Block = std::tuple_element_t<3, typename Net::layer_types>;
  using Down = std::tuple_element_t<5, typename Net::layer_types>;
  return Net(Shape{1, 10, 10}, {{16, 3, 1},
                                {},
                                {},
                                typename Block::Config{{{16, 3, 1}, {}, {}, {16, 3, 1}, {}}},
                                {},
                                typename Down::Config{{{32, 3, 1, 2}, {}, {}, {32, 3, 1}, {}}, {{32, 1, 0, 2}, {}}},
                                {},
                                {5},
                                {},
                                {3}});
}

// Loss and gradient of `count` samples, and the test loss of the same samples, in a workspace for
// max_batch; `handed`: the stem's convolution never wrote its NCHW output in training (it kept it
// blocked for the batch normalization after it).
struct WideRun {
  double loss = 0.0, test_loss = 0.0;
  std::vector<float> grad;
  bool handed = false;
};
template <class Net, class B>
WideRun run_wide(const Net& net, const B& backend, std::size_t count, std::size_t max_batch) {
  hpcps::data::Rng rng(17);
  std::vector<float> params(net.parameter_count()), x(count * net.input_size());
  std::vector<std::int32_t> y(count);
  net.initialize(params.data(), 17);
  for (float& v : params) v += 0.05f * hpcps::data::normal_float(rng);  // running moments off their start
  for (float& v : x) v = hpcps::data::normal_float(rng);
  for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, net.output_size()));
  auto ws = net.make_workspace(backend, max_batch);
  // The stem convolution's NCHW output: NaN until written.
  float* stem = B::data(ws.activations[0]);
  const std::size_t stem_size = max_batch * net.output_shape(0).size();
  std::fill(stem, stem + stem_size, std::nanf(""));
  WideRun r;
  r.grad.resize(params.size());
  r.loss = net.gradient(backend, ws, params.data(), x.data(), y.data(), count, r.grad.data()).loss_sum;
  r.handed = std::all_of(stem, stem + stem_size, [](float v) { return std::isnan(v); });
  r.test_loss = net.evaluate(backend, ws, params.data(), x.data(), y.data(), count).loss_sum;
  return r;
}

}  // namespace

TEMPLATE_TEST_CASE("convolutions that hand batch normalization their channel-blocked output change no float",
                   "[residual][fusion]", Cpu, hpcps::backend::CpuEigen) {
  // Every convolution of this ResNet is followed by batch normalization, and on backend::Cpu keeps
  // its output in oneDNN's blocked layout for it (backend/channel_blocked.hpp). The loss, every
  // gradient and the evaluation are the floats of the same network without the hand-over, also for
  // a batch smaller than the workspace's (the end of an epoch: the rest of the blocked gradient
  // must be zero for the weight gradient).
  const auto handing = wide_resnet<nn::BatchNorm>();
  const auto apart = wide_resnet<NchwBatchNorm>();
  for (int threads : {1, 2}) {
    const TestType backend(threads);
    for (const auto& [count, max_batch] : {std::pair{std::size_t{5}, std::size_t{5}}, std::pair{std::size_t{3}, std::size_t{7}}}) {
      INFO("threads " << threads << ", " << count << " samples in a workspace for " << max_batch);
      const WideRun a = run_wide(handing, backend, count, max_batch), b = run_wide(apart, backend, count, max_batch);
      CHECK(a.handed);
      CHECK_FALSE(b.handed);
      CHECK(a.loss == b.loss);
      CHECK(a.grad == b.grad);
      CHECK(a.test_loss == b.test_loss);
      CHECK(a.test_loss != a.loss);  // evaluation normalised by the running moments, not the batch's
    }
  }
}

TEST_CASE("ps::train's sample position reaches a dropout layer inside a block", "[residual]") {
  // The masks follow (seed, step, first sample) as for a dropout layer outside a block: the same
  // position gives the same gradient, another step or another first sample another one.
  using DropBlock = nn::Residual<nn::Sequential<nn::Conv2d, nn::Dropout, nn::Conv2d>>;
  using Net = nn::Sequential<nn::Conv2d, DropBlock, nn::Flatten, nn::Dense>;
  const Net net(Shape{1, 6, 6}, {{2, 3, 1}, {{{2, 3, 1}, {0.5f, 9}, {2, 3, 1}}}, {}, {3}});
  const std::size_t count = 3;
  hpcps::data::Rng rng(5);
  std::vector<float> params(net.parameter_count()), x(count * net.input_size());
  std::vector<std::int32_t> y{0, 1, 2};
  net.initialize(params.data(), 5);
  for (float& v : x) v = hpcps::data::normal_float(rng);
  const Cpu cpu(1);
  const auto gradient_at = [&](nn::SamplePosition position) {
    auto ws = net.make_workspace(cpu, count);  // fresh: no pass counted before
    net.set_sample_position(ws, position);
    std::vector<float> grad(net.parameter_count());
    net.gradient(cpu, ws, params.data(), x.data(), y.data(), count, grad.data());
    return grad;
  };
  CHECK(gradient_at({3, 8}) == gradient_at({3, 8}));
  CHECK(gradient_at({3, 8}) != gradient_at({4, 8}));
  CHECK(gradient_at({3, 8}) != gradient_at({3, 9}));
}
