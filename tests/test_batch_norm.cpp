// nn::BatchNorm (2d and 1d) and the server's rule for its running moments: the normalisation, the
// gradient against central finite differences, the pushed moments against a direct sum, the
// moments of a batch split in two adding up to the whole batch's, evaluation by the running
// moments, the backends against backend::Cpu, the ReLU fused into the normalisation against the
// two apart, and optim::RunningStatistics piece by piece.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "hpcps/backend/cpu.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/nn/layers.hpp"
#include "hpcps/optim/adam.hpp"
#include "hpcps/optim/optimizer_traits.hpp"
#include "hpcps/optim/running_statistics.hpp"
#include "hpcps/optim/sgd.hpp"
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

static_assert(nn::is_layer_v<nn::BatchNorm2d> && nn::is_layer_for_v<nn::BatchNorm2d, Cpu>);
static_assert(nn::has_state_slots_v<nn::BatchNorm2d> && !nn::has_state_slots_v<nn::Conv2d>);
static_assert(nn::has_state_slots_v<nn::Sequential<nn::Conv2d, nn::BatchNorm2d, nn::Relu>>);
static_assert(!nn::has_state_slots_v<nn::Sequential<nn::Conv2d, nn::Relu>>);
static_assert(hpcps::optim::is_optimizer_v<hpcps::optim::RunningStatistics<hpcps::optim::Adam>>);

namespace {

// Per channel over samples and pixels, in double: mean and biased variance of x.
struct Moments {
  std::vector<double> mean, var, sum_x, sum_x2;  // sum_x, sum_x2: over samples of the per-sample pixel mean
};
Moments moments_of(const std::vector<float>& x, Shape in, std::size_t count) {
  Moments m;
  const std::size_t c = in.channels, p = in.pixels();
  m.mean.assign(c, 0.0), m.var.assign(c, 0.0), m.sum_x.assign(c, 0.0), m.sum_x2.assign(c, 0.0);
  for (std::size_t ch = 0; ch < c; ++ch) {
    for (std::size_t n = 0; n < count; ++n) {
      for (std::size_t i = 0; i < p; ++i) {
        const double v = x[(n * c + ch) * p + i];
        m.sum_x[ch] += v / static_cast<double>(p);
        m.sum_x2[ch] += v * v / static_cast<double>(p);
      }
    }
    m.mean[ch] = m.sum_x[ch] / static_cast<double>(count);
    m.var[ch] = m.sum_x2[ch] / static_cast<double>(count) - m.mean[ch] * m.mean[ch];
  }
  return m;
}

// A layer's data with the inputs moved off zero and scaled, so a channel's mean and variance are
// far from the normalised ones (a layer that did nothing would fail the checks below).
LayerData shifted_data(const nn::BatchNorm& layer, Shape in, std::size_t count, std::uint64_t seed) {
  LayerData d = draw_layer_data(layer, in, count, Inputs::normal, seed);
  for (std::size_t i = 0; i < d.x.size(); ++i) d.x[i] = 3.0f * d.x[i] + 1.5f + static_cast<float>((i / in.pixels()) % in.channels);
  return d;
}

// Largest |analytic - numeric| / max(1, |numeric|) over gamma, beta and the inputs (training mode).
double finite_difference_error(Shape in, std::size_t count, std::uint64_t seed) {
  const nn::BatchNorm layer(in, {});
  LayerData d = shifted_data(layer, in, count, seed);
  const LayerResult analytic = run_layer(layer, Cpu(1), in, count, d);
  const float h = 1e-2f;
  double worst = 0.0;
  const auto check = [&](std::vector<float>& values, const std::vector<float>& derivative, std::size_t n) {
    for (std::size_t i = 0; i < n; i += 1 + n / 60) {
      const float saved = values[i];
      values[i] = saved + h;
      const double up = probe_loss(layer, in, count, d);
      values[i] = saved - h;
      const double down = probe_loss(layer, in, count, d);
      values[i] = saved;
      const double numeric = (up - down) / (2.0 * h);
      worst = std::max(worst, std::abs(numeric - derivative[i]) / std::max(1.0, std::abs(numeric)));
    }
  };
  check(d.params, analytic.grad, 2 * in.channels);  // gamma and beta; the state has no derivative
  check(d.x, analytic.dx, d.x.size());
  return worst;
}

}  // namespace

