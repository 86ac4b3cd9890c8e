// Communication of the parameter server against MPI's own: for a model of P floats (default 25M),
// the time of one worker clock's push plus pull (one worker, S servers, gradient computation
// skipped) against twice the one-way time of an MPI ping-pong of the same bytes between the same
// ranks, measured before and after the parameter server's clocks in one run. The parameter server
// runs twice in that run: as composed by default (ranks on one node share memory) and with
// Options::shared_memory off (every byte in point-to-point messages). Median and range over
// --repeats; JSON on stdout.
//
//   mpiexec -n 2 bench/push_pull [--parameters 25000000] [--clocks 10] [--repeats 7]
//   mpiexec -n 3 bench/push_pull --servers 2
//   mpiexec -n 2 bench/push_pull --wire bf16 [--pull-wire bf16]   # 16-bit pushes (and pulls)
// The ping-pong always moves the fp32 model; with a 16-bit --wire the parameter server moves fewer
// bytes than it, which ps_wire_bytes_per_clock records.
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>
#include <vector>

#include <hpcps/hpcps.hpp>

#include "timing.hpp"

namespace {

// A network with P parameters and no computation: its gradient leaves the buffer as it is, so a
// step is only the push, the server's update and the pull.
class NullNetwork {
 public:
  template <class Backend>
  struct Workspace {};
  explicit NullNetwork(std::size_t parameters) : parameters_(parameters) {}
  std::size_t parameter_count() const { return parameters_; }
  std::size_t input_size() const { return 1; }
  std::size_t output_size() const { return 2; }
  void initialize(float* params, std::uint64_t) const { std::fill(params, params + parameters_, 0.0f); }
  template <class Backend>
  Workspace<Backend> make_workspace(const Backend&, std::size_t) const { return {}; }
  template <class Backend>
  hpcps::nn::BatchStats gradient(const Backend&, Workspace<Backend>&, const float*, const float*, const std::int32_t*,
                                 std::size_t count, float*) const {
    return {0.0, 0, count};
  }
  template <class Backend>
  hpcps::nn::BatchStats evaluate(const Backend&, Workspace<Backend>&, const float*, const float*, const std::int32_t*,
                                 std::size_t count) const {
    return {0.0, 0, count};
  }

 private:
  std::size_t parameters_;
};

}  // namespace

