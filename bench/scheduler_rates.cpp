// What this machine's scheduler charges a bulk-synchronous program when it runs more ranks than
// cores: the oversubscription input of the analytic model (bench/model.py, docs/model.md).
//
// Every rank repeats a superstep: compute for c seconds (single-thread GEMM from backend::Cpu, the
// parameter server's own kernel), then exchange empty messages through hpcps's comm layer and wait
// with its default wait mode, as a parameter-server clock does once its bytes travel through shared
// memory. Two patterns, the two layouts of the parameter server:
//  - server: rank 0 computes nothing; the others send to it, it waits for all of them and answers
//    each (a dedicated server and its workers);
//  - peers: every rank computes and then sends to and receives from every other, --exchanges
//    times (default 2: a colocated clock's push notifications, then its pull notifications).
// The model needs nothing of the parameter server here: only how long a superstep of c seconds
// of compute per rank takes on R ranks of this machine. With R <= cores it is c plus a few
// percent; beyond, it is whatever time slicing and the waiting ranks' polling make it.
//
// c is set by repeating one GEMM whose uncontended time is the minimum over many timed calls (the
// minimum is the run no other rank interrupted, even when ranks share a core). Steps run back to
// back with no barrier between them (a barrier's own spinning would be measured); rank 0 times
// each step. Median and range over --repeats, each the mean of at least 5 steps and 0.5 s of compute.
//
//   mpiexec -n R bench/scheduler_rates --pattern server|peers [--compute-ms 0.25,0.5,1,2,4,16,64,256]
//       [--repeats 5] [--exchanges 2] [--out FILE]
// bench/scheduler_rates.py runs it for R = 1 .. 2 x cores and both patterns.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <hpcps/hpcps.hpp>

#include "timing.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using hpcps::metrics::seconds_since;

// One burst of the parameter server's compute: a GEMM of the small MLP's first layer on 16 samples,
// short (~0.1 ms) so that c can be set finely.
struct Burst {
  static constexpr std::size_t m = 16, n = 256, k = 784;
  hpcps::backend::Cpu cpu{1};
  std::vector<float> a = std::vector<float>(m * k, 0.5f), b = std::vector<float>(n * k, 0.25f),
                     c = std::vector<float>(m * n, 0.0f);
  void operator()() {
    cpu.gemm(hpcps::backend::Transpose::no, hpcps::backend::Transpose::yes, m, n, k, 1.0f, a.data(), k, b.data(),
             k, 0.0f, c.data(), n);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment&) {
    std::string pattern = "server", out;
    std::vector<double> compute_ms{0.25, 0.5, 1, 2, 4, 16, 64, 256};
    int repeats = 5, exchanges = 2;
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (i + 1 >= argc) throw hpcps::Error("scheduler_rates: option " + flag + " needs a value");
      const std::string v = argv[++i];
      if (flag == "--pattern") pattern = v;
      else if (flag == "--compute-ms") compute_ms = hpcps_bench::parse_doubles(v);
      else if (flag == "--repeats") repeats = std::max(1, std::stoi(v));
      else if (flag == "--exchanges") exchanges = std::max(1, std::stoi(v));
      else if (flag == "--out") out = v;
      else throw hpcps::Error("scheduler_rates: unknown option " + flag);
    }
    if (pattern != "server" && pattern != "peers") {
      throw hpcps::Error("scheduler_rates: --pattern must be 'server' or 'peers', got '" + pattern + "'");
    }
    const auto world = hpcps::comm::Communicator::world();
    const int rank = world.rank(), size = world.size();
    const bool server_pattern = pattern == "server";
    if (server_pattern && size < 2) throw hpcps::Error("scheduler_rates: --pattern server needs >= 2 ranks");
    const bool computes = !(server_pattern && rank == 0);

    Burst burst;
    double burst_seconds = 1e9;
    for (int i = 0; i < 200; ++i) {
      const auto t0 = clock_type::now();
      burst();
      burst_seconds = std::min(burst_seconds, seconds_since(t0));
    }
    world.allreduce_in_place(&burst_seconds, 1, MPI_MIN);