TEST_CASE("batch normalization: each channel comes out with mean beta and standard deviation gamma", "[batch_norm]") {
  for (const Shape in : {Shape{3, 4, 5}, Shape{6, 1, 1}}) {
    const std::size_t count = 7;
    const nn::BatchNorm layer(in, {});
    const LayerData d = shifted_data(layer, in, count, 3);
    const LayerResult r = run_layer(layer, Cpu(1), in, count, d, false);
    const Moments m = moments_of(r.y, in, count);
    for (std::size_t c = 0; c < in.channels; ++c) {
      INFO(nn::to_string(in) << ", channel " << c);
      const double gamma = d.params[c], beta = d.params[in.channels + c];
      CHECK(m.mean[c] == Approx(beta).margin(1e-5));
      // var(x) / (var(x) + eps) of gamma^2: eps = 1e-5 against a variance of ~9.
      CHECK(m.var[c] == Approx(gamma * gamma).epsilon(1e-4));
    }
  }
}

// The kernels gather E[x] and E[x^2] in one pass, in double, and take var = E[x^2] - E[x]^2: a
// channel whose mean is 1000 standard deviations from zero must still come out normalised. 29
// pixels: the kernels' 8 partial sums and a tail of 5.
TEST_CASE("batch normalization keeps the variance of a channel far from zero", "[batch_norm]") {
  const Shape in{2, 1, 29};
  const std::size_t count = 9;
  const nn::BatchNorm layer(in, {});
  LayerData d = draw_layer_data(layer, in, count, Inputs::normal, 5);
  for (float& v : d.x) v = 1000.0f + v;
  const LayerResult r = run_layer(layer, Cpu(1), in, count, d, false);
  const Moments m = moments_of(r.y, in, count);
  for (std::size_t c = 0; c < in.channels; ++c) {
    INFO("channel " << c);
    const double gamma = d.params[c], beta = d.params[in.channels + c];
    CHECK(m.mean[c] == Approx(beta).margin(1e-4));
    CHECK(m.var[c] == Approx(gamma * gamma).epsilon(1e-3));
  }
}

TEST_CASE("batch normalization's gradient matches central finite differences", "[batch_norm]") {
  for (std::uint64_t seed : {11u, 12u}) {
    INFO("seed " << seed);
    CHECK(finite_difference_error(Shape{2, 3, 3}, 3, seed) < 1e-2);
    CHECK(finite_difference_error(Shape{5, 1, 1}, 4, seed) < 1e-2);  // BatchNorm1d: one channel per feature
  }
}

TEST_CASE("batch normalization pushes the batch's summed moments, and two halves add up to the whole",
          "[batch_norm]") {
  const Shape in{3, 4, 4};
  const std::size_t count = 8, c = in.channels;
  const nn::BatchNorm layer(in, {});
  const LayerData d = shifted_data(layer, in, count, 5);
  const LayerResult whole = run_layer(layer, Cpu(1), in, count, d);
  const Moments m = moments_of(d.x, in, count);
  for (std::size_t ch = 0; ch < c; ++ch) {
    INFO("channel " << ch);
    CHECK(whole.grad[2 * c + ch] == Approx(m.sum_x[ch]).epsilon(1e-6));
    CHECK(whole.grad[3 * c + ch] == Approx(m.sum_x2[ch]).epsilon(1e-6));
  }
  // Two workers with half the batch each: their pushed moments sum to the whole batch's.
  const std::size_t half = count / 2, per = half * in.size();
  LayerData first = d, second = d;
  first.x.assign(d.x.begin(), d.x.begin() + static_cast<std::ptrdiff_t>(per));
  second.x.assign(d.x.begin() + static_cast<std::ptrdiff_t>(per), d.x.end());
  first.dy.resize(per), second.dy.assign(d.dy.begin() + static_cast<std::ptrdiff_t>(per), d.dy.end());
  const LayerResult a = run_layer(layer, Cpu(1), in, half, first), b = run_layer(layer, Cpu(1), in, half, second);
  for (std::size_t i = 2 * c; i < 4 * c; ++i) CHECK(a.grad[i] + b.grad[i] == Approx(whole.grad[i]).epsilon(1e-6));
  // While gamma's gradient, a function of each half's own statistics, is not the sum (a check
  // that the halves were normalised on their own).
  double gap = 0.0;
  for (std::size_t i = 0; i < c; ++i) gap = std::max(gap, std::abs(double(a.grad[i]) + b.grad[i] - whole.grad[i]));
  CHECK(gap > 1e-3);
}

