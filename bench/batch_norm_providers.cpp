// Should backend::Cpu run batch normalization (+ ReLU) with oneDNN's primitive instead of its own
// kernels? Times, side by side in one run, a training step's batch normalization at the ResNet's
// shapes (examples/fashion_mnist_resnet, width 16: 16 x 28 x 28, 32 x 14 x 14, 64 x 7 x 7), on
// the NCHW buffers the layers hand each other:
//   hpcps       backend::Cpu's batch_norm_train + batch_norm_backward (backend/detail/
//               batch_norm_kernels.hpp: sums in double, one channel per work item)
//   hpcps+relu  the same followed by the ReLU layer's passes (backend.activation<Relu>,
//               activation_gradient<Relu>): the two layers apart
//   hpcps-fused+relu  batch_norm_train<Relu> + batch_norm_backward<Relu>: the ReLU inside the
//               normalisation's passes both ways, what nn::Sequential runs for BatchNorm2d, Relu
//   hpcps-blocked, hpcps-blocked+relu: the same kernels over x in blocks of 16 channels, y in NCHW
//               and dx blocked (backend/detail/batch_norm_blocked_kernels.hpp): what a training
//               step runs after a convolution that hands its output over in oneDNN's layout
//   onednn      oneDNN's batch_normalization forward_training + backward (use_scale, use_shift)
//   onednn+relu the same with fuse_norm_relu: the ReLU inside the primitive, its mask in a workspace
//   onednn-blocked, onednn-blocked+relu: the same on oneDNN's blocked layout (nChw16c, 16 channels
//               interleaved), where its fast kernels run: what a step would pay if each convolution
//               handed its output to the batch normalization without converting it to NCHW
// Forward and backward (with dx) per call pair; median of --repeats timings, each lasting >= 50 ms,
// with min and max. JSON to --out (or stdout), a table on stderr.
//
//   batch_norm_providers [--batch 64] [--threads 1,2] [--repeats 7] [--out FILE]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "hpcps/backend/cpu.hpp"
#include "hpcps/backend/detail/dnnl_conv2d.hpp"  // dnnl_cpu_engine, OmpThreadScope
#include "hpcps/data/random.hpp"
#include "hpcps/metrics/json.hpp"
#include "hpcps/nn/activation.hpp"
#include "timing.hpp"

