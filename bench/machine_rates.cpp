// The inputs of the analytic model (bench/model.py, docs/model.md), measured in one run on two ranks:
//  - latency alpha and bandwidth beta: an MPI ping-pong between rank 0 and rank 1 over message sizes
//    8 B .. 128 MiB, a least-squares fit t(m) = alpha + m / beta on the small and on the large sizes,
//    and the bidirectional rate (both ranks Isend + Irecv at once) for large messages;
//  - the GEMM rate: hpcps's own GEMM (backend::Cpu) at the exact shapes and transposes of one training
//    step of nn::Mlp (forward X W^T, backward dW = D^T A and dX = D W), per shape and for the step, and
//    the whole gradient through nn::Mlp, whose excess over the GEMMs is the element-wise work;
//  - memory bandwidth: STREAM copy and triad, and the server's own kernels (sum += slice, the
//    momentum update), on arrays much larger than cache and on one the size of a small model.
// GEMM and memory run on rank 0 only, while rank 1 sleeps, so the core is not shared. Median and
// range over --repeats; JSON on stdout (or --out), a table on stderr.
//
//   mpiexec -n 2 bench/machine_rates [--repeats 7] [--threads 1,2]
//       [--hidden 256,128 --batch 8,16,32,43,64,128,256] [--hidden 4096,4096 --batch 32,64,86,128,256]
//       [--max-bytes 134217728] [--stream-elements 67108864,262144] [--out FILE]
// Each --hidden starts a network; the --batch after it lists its batch sizes (default: both networks
// above).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <hpcps/hpcps.hpp>

#include "step_gemms.hpp"
#include "timing.hpp"

namespace {

using hpcps_bench::parse_list;
using hpcps_bench::Summary;
using hpcps_bench::summarize;

struct Config {
  int repeats = 7;
  std::vector<std::size_t> threads{1};
  struct Net {
    std::vector<std::size_t> hidden, batches;
  };
  std::vector<Net> nets;
  std::size_t min_bytes = 8, max_bytes = std::size_t{1} << 27;
  std::size_t bidirectional_min_bytes = std::size_t{1} << 16;
  std::vector<std::size_t> stream_elements{std::size_t{1} << 26, 262144};
  std::string out;
};

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw hpcps::Error("machine_rates: option " + flag + " needs a value");
    const std::string v = argv[++i];
    if (flag == "--repeats") c.repeats = std::max(1, std::atoi(v.c_str()));
    else if (flag == "--threads") c.threads = parse_list(v);
    else if (flag == "--hidden") c.nets.push_back({parse_list(v), {}});
    else if (flag == "--batch") {
      if (c.nets.empty()) c.nets.push_back({{256, 128}, {}});
      c.nets.back().batches = parse_list(v);
    } else if (flag == "--min-bytes") c.min_bytes = std::stoul(v);
    else if (flag == "--max-bytes") c.max_bytes = std::stoul(v);
    else if (flag == "--bidirectional-min-bytes") c.bidirectional_min_bytes = std::stoul(v);
    else if (flag == "--stream-elements") c.stream_elements = parse_list(v);
    else if (flag == "--out") c.out = v;
    else throw hpcps::Error("machine_rates: unknown option " + flag);
  }
  if (c.nets.empty()) {
    // 43 and 86: the per-worker batches of strong scaling on 3 workers (bench/scaling_study.py),
    // measured rather than interpolated (one run read 12% below the interpolation at 43, the next
    // on it: this VM's rates drift by that much between runs).
    c.nets.push_back({{256, 128}, {8, 16, 32, 43, 64, 128, 256}});
    c.nets.push_back({{4096, 4096}, {32, 64, 86, 128, 256}});
  }
  for (auto& n : c.nets) {
    if (n.batches.empty()) n.batches = {128};
  }
  return c;
}

void summary_fields(hpcps::metrics::JsonWriter& json, const char* name, const Summary& s) {
  json.key(name).begin_object().field("median", s.median).field("min", s.low).field("max", s.high).end_object();
}