    const std::vector<int> peers = [&] {
      std::vector<int> p;
      for (int r = 0; r < size; ++r) {
        if (r != rank && (!server_pattern || rank == 0 || r == 0)) p.push_back(r);
      }
      return p;
    }();
    hpcps::comm::RequestSet requests(2 * peers.size());
    const char token = 0;
    std::vector<char> inbox(static_cast<std::size_t>(size), 0);
    // Each round: post the round's messages, then wait for them all.
    auto round = [&](auto post) {
      requests.clear();
      post();
      requests.wait_all();
    };
    auto step = [&](std::size_t bursts) {
      if (computes) {
        for (std::size_t i = 0; i < bursts; ++i) burst();
      }
      if (server_pattern && rank == 0) {
        round([&] {
          for (int p : peers) requests.add(world.irecv(&inbox[static_cast<std::size_t>(p)], 1, p, 1));
        });
        round([&] {
          for (int p : peers) requests.add(world.isend(&token, 1, p, 2));
        });
      } else if (server_pattern) {
        round([&] {
          requests.add(world.isend(&token, 1, 0, 1));
          requests.add(world.irecv(&inbox[0], 1, 0, 2));
        });
      } else {
        for (int e = 0; e < exchanges; ++e) {
          round([&] {
            for (int p : peers) requests.add(world.irecv(&inbox[static_cast<std::size_t>(p)], 1, p, 3));
            for (int p : peers) requests.add(world.isend(&token, 1, p, 3));
          });
        }
      }
    };

    hpcps::metrics::JsonWriter json;
    json.begin_object().field("benchmark", "scheduler_rates").field("pattern", pattern).field("ranks", size);
    json.field("hardware_threads", static_cast<unsigned long>(std::thread::hardware_concurrency()));
    json.field("burst_seconds", burst_seconds).field("repeats", repeats);
    if (!server_pattern) json.field("exchanges", exchanges);
    json.key("points").begin_array();
    for (double ms : compute_ms) {
      const auto bursts = static_cast<std::size_t>(std::max(1.0, ms * 1e-3 / burst_seconds + 0.5));
      const double compute = static_cast<double>(bursts) * burst_seconds;
      // Steps per repeat from the uncontended compute, so every rank agrees on the count without
      // measuring first: at least 0.5 s of it and 5 steps (3 steps of 256 ms gave one run's
      // 2-rank point 1.57x where its neighbours read 1.06-1.14x).
      const auto steps = static_cast<std::size_t>(std::clamp(0.5 / (compute + 20e-6), 5.0, 4000.0));
      for (int w = 0; w < 2; ++w) step(bursts);
      std::vector<double> times;
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = clock_type::now();
        for (std::size_t s = 0; s < steps; ++s) step(bursts);
        times.push_back(seconds_since(t0) / static_cast<double>(steps));
      }
      const auto sum = hpcps_bench::summarize(times);
      json.begin_object().field("compute_seconds", compute).field("bursts", bursts).field("steps", steps);
      json.key("step_seconds").begin_object().field("median", sum.median).field("min", sum.low)
          .field("max", sum.high).end_object();
      json.field("slowdown", sum.median / compute).end_object();
      if (rank == 0) {
        std::fprintf(stderr, "%-6s R=%d compute %8.3f ms  step %8.3f ms (%.3f-%.3f)  x%.2f\n", pattern.c_str(), size,
                     compute * 1e3, sum.median * 1e3, sum.low * 1e3, sum.high * 1e3, sum.median / compute);
      }
    }
    json.end_array().end_object();
    if (rank == 0) {
      if (out.empty()) {
        std::printf("%s\n", json.str().c_str());
      } else {
        std::ofstream file(out);
        file << json.str() << "\n";
        if (!file) throw hpcps::Error("scheduler_rates: cannot write " + out);
      }
    }
  });
}
