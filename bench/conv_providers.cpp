// Which convolution method should the CPU backend run nn::Conv2d with? Times, side by side in one
// run, at the CNN's convolution shapes (batch 128 by default), forward, backward-weights and
// backward-data of:
//   im2col   backend::Im2colConv2d<Cpu>: im2col + one OpenBLAS GEMM per sample (the method before
//            oneDNN, still the Thrust backends' method)
//   onednn   backend::detail::DnnlConv2d: oneDNN's primitives with the reorders between our NCHW /
//            OIHW buffers and the library's blocked layouts, exactly what a training step pays
// backward-weights is timed with dx = null (what the first convolution of a network runs), the full
// backward with dx; backward-data is their difference. Median of --repeats timings, each long
// enough to last 50 ms, with min and max, and the process CPU time of the same calls (the
// estimate for a single thread on a machine shared with other jobs). JSON to --out (or stdout), a table on stderr.
//
//   conv_providers [--batch 128] [--threads 1,2] [--repeats 7] [--methods im2col,onednn]
//                  [--shapes conv1,conv1w16,conv2,conv2w16] [--out FILE]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "hpcps/backend/conv2d_im2col.hpp"
#include "hpcps/backend/cpu.hpp"
#include "hpcps/backend/detail/dnnl_conv2d.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/metrics/json.hpp"
#include "timing.hpp"