namespace {

using hpcps::backend::Cpu;
using hpcps_bench::Summary;

struct Shape {
  std::size_t channels, size;
};

struct Buffers {
  std::vector<float> x, y, dy, dx, gamma, beta, mean, inv_std, moments, dgamma, dbeta, affine;
  Buffers(std::size_t batch, Shape s) {
    const std::size_t n = batch * s.channels * s.size * s.size, c = s.channels;
    hpcps::data::Rng rng(11);
    for (auto* v : {&x, &y, &dy, &dx}) v->resize(n);
    for (float& v : x) v = 0.3f + 1.7f * hpcps::data::normal_float(rng);
    for (float& v : dy) v = 0.01f * hpcps::data::normal_float(rng);
    gamma.assign(c, 1.1f), beta.assign(c, 0.1f), mean.resize(c), inv_std.resize(c), moments.resize(2 * c);
    dgamma.resize(c), dbeta.resize(c), affine.resize(2 * c);
  }
};

Summary time_hpcps(std::size_t batch, Shape s, int threads, bool relu, int repeats) {
  const Cpu backend(threads);
  Buffers b(batch, s);
  const std::size_t pixels = s.size * s.size, n = b.x.size();
  return hpcps_bench::time_per_call(
      [&] {
        backend.batch_norm_train(b.x.data(), batch, s.channels, pixels, b.gamma.data(), b.beta.data(), 1e-5f,
                                 b.y.data(), b.mean.data(), b.inv_std.data(), b.moments.data());
        const float* dy = b.dy.data();
        if (relu) {
          backend.activation<hpcps::nn::Relu>(b.y.data(), n, b.y.data());
          backend.activation_gradient<hpcps::nn::Relu>(b.dy.data(), b.y.data(), n, b.dx.data());
          dy = b.dx.data();
        }
        backend.batch_norm_backward(b.x.data(), dy, batch, s.channels, pixels, b.gamma.data(), b.mean.data(),
                                    b.inv_std.data(), b.dx.data(), b.dgamma.data(), b.dbeta.data());
      },
      repeats);
}

// batch_norm_train<Act> + batch_norm_backward<Act>: with Act = Relu the fused passes; with
// `blocked`, over x held in blocks of 16 channels as a convolution hands it over (dx blocked too).
template <class Act>
Summary time_hpcps_kernels(std::size_t batch, Shape s, int threads, bool blocked, int repeats) {
  const Cpu backend(threads);
  Buffers b(batch, s);
  const std::size_t pixels = s.size * s.size;
  const hpcps::backend::ChannelBlocked x{b.x.data(), 16}, dx{b.dx.data(), 16};
  return hpcps_bench::time_per_call(
      [&] {
        if (blocked) {
          backend.batch_norm_train<Act>(x, batch, s.channels, pixels, b.gamma.data(), b.beta.data(), 1e-5f,
                                        b.y.data(), b.mean.data(), b.inv_std.data(), b.moments.data(), b.affine.data());
          backend.batch_norm_backward<Act>(x, b.dy.data(), batch, s.channels, pixels, b.gamma.data(), b.mean.data(),
                                           b.inv_std.data(), dx, b.dgamma.data(), b.dbeta.data(), b.affine.data());
        } else {
          backend.batch_norm_train<Act>(b.x.data(), batch, s.channels, pixels, b.gamma.data(), b.beta.data(), 1e-5f,
                                        b.y.data(), b.mean.data(), b.inv_std.data(), b.moments.data(), b.affine.data());
          backend.batch_norm_backward<Act>(b.x.data(), b.dy.data(), batch, s.channels, pixels, b.gamma.data(),
                                           b.mean.data(), b.inv_std.data(), b.dx.data(), b.dgamma.data(),
                                           b.dbeta.data(), b.affine.data());
        }
      },
      repeats);
}

Summary time_onednn(std::size_t batch, Shape s, int threads, bool relu, bool blocked, int repeats, std::string& impl) {
  using dnnl::memory;
  namespace bd = hpcps::backend::detail;
  const bd::OmpThreadScope scope(threads);
  const auto& engine = bd::dnnl_cpu_engine();
  dnnl::stream stream(engine);
  Buffers b(batch, s);
  const memory::desc md({static_cast<memory::dim>(batch), static_cast<memory::dim>(s.channels),
                         static_cast<memory::dim>(s.size), static_cast<memory::dim>(s.size)},
                        memory::data_type::f32, blocked ? memory::format_tag::nChw16c : memory::format_tag::nchw);
  const memory::desc cd({static_cast<memory::dim>(s.channels)}, memory::data_type::f32, memory::format_tag::a);
  auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  if (relu) flags = flags | dnnl::normalization_flags::fuse_norm_relu;
  const dnnl::batch_normalization_forward::primitive_desc fwd(
      dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, md, 1e-5f, flags), engine);
  const dnnl::batch_normalization_backward::primitive_desc bwd(
      dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, md, md, 1e-5f, flags), engine, fwd);
  impl = std::string(fwd.impl_info_str()) + " / " + bwd.impl_info_str();
  memory src(md, engine, b.x.data()), dst(md, engine, b.y.data()), diff_dst(md, engine, b.dy.data()),
      diff_src(md, engine, b.dx.data()), scale(cd, engine, b.gamma.data()), shift(cd, engine, b.beta.data()),
      mean(cd, engine, b.mean.data()), variance(cd, engine, b.inv_std.data()), dscale(cd, engine, b.dgamma.data()),
      dshift(cd, engine, b.dbeta.data());
  memory workspace(fwd.workspace_desc(), engine);
  dnnl::batch_normalization_forward f(fwd);
  dnnl::batch_normalization_backward g(bwd);
  std::unordered_map<int, memory> forward_args{{DNNL_ARG_SRC, src},     {DNNL_ARG_DST, dst},
                                               {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift},
                                               {DNNL_ARG_MEAN, mean},   {DNNL_ARG_VARIANCE, variance}},
      backward_args{{DNNL_ARG_SRC, src},           {DNNL_ARG_DIFF_DST, diff_dst},     {DNNL_ARG_SCALE, scale},
                    {DNNL_ARG_SHIFT, shift},       {DNNL_ARG_MEAN, mean},             {DNNL_ARG_VARIANCE, variance},
                    {DNNL_ARG_DIFF_SRC, diff_src}, {DNNL_ARG_DIFF_SCALE, dscale},     {DNNL_ARG_DIFF_SHIFT, dshift}};
  if (relu) {  // the ReLU's mask, written forward and read backward
    forward_args.emplace(DNNL_ARG_WORKSPACE, workspace);
    backward_args.emplace(DNNL_ARG_WORKSPACE, workspace);
  }
  return hpcps_bench::time_per_call(
      [&] {
        f.execute(stream, forward_args);
        g.execute(stream, backward_args);
        stream.wait();
      },
      repeats);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t batch = 64;  // one worker's part of the ResNet example's batch 128 on 2 workers
  std::vector<std::size_t> threads{1, 2};
  int repeats = 7;
  std::string out;
  const bool parsed = hpcps_bench::parse_flag_pairs(argc, argv, [&](const std::string& flag, const std::string& value) {
    if (flag == "--batch") batch = std::stoul(value);
    else if (flag == "--threads") threads = hpcps_bench::parse_list(value);
    else if (flag == "--repeats") repeats = std::atoi(value.c_str());
    else if (flag == "--out") out = value;
    else return false;
    return true;
  });
  if (!parsed) return 2;
  if (repeats < 1 || batch < 1) {
    std::fprintf(stderr, "--repeats and --batch must be >= 1\n");
    return 2;
  }
  const std::vector<Shape> shapes{{16, 28}, {32, 14}, {64, 7}};
  hpcps::metrics::JsonWriter json;
  json.begin_object();
  json.field("benchmark", "batch_norm_providers").field("repeats", repeats).field("batch", batch);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  json.field("openblas_coretype", coretype ? coretype : "");
  json.key("results").begin_array();
  std::fprintf(stderr, "%7s %-14s %-20s %10s %10s %10s %8s %8s\n", "threads", "shape", "method", "ms median", "min",
               "max", "GB/s", "/ hpcps");
  for (std::size_t t : threads) {
    for (const Shape& s : shapes) {
      for (const bool relu : {false, true}) {
        std::string plain_impl, blocked_impl;
        const Summary ours = time_hpcps(batch, s, static_cast<int>(t), relu, repeats);
        const Summary plain = time_onednn(batch, s, static_cast<int>(t), relu, false, repeats, plain_impl);
        const Summary blocked = time_onednn(batch, s, static_cast<int>(t), relu, true, repeats, blocked_impl);
        // The least traffic of a forward + backward pair: read x twice and write y, then read x
        // and dy twice and write dx (ReLU fused or not): 8 passes over the tensor.
        const double bytes = 8.0 * 4.0 * static_cast<double>(batch * s.channels * s.size * s.size);
        const std::string suffix = relu ? "+relu" : "";
        std::vector<std::tuple<std::string, Summary, std::string>> rows{
            {"hpcps" + suffix, ours, ""}, {"onednn" + suffix, plain, plain_impl},
            {"onednn-blocked" + suffix, blocked, blocked_impl}};
        using hpcps::nn::Identity, hpcps::nn::Relu;
        if (relu) {
          rows.emplace_back("hpcps-fused+relu", time_hpcps_kernels<Relu>(batch, s, static_cast<int>(t), false, repeats),
                            "");
          rows.emplace_back("hpcps-blocked+relu",
                            time_hpcps_kernels<Relu>(batch, s, static_cast<int>(t), true, repeats), "");
        } else {
          rows.emplace_back("hpcps-blocked", time_hpcps_kernels<Identity>(batch, s, static_cast<int>(t), true, repeats),
                            "");
        }
        for (const auto& [name, sum, impl] : rows) {
          json.begin_object();
          json.field("threads", t).field("channels", s.channels).field("size", s.size).field("method", name);
          json.field("seconds_median", sum.median).field("seconds_min", sum.low).field("seconds_max", sum.high);
          json.field("gb_per_second_median", bytes / sum.median / 1e9);
          json.field("time_over_hpcps", sum.median / ours.median);
          if (!impl.empty()) json.field("onednn_impl", impl);
          json.end_object();
          std::fprintf(stderr, "%7zu %3zu x %2zu x %-4zu %-20s %10.3f %10.3f %10.3f %8.1f %8.2f\n", t, s.channels,
                       s.size, s.size, name.c_str(), sum.median * 1e3, sum.low * 1e3, sum.high * 1e3,
                       bytes / sum.median / 1e9, sum.median / ours.median);
        }
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
