#pragma once
// Each layer on a backend against the same layer on backend::Cpu, from the same inputs, within the
// bound derived from the arithmetic: |got - reference| <= 2 n eps (|reference| + sum of |terms|),
// the sum of |terms| being the layer run on |params|, |x| and |dy|. Shared by test_layers.cpp
// (host backends) and test_backends_cuda.cu (the CUDA backend); every_layer_case lists the cases.
// And fused_against_plain: a network nn::Sequential fuses against the same one with Unfused
// activations (test_layers.cpp, test_residual.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "hpcps/backend/cpu.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/nn/layers.hpp"

namespace hpcps_test {

// How a layer's test inputs are drawn: kinks (ReLU at 0, a max pool's ties) must stay further
// from every input than the finite-difference step, or the numeric derivative is meaningless.
enum class Inputs { normal, away_from_zero, distinct };

inline std::vector<float> draw_inputs(std::size_t n, Inputs kind, hpcps::data::Rng& rng) {
  std::vector<float> x(n);
  for (float& v : x) v = hpcps::data::normal_float(rng);
  if (kind == Inputs::away_from_zero) {
    for (float& v : x) v = (v < 0.0f ? -1.0f : 1.0f) * (0.1f + std::abs(v));
  } else if (kind == Inputs::distinct) {
    // A shuffled ladder: any two values differ by at least 0.05.
    for (std::size_t i = 0; i < n; ++i) x[i] = 0.05f * (static_cast<float>(i) - static_cast<float>(n) / 2.0f);
    hpcps::data::shuffle(x.begin(), x.end(), rng);
  }
  return x;
}

struct LayerData {
  std::vector<float> params, x, dy;
};

template <class L>
LayerData draw_layer_data(const L& layer, hpcps::nn::Shape in, std::size_t count, Inputs kind, std::uint64_t seed) {
  hpcps::data::Rng rng(seed);
  LayerData d;
  d.params.resize(layer.parameter_count());
  layer.initialize(d.params.data(), rng);
  for (float& p : d.params) p += 0.1f * hpcps::data::normal_float(rng);  // biases away from 0 too
  d.x = draw_inputs(count * in.size(), kind, rng);
  d.dy.resize(count * layer.output_shape().size());
  for (float& v : d.dy) v = hpcps::data::normal_float(rng);
  return d;
}

struct LayerResult {
  std::vector<float> y, dx, grad;
};

// One forward (training mode) and one backward pass of `layer` on `backend`, from host arrays, in
// a fresh workspace (so a dropout layer uses the mask of its first pass every time).
template <class L, class B>
LayerResult run_layer(const L& layer, const B& backend, hpcps::nn::Shape in, std::size_t count, const LayerData& d,
                      bool backward = true) {
  auto ws = layer.make_workspace(backend, count);
  const auto buffer = [&](const std::vector<float>& host) {
    auto b = backend.make_buffer(std::max<std::size_t>(host.size(), 1));
    if (!host.empty()) backend.upload(host.data(), host.size(), B::data(b));
    return b;
  };
  const std::size_t out = count * layer.output_shape().size();
  auto params = buffer(d.params), x = buffer(d.x), dy = buffer(d.dy);
  auto y = backend.make_buffer(out), dx = backend.make_buffer(count * in.size());
  auto grad = backend.make_buffer(std::max<std::size_t>(d.params.size(), 1));
  layer.forward(backend, ws, B::data(params), B::data(x), count, B::data(y), true);
  LayerResult r{std::vector<float>(out), {}, {}};
  backend.download(B::data(y), out, r.y.data());
  if (!backward) return r;
  layer.backward(backend, ws, B::data(params), B::data(x), B::data(y), B::data(dy), count, B::data(dx), B::data(grad));
  r.dx.resize(count * in.size());
  r.grad.resize(d.params.size());
  backend.download(B::data(dx), r.dx.size(), r.dx.data());
  backend.download(B::data(grad), r.grad.size(), r.grad.data());
  return r;
}

// loss = sum_i dy_i * y_i of the layer's training pass on backend::Cpu, in double: d(loss)/d(anything)
// is what backward computes from dy, so central differences of it check a layer's gradient.
template <class L>
double probe_loss(const L& layer, hpcps::nn::Shape in, std::size_t count, const LayerData& d) {
  const LayerResult r = run_layer(layer, hpcps::backend::Cpu(1), in, count, d, false);
  double loss = 0.0;
  for (std::size_t i = 0; i < r.y.size(); ++i) loss += static_cast<double>(d.dy[i]) * r.y[i];
  return loss;
}

// max |a - b| / (1 + |b|): for layers that divide (batch normalization), where the sum-of-products
// bound below does not apply; compared against a few float ulps of values of order 1-10.
inline double worst_scaled_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / (1.0 + std::abs(static_cast<double>(b[i]))));
  }
  return worst;
}

