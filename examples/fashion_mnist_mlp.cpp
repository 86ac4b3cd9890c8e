// Trains a multilayer perceptron on Fashion-MNIST with an hpcps parameter server.
//
//   mpiexec -n 4 ./fashion_mnist_mlp                          # 3 workers, 1 server, synchronous
//   mpiexec -n 5 ./fashion_mnist_mlp --servers 2              # 3 workers, 2 servers
//   mpiexec -n 4 ./fashion_mnist_mlp --sync ssp --staleness 2 # stale-synchronous
//   mpiexec -n 4 ./fashion_mnist_mlp --sync async --optimizer adam
//
// Ranks [0, W) are workers and the last --servers ranks are servers; rank 0 prints progress.
// Each --sync and --optimizer choice selects a composition compiled into this program.
#include <hpcps/hpcps.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Config {
  std::string data = hpcps::data::default_fashion_mnist_dir();
  std::size_t epochs = 10;
  std::size_t batch = 64;
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
  int slow_worker = -1;  // straggler study: this worker computes `slowdown` times slower
  double slowdown = 1.0;
};

float default_lr(const std::string& optimizer) {
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

template <class Sync, class Optimizer>
int train(const Problem& p, Sync sync, Optimizer optimizer) {
  using Server = hpcps::ParameterServer<Network, hpcps::backend::Cpu, Sync, Optimizer>;
  const Config& cfg = p.cfg;
  const bool root = p.world.rank() == 0;
  typename Server::Options options;
  options.servers = cfg.servers;
  options.seed = cfg.seed;
  options.max_batch = (cfg.batch + static_cast<std::size_t>(p.workers) - 1) / static_cast<std::size_t>(p.workers);
  Server ps(p.world, p.network, hpcps::backend::Cpu(cfg.threads), options, sync, optimizer);

  if (root) {
    fmt::print("hpcps {}: {} ({} parameters), {} worker(s) + {} server(s), global batch {}, {} thread(s)/rank, "
               "sync {}{}, optimizer {} (lr {} {}), gemm {}\n",
               hpcps::version_string, p.network.describe(), p.network.parameter_count(), ps.layout().workers(),
               ps.layout().servers(), cfg.batch, cfg.threads, Sync::name,
               cfg.sync == "ssp" ? fmt::format(" (staleness {})", cfg.staleness) : std::string(), cfg.optimizer,
               *cfg.lr, cfg.schedule, hpcps::backend::Cpu::name);
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
    fmt::print("final test accuracy {:.4f}, {:.0f} samples/s, {:.2f} s training, {:.2f} s wall; "
               "server: {} updates, {:.2f} s waiting, {:.2f} s updating, largest staleness {}\n",
               report.test_accuracy, report.samples_per_second, report.train_seconds, report.wall_seconds,
               report.server_updates, report.server_wait, report.server_update, report.server_max_staleness);
    if (!cfg.report.empty()) {
      hpcps::metrics::JsonWriter json;
      json.begin_object();
      json.key("config").begin_object();
      json.field("program", "fashion_mnist_mlp").field("network", p.network.describe());
      json.field("parameters", p.network.parameter_count()).field("data", cfg.data).field("epochs", cfg.epochs);
      json.field("batch", cfg.batch).field("sync", cfg.sync).field("staleness", cfg.sync == "ssp" ? cfg.staleness : 0);
      json.field("optimizer", cfg.optimizer).field("lr", *cfg.lr).field("schedule", cfg.schedule);
      json.field("momentum", cfg.momentum).field("weight_decay", cfg.weight_decay);
      json.field("servers", cfg.servers).field("workers", ps.layout().workers()).field("threads", cfg.threads);
      json.field("seed", cfg.seed).field("backend", hpcps::backend::Cpu::name);
      json.field("slow_worker", cfg.slow_worker).field("slowdown", cfg.slowdown);
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
hpcps::optim::Schedule make_schedule(const Problem& p, bool aggregates) {
  const Config& cfg = p.cfg;
  const std::size_t per_clock = aggregates ? 1 : static_cast<std::size_t>(p.workers);
  const std::size_t steps = cfg.epochs * hpcps::ps::clocks_per_epoch(p.data.train.count, cfg.batch, p.workers) * per_clock;
  const float lr = *cfg.lr / static_cast<float>(per_clock);
  if (cfg.schedule == "cosine") return hpcps::optim::Schedule::cosine(lr, steps);
  if (cfg.schedule == "step") return hpcps::optim::Schedule::step_decay(lr, std::max<std::size_t>(steps / 3, 1), 0.1f);
  return hpcps::optim::Schedule::constant(lr);
}

template <class Sync>
int with_optimizer(const Problem& p, Sync sync) {
  const Config& cfg = p.cfg;
  const auto schedule = make_schedule(p, Sync::aggregates);
  if (cfg.optimizer == "sgd") return train(p, sync, hpcps::optim::StandardSgd(schedule, cfg.weight_decay));
  if (cfg.optimizer == "adam") return train(p, sync, hpcps::optim::Adam(schedule, 0.9f, 0.999f, 1e-8f, cfg.weight_decay));
  return train(p, sync,
               hpcps::optim::MomentumSgd(schedule, cfg.weight_decay,
                                         hpcps::optim::MomentumUpdate(cfg.momentum, cfg.optimizer == "nesterov")));
}

int run(const Config& cfg) {
  const auto world = hpcps::comm::Communicator::world();
  const auto data = hpcps::data::load_fashion_mnist(cfg.data);
  std::vector<std::size_t> sizes{data.train.features};
  sizes.insert(sizes.end(), cfg.hidden.begin(), cfg.hidden.end());
  sizes.push_back(data.train.classes);
  const Network network(sizes);
  const Problem p{world, cfg, data, network, std::max(world.size() - cfg.servers, 1)};
  if (cfg.sync == "ssp") return with_optimizer(p, hpcps::sync::StaleSynchronous(cfg.staleness));
  if (cfg.sync == "async") return with_optimizer(p, hpcps::sync::Asynchronous{});
  return with_optimizer(p, hpcps::sync::Synchronous{});
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Train an MLP on Fashion-MNIST with an hpcps parameter server (run under mpiexec)"};
  app.add_option("--data", cfg.data, "Folder with the Fashion-MNIST IDX files (.gz or not)")->capture_default_str();
  app.add_option("--epochs", cfg.epochs, "Passes over the training set")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch", cfg.batch, "Global minibatch per clock, split among the workers")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--sync", cfg.sync, "Synchronization: bsp (synchronous), ssp (stale-bounded), async")
      ->capture_default_str()->check(CLI::IsMember({"bsp", "ssp", "async"}));
  app.add_option("--staleness", cfg.staleness, "Staleness bound s of --sync ssp (clocks a worker may run ahead)")
      ->capture_default_str();
  app.add_option("--optimizer", cfg.optimizer, "Server-side update rule: sgd, momentum, nesterov, adam")
      ->capture_default_str()->check(CLI::IsMember({"sgd", "momentum", "nesterov", "adam"}));
  app.add_option("--lr", cfg.lr, "Learning rate (default: 0.1 sgd, 0.02 momentum/nesterov, 0.001 adam)")
      ->check(CLI::PositiveNumber);
  app.add_option("--schedule", cfg.schedule, "Learning-rate schedule over the run: cosine (to 0), step (x0.1 every third), constant")
      ->capture_default_str()->check(CLI::IsMember({"cosine", "step", "constant"}));
  app.add_option("--momentum", cfg.momentum, "Momentum of --optimizer momentum/nesterov")
      ->capture_default_str()->check(CLI::Range(0.0f, 0.999f));
  app.add_option("--weight-decay", cfg.weight_decay, "L2 weight decay")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--hidden", cfg.hidden, "Hidden layer sizes, e.g. 256,128")->delimiter(',')->capture_default_str();
  app.add_option("--servers", cfg.servers, "Server ranks (the last ones); the rest are workers")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--threads", cfg.threads, "Compute threads per worker rank")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seed", cfg.seed, "Seed for initialisation and shuffling")->capture_default_str();
  app.add_option("--report", cfg.report, "Write a JSON summary to this file (rank 0)");
  app.add_option("--evaluations-per-epoch", cfg.evaluations_per_epoch,
                 "Test-set evaluations on rank 0 per epoch (time-to-accuracy curves in the report)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--slow-worker", cfg.slow_worker, "Straggler study: slow this worker down (-1: none)")->capture_default_str();
  app.add_option("--slowdown", cfg.slowdown, "Straggler study: the slow worker computes this many times slower")
      ->capture_default_str()->check(CLI::Range(1.0, 100.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments, so every rank exits the same way: no MPI needed.
    return app.exit(e);
  }
  if (!cfg.lr) cfg.lr = default_lr(cfg.optimizer);
  return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment&) { return run(cfg); });
}
