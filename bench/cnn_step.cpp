// One training step of the CNN of issue 11 (Conv2d{W,5,2}, Relu, MaxPool2d{2}, Conv2d{2W,5,2},
// Relu, MaxPool2d{2}, Flatten, Dense{128}, Relu, Dense{10}) on backend::Cpu, with the convolution
// method of backend::Cpu (oneDNN, each convolution pooled in oneDNN's layout) and, side by side in
// one run, with the pooling apart (`onednn-apart`: backend.max_pool on NCHW, the method before the
// fusion) and with im2col + GEMM on the same backend otherwise (the method before oneDNN). Reports samples/s of Sequential::gradient (median of
// --repeats timings with min and max, and the process CPU time of the same calls) and where the time goes: every layer's forward and backward
// pass timed on its own in a replica of the step. JSON to --out (or stdout), a table on stderr.
//
//   cnn_step [--widths 32,16] [--batch 128] [--threads 1,2] [--repeats 7]
//            [--methods onednn,onednn-apart,im2col]
//            [--out FILE]
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hpcps/backend/conv2d_im2col.hpp"
#include "hpcps/backend/cpu.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/metrics/json.hpp"
#include "hpcps/nn/layers.hpp"
#include "backend_throughput.hpp"
#include "timing.hpp"

namespace {

namespace nn = hpcps::nn;
using Clock = std::chrono::steady_clock;

// backend::Cpu in every respect but the convolution method: im2col + one GEMM per sample.
class CpuIm2col : public hpcps::backend::Cpu {
 public:
  using hpcps::backend::Cpu::Cpu;
  using conv2d_method_type = hpcps::backend::Im2colConv2d<CpuIm2col>;
};

using Cnn = nn::Sequential<nn::Conv2d, nn::Relu, nn::MaxPool2d, nn::Conv2d, nn::Relu, nn::MaxPool2d, nn::Flatten,
                           nn::Dense, nn::Relu, nn::Dense>;
constexpr std::size_t layers = Cnn::layer_count;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Sequential::gradient, layer by layer with a clock around each pass (the first layer gets no dx).
template <class B>
struct TimedStep {
  const Cnn& net;
  const B& backend;
  typename Cnn::template Workspace<B>& ws;
  const float* params;
  const float* x;
  const std::int32_t* labels;
  std::size_t count;
  float* grad;
  std::array<double, layers>& forward_seconds;
  std::array<double, layers>& backward_seconds;
  double& loss_seconds;

