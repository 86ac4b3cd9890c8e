#pragma once
// The compositions of the Fashion-MNIST example, shared by fashion_mnist_mlp.cpp (CPU and Thrust
// OpenMP backends, g++) and fashion_mnist_mlp_cuda.cu (Thrust CUDA backend, nvcc).
#include <hpcps/hpcps.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace fashion_mnist {

struct Config {
  std::string data = hpcps::data::default_fashion_mnist_dir();
  std::size_t epochs = 10;
  std::size_t batch = 64;
  std::string backend = "cpu";
  std::string sync = "bsp";
  std::size_t staleness = 2;
  std::string optimizer = "momentum";
  std::optional<float> lr;  // default depends on the optimizer
  float momentum = 0.9f;
  std::string schedule = "cosine";
  float weight_decay = 0.0f;
  std::vector<std::size_t> hidden{256, 128};
  int servers = 1;
  int threads = 1;
  std::uint64_t seed = 1;
  std::string report;
  std::size_t evaluations_per_epoch = 1;
  bool evaluate = true;           // test-set evaluation on rank 0 (excluded from the training time)
  std::size_t train_samples = 0;  // train on the first N samples only; 0: all
  std::string wire = "fp32";       // number format of pushed gradients: fp32, bf16, fp16
  std::string pull_wire = "fp32";  // number format of pulled parameters
  std::size_t piece_floats = hpcps::ps::Layout::default_piece_floats;  // largest push/pull message
  bool overlap = true;             // push pieces during backpropagation
  bool shared_memory = true;       // ranks on one node exchange through a shared-memory window
  int slow_worker = -1;  // straggler study: this worker computes `slowdown` times slower
  double slowdown = 1.0;
};

inline float default_lr(const std::string& optimizer) {
  if (optimizer == "adam") return 0.001f;
  if (optimizer == "sgd") return 0.1f;
  return 0.02f;  // momentum, nesterov
}

using Network = hpcps::nn::Mlp<hpcps::nn::Relu>;

struct Problem {
  const hpcps::comm::Communicator& world;
  const Config& cfg;
  const hpcps::data::TrainTest& data;
  const Network& network;
  int workers;
};

template <class Backend, class Sync, class Optimizer>
int train(const Problem& p, Sync sync, Optimizer optimizer) {
  using Server = hpcps::ParameterServer<Network, Backend, Sync, Optimizer>;
  const Config& cfg = p.cfg;
  const bool root = p.world.rank() == 0;
  typename Server::Options options;
  options.servers = cfg.servers;
  options.seed = cfg.seed;
  options.max_batch = hpcps::ps::worker_batch(cfg.batch, 0, p.workers);  // worker 0 gets the largest share
  options.wire = hpcps::ps::parse_wire_format(cfg.wire);
  options.pull_wire = hpcps::ps::parse_wire_format(cfg.pull_wire);
  options.piece_floats = cfg.piece_floats;
  options.overlap = cfg.overlap;
  options.shared_memory = cfg.shared_memory;
  Server ps(p.world, p.network, Backend(cfg.threads), options, sync, optimizer);

  if (root) {
    fmt::print("hpcps {}: {} ({} parameters), {} worker(s) + {} server(s), global batch {}, {} thread(s)/rank, "
               "sync {}{}, optimizer {} (lr {} {}), backend {}, wire {} push / {} pull{}\n",
               hpcps::version_string, p.network.describe(), p.network.parameter_count(), ps.layout().workers(),
               ps.layout().servers(), cfg.batch, cfg.threads, Sync::name,
               cfg.sync == "ssp" ? fmt::format(" (staleness {})", cfg.staleness) : std::string(), cfg.optimizer,
               *cfg.lr, cfg.schedule, Backend::name, cfg.wire, cfg.pull_wire,
               ps.uses_shared_memory() ? ", shared memory on the node" : "");
    if (cfg.slow_worker >= 0) fmt::print("worker {} is slowed down {}x\n", cfg.slow_worker, cfg.slowdown);
    fmt::print("{:>5} {:>10} {:>9} {:>10} {:>9} {:>11} {:>8} {:>9} {:>9} {:>9}\n", "epoch", "train_loss", "train_acc",
               "test_loss", "test_acc", "samples/s", "time_s", "compute", "comm", "wait");
    std::fflush(stdout);
  }
  hpcps::ps::TrainOptions train_options;
  train_options.epochs = cfg.epochs;
  train_options.batch = cfg.batch;
  train_options.seed = cfg.seed;
  train_options.evaluations_per_epoch = cfg.evaluations_per_epoch;
  train_options.evaluate = cfg.evaluate;
  if (cfg.slow_worker >= 0 && cfg.slowdown > 1.0) {
    train_options.after_compute = [&cfg](int w, std::size_t, double seconds) {
      if (w == cfg.slow_worker) std::this_thread::sleep_for(std::chrono::duration<double>((cfg.slowdown - 1.0) * seconds));
    };
  }
  const auto report = hpcps::ps::train(ps, p.data.train, &p.data.test, train_options, [](const hpcps::ps::EpochReport& e) {
    fmt::print("{:>5} {:>10.4f} {:>9.4f} {:>10.4f} {:>9.4f} {:>11.0f} {:>8.2f} {:>9.2f} {:>9.2f} {:>9.2f}\n", e.epoch,
               e.train_loss, e.train_accuracy, e.test_loss, e.test_accuracy, e.samples_per_second, e.seconds,
               e.times.compute, e.times.communicate, e.times.wait);
    std::fflush(stdout);
  });

  if (root) {
    fmt::print("final test accuracy {}, {:.0f} samples/s, {:.2f} s training, {:.2f} s wall; "
               "server: {} updates, {:.2f} s waiting, {:.2f} s updating, largest staleness {}\n",
               cfg.evaluate ? fmt::format("{:.4f}", report.test_accuracy) : std::string("not evaluated"),
               report.samples_per_second, report.train_seconds, report.wall_seconds,
               report.server_updates, report.server_wait, report.server_update, report.server_max_staleness);
    if (!cfg.report.empty()) {
      hpcps::metrics::JsonWriter json;
      json.begin_object();
      json.key("config").begin_object();
      json.field("program", "fashion_mnist_mlp").field("network", p.network.describe());
      json.field("parameters", p.network.parameter_count()).field("data", cfg.data).field("epochs", cfg.epochs);
      json.field("train_samples", p.data.train.count).field("evaluate", cfg.evaluate);
      json.field("batch", cfg.batch).field("sync", cfg.sync).field("staleness", cfg.sync == "ssp" ? cfg.staleness : 0);
      json.field("optimizer", cfg.optimizer).field("lr", *cfg.lr).field("schedule", cfg.schedule);
      json.field("momentum", cfg.momentum).field("weight_decay", cfg.weight_decay);
      json.field("servers", cfg.servers).field("workers", ps.layout().workers()).field("threads", cfg.threads);
      json.field("seed", cfg.seed).field("backend", cfg.backend).field("backend_type", Backend::name);
      json.field("slow_worker", cfg.slow_worker).field("slowdown", cfg.slowdown);
      json.field("wire", cfg.wire).field("pull_wire", cfg.pull_wire);
      json.field("piece_floats", cfg.piece_floats).field("overlap", cfg.overlap);
      json.field("shared_memory_requested", cfg.shared_memory).field("shared_memory", ps.uses_shared_memory());
      json.end_object();
      hpcps::ps::write_report_fields(json, report);
      json.end_object();
      hpcps::ps::write_file(cfg.report, json.str());
      fmt::print("report written to {}\n", cfg.report);
    }
  }
  return 0;
}