TEST_CASE("evaluation normalises by the running moments in the parameters", "[batch_norm]") {
  const Shape in{2, 3, 3};
  const std::size_t count = 6, c = in.channels;
  const nn::BatchNorm layer(in, {});
  LayerData d = shifted_data(layer, in, count, 9);
  const Moments m = moments_of(d.x, in, count);
  // Running moments equal to this batch's: evaluation gives what training gives.
  for (std::size_t ch = 0; ch < c; ++ch) {
    d.params[2 * c + ch] = static_cast<float>(m.mean[ch]);
    d.params[3 * c + ch] = static_cast<float>(m.sum_x2[ch] / static_cast<double>(count));
  }
  const Cpu cpu(1);
  auto ws = layer.make_workspace(cpu, count);
  std::vector<float> trained(d.x.size()), evaluated(d.x.size());
  layer.forward(cpu, ws, d.params.data(), d.x.data(), count, trained.data(), true);
  layer.forward(cpu, ws, d.params.data(), d.x.data(), count, evaluated.data(), false);
  for (std::size_t i = 0; i < trained.size(); ++i) CHECK(evaluated[i] == Approx(trained[i]).margin(1e-4));
  // Other running moments, another output: evaluation reads them.
  d.params[2 * c] += 1.0f;
  layer.forward(cpu, ws, d.params.data(), d.x.data(), count, evaluated.data(), false);
  CHECK(std::abs(evaluated[0] - trained[0]) > 0.1f);
}

TEST_CASE("batch normalization's parameters: gamma 1, beta 0, then the state, E[x] 0 and E[x^2] 1",
          "[batch_norm]") {
  const nn::BatchNorm layer(Shape{4, 2, 2}, {1e-5f, 0.25f});
  std::vector<float> p(layer.parameter_count(), -7.0f);
  hpcps::data::Rng rng(1);
  layer.initialize(p.data(), rng);
  CHECK(p == std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1});
  const auto slots = layer.state_slots();
  REQUIRE(slots.size() == 1);
  CHECK(slots[0].begin == 8);
  CHECK(slots[0].size == 8);
  CHECK(slots[0].momentum == 0.25f);
  CHECK_THROWS_WITH(nn::BatchNorm(Shape{4, 1, 1}, {1e-5f, 0.0f}), Catch::Contains("momentum must be in (0, 1]"));
  CHECK_THROWS_WITH(nn::BatchNorm(Shape{4, 1, 1}, {0.0f, 0.1f}), Catch::Contains("epsilon must be > 0"));
}

#if defined(HPCPS_TEST_THRUST)
#define HPCPS_BN_BACKENDS Cpu, hpcps::backend::CpuEigen, hpcps::backend::ThrustOmp, hpcps::backend::ThrustCpp
#else
#define HPCPS_BN_BACKENDS Cpu, hpcps::backend::CpuEigen
#endif