namespace {

using hpcps::backend::Cpu;
using hpcps::backend::Window2d;
using hpcps_bench::Summary;
using hpcps_bench::time_per_call;

struct ConvShape {
  std::string name;
  std::size_t in_channels, out_channels, size, kernel, padding;
};

const std::vector<ConvShape> all_shapes{
    {"conv1", 1, 32, 28, 5, 2},     // the CNN of issue 11, first convolution
    {"conv1w16", 1, 16, 28, 5, 2},  // the same at width 16 (the PyTorch peer's CNN)
    {"conv2", 32, 64, 14, 5, 2},    // second convolution
    {"conv2w16", 16, 32, 14, 5, 2},
};

void field_summary(hpcps::metrics::JsonWriter& json, const std::string& prefix, const hpcps_bench::WallAndCpu& t,
                   double flops) {
  const Summary& s = t.wall;
  json.field(prefix + "_seconds_median", s.median).field(prefix + "_seconds_min", s.low)
      .field(prefix + "_seconds_max", s.high).field(prefix + "_gflops_median", flops / s.median / 1e9)
      .field(prefix + "_gflops_min", flops / s.high / 1e9).field(prefix + "_gflops_max", flops / s.low / 1e9);
  json.field(prefix + "_cpu_seconds_median", t.cpu.median).field(prefix + "_cpu_seconds_min", t.cpu.low)
      .field(prefix + "_cpu_seconds_max", t.cpu.high);
}

template <class Method>
void measure(hpcps::metrics::JsonWriter& json, const char* method_name, const ConvShape& shape, std::size_t batch,
             int threads, int repeats) {
  const Cpu backend(threads);
  const Window2d g = Window2d::make(shape.in_channels, shape.size, shape.size, shape.kernel, 1, shape.padding);
  Method method(backend, g, shape.out_channels, batch);
  const std::size_t weights = shape.out_channels * g.patch();
  hpcps::data::Rng rng(7);
  std::vector<float> params(weights + shape.out_channels), x(batch * g.in_size()),
      y(batch * shape.out_channels * g.out_pixels()), dy(y.size()), dx(x.size()), grad(params.size());
  for (float& v : params) v = 0.05f * hpcps::data::normal_float(rng);
  for (float& v : x) v = hpcps::data::normal_float(rng);
  for (float& v : dy) v = 0.01f * hpcps::data::normal_float(rng);
  // The same multiply-adds for each pass: 2 * N * out * P * C * k * k.
  const double flops = 2.0 * static_cast<double>(batch) * static_cast<double>(weights) *
                       static_cast<double>(g.out_pixels());
  const auto fwd_t = hpcps_bench::time_per_call_with_cpu(
      [&] { method.forward(backend, params.data(), x.data(), batch, y.data()); }, repeats);
  method.forward(backend, params.data(), x.data(), batch, y.data());
  const auto bw_t = hpcps_bench::time_per_call_with_cpu(
      [&] { method.backward(backend, params.data(), x.data(), dy.data(), batch, nullptr, grad.data()); }, repeats);
  const auto both_t = hpcps_bench::time_per_call_with_cpu(
      [&] { method.backward(backend, params.data(), x.data(), dy.data(), batch, dx.data(), grad.data()); }, repeats);
  const Summary &fwd = fwd_t.wall, &bw = bw_t.wall, &both = both_t.wall;
  const double bd = both.median - bw.median;
  json.begin_object();
  json.field("method", method_name).field("shape", shape.name).field("batch", batch).field("threads", threads);
  json.field("in_channels", shape.in_channels).field("out_channels", shape.out_channels).field("size", shape.size)
      .field("kernel", shape.kernel).field("padding", shape.padding).field("flops_per_pass", flops);
  field_summary(json, "forward", fwd_t, flops);
  field_summary(json, "backward_weights", bw_t, flops);
  field_summary(json, "backward_both", both_t, 2 * flops);
  json.field("backward_data_seconds_median", bd).field("backward_data_gflops_median", flops / bd / 1e9);
  json.field("step_seconds_median", fwd.median + both.median)
      .field("step_gflops_median", 3 * flops / (fwd.median + both.median) / 1e9);
  json.end_object();
  std::fprintf(stderr,
               "%-8s %-9s threads %d: fwd %6.1f (%5.1f-%5.1f) GF/s %7.2f ms | bwd-w %6.1f (%5.1f-%5.1f) %7.2f ms | "
               "bwd-d %6.1f %7.2f ms | fwd+bwd %6.1f GF/s %7.2f ms\n",
               method_name, shape.name.c_str(), threads, flops / fwd.median / 1e9, flops / fwd.high / 1e9,
               flops / fwd.low / 1e9, fwd.median * 1e3, flops / bw.median / 1e9, flops / bw.high / 1e9,
               flops / bw.low / 1e9, bw.median * 1e3, flops / bd / 1e9, bd * 1e3,
               3 * flops / (fwd.median + both.median) / 1e9, (fwd.median + both.median) * 1e3);
  const double cpu_step = fwd_t.cpu.median + both_t.cpu.median;
  std::fprintf(stderr, "         by CPU time: fwd %6.1f GF/s, bwd-w %6.1f, fwd+bwd %6.1f GF/s %7.2f ms (%.2f CPUs busy)\n",
               flops / fwd_t.cpu.median / 1e9, flops / bw_t.cpu.median / 1e9, 3 * flops / cpu_step / 1e9, cpu_step * 1e3,
               cpu_step / (fwd.median + both.median));
  if constexpr (std::is_same_v<Method, hpcps::backend::detail::DnnlConv2d>) {
    std::fprintf(stderr, "         oneDNN: forward %s, backward-data %s, backward-weights %s\n",
                 method.forward_impl().c_str(), method.backward_data_impl().c_str(),
                 method.backward_weights_impl().c_str());
  }
}

std::vector<std::string> split_names(const std::string& s) {
  return hpcps_bench::split_list<std::string>(s, [](const std::string& item) { return item; });
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t batch = 128;
  std::vector<std::size_t> threads{1, 2};
  std::vector<std::string> methods{"im2col", "onednn"}, shape_names{"conv1", "conv1w16", "conv2", "conv2w16"};
  int repeats = 7;
  std::string out;
  const bool parsed = hpcps_bench::parse_flag_pairs(argc, argv, [&](const std::string& flag, const std::string& value) {
    if (flag == "--batch") batch = std::stoul(value);
    else if (flag == "--threads") threads = hpcps_bench::parse_list(value);
    else if (flag == "--repeats") repeats = std::atoi(value.c_str());
    else if (flag == "--methods") methods = split_names(value);
    else if (flag == "--shapes") shape_names = split_names(value);
    else if (flag == "--out") out = value;
    else return false;
    return true;
  });
  if (!parsed) return 2;
  if (repeats < 1 || batch < 1) {
    std::fprintf(stderr, "--repeats and --batch must be >= 1\n");
    return 2;
  }
  std::vector<ConvShape> shapes;
  for (const std::string& n : shape_names) {
    bool found = false;
    for (const ConvShape& s : all_shapes) {
      if (s.name == n) shapes.push_back(s), found = true;
    }
    if (!found) {
      std::fprintf(stderr, "unknown shape '%s' (conv1, conv1w16, conv2, conv2w16)\n", n.c_str());
      return 2;
    }
  }
  for (const std::string& m : methods) {
    if (m != "im2col" && m != "onednn") {
      std::fprintf(stderr, "unknown method '%s' (im2col, onednn)\n", m.c_str());
      return 2;
    }
  }
  hpcps::metrics::JsonWriter json;
  json.begin_object();
  json.field("benchmark", "conv_providers").field("repeats", repeats).field("batch", batch);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  json.field("openblas_coretype", coretype ? coretype : "");
  json.key("results").begin_array();
  for (std::size_t t : threads) {
    for (const ConvShape& s : shapes) {
      for (const std::string& m : methods) {
        if (m == "im2col") measure<hpcps::backend::Im2colConv2d<Cpu>>(json, "im2col", s, batch, static_cast<int>(t), repeats);
        else measure<hpcps::backend::detail::DnnlConv2d>(json, "onednn", s, batch, static_cast<int>(t), repeats);
      }
    }
  }
  json.end_array();
  json.end_object();
  if (out.empty()) {
    std::printf("%s\n", json.str().c_str());
  } else {
    std::ofstream(out) << json.str() << "\n";
  }
  return 0;
}
