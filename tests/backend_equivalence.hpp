#pragma once
// Checks shared by the backend equivalence tests (host systems in test_backends.cpp, CUDA in
// test_backends_cuda.cu): a backend's forward pass, loss and gradients against backend::Cpu on the
// same random data, as the largest relative difference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "hpcps/backend/cpu.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/nn/layers.hpp"
#include "hpcps/nn/mlp.hpp"
#include "hpcps/nn/softmax_regression.hpp"

namespace hpcps_test {

struct Differences {
  double forward = 0.0;    // largest over the network's outputs (logits) of |a - b| / max(1, |b|)
  double loss = 0.0;       // relative, summed loss
  double gradient = 0.0;   // largest over parameters of |a - b| / max(1, |b|)
  double evaluation = 0.0; // relative, evaluate() loss over several chunks
  std::size_t correct_reference = 0, correct_backend = 0;
  int redraws = 0;         // data drawn again because a run sat near a kink (see near_kink)
};

// The buffer holding a network's outputs after evaluate(): the last activation of an MLP, the
// logits of softmax regression.
template <class W, class = void>
struct has_activations : std::false_type {};
template <class W>
struct has_activations<W, std::void_t<decltype(std::declval<W&>().activations)>> : std::true_type {};

template <class Workspace>
auto& output_buffer(Workspace& ws) {
  if constexpr (has_activations<Workspace>::value) {
    return ws.activations.back();
  } else {
    return ws.logits;
  }
}

// Two small CNNs that between them hold every layer, fused pairs included (a convolution with its
// ReLU, tanh or sigmoid, a ReLU folded into max pooling): the example's network at width 4, and
// strided convolutions with smooth activations and average pooling.
using ExampleCnn = hpcps::nn::Sequential<hpcps::nn::Conv2d, hpcps::nn::Relu, hpcps::nn::MaxPool2d, hpcps::nn::Conv2d,
                                         hpcps::nn::Relu, hpcps::nn::MaxPool2d, hpcps::nn::Flatten, hpcps::nn::Dense,
                                         hpcps::nn::Relu, hpcps::nn::Dropout, hpcps::nn::Dense>;
inline ExampleCnn example_cnn() {
  return ExampleCnn(hpcps::nn::Shape{1, 28, 28}, {{4, 5, 2}, {}, {2}, {8, 5, 2}, {}, {2}, {}, {16}, {}, {0.25f}, {10}});
}
using SmoothCnn = hpcps::nn::Sequential<hpcps::nn::Conv2d, hpcps::nn::Tanh, hpcps::nn::AvgPool2d, hpcps::nn::Conv2d,
                                        hpcps::nn::Sigmoid, hpcps::nn::Flatten, hpcps::nn::Dense>;
inline SmoothCnn smooth_cnn() {
  return SmoothCnn(hpcps::nn::Shape{2, 13, 13}, {{3, 3, 1, 2}, {}, {2}, {5, 3, 1}, {}, {}, {6}});
}

// Where the loss is not smooth, two backends that round differently may land on different sides
// of a kink and give gradients that differ by a whole term. One such case failed CI: in a 2x2
// max-pooling window the two largest inputs differed by one ulp (0.560517311 vs 0.560517192), the
// backends picked different maxima, and one weight's gradient differed by 2e-4. Equivalence is
// therefore checked on data away from every kink, within `margin` relative: a ReLU output in
// (0, margin], a max-pooling window's two largest inputs, a sample's two largest logits (its
// argmax decides `correct`).
inline bool near_tie(const float* v, std::size_t n, double margin) {
  if (n < 2) return false;
  double first = -HUGE_VAL, second = -HUGE_VAL;
  for (std::size_t k = 0; k < n; ++k) {
    const double value = v[k];
    if (value > first) {
      second = first;
      first = value;
    } else if (value > second) {
      second = value;
    }
  }
  // A window of zeros is a dead ReLU's: its gradient is zero whichever input is picked.
  return first != 0.0 && first - second < margin * std::max(1.0, std::abs(first));
}

template <class B>
std::vector<float> to_host(const B& backend, const float* data, std::size_t n) {
  std::vector<float> host(n);
  if (n > 0) backend.download(data, n, host.data());
  return host;
}

template <class Network>
struct is_relu_mlp : std::false_type {};
template <>
struct is_relu_mlp<hpcps::nn::Mlp<hpcps::nn::Relu>> : std::true_type {};

template <class Network>
struct is_sequential : std::false_type {};
template <class... Layers>
struct is_sequential<hpcps::nn::Sequential<Layers...>> : std::true_type {};

template <class B, class Network, class Workspace, std::size_t... I>
bool near_kink_in_layers(const Network& net, const B& backend, Workspace& ws, const std::vector<float>& x,
                         std::size_t batch, double margin, std::index_sequence<I...>) {
  const auto layer_near_kink = [&](auto index) {
    constexpr std::size_t i = decltype(index)::value;
    using Layer = typename Network::template layer_type<i>;
    if constexpr (std::is_same_v<Layer, hpcps::nn::ActivationLayer<hpcps::nn::Relu>>) {
      const auto y = to_host(backend, B::data(ws.activations[i]), batch * net.output_shape(i).size());
      return std::any_of(y.begin(), y.end(), [&](float v) { return v > 0.0f && v <= margin; });
    } else if constexpr (std::is_same_v<Layer, hpcps::nn::MaxPool2d>) {
      const auto& g = net.template layer<i>().geometry();
      const auto in = i == 0 ? x : to_host(backend, B::data(ws.activations[i - 1]), batch * g.in_size());
      std::vector<float> window(g.window * g.window);
      for (std::size_t plane = 0; plane < batch * g.channels; ++plane) {
        for (std::size_t oy = 0; oy < g.out_height; ++oy) {
          for (std::size_t ox = 0; ox < g.out_width; ++ox) {
            for (std::size_t wy = 0; wy < g.window; ++wy) {
              for (std::size_t wx = 0; wx < g.window; ++wx) {
                window[wy * g.window + wx] = in[plane * g.in_pixels() + (oy * g.stride + wy) * g.width + ox * g.stride + wx];
              }
            }
            if (near_tie(window.data(), window.size(), margin)) return true;
          }
        }
      }
      return false;
    } else {
      return false;
    }
  };
  return (layer_near_kink(std::integral_constant<std::size_t, I>{}) || ...);
}

template <class B, class Network, class Workspace>
bool near_kink(const Network& net, const B& backend, Workspace& ws, const std::vector<float>& x, std::size_t batch,
               double margin) {
  const std::size_t classes = net.output_size();
  const auto logits = to_host(backend, B::data(output_buffer(ws)), batch * classes);
  for (std::size_t s = 0; s < batch; ++s) {
    if (near_tie(logits.data() + s * classes, classes, margin)) return true;
  }
  if constexpr (is_relu_mlp<Network>::value) {
    // The hidden layers' ReLU outputs (the last layer's are the logits, checked above).
    for (std::size_t l = 0; l + 1 < ws.activations.size(); ++l) {
      const auto y = to_host(backend, B::data(ws.activations[l]), batch * net.layer_sizes()[l + 1]);
      if (std::any_of(y.begin(), y.end(), [&](float v) { return v > 0.0f && v <= margin; })) return true;
    }
  }
  if constexpr (is_sequential<Network>::value) {
    return near_kink_in_layers(net, backend, ws, x, batch, margin, std::make_index_sequence<Network::layer_count>{});
  }
  return false;
}

// What two correct backends may differ by, relative to the sum of the absolute values of the terms:
// a sum of n terms computed in any order is within gamma_n = n u / (1 - n u) of that sum (u = 2^-24,
// fp32's unit roundoff; Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 4.2); each
// backend is that close to the exact value at each of `levels` sums chained through the network,
// so they are within 2 * levels * gamma_n of each other, n the longest sum. The Differences above
// are relative to max(1, |value|): with inputs in [0, 1] and initialised weights, the sums of the
// absolute terms of a logit or a gradient entry are of order 1 (docs/backends.md#tolerance).
inline double summation_bound(std::size_t longest_sum, std::size_t levels) {
  const double u = std::ldexp(1.0, -24);
  const double n = static_cast<double>(longest_sum);
  return 2.0 * static_cast<double>(levels) * n * u / (1.0 - n * u);
}

// Runs gradient() and evaluate() of `net` on backend B and on backend::Cpu with the same
// parameters and a random batch drawn from `seed`, redrawn (up to 20 times) while either run is
// near a kink.
template <class B, class Network>
Differences compare_with_cpu(const Network& net, const B& backend, std::size_t batch, std::uint64_t seed) {
  constexpr double kink_margin = 1e-5;  // 10x the largest activation difference seen between backends
  hpcps::data::Rng rng(seed);
  std::vector<float> params(net.parameter_count()), x(batch * net.input_size());
  std::vector<std::int32_t> y(batch);
  const hpcps::backend::Cpu cpu(1);
  auto cpu_ws = net.make_workspace(cpu, batch);
  auto ws = net.make_workspace(backend, batch);
  std::vector<float> cpu_grad(params.size()), grad(params.size());
  auto device_params = backend.make_buffer(params.size());
  auto device_grad = backend.make_buffer(params.size());
  Differences d;
  for (;; ++d.redraws) {
    net.initialize(params.data(), seed + d.redraws);
    for (float& p : params) p += 0.05f * hpcps::data::normal_float(rng);
    for (float& v : x) v = hpcps::data::uniform_float(rng);
    for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, net.output_size()));

