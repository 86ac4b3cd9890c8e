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

// Runs gradient() and evaluate() of `net` on backend B and on backend::Cpu with the same
// parameters and a random batch drawn from `seed`.
template <class B, class Network>
Differences compare_with_cpu(const Network& net, const B& backend, std::size_t batch, std::uint64_t seed) {
  hpcps::data::Rng rng(seed);
  std::vector<float> params(net.parameter_count()), x(batch * net.input_size());
  std::vector<std::int32_t> y(batch);
  net.initialize(params.data(), seed);
  for (float& p : params) p += 0.05f * hpcps::data::normal_float(rng);
  for (float& v : x) v = hpcps::data::uniform_float(rng);
  for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, net.output_size()));

  const hpcps::backend::Cpu cpu(1);
  auto cpu_ws = net.make_workspace(cpu, batch);
  std::vector<float> cpu_grad(params.size());
  const auto cpu_stats = net.gradient(cpu, cpu_ws, params.data(), x.data(), y.data(), batch, cpu_grad.data());
  const auto cpu_eval = net.evaluate(cpu, cpu_ws, params.data(), x.data(), y.data(), batch);

  auto ws = net.make_workspace(backend, batch);
  auto device_params = backend.make_buffer(params.size());
  auto device_grad = backend.make_buffer(params.size());
  backend.upload(params.data(), params.size(), B::data(device_params));
  const auto stats = net.gradient(backend, ws, B::data(device_params), x.data(), y.data(), batch, B::data(device_grad));
  const auto eval = net.evaluate(backend, ws, B::data(device_params), x.data(), y.data(), batch);
  std::vector<float> grad(params.size());
  backend.download(B::data(device_grad), grad.size(), grad.data());

  Differences d;
  // evaluate() leaves the last layer's outputs (logits, before the softmax) in the workspace.
  const std::size_t outputs = batch * net.output_size();
  std::vector<float> logits(outputs);
  backend.download(B::data(output_buffer(ws)), outputs, logits.data());
  const float* cpu_logits = hpcps::backend::Cpu::data(output_buffer(cpu_ws));
  for (std::size_t i = 0; i < outputs; ++i) {
    d.forward = std::max(d.forward, std::abs(static_cast<double>(logits[i]) - cpu_logits[i]) /
                                        std::max(1.0, std::abs(static_cast<double>(cpu_logits[i]))));
  }
  d.loss = std::abs(stats.loss_sum - cpu_stats.loss_sum) / std::max(1e-30, std::abs(cpu_stats.loss_sum));
  d.evaluation = std::abs(eval.loss_sum - cpu_eval.loss_sum) / std::max(1e-30, std::abs(cpu_eval.loss_sum));
  for (std::size_t i = 0; i < grad.size(); ++i) {
    d.gradient = std::max(d.gradient, std::abs(static_cast<double>(grad[i]) - cpu_grad[i]) /
                                          std::max(1.0, std::abs(static_cast<double>(cpu_grad[i]))));
  }
  d.correct_reference = cpu_stats.correct;
  d.correct_backend = stats.correct;
  return d;
}

}  // namespace hpcps_test
