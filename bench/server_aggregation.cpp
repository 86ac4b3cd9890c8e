// Server aggregation against memory bandwidth, one process, one thread (the server's): for a shard
// of N floats, ps::detail::aggregate_and_step (sum W contributor slices block by block, apply the
// update rule) against STREAM-style copy, add and triad on arrays of N floats, and against the
// unfused loop the server used before (sum every slice into an N-float buffer, then the rule over
// the whole shard). All kernels run in one process, interleaved within every repeat, so they see
// the same machine. Median and range over --repeats; table on stderr, JSON on stdout or --out.
//
//   bench/server_aggregation [--floats 25000000] [--repeats 7] [--out FILE]
//
// Traffic counted: STREAM's convention (copy 8N bytes, add and triad 12N; the write-allocate read
// of the destination is not counted), and for the aggregation the compulsory bytes
// 4N * (W slices read + params read and written + the rule's state arrays read and written).
// The aggregation writes only arrays it has just read, so it has no write-allocate traffic: its
// counted bytes are all the bytes that move, while STREAM's add/triad move 16N for 12N counted.
// The in-place kernel `a += s * b` (12N, no write-allocate either) is reported beside them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <hpcps/metrics/json.hpp>
#include <hpcps/optim/adam.hpp>
#include <hpcps/optim/sgd.hpp>
#include <hpcps/ps/detail/aggregate.hpp>

#include "timing.hpp"

namespace {

// Keeps the compiler from treating the arrays behind p as dead or the call as repeatable.
inline void clobber(const void* p) { asm volatile("" : : "g"(p) : "memory"); }

// The STREAM kernels with ordinary stores, as the aggregation has: GCC would otherwise turn the
// copy loop into memcpy, whose non-temporal stores for large sizes skip the write-allocate read.
#define HPCPS_STREAM_KERNEL __attribute__((noinline, optimize("no-tree-loop-distribute-patterns")))

HPCPS_STREAM_KERNEL void stream_copy(float* __restrict a, const float* __restrict b, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) a[i] = b[i];
}
HPCPS_STREAM_KERNEL void stream_add(float* __restrict a, const float* __restrict b, const float* __restrict c,
                                    std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + c[i];
}
HPCPS_STREAM_KERNEL void stream_triad(float* __restrict a, const float* __restrict b, const float* __restrict c, float s,
                                      std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}
HPCPS_STREAM_KERNEL void stream_update(float* __restrict a, const float* __restrict b, float s, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) a[i] += s * b[i];
}

// The server's loop before cache blocking: sum into a shard-sized buffer, then one pass of the
// rule (a lone contributor's slice was used in place, as now).
template <class Optimizer, class State>
void unfused_sum_then_step(const Optimizer& optimizer, State& state, float* params, const float* const* slices,
                           std::size_t count, float scale, std::size_t n, std::size_t step, float* sum) {
  if (count == 1) {
    optimizer.step(state, 0, params, slices[0], scale, n, step);
    return;
  }
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) sum[i] = slices[0][i] + slices[1][i];
  for (std::size_t c = 2; c < count; ++c) {
    const float* s = slices[c];
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) sum[i] += s[i];
  }
  optimizer.step(state, 0, params, sum, scale, n, step);
}

struct Kernel {
  std::string name;    // row label
  std::string kind;    // "stream", "fused" or "unfused"
  std::string rule;    // update rule, empty for STREAM
  std::size_t contributors = 0;
  double bytes = 0.0;  // counted traffic per call
  std::function<void()> call;
  std::size_t calls = 1;         // calls per timed sample, so a sample lasts >= 50 ms
  std::vector<double> seconds;   // per call, one entry per repeat
};

struct Options {
  std::size_t floats = 25'000'000;
  int repeats = 7;
  std::string out;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("option " + flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--floats") o.floats = std::stoul(next());
    else if (flag == "--repeats") o.repeats = std::stoi(next());
    else if (flag == "--out") o.out = next();
    else if (flag == "--help" || flag == "-h") {
      std::fprintf(stderr, "usage: server_aggregation [--floats N] [--repeats R] [--out FILE]\n");
      std::exit(0);
    } else {
      throw std::runtime_error("unknown option " + flag + " (try --help)");
    }
  }
  if (o.floats == 0) throw std::runtime_error("--floats must be > 0");
  if (o.repeats < 1) throw std::runtime_error("--repeats must be >= 1");
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double time_calls(Kernel& k) {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t c = 0; c < k.calls; ++c) k.call();
  return seconds_since(t0) / static_cast<double>(k.calls);
}