// |got - reference| <= 2 n eps (|reference| + sum of |terms|) element by element: the worst-case
// rounding of two n-term float sums in any order. The sum of |terms| is the same layer run on
// |params|, |x| and |dy| (every layer here is a sum of products, a selection or an elementwise
// map, for which that run bounds each term's magnitude). Returns the worst ratio error / bound.
inline double worst_ratio(const std::vector<float>& got, const std::vector<float>& reference,
                   const std::vector<float>& magnitude, std::size_t terms) {
  const double eps = std::numeric_limits<float>::epsilon();
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = 2.0 * static_cast<double>(terms) * eps *
                             (std::abs(static_cast<double>(reference[i])) + std::abs(static_cast<double>(magnitude[i]))) +
                         std::numeric_limits<float>::denorm_min();
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - reference[i]) / bound);
  }
  return worst;
}

// The worst error / bound ratio of a layer's outputs, input gradient and parameter gradient on
// `backend` (each must be <= 1), and whether the outputs are not all zero (a check that could
// not fail otherwise).
struct LayerRatios {
  double y = 0.0, dx = 0.0, grad = 0.0;
  bool nonzero = false;
};

// The same data with every value replaced by its absolute value: run through the layer, it gives
// each output's sum of the absolute values of its terms, the scale of the rounding bound.
inline LayerData absolute(const LayerData& d) {
  LayerData magnitudes = d;
  for (auto* v : {&magnitudes.params, &magnitudes.x, &magnitudes.dy}) {
    for (float& f : *v) f = std::abs(f);
  }
  return magnitudes;
}

// `terms`: the longest sum any output, input gradient or parameter gradient of the layer is.
template <class L, class B>
LayerRatios compare_layer(const B& backend, const L& layer, hpcps::nn::Shape in, Inputs kind, std::size_t terms,
                          std::size_t count, std::uint64_t seed) {
  const LayerData d = draw_layer_data(layer, in, count, kind, seed);
  const LayerData magnitudes = absolute(d);
  const hpcps::backend::Cpu cpu(1);
  const LayerResult reference = run_layer(layer, cpu, in, count, d);
  const LayerResult bound = run_layer(layer, cpu, in, count, magnitudes);
  const LayerResult got = run_layer(layer, backend, in, count, d);
  LayerRatios r;
  r.y = worst_ratio(got.y, reference.y, bound.y, terms);
  r.dx = worst_ratio(got.dx, reference.dx, bound.dx, terms);
  r.grad = worst_ratio(got.grad, reference.grad, bound.grad, terms);
  r.nonzero = std::any_of(got.y.begin(), got.y.end(), [](float v) { return v != 0.0f; });
  return r;
}