TEMPLATE_TEST_CASE("backends agree with backend::Cpu on batch normalization", "[batch_norm][backend]",
                   HPCPS_BN_BACKENDS) {
  // The same kernels in the same order on every backend, with double sums per channel: what
  // differs is float rounding of the elementwise steps, a few ulps of values of order 1-10.
  for (int threads : {1, 2}) {
    const TestType backend(threads);
    for (const Shape in : {Shape{3, 5, 4}, Shape{7, 1, 1}}) {
      const std::size_t count = 6;
      const nn::BatchNorm layer(in, {});
      const LayerData d = shifted_data(layer, in, count, 21);
      const LayerResult reference = run_layer(layer, Cpu(1), in, count, d);
      const LayerResult got = run_layer(layer, backend, in, count, d);
      INFO("threads " << threads << ", " << nn::to_string(in));
      CHECK(hpcps_test::worst_scaled_difference(got.y, reference.y) < 1e-5);
      CHECK(hpcps_test::worst_scaled_difference(got.dx, reference.dx) < 1e-5);
      CHECK(hpcps_test::worst_scaled_difference(got.grad, reference.grad) < 1e-5);
      // Evaluation mode too.
      auto ws = layer.make_workspace(backend, count);
      auto params = backend.make_buffer(d.params.size()), x = backend.make_buffer(d.x.size()),
           y = backend.make_buffer(d.x.size());
      backend.upload(d.params.data(), d.params.size(), TestType::data(params));
      backend.upload(d.x.data(), d.x.size(), TestType::data(x));
      layer.forward(backend, ws, TestType::data(params), TestType::data(x), count, TestType::data(y), false);
      std::vector<float> evaluated(d.x.size()), expected(d.x.size());
      backend.download(TestType::data(y), evaluated.size(), evaluated.data());
      const Cpu cpu(1);
      auto cpu_ws = layer.make_workspace(cpu, count);
      layer.forward(cpu, cpu_ws, d.params.data(), d.x.data(), count, expected.data(), false);
      CHECK(hpcps_test::worst_scaled_difference(evaluated, expected) < 1e-5);
    }
  }
}

TEMPLATE_TEST_CASE("batch normalization with the activation after it fused gives the floats of the two apart",
                   "[batch_norm][backend]", HPCPS_BN_BACKENDS) {
  // forward_activated / backward_activated (what nn::Sequential runs for BatchNorm2d, Relu) against
  // forward, the activation layer's passes and backward. The backward pass works through a plane
  // in chunks of 256 values: 17 x 19 has a plane of 323 (a chunk, then 64 values, then a 3-value
  // tail of the 8 lanes), 28 x 28 three chunks and a part.
  for (int threads : {1, 2}) {
    const TestType backend(threads);
    for (const Shape in : {Shape{3, 17, 19}, Shape{2, 28, 28}, Shape{3, 5, 4}, Shape{7, 1, 1}}) {
      const std::size_t count = 3, n = count * in.size();
      const nn::BatchNorm layer(in, {});
      const LayerData d = shifted_data(layer, in, count, 23);
      auto ws = layer.make_workspace(backend, count);
      const auto buffer = [&](const std::vector<float>& host) {
        auto b = backend.make_buffer(host.size());
        backend.upload(host.data(), host.size(), TestType::data(b));
        return b;
      };
      const auto host = [&](const auto& b, std::size_t size) {
        std::vector<float> v(size);
        backend.download(TestType::data(b), size, v.data());
        return v;
      };
      auto params = buffer(d.params), x = buffer(d.x), dy = buffer(d.dy);
      auto y = backend.make_buffer(n), activated = backend.make_buffer(n), g = backend.make_buffer(n),
           dx = backend.make_buffer(n), grad = backend.make_buffer(d.params.size());
      // Apart: normalise, ReLU, the ReLU's gradient, the normalisation's backward pass.
      layer.forward(backend, ws, TestType::data(params), TestType::data(x), count, TestType::data(y), true);
      backend.template activation<nn::Relu>(TestType::data(y), n, TestType::data(activated));
      backend.template activation_gradient<nn::Relu>(TestType::data(dy), TestType::data(activated), n,
                                                     TestType::data(g));
      layer.backward(backend, ws, TestType::data(params), TestType::data(x), TestType::data(y), TestType::data(g),
                     count, TestType::data(dx), TestType::data(grad));
      const std::vector<float> y_apart = host(activated, n), dx_apart = host(dx, n),
                               grad_apart = host(grad, d.params.size());
      // Fused, with Act's output never read back (NaN in y).
      layer.template forward_activated<nn::Relu>(backend, ws, TestType::data(params), TestType::data(x), count,
                                                 TestType::data(activated), true);
      const std::vector<float> y_fused = host(activated, n);
      backend.upload(std::vector<float>(n, std::nanf("")).data(), n, TestType::data(y));
      layer.template backward_activated<nn::Relu>(backend, ws, TestType::data(params), TestType::data(x),
                                                  TestType::data(y), TestType::data(dy), count, TestType::data(dx),
                                                  TestType::data(grad));
      INFO("threads " << threads << ", " << nn::to_string(in));
      CHECK(y_fused == y_apart);
      CHECK(host(dx, n) == dx_apart);
      CHECK(host(grad, d.params.size()) == grad_apart);
      CHECK(std::count(y_apart.begin(), y_apart.end(), 0.0f) > static_cast<std::ptrdiff_t>(n / 4));  // the ReLU cut
    }
  }
}