// Round trips per repeat: many for small messages (the clock's resolution), at least 2 for large ones;
// about 64 MiB each way per repeat above 64 KiB.
std::size_t iterations_for(std::size_t bytes) {
  return std::clamp<std::size_t>((std::size_t{1} << 26) / bytes, 2, 1000);
}

// Least-squares line t = a + b m through the points; returns {a, b}.
std::pair<double, double> fit_line(const std::vector<double>& m, const std::vector<double>& t) {
  const double n = static_cast<double>(m.size());
  double sm = 0, st = 0, smm = 0, smt = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    sm += m[i];
    st += t[i];
    smm += m[i] * m[i];
    smt += m[i] * t[i];
  }
  const double b = (n * smt - sm * st) / (n * smm - sm * sm);
  return {(st - b * sm) / n, b};
}

struct PingPongRow {
  std::size_t bytes;
  Summary one_way;
};
struct BidirectionalRow {
  std::size_t bytes;
  Summary exchange;  // seconds for both directions to complete
};

void measure_network(const hpcps::comm::Communicator& world, const Config& cfg, std::vector<PingPongRow>& pingpong,
                     std::vector<BidirectionalRow>& bidirectional) {
  const int rank = world.rank();
  const bool active = rank <= 1;
  const int peer = 1 - rank;
  // Touched once here, so no repeat pays first-touch page faults.
  std::vector<std::uint8_t> send(active ? cfg.max_bytes : 0, 1), recv(active ? cfg.max_bytes : 0, 0);
  for (std::size_t bytes = cfg.min_bytes; bytes <= cfg.max_bytes; bytes *= 2) {
    const std::size_t iters = iterations_for(bytes);
    std::vector<double> times;
    for (int r = -1; r < cfg.repeats; ++r) {  // r = -1: warm-up
      world.barrier();
      const double t0 = MPI_Wtime();
      for (std::size_t i = 0; i < iters && active; ++i) {
        if (rank == 0) {
          world.send(send.data(), bytes, 1, 1);
          world.recv(recv.data(), bytes, 1, 2);
        } else {
          world.recv(recv.data(), bytes, 0, 1);
          world.send(send.data(), bytes, 0, 2);
        }
      }
      if (r >= 0) times.push_back((MPI_Wtime() - t0) / (2.0 * static_cast<double>(iters)));
    }
    pingpong.push_back({bytes, summarize(times)});
  }
  for (std::size_t bytes = std::max(cfg.bidirectional_min_bytes, cfg.min_bytes); bytes <= cfg.max_bytes; bytes *= 4) {
    const std::size_t iters = iterations_for(bytes);
    std::vector<double> times;
    hpcps::comm::RequestSet requests(2);
    for (int r = -1; r < cfg.repeats; ++r) {
      world.barrier();
      const double t0 = MPI_Wtime();
      for (std::size_t i = 0; i < iters && active; ++i) {
        requests.add(world.irecv(recv.data(), bytes, peer, 3));
        requests.add(world.isend(send.data(), bytes, peer, 3));
        requests.wait_all(hpcps::comm::WaitMode::spin);
        requests.clear();
      }
      if (r >= 0) times.push_back((MPI_Wtime() - t0) / static_cast<double>(iters));
    }
    bidirectional.push_back({bytes, summarize(times)});
  }
}

