// Which GEMM library should the CPU backend use? Measures, side by side in one run, Eigen and
// OpenBLAS (CBLAS) on the GEMMs of one training step of an MLP, and the whole gradient
// computation through each backend. Median and spread of repeated runs; JSON on stdout.
//
//   gemm_providers [--hidden 256,128] [--batches 64,128] [--threads 1,2] [--repeats 7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "hpcps/backend/cpu.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/metrics/json.hpp"
#include "hpcps/nn/mlp.hpp"
#include "timing.hpp"

namespace {

using hpcps_bench::parse_list;
using hpcps_bench::time_per_call;

template <class Backend>
void measure(hpcps::metrics::JsonWriter& json, const std::vector<std::size_t>& sizes, std::size_t batch, int threads,
             int repeats) {
  const Backend backend(threads);
  const hpcps::nn::Mlp<hpcps::nn::Relu> net(sizes);
  hpcps::data::Rng rng(1);
  std::vector<float> params(net.parameter_count()), grad(net.parameter_count()), x(batch * sizes.front());
  std::vector<std::int32_t> y(batch);
  net.initialize(params.data(), 1);
  for (float& v : x) v = hpcps::data::uniform_float(rng);
  for (auto& l : y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, sizes.back()));
  auto ws = net.make_workspace(backend, batch);

  // The step's GEMMs alone: forward X W^T per layer, backward dW = D^T A and dA = D W.
  double gemm_flops = 0.0;
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) gemm_flops += 2.0 * batch * sizes[l] * sizes[l + 1] * (l == 0 ? 2 : 3);
  std::vector<float> a(batch * 4096), d(batch * 4096), c(4096 * 4096);
  const auto gemms = time_per_call(
      [&] {
        for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
          const std::size_t in = sizes[l], out = sizes[l + 1];
          const float* w = params.data();
          backend.gemm(hpcps::backend::Transpose::no, hpcps::backend::Transpose::yes, batch, out, in, 1.0f, a.data(), in,
                       w, in, 0.0f, d.data(), out);
          backend.gemm(hpcps::backend::Transpose::yes, hpcps::backend::Transpose::no, out, in, batch, 1.0f, d.data(), out,
                       a.data(), in, 0.0f, c.data(), in);
          if (l > 0) {
            backend.gemm(hpcps::backend::Transpose::no, hpcps::backend::Transpose::no, batch, in, out, 1.0f, d.data(),
                         out, w, in, 0.0f, a.data(), in);
          }
        }
      },
      repeats);
  const auto step = time_per_call(
      [&] { net.gradient(backend, ws, params.data(), x.data(), y.data(), batch, grad.data()); }, repeats);

  json.begin_object();
  json.field("provider", Backend::name).field("batch", batch).field("threads", threads);
  json.field("gemm_flops_per_step", gemm_flops);
  json.field("gemm_seconds_median", gemms.median).field("gemm_seconds_min", gemms.low).field("gemm_seconds_max", gemms.high);
  json.field("gemm_gflops_median", gemm_flops / gemms.median / 1e9);
  json.field("gradient_seconds_median", step.median).field("gradient_seconds_min", step.low)
      .field("gradient_seconds_max", step.high);
  json.field("gradient_samples_per_second_median", static_cast<double>(batch) / step.median);
  json.end_object();
  std::fprintf(stderr, "%-9s batch %4zu threads %d: GEMMs %.1f GFLOP/s, gradient %.0f samples/s\n", Backend::name, batch,
               threads, gemm_flops / gemms.median / 1e9, static_cast<double>(batch) / step.median);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> hidden{256, 128}, batches{64, 128}, threads{1, 2};
  int repeats = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--hidden") hidden = parse_list(argv[i + 1]);
    else if (flag == "--batches") batches = parse_list(argv[i + 1]);
    else if (flag == "--threads") threads = parse_list(argv[i + 1]);
    else if (flag == "--repeats") repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  std::vector<std::size_t> sizes{784};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(10);
  hpcps::metrics::JsonWriter json;
  json.begin_object();
  json.field("benchmark", "gemm_providers").field("repeats", repeats);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  json.field("openblas_coretype", coretype ? coretype : "");
  json.key("layers").begin_array();
  for (std::size_t s : sizes) json.value(s);
  json.end_array();
  json.key("results").begin_array();
  for (std::size_t t : threads) {
    for (std::size_t b : batches) {
      measure<hpcps::backend::CpuEigen>(json, sizes, b, static_cast<int>(t), repeats);
      measure<hpcps::backend::Cpu>(json, sizes, b, static_cast<int>(t), repeats);
    }
  }
  json.end_array();
  json.end_object();
  std::printf("%s\n", json.str().c_str());
  return 0;
}
