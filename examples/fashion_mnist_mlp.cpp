// Trains a multilayer perceptron on Fashion-MNIST with a synchronous parameter server.
//
//   mpiexec -n 4 ./fashion_mnist_mlp                 # 3 workers, 1 server
//   mpiexec -n 5 ./fashion_mnist_mlp --servers 2     # 3 workers, 2 servers
//
// Ranks [0, W) are workers and the last --servers ranks are servers; rank 0 prints progress.
#include <hpcps/hpcps.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace {

struct Config {
  std::string data = hpcps::data::default_fashion_mnist_dir();
  std::size_t epochs = 10;
  std::size_t batch = 64;
  float lr = 0.02f;
  float momentum = 0.9f;
  bool nesterov = false;
  std::string schedule = "cosine";
  float weight_decay = 0.0f;
  std::vector<std::size_t> hidden{256, 128};
  int servers = 1;
  int threads = 1;
  std::uint64_t seed = 1;
  std::string report;
};

using Server = hpcps::ParameterServer<hpcps::nn::Mlp<hpcps::nn::Relu>, hpcps::backend::Cpu,
                                      hpcps::sync::Synchronous, hpcps::optim::MomentumSgd>;

int train(const Config& cfg) {
  const auto world = hpcps::comm::Communicator::world();
  const bool root = world.rank() == 0;
  const auto data = hpcps::data::load_fashion_mnist(cfg.data);

  std::vector<std::size_t> sizes{data.train.features};
  sizes.insert(sizes.end(), cfg.hidden.begin(), cfg.hidden.end());
  sizes.push_back(data.train.classes);
  const hpcps::nn::Mlp<hpcps::nn::Relu> network(sizes);

  Server::Options options;
  options.servers = cfg.servers;
  options.seed = cfg.seed;
  const int workers = world.size() - cfg.servers;
  options.max_batch = workers > 0 ? (cfg.batch + static_cast<std::size_t>(workers) - 1) / static_cast<std::size_t>(workers) : 1;
  const std::size_t steps =
      cfg.epochs * hpcps::ps::clocks_per_epoch(data.train.count, cfg.batch, std::max(workers, 1));
  const auto schedule = cfg.schedule == "cosine" ? hpcps::optim::Schedule::cosine(cfg.lr, steps)
                        : cfg.schedule == "step" ? hpcps::optim::Schedule::step_decay(cfg.lr, std::max<std::size_t>(steps / 3, 1), 0.1f)
                                                 : hpcps::optim::Schedule::constant(cfg.lr);
  Server ps(world, network, hpcps::backend::Cpu(cfg.threads), options, hpcps::sync::Synchronous{},
            hpcps::optim::MomentumSgd(schedule, cfg.weight_decay, hpcps::optim::MomentumUpdate(cfg.momentum, cfg.nesterov)));

  if (root) {
    fmt::print("hpcps {}: {} ({} parameters), {} worker(s) + {} server(s), global batch {}, {} thread(s)/rank, "
               "sync {}, optimizer {} (lr {} {}, momentum {}{}), gemm {}\n",
               hpcps::version_string, network.describe(), network.parameter_count(), ps.layout().workers(),
               ps.layout().servers(), cfg.batch, cfg.threads, hpcps::sync::Synchronous::name, hpcps::optim::MomentumSgd::name,
               cfg.lr, schedule.name(), cfg.momentum, cfg.nesterov ? ", nesterov" : "", hpcps::backend::Cpu::name);
    fmt::print("{:>5} {:>10} {:>9} {:>10} {:>9} {:>11} {:>8} {:>9} {:>9} {:>9}\n", "epoch", "train_loss", "train_acc",
               "test_loss", "test_acc", "samples/s", "time_s", "compute", "comm", "wait");
    std::fflush(stdout);
  }
  hpcps::ps::TrainOptions train_options;
  train_options.epochs = cfg.epochs;
  train_options.batch = cfg.batch;
  train_options.seed = cfg.seed;
  const auto report = hpcps::ps::train(ps, data.train, &data.test, train_options, [](const hpcps::ps::EpochReport& e) {
    fmt::print("{:>5} {:>10.4f} {:>9.4f} {:>10.4f} {:>9.4f} {:>11.0f} {:>8.2f} {:>9.2f} {:>9.2f} {:>9.2f}\n", e.epoch,
               e.train_loss, e.train_accuracy, e.test_loss, e.test_accuracy, e.samples_per_second, e.seconds,
               e.times.compute, e.times.communicate, e.times.wait);
    std::fflush(stdout);
  });

  if (root) {
    fmt::print("final test accuracy {:.4f}, {:.0f} samples/s, {:.2f} s training, {:.2f} s wall; "
               "server: {} updates, {:.2f} s waiting, {:.2f} s updating\n",
               report.test_accuracy, report.samples_per_second, report.train_seconds, report.wall_seconds,
               report.server_updates, report.server_wait, report.server_update);
    if (!cfg.report.empty()) {
      hpcps::metrics::JsonWriter json;
      json.begin_object();
      json.key("config").begin_object();
      json.field("program", "fashion_mnist_mlp").field("network", network.describe());
      json.field("parameters", network.parameter_count()).field("data", cfg.data).field("epochs", cfg.epochs);
      json.field("batch", cfg.batch).field("lr", cfg.lr).field("schedule", cfg.schedule).field("momentum", cfg.momentum).field("nesterov", cfg.nesterov);
      json.field("weight_decay", cfg.weight_decay);
      json.field("servers", cfg.servers).field("workers", ps.layout().workers()).field("threads", cfg.threads);
      json.field("seed", cfg.seed).field("backend", hpcps::backend::Cpu::name);
      json.field("sync", hpcps::sync::Synchronous::name).field("optimizer", hpcps::optim::MomentumSgd::name);
      json.end_object();
      hpcps::ps::write_report_fields(json, report);
      json.end_object();
      hpcps::ps::write_file(cfg.report, json.str());
      fmt::print("report written to {}\n", cfg.report);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Train an MLP on Fashion-MNIST with an hpcps synchronous parameter server (run under mpiexec)"};
  app.add_option("--data", cfg.data, "Folder with the Fashion-MNIST IDX files (.gz or not)")->capture_default_str();
  app.add_option("--epochs", cfg.epochs, "Passes over the training set")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch", cfg.batch, "Global minibatch per step, split among the workers")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--lr", cfg.lr, "Learning rate of the server-side SGD with momentum")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--schedule", cfg.schedule, "Learning-rate schedule over the run: cosine (to 0), step (x0.1 every third), constant")
      ->capture_default_str()->check(CLI::IsMember({"cosine", "step", "constant"}));
  app.add_option("--momentum", cfg.momentum, "Momentum of the server-side SGD (0 = plain SGD)")
      ->capture_default_str()->check(CLI::Range(0.0f, 0.999f));
  app.add_flag("--nesterov", cfg.nesterov, "Use Nesterov momentum");
  app.add_option("--weight-decay", cfg.weight_decay, "L2 weight decay")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--hidden", cfg.hidden, "Hidden layer sizes, e.g. 256,128")->delimiter(',')->capture_default_str();
  app.add_option("--servers", cfg.servers, "Server ranks (the last ones); the rest are workers")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--threads", cfg.threads, "Compute threads per worker rank")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seed", cfg.seed, "Seed for initialisation and shuffling")->capture_default_str();
  app.add_option("--report", cfg.report, "Write a JSON summary to this file (rank 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments, so every rank exits the same way: no MPI needed.
    return app.exit(e);
  }
  return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment&) { return train(cfg); });
}