// Rank 1 (and any other) sleeps until rank 0 is done computing, so rank 0 has the machine's cores to
// itself: a barrier would spin on a core the GEMM's second thread may want.
template <class F>
void on_rank0_alone(const hpcps::comm::Communicator& world, F&& f) {
  float token = 0.0f;
  if (world.rank() == 0) {
    f();
    for (int r = 1; r < world.size(); ++r) world.send(&token, 1, r, 9);
  } else {
    auto request = world.irecv(&token, 1, 0, 9);
    while (!request.test()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  world.barrier();
}

using hpcps_bench::StepGemm;

void measure_compute(hpcps::metrics::JsonWriter& json, const std::vector<std::size_t>& sizes, std::size_t batch,
                     int threads, int repeats) {
  using hpcps::backend::Transpose;
  const hpcps::backend::Cpu backend(threads);
  hpcps_bench::StepProblem problem(backend, sizes, batch);

  // Operands sized for the largest of each role: A is at most [batch x widest] (X, D), B at most
  // [widest x max(batch, widest)] (W or the activations), C the same as B (dW or Y).
  const std::size_t widest = *std::max_element(sizes.begin(), sizes.end());
  const std::size_t big = std::max(batch, widest) * widest;
  std::vector<float> a(batch * widest, 0.5f), b(big, 0.25f), c(big, 0.0f);
  const auto shapes = hpcps_bench::step_gemms(sizes, batch);
  auto run = [&](const StepGemm& s) {
    backend.gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), s.lda(), b.data(), s.ldb(), 0.0f, c.data(), s.n);
  };

  json.begin_object().field("batch", batch).field("threads", threads);
  json.key("shapes").begin_array();
  double flops = 0.0, sum_of_medians = 0.0;
  std::fprintf(stderr, "  %-16s %5s %5s %5s %5s  %9s %8s\n", "gemm", "layer", "m", "n", "k", "ms", "GFLOP/s");
  for (const StepGemm& s : shapes) {
    const Summary t = hpcps_bench::time_per_call([&] { run(s); }, repeats);
    flops += s.flops();
    sum_of_medians += t.median;
    json.begin_object().field("layer", s.layer).field("kind", s.kind);
    json.field("transpose_a", s.ta == Transpose::yes).field("transpose_b", s.tb == Transpose::yes);
    json.field("m", s.m).field("n", s.n).field("k", s.k).field("flops", s.flops());
    summary_fields(json, "seconds", t);
    json.field("gflops_median", s.flops() / t.median / 1e9).end_object();
    std::fprintf(stderr, "  %-16s %5zu %5zu %5zu %5zu  %9.4f %8.1f\n", s.kind, s.layer, s.m, s.n, s.k, t.median * 1e3,
                 s.flops() / t.median / 1e9);
  }
  json.end_array();
  const Summary step = hpcps_bench::time_per_call([&] { for (const StepGemm& s : shapes) run(s); }, repeats);
  const Summary gradient = hpcps_bench::time_per_call(
      [&] { problem.gradient(); }, repeats);
  const double elementwise = std::max(0.0, gradient.median - step.median);
  json.field("gemm_flops", flops);
  summary_fields(json, "gemm_seconds", step);
  json.field("gemm_seconds_sum_of_shapes", sum_of_medians);
  json.field("gemm_gflops_median", flops / step.median / 1e9);
  summary_fields(json, "gradient_seconds", gradient);
  json.field("elementwise_seconds", elementwise);
  json.field("gradient_samples_per_second", static_cast<double>(batch) / gradient.median);
  json.end_object();
  std::fprintf(stderr,
               "  step GEMMs %.3f ms (%.1f GFLOP/s), whole gradient %.3f ms (%.0f samples/s), element-wise %.3f ms\n",
               step.median * 1e3, flops / step.median / 1e9, gradient.median * 1e3,
               static_cast<double>(batch) / gradient.median, elementwise * 1e3);
}

