// Trains a multilayer perceptron on Fashion-MNIST with an hpcps parameter server.
//
//   mpiexec -n 4 ./fashion_mnist_mlp                          # 3 workers, 1 server, synchronous
//   mpiexec -n 5 ./fashion_mnist_mlp --servers 2              # 3 workers, 2 servers
//   mpiexec -n 4 ./fashion_mnist_mlp --sync ssp --staleness 2 # stale-synchronous
//   mpiexec -n 4 ./fashion_mnist_mlp --sync async --optimizer adam
//   mpiexec -n 2 ./fashion_mnist_mlp --backend thrust-omp --threads 2
//   mpiexec -n 3 ./fashion_mnist_mlp --hidden 4096,4096 --batch 256 --train-samples 4096 --no-evaluation
//   mpiexec -n 2 ./fashion_mnist_mlp --wire bf16                # gradients pushed as bfloat16
//
// Ranks [0, W) are workers and the last --servers ranks are servers; rank 0 prints progress.
// Each --sync and --optimizer choice selects a composition compiled into this program.
#include "fashion_mnist_mlp.hpp"

#if defined(HPCPS_EXAMPLE_THRUST)
#include <hpcps/backend/thrust.hpp>
#endif

#include <CLI/CLI.hpp>

namespace fashion_mnist {

// Keeps the first `count` samples of `set`: short runs of the compute-heavy networks (the scaling
// study) train on a prefix instead of the whole set.
void keep_first(hpcps::data::Dataset& set, std::size_t count) {
  set.count = count;
  set.images.resize(count * set.features);
  set.labels.resize(count);
}

int run(const Config& cfg) {
  const auto world = hpcps::comm::Communicator::world();
  auto data = hpcps::data::load_fashion_mnist(cfg.data);
  const int workers = std::max(world.size() - cfg.servers, 1);
  if (cfg.train_samples > 0) {
    // Every rank checks the same numbers, so every rank fails the same way.
    if (cfg.train_samples > data.train.count) {
      throw hpcps::Error(fmt::format("--train-samples {}: the training set in {} has only {} samples", cfg.train_samples,
                                     cfg.data, data.train.count));
    }
    if (cfg.train_samples < static_cast<std::size_t>(workers)) {
      throw hpcps::Error(fmt::format("--train-samples {}: fewer samples than the {} workers (each needs at least one)",
                                     cfg.train_samples, workers));
    }
    keep_first(data.train, cfg.train_samples);
  }
  std::vector<std::size_t> sizes{data.train.features};
  sizes.insert(sizes.end(), cfg.hidden.begin(), cfg.hidden.end());
  sizes.push_back(data.train.classes);
  const Network network(sizes);
  const Problem p{world, cfg, data, network, workers};
  if (cfg.backend == "cuda") {
#if defined(HPCPS_EXAMPLE_CUDA)
    return run_cuda(p);
#else
    throw hpcps::Error("--backend cuda: this build has no CUDA (configure with nvcc and -DHPCPS_CUDA=ON)");
#endif
  }
  if (cfg.backend == "thrust-omp") {
#if defined(HPCPS_EXAMPLE_THRUST)
    return with_backend<hpcps::backend::ThrustOmp>(p);
#else
    throw hpcps::Error("--backend thrust-omp: this build found no Thrust headers (CCCL)");
#endif
  }
  return with_backend<hpcps::backend::Cpu>(p);
}

}  // namespace fashion_mnist

int main(int argc, char** argv) {
  using namespace fashion_mnist;
  Config cfg;
  CLI::App app{"Train an MLP on Fashion-MNIST with an hpcps parameter server (run under mpiexec)"};
  app.add_option("--data", cfg.data, "Folder with the Fashion-MNIST IDX files (.gz or not)")->capture_default_str();
  app.add_option("--epochs", cfg.epochs, "Passes over the training set")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch", cfg.batch, "Global minibatch per clock, split among the workers")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--backend", cfg.backend, "Gradient backend: cpu, thrust-omp, cuda (where built with CUDA)")
      ->capture_default_str()->check(CLI::IsMember({"cpu", "thrust-omp", "cuda"}));
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
  app.add_option("--servers", cfg.servers,
                 "Server ranks (the last ones); the rest are workers. 0: colocated, every rank a worker and the "
                 "server of its own shard (synchronous only)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--threads", cfg.threads, "Compute threads per worker rank")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seed", cfg.seed, "Seed for initialisation and shuffling")->capture_default_str();
  app.add_option("--report", cfg.report, "Write a JSON summary to this file (rank 0)");
  app.add_option("--evaluations-per-epoch", cfg.evaluations_per_epoch,
                 "Test-set evaluations on rank 0 per epoch (time-to-accuracy curves in the report)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--train-samples", cfg.train_samples, "Train on the first N training samples only (0: all)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("!--no-evaluation", cfg.evaluate,
               "Skip the test-set evaluations (benchmarks: they are not training time, but rank 0 spends them)");
  app.add_option("--wire", cfg.wire, "Number format of the pushed gradients: fp32, bf16, fp16 (servers sum in fp32)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--pull-wire", cfg.pull_wire,
                 "Number format of the pulled parameters: fp32, bf16, fp16 (servers keep fp32 masters)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--piece-floats", cfg.piece_floats, "Largest push/pull message in floats (a shard travels as pieces)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("!--no-overlap", cfg.overlap, "Push after the whole gradient instead of during backpropagation");
  app.add_flag("!--no-shared-memory", cfg.shared_memory,
               "Send every byte in point-to-point messages, also between ranks on one node");
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