// The learning-rate schedule over server updates. Asynchronous and stale-synchronous servers
// update once per push, W times per clock, so their schedule is W times longer and the rate per
// update is lr / W: a clock's W updates then move the parameters about as far as one synchronous
// update of the same lr.
inline hpcps::optim::Schedule make_schedule(const Problem& p, bool aggregates) {
  const Config& cfg = p.cfg;
  const std::size_t per_clock = aggregates ? 1 : static_cast<std::size_t>(p.workers);
  const std::size_t steps = cfg.epochs * hpcps::ps::clocks_per_epoch(p.data.train.count, cfg.batch, p.workers) * per_clock;
  const float lr = *cfg.lr / static_cast<float>(per_clock);
  if (cfg.schedule == "cosine") return hpcps::optim::Schedule::cosine(lr, steps);
  if (cfg.schedule == "step") return hpcps::optim::Schedule::step_decay(lr, std::max<std::size_t>(steps / 3, 1), 0.1f);
  return hpcps::optim::Schedule::constant(lr);
}

template <class Backend, class Sync>
int with_optimizer(const Problem& p, Sync sync) {
  const Config& cfg = p.cfg;
  const auto schedule = make_schedule(p, Sync::aggregates);
  if (cfg.optimizer == "sgd") return train<Backend>(p, sync, hpcps::optim::StandardSgd(schedule, cfg.weight_decay));
  if (cfg.optimizer == "adam") return train<Backend>(p, sync, hpcps::optim::Adam(schedule, 0.9f, 0.999f, 1e-8f, cfg.weight_decay));
  return train<Backend>(p, sync,
               hpcps::optim::MomentumSgd(schedule, cfg.weight_decay,
                                         hpcps::optim::MomentumUpdate(cfg.momentum, cfg.optimizer == "nesterov")));
}

// Every synchronization strategy for one backend: the compositions this program holds for it.
template <class Backend>
int with_backend(const Problem& p) {
  if (p.cfg.sync == "ssp") return with_optimizer<Backend>(p, hpcps::sync::StaleSynchronous(p.cfg.staleness));
  if (p.cfg.sync == "async") return with_optimizer<Backend>(p, hpcps::sync::Asynchronous{});
  return with_optimizer<Backend>(p, hpcps::sync::Synchronous{});
}

// Defined in fashion_mnist_mlp_cuda.cu, compiled by nvcc, when the build has CUDA.
int run_cuda(const Problem& p);

}  // namespace fashion_mnist