// STREAM-style kernels, timed one pass at a time (a pass over 256 MiB lasts ~10 ms); bytes are the
// traffic STREAM counts (reads + writes, no write-allocate).
void measure_memory(hpcps::metrics::JsonWriter& json, std::size_t n, int threads, int repeats) {
  std::vector<float> a(n), b(n), c(n), d(n);
  const auto total = static_cast<std::ptrdiff_t>(n);
  // First touch by the threads that use the memory later.
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::ptrdiff_t i = 0; i < total; ++i) {
    a[i] = 1.0f;
    b[i] = 2.0f;
    c[i] = 0.5f;
    d[i] = 0.0f;
  }
  const float s = 0.999f;
  float* pa = a.data();
  float* pb = b.data();
  float* pc = c.data();
  float* pd = d.data();
  auto time = [&](auto&& kernel) { return hpcps_bench::time_per_call(kernel, repeats); };
  const Summary copy = time([&] {
#pragma omp parallel for simd num_threads(threads) schedule(static)
    for (std::ptrdiff_t i = 0; i < total; ++i) pc[i] = pa[i];
  });
  const Summary triad = time([&] {
#pragma omp parallel for simd num_threads(threads) schedule(static)
    for (std::ptrdiff_t i = 0; i < total; ++i) pa[i] = pb[i] + s * pc[i];
  });
  // The server's accumulation of one worker's slice (ps/server.hpp).
  const Summary add = time([&] {
#pragma omp parallel for simd num_threads(threads) schedule(static)
    for (std::ptrdiff_t i = 0; i < total; ++i) pd[i] += pb[i];
  });
  // The server's update rule, MomentumSgd: reads params, sum, velocity; writes params, velocity.
  const hpcps::optim::MomentumSgd sgd(1e-6f);
  auto state = sgd.make_state(n);
  std::size_t step = 0;
  const Summary momentum = time([&] { sgd.step(state, pa, pb, 1e-3f, n, step++); });
  const double bytes = 4.0 * static_cast<double>(n);
  struct Kernel {
    const char* name;
    const Summary* t;
    double arrays;
  };
  const Kernel kernels[] = {{"copy", &copy, 2}, {"triad", &triad, 3}, {"add", &add, 3}, {"momentum_sgd", &momentum, 5}};
  json.begin_object().field("elements", n).field("bytes_per_array", bytes).field("threads", threads);
  // The update rule is the server's own code, which runs on one thread whatever `threads` says.
  json.field("momentum_sgd_threads", 1);
  std::fprintf(stderr, "  %zu floats (%.0f MiB per array), %d thread(s):", n, bytes / (1 << 20), threads);
  for (const Kernel& k : kernels) {
    const double traffic = k.arrays * bytes;
    json.key(k.name).begin_object().field("traffic_bytes", traffic);
    summary_fields(json, "seconds", *k.t);
    json.field("gbytes_per_second_median", traffic / k.t->median / 1e9)
        .field("gbytes_per_second_min", traffic / k.t->high / 1e9)
        .field("gbytes_per_second_max", traffic / k.t->low / 1e9)
        .end_object();
    std::fprintf(stderr, " %s %.1f GB/s", k.name, traffic / k.t->median / 1e9);
  }
  std::fprintf(stderr, "\n");
  json.end_object();
}

}  // namespace