int main(int argc, char** argv) {
  return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment&) {
    std::size_t parameters = 25'000'000, clocks = 10;
    int repeats = 7, servers = 1;
    auto wire = hpcps::ps::WireFormat::fp32, pull_wire = hpcps::ps::WireFormat::fp32;
    std::size_t piece_floats = hpcps::ps::Layout::default_piece_floats;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string flag = argv[i];
      if (flag == "--parameters") parameters = std::stoul(argv[i + 1]);
      else if (flag == "--clocks") clocks = std::stoul(argv[i + 1]);
      else if (flag == "--repeats") repeats = std::atoi(argv[i + 1]);
      else if (flag == "--servers") servers = std::atoi(argv[i + 1]);
      else if (flag == "--wire") wire = hpcps::ps::parse_wire_format(argv[i + 1]);
      else if (flag == "--pull-wire") pull_wire = hpcps::ps::parse_wire_format(argv[i + 1]);
      else if (flag == "--piece-floats") piece_floats = std::stoul(argv[i + 1]);
    }
    const auto world = hpcps::comm::Communicator::world();
    // --servers 0: two colocated ranks, each a worker and the server of half the model, exchanging
    // both ways at once (pretend nodes: is a clock two exchanges of MPI's own time?).
    if (servers == 0 ? world.size() != 2 : world.size() != servers + 1) {
      throw hpcps::Error("push_pull: run with 1 worker: mpiexec -n (servers + 1), or --servers 0 on 2 ranks");
    }
    using Server = hpcps::ParameterServer<NullNetwork, hpcps::backend::Cpu, hpcps::sync::Synchronous,
                                          hpcps::optim::StandardSgd>;
    const float x = 0.0f;
    const std::int32_t y = 0;

    // Ping-pong between rank 0 and rank 1 with the same bytes, through the same comm layer: half the
    // repeats before the parameter server's clocks and half after, so both see the same machine.
    std::vector<float> buffer(world.rank() <= 1 ? parameters : 0, 1.0f);
    std::vector<double> pingpong;
    auto pingpong_repeats = [&](int n) {
      for (int r = 0; r < n; ++r) {
        world.barrier();
        const double t0 = MPI_Wtime();
        for (std::size_t i = 0; i < clocks; ++i) {
          if (world.rank() == 0) {
            world.send(buffer.data(), parameters, 1, 1);
            world.recv(buffer.data(), parameters, 1, 2);
          } else if (world.rank() == 1) {
            world.recv(buffer.data(), parameters, 0, 1);
            world.send(buffer.data(), parameters, 0, 2);
          }
        }
        pingpong.push_back((MPI_Wtime() - t0) / static_cast<double>(clocks));  // = 2 x one way
      }
    };
    // The parameter server's clocks with one transport: seconds per clock by repeat, and the
    // servers' update time per clock.
    struct Measured {
      std::vector<double> clocks;
      double update_per_clock = 0.0;
      bool shared = false;
    };
    auto parameter_server = [&](bool shared_memory) {
      Server::Options options;
      options.servers = servers;
      options.max_batch = 1;
      options.wire = wire;
      options.pull_wire = pull_wire;
      options.piece_floats = piece_floats;
      options.shared_memory = shared_memory;
      Server ps(world, NullNetwork(parameters), hpcps::backend::Cpu(1), options);
      Measured m;
      m.shared = world.allreduce_value(ps.uses_shared_memory() ? 1 : 0, MPI_MAX) != 0;
      if (ps.is_worker()) {
        auto& worker = ps.worker();
        worker.start();
        for (int r = 0; r < repeats; ++r) {
          const double t1 = MPI_Wtime();
          for (std::size_t i = 0; i < clocks; ++i) worker.step(&x, &y, 1);
          m.clocks.push_back((MPI_Wtime() - t1) / static_cast<double>(clocks));
        }
        worker.finish();
      } else {
        ps.server().run();
      }
      double update = ps.is_server() ? ps.server().stats().update : 0.0;
      double updates = ps.is_server() ? static_cast<double>(ps.server().stats().updates) : 0.0;
      world.allreduce_in_place(&update, 1, MPI_MAX);
      world.allreduce_in_place(&updates, 1, MPI_MAX);
      m.update_per_clock = updates > 0 ? update / updates : 0.0;
      return m;
    };
    // The node's copy limit for the same bytes: one core copying P floats there and back (what a
    // shared-memory transport that copies both ways would take), timed on rank 0 alone.
    std::vector<double> copies;
    if (world.rank() == 0) {
      std::vector<float> there(parameters, 0.0f);
      std::memcpy(there.data(), buffer.data(), parameters * sizeof(float));  // first touch, untimed
      for (int r = 0; r < repeats; ++r) {
        const double t0 = MPI_Wtime();
        for (std::size_t i = 0; i < clocks; ++i) {
          std::memcpy(there.data(), buffer.data(), parameters * sizeof(float));
          std::memcpy(buffer.data(), there.data(), parameters * sizeof(float));
        }
        copies.push_back((MPI_Wtime() - t0) / static_cast<double>(clocks));
      }
    }
    world.barrier();
    pingpong_repeats((repeats + 1) / 2);
    const Measured shared = parameter_server(true);       // the default: shared memory where ranks share a node
    const Measured messages = parameter_server(false);    // every byte in point-to-point messages
    pingpong_repeats(repeats / 2 + 1);
    if (world.rank() == 0) {
      const auto pp = hpcps_bench::summarize(pingpong);
      const double bytes = 4.0 * static_cast<double>(parameters);
      const double wire_bytes = static_cast<double>(parameters * (hpcps::ps::wire_bytes(wire) + hpcps::ps::wire_bytes(pull_wire)));
      hpcps::metrics::JsonWriter json;
      json.begin_object().field("benchmark", "push_pull").field("parameters", parameters).field("servers", servers);
      json.field("clocks_per_repeat", clocks).field("repeats", repeats).field("bytes_each_way", bytes);
      json.field("wire", hpcps::ps::wire_name(wire)).field("pull_wire", hpcps::ps::wire_name(pull_wire));
      json.field("piece_floats", piece_floats);
      json.field("ps_wire_bytes_per_clock", wire_bytes);
      json.field("pingpong_round_trip_seconds_median", pp.median).field("pingpong_round_trip_seconds_min", pp.low)
          .field("pingpong_round_trip_seconds_max", pp.high);
      json.field("pingpong_gbytes_per_second", 2 * bytes / pp.median / 1e9);
      const auto copy = hpcps_bench::summarize(copies);
      json.field("memcpy_round_trip_seconds_median", copy.median).field("memcpy_round_trip_seconds_min", copy.low)
          .field("memcpy_round_trip_seconds_max", copy.high);
      // ps_*: the default composition (shared memory where it applies); ps_point_to_point_*: the same
      // with Options::shared_memory off.
      const auto report = [&](const char* prefix, const Measured& m) {
        const auto c = hpcps_bench::summarize(m.clocks);
        const std::string p = prefix;
        json.field((p + "_shared_memory").c_str(), m.shared);
        json.field((p + "_clock_seconds_median").c_str(), c.median).field((p + "_clock_seconds_min").c_str(), c.low)
            .field((p + "_clock_seconds_max").c_str(), c.high);
        json.field((p + "_server_update_seconds_per_clock").c_str(), m.update_per_clock);
        json.field((p + "_gbytes_per_second").c_str(), 2 * bytes / c.median / 1e9);  // of fp32 model bytes, whatever the wire
        json.field((p + "_wire_gbytes_per_second").c_str(), wire_bytes / c.median / 1e9);
        json.field((p + "_over_pingpong").c_str(), pp.median / c.median);
        json.field((p + "_over_pingpong_min").c_str(), pp.median / c.high);
        json.field((p + "_over_pingpong_max").c_str(), pp.median / c.low);
        json.field((p + "_over_pingpong_excluding_update").c_str(), pp.median / (c.median - m.update_per_clock));
        json.field((p + "_over_memcpy").c_str(), copy.median / c.median);
        std::fprintf(stderr, "  %-18s push+pull %.2f ms (%.2f-%.2f), server update ~%.2f ms: %.2f x ping-pong\n",
                     m.shared ? "shared memory" : "point-to-point", c.median * 1e3, c.low * 1e3, c.high * 1e3,
                     m.update_per_clock * 1e3, pp.median / c.median);
      };
      std::fprintf(stderr, "P = %zu floats (%.0f MB each way), %d server(s), wire %s/%s: ping-pong round trip %.2f ms (%.2f-%.2f)\n",
                   parameters, bytes / 1e6, servers, hpcps::ps::wire_name(wire), hpcps::ps::wire_name(pull_wire),
                   pp.median * 1e3, pp.low * 1e3, pp.high * 1e3);
      std::fprintf(stderr, "  memcpy there and back on one core %.2f ms (%.2f-%.2f)\n", copy.median * 1e3,
                   copy.low * 1e3, copy.high * 1e3);
      report("ps", shared);
      report("ps_point_to_point", messages);
      json.end_object();
      std::printf("%s\n", json.str().c_str());
    }
  });
}