// Every shipped layer but dropout (its mask takes a seed), at shapes that exercise padding, stride
// and partial windows, batch n: `check(layer, input shape, inputs, terms, count)` for each.
template <class Check>
void every_layer_case(Check&& check, std::size_t n) {
  namespace nn = hpcps::nn;
  using nn::Shape;
  // Terms: a dense output sums in + 1, its weight gradient n, its input gradient units.
  check(nn::Dense(Shape{33, 1, 1}, {17}), Shape{33, 1, 1}, Inputs::normal, 34, n);
  // A convolution output sums C k k + 1 terms, a weight gradient n P, an input gradient
  // out_channels k k.
  check(nn::Conv2d(Shape{3, 9, 8}, {4, 3, 1, 2}), Shape{3, 9, 8}, Inputs::normal, n * 20, n);
  check(nn::Conv2d(Shape{2, 6, 6}, {3, 5, 2}), Shape{2, 6, 6}, Inputs::normal, n * 36, n);
  check(nn::Conv2d(Shape{8, 32, 32}, {2, 5, 2}), Shape{8, 32, 32}, Inputs::normal, 7 * 1024, 7);
  check(nn::MaxPool2d(Shape{3, 8, 8}, {2}), Shape{3, 8, 8}, Inputs::normal, 1, n);
  check(nn::MaxPool2d(Shape{3, 9, 9}, {3, 2}), Shape{3, 9, 9}, Inputs::normal, 4, n);
  check(nn::AvgPool2d(Shape{3, 8, 8}, {2}), Shape{3, 8, 8}, Inputs::normal, 4, n);
  check(nn::AvgPool2d(Shape{3, 9, 7}, {3, 2}), Shape{3, 9, 7}, Inputs::normal, 9, n);
  check(nn::ActivationLayer<nn::Relu>(Shape{3, 4, 4}, {}), Shape{3, 4, 4}, Inputs::normal, 1, n);
  check(nn::ActivationLayer<nn::Tanh>(Shape{3, 4, 4}, {}), Shape{3, 4, 4}, Inputs::normal, 1, n);
  check(nn::ActivationLayer<nn::Sigmoid>(Shape{3, 4, 4}, {}), Shape{3, 4, 4}, Inputs::normal, 1, n);
  check(nn::ActivationLayer<nn::Identity>(Shape{3, 4, 4}, {}), Shape{3, 4, 4}, Inputs::normal, 1, n);
  check(nn::Flatten(Shape{3, 4, 4}, {}), Shape{3, 4, 4}, Inputs::normal, 1, n);
}

// ---- Fusion: a network whose layers nn::Sequential fuses against the same layers apart ----------

// The same activation as a layer nn::Sequential does not recognise, so nothing is fused with it.
template <class Act>
struct Unfused : hpcps::nn::ActivationLayer<Act> {
  using hpcps::nn::ActivationLayer<Act>::ActivationLayer;
};

template <class Net, class B>
std::vector<float> gradient_of(const Net& net, const B& backend, const std::vector<float>& params,
                               const std::vector<float>& x, const std::vector<std::int32_t>& y, double& loss) {
  auto ws = net.make_workspace(backend, y.size());
  auto device_params = backend.make_buffer(params.size());
  auto grad = backend.make_buffer(params.size());
  backend.upload(params.data(), params.size(), B::data(device_params));
  loss = net.gradient(backend, ws, B::data(device_params), x.data(), y.data(), y.size(), B::data(grad)).loss_sum;
  std::vector<float> host(params.size());
  backend.download(B::data(grad), host.size(), host.data());
  return host;
}

// The largest difference of the loss and the gradient, relative (absolute below 1e-3). Plain's
// configs are given apart where their types differ from Fused's (a block with another body).
template <class Fused, class Plain, class B>
double fused_against_plain(const B& backend, hpcps::nn::Shape in, const typename Fused::Configs& configs,
                           const typename Plain::Configs& plain_configs, std::uint64_t seed) {
  const Fused fused(in, configs);
  const Plain plain(in, plain_configs);
  hpcps::data::Rng rng(seed);
  std::vector<float> params(fused.parameter_count()), x(5 * fused.input_size());
  std::vector<std::int32_t> y(5);
  fused.initialize(params.data(), seed);
  for (float& v : x) v = hpcps::data::normal_float(rng);
  for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, fused.output_size()));
  double fused_loss = 0.0, plain_loss = 0.0;
  const std::vector<float> a = gradient_of(fused, backend, params, x, y, fused_loss);
  const std::vector<float> b = gradient_of(plain, backend, params, x, y, plain_loss);
  double worst = std::abs(fused_loss - plain_loss) / std::max(1.0, std::abs(plain_loss));
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(1e-3, std::abs(static_cast<double>(b[i])));
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / scale);
  }
  return worst;
}
template <class Fused, class Plain, class B>
double fused_against_plain(const B& backend, hpcps::nn::Shape in, const typename Fused::Configs& configs,
                           std::uint64_t seed) {
  return fused_against_plain<Fused, Plain>(backend, in, configs, configs, seed);
}

}  // namespace hpcps_test
