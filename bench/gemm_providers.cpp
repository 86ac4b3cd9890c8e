// Which GEMM library should the CPU backend use, and how fast can a training step possibly be?
// Measures, side by side in one run, Eigen and OpenBLAS (CBLAS) on the GEMMs of one training step
// of an MLP (each GEMM alone, with the transposes and leading dimensions Mlp::gradient passes, and
// all of them back to back), and the whole gradient computation through each backend. The back to
// back rate is the GEMM-bound ceiling bench/peers/compare_pytorch.py divides training by.
// Median and spread of repeated runs; JSON on stdout, a table on stderr.
//
//   gemm_providers [--hidden 256,128] [--batches 64,128] [--threads 1,2] [--repeats 7]
//                  [--providers eigen,openblas]
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
#include "step_gemms.hpp"
#include "timing.hpp"

namespace {

using hpcps::backend::Transpose;
using hpcps_bench::parse_list;
using hpcps_bench::time_per_call;

using hpcps_bench::step_gemms;
using hpcps_bench::StepGemm;

template <class Backend>
void measure(hpcps::metrics::JsonWriter& json, const std::vector<std::size_t>& sizes, std::size_t batch, int threads,
             int repeats) {
  const Backend backend(threads);
  hpcps_bench::StepProblem problem(backend, sizes, batch);

  // Operands big enough for every GEMM of the step, filled with small numbers (no denormals).
  const std::vector<StepGemm> gemms = step_gemms(sizes, batch);
  std::size_t largest = 0;
  for (const StepGemm& g : gemms) largest = std::max({largest, g.m * g.k, g.k * g.n, g.m * g.n});
  std::vector<float> a(largest, 0.01f), b(largest, 0.02f), c(largest);
  auto run = [&](const StepGemm& g) {
    backend.gemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), g.lda(), b.data(), g.ldb(), 0.0f, c.data(), g.n);
  };
  double step_flops = 0.0;
  for (const StepGemm& g : gemms) step_flops += g.flops();
  const auto all = time_per_call([&] { for (const StepGemm& g : gemms) run(g); }, repeats);
  const auto step = time_per_call(
      [&] { problem.gradient(); }, repeats);

  json.begin_object();
  json.field("provider", Backend::name).field("batch", batch).field("threads", threads);
  json.field("gemm_flops_per_step", step_flops);
  json.field("gemm_seconds_median", all.median).field("gemm_seconds_min", all.low).field("gemm_seconds_max", all.high);
  json.field("gemm_gflops_median", step_flops / all.median / 1e9);
  json.field("gradient_seconds_median", step.median).field("gradient_seconds_min", step.low)
      .field("gradient_seconds_max", step.high);
  json.field("gradient_samples_per_second_median", static_cast<double>(batch) / step.median);
  json.key("gemms").begin_array();
  std::fprintf(stderr, "%-9s batch %4zu threads %d: step's GEMMs %.1f GFLOP/s (%.0f us), gradient %.0f samples/s (%.0f us)\n",
               Backend::name, batch, threads, step_flops / all.median / 1e9, all.median * 1e6,
               static_cast<double>(batch) / step.median, step.median * 1e6);
  for (const StepGemm& g : gemms) {
    const auto t = time_per_call([&] { run(g); }, repeats);
    json.begin_object();
    json.field("name", g.name()).field("transpose_a", g.ta == Transpose::yes).field("transpose_b", g.tb == Transpose::yes);
    json.field("m", g.m).field("n", g.n).field("k", g.k);
    json.field("seconds_median", t.median).field("seconds_min", t.low).field("seconds_max", t.high);
    json.field("gflops_median", g.flops() / t.median / 1e9);
    json.end_object();
    std::fprintf(stderr, "    %-14s %c%c m %5zu n %5zu k %5zu: %8.1f us %6.1f GFLOP/s\n", g.name().c_str(),
                 g.ta == Transpose::yes ? 'T' : 'N', g.tb == Transpose::yes ? 'T' : 'N', g.m, g.n, g.k, t.median * 1e6,
                 g.flops() / t.median / 1e9);
  }
  json.end_array();
  json.end_object();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> hidden{256, 128}, batches{64, 128}, threads{1, 2};
  std::vector<std::string> providers{"eigen", "openblas"};
  int repeats = 7;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "option %s needs a value\n", argv[i]);
      return 2;
    }
    if (flag == "--hidden") hidden = parse_list(argv[i + 1]);
    else if (flag == "--batches") batches = parse_list(argv[i + 1]);
    else if (flag == "--threads") threads = parse_list(argv[i + 1]);
    else if (flag == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (flag == "--providers") {
      providers.clear();
      const std::string list = argv[i + 1];
      for (std::size_t start = 0; start <= list.size();) {
        const std::size_t end = std::min(list.find(',', start), list.size());
        providers.push_back(list.substr(start, end - start));
        start = end + 1;
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  for (const std::string& p : providers) {
    if (p != "eigen" && p != "openblas") {
      std::fprintf(stderr, "unknown provider '%s' (eigen, openblas)\n", p.c_str());
      return 2;
    }
  }
  if (repeats < 1) {
    std::fprintf(stderr, "--repeats must be >= 1\n");
    return 2;
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
      for (const std::string& p : providers) {
        if (p == "eigen") measure<hpcps::backend::CpuEigen>(json, sizes, b, static_cast<int>(t), repeats);
        else measure<hpcps::backend::Cpu>(json, sizes, b, static_cast<int>(t), repeats);
      }
    }
  }
  json.end_array();
  json.end_object();
  std::printf("%s\n", json.str().c_str());
  return 0;
}