namespace {

// x in NCHW laid out channel-blocked, as a convolution on backend::Cpu hands it over.
std::vector<float> to_blocked(const std::vector<float>& x, Shape in, std::size_t count, std::size_t block) {
  std::vector<float> out(x.size());
  const hpcps::backend::ChannelBlocked view{out.data(), block};
  for (std::size_t n = 0; n < count; ++n) {
    for (std::size_t c = 0; c < in.channels; ++c) {
      for (std::size_t p = 0; p < in.pixels(); ++p) {
        out[view.index(n, c, p, in.channels, in.pixels())] = x[(n * in.channels + c) * in.pixels() + p];
      }
    }
  }
  return out;
}

// Both passes of batch normalization (with Act after it) over NCHW x and over x blocked: what the
// training passes write, for comparison float by float.
struct BatchNormOutputs {
  std::vector<float> y, mean, inv_std, moments, affine, dx, dgamma, dbeta;
  bool operator==(const BatchNormOutputs& o) const {
    return y == o.y && mean == o.mean && inv_std == o.inv_std && moments == o.moments && affine == o.affine &&
           dx == o.dx && dgamma == o.dgamma && dbeta == o.dbeta;
  }
};
template <class Act, class B>
BatchNormOutputs batch_norm_passes(const B& backend, const LayerData& d, Shape in, std::size_t count,
                                   std::size_t block) {
  const std::size_t c = in.channels, p = in.pixels(), n = count * in.size();
  BatchNormOutputs o{std::vector<float>(n), std::vector<float>(c), std::vector<float>(c), std::vector<float>(2 * c),
                     std::vector<float>(2 * c), std::vector<float>(n), std::vector<float>(c), std::vector<float>(c)};
  const float* gamma = d.params.data();
  if (block == 0) {
    backend.template batch_norm_train<Act>(d.x.data(), count, c, p, gamma, gamma + c, 1e-5f, o.y.data(),
                                           o.mean.data(), o.inv_std.data(), o.moments.data(), o.affine.data());
    backend.template batch_norm_backward<Act>(d.x.data(), d.dy.data(), count, c, p, gamma, o.mean.data(),
                                              o.inv_std.data(), o.dx.data(), o.dgamma.data(), o.dbeta.data(),
                                              o.affine.data());
    return o;
  }
  std::vector<float> x = to_blocked(d.x, in, count, block), dx(n, std::nanf(""));
  backend.template batch_norm_train<Act>(hpcps::backend::ChannelBlocked{x.data(), block}, count, c, p, gamma,
                                         gamma + c, 1e-5f, o.y.data(), o.mean.data(), o.inv_std.data(),
                                         o.moments.data(), o.affine.data());
  backend.template batch_norm_backward<Act>(hpcps::backend::ChannelBlocked{x.data(), block}, d.dy.data(), count, c,
                                            p, gamma, o.mean.data(), o.inv_std.data(),
                                            hpcps::backend::ChannelBlocked{dx.data(), block}, o.dgamma.data(),
                                            o.dbeta.data(), o.affine.data());
  // Back to NCHW, read through the same index map the kernels use.
  const hpcps::backend::ChannelBlocked view{dx.data(), block};
  for (std::size_t s = 0; s < count; ++s) {
    for (std::size_t ch = 0; ch < c; ++ch) {
      for (std::size_t i = 0; i < p; ++i) o.dx[(s * c + ch) * p + i] = dx[view.index(s, ch, i, c, p)];
    }
  }
  return o;
}

}  // namespace