int run(const Options& o) {
  const std::size_t n = o.floats;
  constexpr std::size_t max_contributors = 4;
  const double fn = static_cast<double>(n);
  // Every array is filled here, so no first-touch page fault falls into a timing. Slice values are
  // small and varied, so the rules do real arithmetic without overflow or denormals over all calls.
  std::vector<std::vector<float>> slices(max_contributors);
  for (std::size_t c = 0; c < max_contributors; ++c) {
    slices[c].resize(n);
    for (std::size_t i = 0; i < n; ++i) slices[c][i] = 1e-3f * static_cast<float>((i * 7 + c * 13) % 101) - 0.05f;
  }
  std::vector<float> params(n), stream_a(n, 0.0f), sum(n, 0.0f), block(hpcps::ps::detail::aggregate_block, 0.0f);
  for (std::size_t i = 0; i < n; ++i) params[i] = 1e-2f * static_cast<float>(i % 97) - 0.5f;
  const float* slice_ptrs[max_contributors];
  for (std::size_t c = 0; c < max_contributors; ++c) slice_ptrs[c] = slices[c].data();
  const float* b = slices[0].data();
  const float* c = slices[1].data();

  const hpcps::optim::MomentumSgd momentum(1e-4f, 1e-4f, hpcps::optim::MomentumUpdate(0.9f));
  const hpcps::optim::StandardSgd sgd(1e-4f, 1e-4f);
  const hpcps::optim::Adam adam(1e-5f);
  auto momentum_state = momentum.make_state(n);
  auto sgd_state = sgd.make_state(n);
  auto adam_state = adam.make_state(n);
  std::size_t step = 0;  // advances every call, as a server's update count does (Adam's corrections)

  std::vector<Kernel> kernels;
  auto add_kernel = [&](std::string name, std::string kind, std::string rule, std::size_t contributors, double bytes,
                        std::function<void()> call) {
    Kernel k;
    k.name = std::move(name);
    k.kind = std::move(kind);
    k.rule = std::move(rule);
    k.contributors = contributors;
    k.bytes = bytes;
    k.call = std::move(call);
    kernels.push_back(std::move(k));
  };
  add_kernel("stream copy", "stream", "", 0, 8 * fn, [&] { stream_copy(stream_a.data(), b, n); clobber(stream_a.data()); });
  add_kernel("stream add", "stream", "", 0, 12 * fn, [&] { stream_add(stream_a.data(), b, c, n); clobber(stream_a.data()); });
  add_kernel("stream triad", "stream", "", 0, 12 * fn,
                     [&] { stream_triad(stream_a.data(), b, c, 0.5f, n); clobber(stream_a.data()); });
  add_kernel("in-place a+=s*b", "stream", "", 0, 12 * fn,
                     [&] { stream_update(stream_a.data(), b, 1e-7f, n); clobber(stream_a.data()); });
  auto add_rule = [&](const std::string& rule, auto& optimizer, auto& state, int state_arrays) {
    for (std::size_t w = 1; w <= max_contributors; ++w) {
      const double bytes = 4.0 * fn * static_cast<double>(w + 2 + 2 * state_arrays);
      const float scale = 1.0f / static_cast<float>(w);
      add_kernel(rule + " W=" + std::to_string(w) + " fused", "fused", rule, w, bytes, [&, w, scale] {
                           hpcps::ps::detail::aggregate_and_step(optimizer, state, 0, params.data(), slice_ptrs, w, scale,
                                                                 n, step++, block.data());
                           clobber(params.data());
                         });
      add_kernel(rule + " W=" + std::to_string(w) + " unfused", "unfused", rule, w, bytes, [&, w, scale] {
                           unfused_sum_then_step(optimizer, state, params.data(), slice_ptrs, w, scale, n, step++,
                                                 sum.data());
                           clobber(params.data());
                         });
    }
  };
  add_rule("momentum", momentum, momentum_state, 1);
  add_rule("sgd", sgd, sgd_state, 0);
  add_rule("adam", adam, adam_state, 2);

  // Warm-up and calibration: one call each (the caches and TLB see every array once), then
  // double the calls per sample until one sample lasts 50 ms.
  const auto started = std::chrono::steady_clock::now();
  for (auto& k : kernels) {
    k.call();
    while (time_calls(k) * static_cast<double>(k.calls) < 0.05) k.calls *= 2;
  }
  // Interleaved repeats; the order rotates each repeat so no kernel always follows the same one.
  for (int r = 0; r < o.repeats; ++r) {
    for (std::size_t j = 0; j < kernels.size(); ++j) {
      auto& k = kernels[(j + static_cast<std::size_t>(r) * 5) % kernels.size()];
      k.seconds.push_back(time_calls(k));
    }
  }
  const double elapsed = seconds_since(started);

  // Results depend on every array written, so none of the work can be dropped.
  double checksum = 0.0;
  for (std::size_t i = 0; i < n; i += 4096) {
    checksum += static_cast<double>(params[i]) + stream_a[i] + sum[i] + momentum_state.velocity[i] + adam_state.m[i] +
                adam_state.v[i];
  }
  if (!std::isfinite(checksum)) throw std::runtime_error("non-finite values in the arrays: the kernels misbehaved");

  auto find = [&](const std::string& name) -> const Kernel& {
    for (const auto& k : kernels)
      if (k.name == name) return k;
    throw std::runtime_error("no kernel " + name);
  };
  auto rate = [](const Kernel& k, std::size_t r) { return k.bytes / k.seconds[r] / 1e9; };
  auto rates = [&](const Kernel& k) {
    std::vector<double> v;
    for (std::size_t r = 0; r < k.seconds.size(); ++r) v.push_back(rate(k, r));
    return v;
  };
  const Kernel& copy = find("stream copy");
  const Kernel& add = find("stream add");
  const Kernel& triad = find("stream triad");
  const auto copy_s = hpcps_bench::summarize(rates(copy));
  const auto add_s = hpcps_bench::summarize(rates(add));
  const auto triad_s = hpcps_bench::summarize(rates(triad));
  // "Memory bandwidth": the better of add and triad (median), and per repeat for the paired ratio.
  const bool ref_is_add = add_s.median >= triad_s.median;
  const Kernel& ref = ref_is_add ? add : triad;
  const double ref_rate = ref_is_add ? add_s.median : triad_s.median;

  hpcps::metrics::JsonWriter json;
  json.begin_object().field("benchmark", "server_aggregation").field("floats", n).field("repeats", o.repeats);
  json.field("threads", 1).field("block_floats", hpcps::ps::detail::aggregate_block);
  json.field("reference", ref_is_add ? "stream add" : "stream triad").field("reference_gbytes_per_second", ref_rate);
  json.field("bytes_convention",
             "STREAM: copy 8N, add/triad 12N (write-allocate not counted); aggregation: 4N*(W + 2 + 2*state arrays)");
  json.field("elapsed_seconds", elapsed).field("checksum", checksum);
  json.key("kernels").begin_array();
  std::fprintf(stderr, "N = %zu floats (%.0f MB per array), 1 thread, %d repeats, block %zu floats; reference = %s %.1f GB/s\n",
               n, 4 * fn / 1e6, o.repeats, hpcps::ps::detail::aggregate_block, ref_is_add ? "add" : "triad", ref_rate);
  std::fprintf(stderr, "%-22s %9s %26s %8s %8s %8s %22s\n", "kernel", "ms/call", "GB/s median (min-max)", "/copy",
               "/add", "/triad", "/ref paired (min-max)");
  for (const auto& k : kernels) {
    const auto t = hpcps_bench::summarize(k.seconds);
    const auto g = hpcps_bench::summarize(rates(k));
    std::vector<double> paired;  // this repeat's rate over the same repeat's reference rate
    for (std::size_t r = 0; r < k.seconds.size(); ++r) paired.push_back(rate(k, r) / rate(ref, r));
    const auto p = hpcps_bench::summarize(paired);
    json.begin_object().field("name", k.name).field("kind", k.kind).field("rule", k.rule).field("contributors", k.contributors);
    json.field("bytes_per_call", k.bytes).field("calls_per_sample", k.calls);
    json.field("seconds_median", t.median).field("seconds_min", t.low).field("seconds_max", t.high);
    json.field("gbytes_per_second_median", g.median).field("gbytes_per_second_min", g.low).field("gbytes_per_second_max", g.high);
    json.field("over_copy", g.median / copy_s.median).field("over_add", g.median / add_s.median);
    json.field("over_triad", g.median / triad_s.median).field("over_reference", g.median / ref_rate);
    json.field("over_reference_paired_median", p.median).field("over_reference_paired_min", p.low)
        .field("over_reference_paired_max", p.high);
    json.key("seconds").begin_array();
    for (double s : k.seconds) json.value(s);
    json.end_array().end_object();
    std::fprintf(stderr, "%-22s %9.3f %8.1f (%6.1f-%6.1f) %8.2f %8.2f %8.2f %8.2f (%4.2f-%4.2f)\n", k.name.c_str(),
                 t.median * 1e3, g.median, g.low, g.high, g.median / copy_s.median, g.median / add_s.median,
                 g.median / triad_s.median, p.median, p.low, p.high);
  }
  json.end_array().end_object();
  std::fprintf(stderr, "(%.1f s)\n", elapsed);
  hpcps_bench::print_or_write_json(json.str(), o.out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "server_aggregation: error: %s\n", e.what());
    return 1;
  }
}