int main(int argc, char** argv) {
  return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment&) {
    const Config cfg = parse(argc, argv);
    const auto world = hpcps::comm::Communicator::world();
    if (world.size() < 2) throw hpcps::Error("machine_rates: run on 2 ranks: mpiexec -n 2 bench/machine_rates");
    std::vector<PingPongRow> pingpong;
    std::vector<BidirectionalRow> bidirectional;
    measure_network(world, cfg, pingpong, bidirectional);

    hpcps::metrics::JsonWriter json;
    json.begin_object().field("benchmark", "machine_rates").field("repeats", cfg.repeats);
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    json.field("openblas_coretype", coretype ? coretype : "");
    json.field("hardware_threads", static_cast<unsigned long>(std::thread::hardware_concurrency()));
    if (world.rank() == 0) {
      std::fprintf(stderr, "ping-pong, rank 0 <-> rank 1, one way (median of %d):\n", cfg.repeats);
      json.key("pingpong").begin_array();
      std::vector<double> small_m, small_t, large_m, large_t;
      for (const auto& row : pingpong) {
        json.begin_object().field("bytes", row.bytes);
        summary_fields(json, "seconds_one_way", row.one_way);
        json.field("gbytes_per_second", static_cast<double>(row.bytes) / row.one_way.median / 1e9).end_object();
        std::fprintf(stderr, "  %10zu B  %10.2f us  %7.2f GB/s\n", row.bytes, row.one_way.median * 1e6,
                     static_cast<double>(row.bytes) / row.one_way.median / 1e9);
        if (row.bytes <= 4096) {
          small_m.push_back(static_cast<double>(row.bytes));
          small_t.push_back(row.one_way.median);
        }
        if (row.bytes >= (std::size_t{1} << 20)) {
          large_m.push_back(static_cast<double>(row.bytes));
          large_t.push_back(row.one_way.median);
        }
      }
      json.end_array();
      // Two regimes: the latency from the small sizes, the bandwidth from the large ones (eager and
      // rendezvous/CMA protocols differ, so one line through all sizes fits neither end).
      json.key("fit").begin_object();
      double alpha = pingpong.front().one_way.median, beta = 0.0;
      if (small_m.size() >= 2) {
        const auto [a, b] = fit_line(small_m, small_t);
        json.key("small").begin_object().field("max_bytes", 4096).field("alpha_seconds", a)
            .field("beta_bytes_per_second", b > 0 ? 1.0 / b : std::nan("")).end_object();
        if (a > 0) alpha = a;
      }
      if (large_m.size() >= 2) {
        const auto [a, b] = fit_line(large_m, large_t);
        json.key("large").begin_object().field("min_bytes", 1 << 20).field("alpha_seconds", a)
            .field("beta_bytes_per_second", b > 0 ? 1.0 / b : std::nan("")).end_object();
        beta = b > 0 ? 1.0 / b : 0.0;
      }
      if (!(beta > 0.0)) {  // too few large sizes, or a noisy fit: the largest message's own rate
        beta = static_cast<double>(pingpong.back().bytes) / pingpong.back().one_way.median;
      }
      json.field("alpha_seconds", alpha).field("beta_bytes_per_second", beta).end_object();
      std::fprintf(stderr, "fit: alpha %.2f us (sizes <= 4 KiB), beta %.2f GB/s (sizes >= 1 MiB)\n", alpha * 1e6,
                   beta / 1e9);

      std::fprintf(stderr, "bidirectional (both ranks Isend + Irecv at once):\n");
      json.key("bidirectional").begin_array();
      for (const auto& row : bidirectional) {
        const double sum = 2.0 * static_cast<double>(row.bytes) / row.exchange.median / 1e9;
        json.begin_object().field("bytes", row.bytes);
        summary_fields(json, "seconds", row.exchange);
        json.field("gbytes_per_second_sum", sum).field("gbytes_per_second_each_direction", sum / 2).end_object();
        std::fprintf(stderr, "  %10zu B  %10.2f us  %7.2f GB/s both directions together\n", row.bytes,
                     row.exchange.median * 1e6, sum);
      }
      json.end_array();
    }

    on_rank0_alone(world, [&] {
      json.key("compute").begin_array();
      for (const auto& net : cfg.nets) {
        std::vector<std::size_t> sizes{784};
        sizes.insert(sizes.end(), net.hidden.begin(), net.hidden.end());
        sizes.push_back(10);
        const hpcps::nn::Mlp<hpcps::nn::Relu> mlp(sizes);
        json.begin_object().field("network", mlp.describe()).field("parameters", mlp.parameter_count());
        json.key("layers").begin_array();
        for (std::size_t s : sizes) json.value(s);
        json.end_array();
        json.key("results").begin_array();
        for (std::size_t t : cfg.threads) {
          for (std::size_t b : net.batches) {
            std::fprintf(stderr, "%s, batch %zu, %zu thread(s):\n", mlp.describe().c_str(), b, t);
            measure_compute(json, sizes, b, static_cast<int>(t), cfg.repeats);
          }
        }
        json.end_array().end_object();
      }
      json.end_array();
      std::fprintf(stderr, "memory (STREAM-style, traffic = reads + writes):\n");
      json.key("memory").begin_array();
      for (std::size_t t : cfg.threads) {
        for (std::size_t n : cfg.stream_elements) measure_memory(json, n, static_cast<int>(t), cfg.repeats);
      }
      json.end_array();
    });
    json.end_object();
    if (world.rank() == 0) {
      if (cfg.out.empty()) {
        std::printf("%s\n", json.str().c_str());
      } else {
        std::ofstream file(cfg.out);
        file << json.str() << "\n";
        if (!file) throw hpcps::Error("machine_rates: cannot write " + cfg.out);
      }
    }
  });
}