    const auto cpu_stats = net.gradient(cpu, cpu_ws, params.data(), x.data(), y.data(), batch, cpu_grad.data());
    backend.upload(params.data(), params.size(), B::data(device_params));
    const auto stats =
        net.gradient(backend, ws, B::data(device_params), x.data(), y.data(), batch, B::data(device_grad));
    if (d.redraws < 20 && (near_kink(net, cpu, cpu_ws, x, batch, kink_margin) ||
                           near_kink(net, backend, ws, x, batch, kink_margin))) {
      continue;
    }
    backend.download(B::data(device_grad), grad.size(), grad.data());
    d.loss = std::abs(stats.loss_sum - cpu_stats.loss_sum) / std::max(1e-30, std::abs(cpu_stats.loss_sum));
    d.correct_reference = cpu_stats.correct;
    d.correct_backend = stats.correct;
    break;
  }
  const auto cpu_eval = net.evaluate(cpu, cpu_ws, params.data(), x.data(), y.data(), batch);
  const auto eval = net.evaluate(backend, ws, B::data(device_params), x.data(), y.data(), batch);

  // evaluate() leaves the last layer's outputs (logits, before the softmax) in the workspace.
  const std::size_t outputs = batch * net.output_size();
  const auto logits = to_host(backend, B::data(output_buffer(ws)), outputs);
  const float* cpu_logits = hpcps::backend::Cpu::data(output_buffer(cpu_ws));
  for (std::size_t i = 0; i < outputs; ++i) {
    d.forward = std::max(d.forward, std::abs(static_cast<double>(logits[i]) - cpu_logits[i]) /
                                        std::max(1.0, std::abs(static_cast<double>(cpu_logits[i]))));
  }
  d.evaluation = std::abs(eval.loss_sum - cpu_eval.loss_sum) / std::max(1e-30, std::abs(cpu_eval.loss_sum));
  for (std::size_t i = 0; i < grad.size(); ++i) {
    d.gradient = std::max(d.gradient, std::abs(static_cast<double>(grad[i]) - cpu_grad[i]) /
                                          std::max(1.0, std::abs(static_cast<double>(cpu_grad[i]))));
  }
  return d;
}

}  // namespace hpcps_test
