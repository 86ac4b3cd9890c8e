#pragma once
// Gradient throughput of one backend on one MLP shape, side by side with backend::Cpu in the same
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

template <class Backend>
void measure_backend(hpcps::metrics::JsonWriter& json, const char* label, const std::vector<std::size_t>& sizes,
                     std::size_t batch, int threads, int repeats) {
  const Backend backend(threads);
  const hpcps::nn::Mlp<hpcps::nn::Relu> net(sizes);
  hpcps::data::Rng rng(3);
  std::vector<float> params(net.parameter_count()), x(batch * sizes.front()), probe(1);
  std::vector<std::int32_t> y(batch);
  net.initialize(params.data(), 3);
  for (float& v : x) v = hpcps::data::uniform_float(rng);
  for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, sizes.back()));
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
  const auto diff = hpcps_test::compare_with_cpu(net, backend, batch, 11);
  const double flops = mlp_training_flops(sizes, batch);
  json.begin_object();
  json.field("backend", label).field("batch", batch).field("threads", threads);
  json.field("seconds_median", step.median).field("seconds_min", step.low).field("seconds_max", step.high);
  json.field("samples_per_second_median", static_cast<double>(batch) / step.median);
  json.field("samples_per_second_min", static_cast<double>(batch) / step.high);
  json.field("samples_per_second_max", static_cast<double>(batch) / step.low);
  json.field("gflops_median", flops / step.median / 1e9);
  json.field("output_max_relative_difference_vs_cpu", diff.forward);
  json.field("gradient_max_relative_difference_vs_cpu", diff.gradient).field("loss_relative_difference_vs_cpu", diff.loss);
  json.end_object();
  std::fprintf(stderr, "%-11s %-22s batch %4zu threads %d: %9.0f samples/s (%.0f-%.0f), %6.1f GFLOP/s, grad diff %.2g\n",
               label, net.describe().c_str(), batch, threads, static_cast<double>(batch) / step.median,
               static_cast<double>(batch) / step.high, static_cast<double>(batch) / step.low, flops / step.median / 1e9,
               diff.gradient);
}

}  // namespace hpcps_bench