  template <std::size_t I>
  const float* input() {
    if constexpr (I == 0) return x;
    else return B::data(ws.activations[I - 1]);
  }
  template <std::size_t... I>
  void run(std::index_sequence<I...>) {
    ((forward_layer<I>()), ...);
    auto t0 = Clock::now();
    float* delta = B::data(ws.delta_a);
    backend.copy(B::data(ws.activations.back()), count * net.output_size(), delta);
    backend.softmax_cross_entropy(delta, labels, count, net.output_size(), true);
    loss_seconds += seconds_since(t0);
    ((backward_layer<layers - 1 - I>(delta)), ...);
  }
  template <std::size_t I>
  void forward_layer() {
    const auto t0 = Clock::now();
    net.template layer<I>().forward(backend, std::get<I>(ws.layers), params + net.parameter_offset(I), input<I>(),
                                    count, B::data(ws.activations[I]), true);
    forward_seconds[I] += seconds_since(t0);
  }
  template <std::size_t I>
  void backward_layer(float*& delta) {
    const auto t0 = Clock::now();
    float* dx = nullptr;
    if (I != 0) dx = delta == B::data(ws.delta_a) ? B::data(ws.delta_b) : B::data(ws.delta_a);
    net.template layer<I>().backward(backend, std::get<I>(ws.layers), params + net.parameter_offset(I), input<I>(),
                                     B::data(ws.activations[I]), delta, count, dx, grad + net.parameter_offset(I));
    backward_seconds[I] += seconds_since(t0);
    delta = dx;
  }
};

const char* layer_name(std::size_t i) {
  static const char* names[layers] = {"conv1", "relu1", "pool1", "conv2", "relu2", "pool2",
                                      "flatten", "dense1", "relu3", "dense2"};
  return names[i];
}

template <class B>
void measure(hpcps::metrics::JsonWriter& json, const char* method, std::size_t width, std::size_t batch, int threads,
             int repeats) {
  const Cnn net(nn::Shape{1, 28, 28},
                {{width, 5, 2}, {}, {2}, {2 * width, 5, 2}, {}, {2}, {}, {128}, {}, {10}});
  const B backend(threads);
  hpcps::data::Rng rng(3);
  std::vector<float> params(net.parameter_count()), grad(params.size()), x(batch * net.input_size());
  std::vector<std::int32_t> labels(batch);
  net.initialize(params.data(), 1);
  for (float& v : x) v = hpcps::data::uniform_float(rng);  // pixels in [0, 1), as the data set's
  for (auto& l : labels) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, 10));
  auto ws = net.make_workspace(backend, batch);
  if constexpr (std::is_same_v<B, hpcps::backend::Cpu>) {
    if (std::string(method) == "onednn-apart") {
      std::get<0>(ws.layers).method.pool_in_library(false);
      std::get<3>(ws.layers).method.pool_in_library(false);
    }
  }
  const auto timed = hpcps_bench::time_per_call_with_cpu(
      [&] { net.gradient(backend, ws, params.data(), x.data(), labels.data(), batch, grad.data()); }, repeats);
  const hpcps_bench::Summary& step = timed.wall;

  // Per layer: `repeats` rounds of enough steps to last ~0.3 s, median per pass.
  const std::size_t steps = std::max<std::size_t>(1, static_cast<std::size_t>(0.3 / step.median));
  std::vector<std::array<double, layers>> fwd_rounds, bwd_rounds;
  std::vector<double> loss_rounds;
  for (int r = 0; r < repeats; ++r) {
    std::array<double, layers> fwd{}, bwd{};
    double loss = 0.0;
    for (std::size_t s = 0; s < steps; ++s) {
      TimedStep<B>{net, backend, ws, params.data(), x.data(), labels.data(), batch, grad.data(), fwd, bwd, loss}.run(
          std::make_index_sequence<layers>{});
    }
    for (auto& v : fwd) v /= static_cast<double>(steps);
    for (auto& v : bwd) v /= static_cast<double>(steps);
    fwd_rounds.push_back(fwd);
    bwd_rounds.push_back(bwd);
    loss_rounds.push_back(loss / static_cast<double>(steps));
  }
  const double flops = hpcps_bench::cnn_flops_per_sample(width) * static_cast<double>(batch);
  json.begin_object();
  json.field("method", method).field("width", width).field("batch", batch).field("threads", threads);
  json.field("parameters", net.parameter_count()).field("flops_per_sample", hpcps_bench::cnn_flops_per_sample(width));
  json.field("step_seconds_median", step.median).field("step_seconds_min", step.low).field("step_seconds_max", step.high);
  json.field("samples_per_second_median", static_cast<double>(batch) / step.median)
      .field("samples_per_second_min", static_cast<double>(batch) / step.high)
      .field("samples_per_second_max", static_cast<double>(batch) / step.low);
  json.field("gflops_median", flops / step.median / 1e9);
  json.field("step_cpu_seconds_median", timed.cpu.median).field("step_cpu_seconds_min", timed.cpu.low)
      .field("step_cpu_seconds_max", timed.cpu.high)
      .field("samples_per_cpu_second_median", static_cast<double>(batch) / timed.cpu.median);
  json.field("loss_seconds_median", hpcps_bench::summarize(loss_rounds).median);
  json.key("layers").begin_array();
  std::fprintf(stderr, "%-12s width %2zu threads %d: %7.0f samples/s (%.0f-%.0f), step %.2f ms, %.1f GFLOP/s\n", method,
               width, threads, static_cast<double>(batch) / step.median, static_cast<double>(batch) / step.high,
               static_cast<double>(batch) / step.low, step.median * 1e3, flops / step.median / 1e9);
  std::fprintf(stderr, "    by CPU time: %.0f samples per CPU second (%.2f ms, %.2f CPUs busy)\n",
               static_cast<double>(batch) / timed.cpu.median, timed.cpu.median * 1e3, timed.cpu.median / step.median);
  for (std::size_t i = 0; i < layers; ++i) {
    std::vector<double> f, b;
    for (int r = 0; r < repeats; ++r) f.push_back(fwd_rounds[r][i]), b.push_back(bwd_rounds[r][i]);
    const auto fs = hpcps_bench::summarize(f), bs = hpcps_bench::summarize(b);
    json.begin_object();
    json.field("layer", layer_name(i)).field("forward_seconds_median", fs.median).field("forward_seconds_min", fs.low)
        .field("forward_seconds_max", fs.high).field("backward_seconds_median", bs.median)
        .field("backward_seconds_min", bs.low).field("backward_seconds_max", bs.high);
    json.end_object();
    std::fprintf(stderr, "    %-8s forward %7.3f ms  backward %7.3f ms  (%4.1f%% of the step)\n", layer_name(i),
                 fs.median * 1e3, bs.median * 1e3, 100.0 * (fs.median + bs.median) / step.median);
  }
  std::fprintf(stderr, "    softmax  %7.3f ms\n", hpcps_bench::summarize(loss_rounds).median * 1e3);
  json.end_array();
  json.end_object();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> widths{32, 16}, threads{1, 2};
  std::vector<std::string> methods{"onednn", "onednn-apart", "im2col"};
  std::size_t batch = 128;
  int repeats = 7;
  std::string out;
  const bool parsed = hpcps_bench::parse_flag_pairs(argc, argv, [&](const std::string& flag, const std::string& value) {
    if (flag == "--widths") widths = hpcps_bench::parse_list(value);
    else if (flag == "--threads") threads = hpcps_bench::parse_list(value);
    else if (flag == "--batch") batch = std::stoul(value);
    else if (flag == "--repeats") repeats = std::atoi(value.c_str());
    else if (flag == "--methods") methods = hpcps_bench::split_list<std::string>(value, [](const std::string& s) { return s; });
    else if (flag == "--out") out = value;
    else return false;
    return true;
  });
  if (!parsed) return 2;
  if (repeats < 1 || batch < 1) {
    std::fprintf(stderr, "--repeats and --batch must be >= 1\n");
    return 2;
  }
  for (const std::string& m : methods) {
    if (m != "im2col" && m != "onednn" && m != "onednn-apart") {
      std::fprintf(stderr, "unknown method '%s' (onednn, onednn-apart, im2col)\n", m.c_str());
      return 2;
    }
  }
  hpcps::metrics::JsonWriter json;
  json.begin_object();
  json.field("benchmark", "cnn_step").field("repeats", repeats).field("batch", batch);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  json.field("openblas_coretype", coretype ? coretype : "");
  json.key("results").begin_array();
  for (std::size_t t : threads) {
    for (std::size_t w : widths) {
      for (const std::string& m : methods) {
        if (m != "im2col") measure<hpcps::backend::Cpu>(json, m.c_str(), w, batch, static_cast<int>(t), repeats);
        else measure<CpuIm2col>(json, "im2col", w, batch, static_cast<int>(t), repeats);
      }
    }
  }
  json.end_array();
  json.end_object();
  if (out.empty()) std::printf("%s\n", json.str().c_str());
  else std::ofstream(out) << json.str() << "\n";
  return 0;
}