TEMPLATE_TEST_CASE("batch normalization over a channel-blocked input gives the floats of the NCHW kernels",
                   "[batch_norm][backend]", Cpu, hpcps::backend::CpuEigen) {
  // What a convolution on backend::Cpu hands over (nChw8c, nChw16c): every value meets the same
  // lane of the same double sums in the same order, so y, the statistics, dx and the parameter
  // gradient are equal bit for bit, with and without the ReLU after it. Planes of 323 (17 x 19:
  // tiles of 32 pixels, 3-value lane tail), 49 (7 x 7) and 1 pixel; 1 to 4 groups of 8 channels.
  for (int threads : {1, 2}) {
    const TestType backend(threads);
    for (const Shape in : {Shape{16, 17, 19}, Shape{32, 7, 7}, Shape{8, 5, 4}, Shape{16, 1, 1}}) {
      for (const std::size_t block : {std::size_t{8}, std::size_t{16}}) {
        if (in.channels % block != 0) continue;
        const std::size_t count = 3;
        const nn::BatchNorm layer(in, {});
        LayerData d = shifted_data(layer, in, count, 29);
        INFO("threads " << threads << ", " << nn::to_string(in) << ", blocks of " << block);
        const BatchNormOutputs plain = batch_norm_passes<nn::Identity>(backend, d, in, count, 0);
        CHECK(batch_norm_passes<nn::Identity>(backend, d, in, count, block) == plain);
        const BatchNormOutputs relu = batch_norm_passes<nn::Relu>(backend, d, in, count, 0);
        CHECK(batch_norm_passes<nn::Relu>(backend, d, in, count, block) == relu);
        CHECK(relu.dx != plain.dx);  // the ReLU's derivative took part
      }
    }
  }
  // A layout the kernels cannot read is an error, not a wrong answer.
  std::vector<float> x(3 * 12), y(x.size()), stats(4 * 12);
  CHECK_THROWS_WITH(Cpu(1).batch_norm_train(hpcps::backend::ChannelBlocked{x.data(), 8}, 3, 12, 1, stats.data(),
                                            stats.data(), 1e-5f, y.data(), stats.data(), stats.data(), stats.data()),
                    Catch::Contains("needs blocks of 8 or 16 channels that divide its 12"));
}

// ---- The server's rule: the optimizer outside the state, the running average inside -----------

TEST_CASE("optim::RunningStatistics steps the parameters and averages the state, in any pieces", "[batch_norm][optim]") {
  using Rule = hpcps::optim::RunningStatistics<hpcps::optim::MomentumSgd>;
  const std::size_t n = 12;
  // State at [3, 6) with momentum 0.5 and [9, 12) with momentum 0.25.
  const Rule rule(hpcps::optim::MomentumSgd(0.1f), {{3, 6, 0.5f}, {9, 12, 0.25f}});
  std::vector<float> params(n), sum(n);
  for (std::size_t i = 0; i < n; ++i) params[i] = 1.0f + static_cast<float>(i), sum[i] = 4.0f * static_cast<float>(i) - 10.0f;
  const float scale = 0.25f;

  auto whole = params;
  auto state = rule.make_state(n);
  rule.step(state, 0, whole.data(), sum.data(), scale, n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    INFO("element " << i);
    const float mean = sum[i] * scale;
    if (i >= 3 && i < 6) {
      CHECK(whole[i] == params[i] + 0.5f * (mean - params[i]));
      CHECK(state.velocity[i] == 0.0f);  // the optimizer never saw it
    } else if (i >= 9) {
      CHECK(whole[i] == params[i] + 0.25f * (mean - params[i]));
    } else {
      CHECK(whole[i] == params[i] - 0.1f * mean);  // first momentum step: v = g
      CHECK(state.velocity[i] == mean);
    }
  }
  // A server applies its shard piece by piece as the pieces arrive: every cut gives the same bits.
  for (std::size_t cut = 1; cut < n; ++cut) {
    auto pieces = params;
    auto s = rule.make_state(n);
    rule.step(s, 0, pieces.data(), sum.data(), scale, cut, 0);
    rule.step(s, cut, pieces.data() + cut, sum.data() + cut, scale, n - cut, 0);
    INFO("cut at " << cut);
    CHECK(pieces == whole);
    CHECK(s.velocity == state.velocity);
  }
  CHECK_THROWS_WITH(Rule(hpcps::optim::MomentumSgd(0.1f), {{3, 6, 0.5f}, {5, 8, 0.5f}}),
                    Catch::Contains("out of order"));
  CHECK_THROWS_WITH(Rule(hpcps::optim::MomentumSgd(0.1f), {{3, 6, 0.0f}}), Catch::Contains("momentum"));
}
