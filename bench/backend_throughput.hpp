#pragma once
// Gradient throughput of one backend on one network (an MLP shape, or any nn network), side by side with backend::Cpu in the same
// run: samples/s (median and range of the repeats), GFLOP/s from the GEMM FLOP count, and the
// largest relative difference of its gradient from the CPU backend's. Used by
// backend_throughput.cpp (host backends) and backend_throughput_cuda.cu (the CUDA backend).
#include <cstdio>
#include <string>
#include <vector>

#include "../tests/backend_equivalence.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/metrics/json.hpp"
#include "hpcps/nn/mlp.hpp"
#include "timing.hpp"

namespace hpcps_bench {

inline double mlp_training_flops(const std::vector<std::size_t>& sizes, std::size_t batch) {
  double flops = 0.0;  // forward, weight gradient, and input gradient except for the first layer
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) flops += 2.0 * batch * sizes[l] * sizes[l + 1] * (l == 0 ? 2 : 3);
  return flops;
}

// A batch for `net`: its initial parameters (from `seed`) in `params`, uniform inputs in [0, 1)
// and uniform labels.
template <class Network, class Params>
void draw_problem(const Network& net, std::size_t batch, std::uint64_t seed, Params& params, std::vector<float>& x,
                  std::vector<std::int32_t>& y) {
  hpcps::data::Rng rng(seed);
  params.resize(net.parameter_count());
  x.resize(batch * net.input_size());
  y.resize(batch);
  net.initialize(params.data(), seed);
  for (float& v : x) v = hpcps::data::uniform_float(rng);
  for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, net.output_size()));
}

// Times Network::gradient on Backend (median and range of `repeats`), writes one JSON object and
// returns the median samples/s. `flops` is one batch's count, for GFLOP/s.
template <class Backend, class Network>
double measure_network(hpcps::metrics::JsonWriter& json, const char* label, const Network& net, std::size_t batch,
                       int threads, int repeats, double flops) {
  const Backend backend(threads);
  std::vector<float> params, x, probe(1);
  std::vector<std::int32_t> y;
  draw_problem(net, batch, 3, params, x, y);
  auto ws = net.make_workspace(backend, batch);
  auto device_params = backend.make_buffer(params.size());
  auto device_grad = backend.make_buffer(params.size());
  backend.upload(params.data(), params.size(), Backend::data(device_params));
  const auto step = time_per_call(
      [&] {
        net.gradient(backend, ws, Backend::data(device_params), x.data(), y.data(), batch, Backend::data(device_grad));
        backend.download(Backend::data(device_grad), 1, probe.data());  // waits for a device to finish
      },
      repeats);
  // The comparison redraws its data while any ReLU sits near its kink, which a large batch of a
  // wide network nearly always has: up to 20 CPU gradients, longer than the timing itself.
  const bool compared = batch <= 256;
  const auto diff = compared ? hpcps_test::compare_with_cpu(net, backend, batch, 11) : hpcps_test::Differences{};
  json.begin_object();
  json.field("backend", label).field("network", net.describe()).field("batch", batch).field("threads", threads);
  json.field("seconds_median", step.median).field("seconds_min", step.low).field("seconds_max", step.high);
  json.field("samples_per_second_median", static_cast<double>(batch) / step.median);
  json.field("samples_per_second_min", static_cast<double>(batch) / step.high);
  json.field("samples_per_second_max", static_cast<double>(batch) / step.low);
  json.field("gflops_median", flops / step.median / 1e9);
  if (compared) {
    json.field("output_max_relative_difference_vs_cpu", diff.forward);
    json.field("gradient_max_relative_difference_vs_cpu", diff.gradient).field("loss_relative_difference_vs_cpu", diff.loss);
  }
  json.end_object();
  std::fprintf(stderr, "%-11s %-22s batch %4zu threads %d: %9.0f samples/s (%.0f-%.0f), %6.1f GFLOP/s", label,
               net.describe().c_str(), batch, threads, static_cast<double>(batch) / step.median,
               static_cast<double>(batch) / step.high, static_cast<double>(batch) / step.low, flops / step.median / 1e9);
  if (compared) std::fprintf(stderr, ", grad diff %.2g", diff.gradient);
  std::fprintf(stderr, "\n");
  return static_cast<double>(batch) / step.median;
}

// Multiply-adds x 2 of one step of the CNN example's network at `width` (bench/cnn_step.cpp, the
// CUDA comparison): forward, weight gradients, input gradients (none below the first convolution).
inline double cnn_flops_per_sample(std::size_t width) {
  const double conv1 = 2.0 * width * 28 * 28 * 25, conv2 = 2.0 * (2 * width) * 14 * 14 * (width * 25);
  const double dense1 = 2.0 * (2 * width * 7 * 7) * 128, dense2 = 2.0 * 128 * 10;
  return 2 * conv1 + 3 * (conv2 + dense1 + dense2);
}

template <class Backend>
double measure_backend(hpcps::metrics::JsonWriter& json, const char* label, const std::vector<std::size_t>& sizes,
                       std::size_t batch, int threads, int repeats) {
  return measure_network<Backend>(json, label, hpcps::nn::Mlp<hpcps::nn::Relu>(sizes), batch, threads, repeats,
                                  mlp_training_flops(sizes, batch));
}

}  // namespace hpcps_bench
