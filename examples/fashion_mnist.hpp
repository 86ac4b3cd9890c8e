#pragma once
// What the Fashion-MNIST examples share: the command line, its validation, and the compositions
// (every strategy x update rule for a backend), over any network type. fashion_mnist_mlp.cpp and
// fashion_mnist_cnn.cpp each add their network's options and build it, and hold the compositions
// of backend::Cpu; the other backends' are in sources of their own (*_thrust_omp.cpp, compiled in
// parallel with the program's source, and *_cuda.cu, compiled by nvcc into the *_cuda programs
// only, so that the CPU programs link no CUDA library).
#include <hpcps/hpcps.hpp>
#include <hpcps/ps/agreed_verdict.hpp>
#include <hpcps/ps/node_dataset.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fashion_mnist {

struct Config {
  std::string program;
  std::string data = hpcps::data::default_fashion_mnist_dir();
  std::size_t epochs = 10;
  std::size_t batch = 64;
  std::string backend = "cpu";
  std::string sync = "bsp";
  int staleness = 2;
  std::string optimizer = "momentum";
  std::optional<float> lr;  // default depends on the optimizer
  float momentum = 0.9f;
  std::string schedule = "cosine";
  float weight_decay = 0.0f;
  std::optional<int> servers;  // unset: chosen from the launch (layout())
  int threads = 1;
  std::uint64_t seed = 1;
  std::string report;
  std::size_t evaluations_per_epoch = 1;
  bool evaluate = true;           // test-set evaluation on rank 0 (excluded from the training time)
  std::size_t train_samples = 0;  // train on the first N samples only; 0: all
  std::size_t augment_shift = 0;  // random translation of training images by up to N pixels
  bool augment_flip = false;      // random left-right mirror of training images
  std::string wire = "fp32";       // number format of pushed gradients: fp32, bf16, fp16
  std::string pull_wire = "fp32";  // number format of pulled parameters
  double top_k = 0.0;              // top-k pushes with error feedback: the share of each piece sent; 0: all
  float top_k_momentum = 0.0f;     // with --top-k or --sign-push: momentum correction on the workers (DGC); 0: off
  bool sign_push = false;          // scaled-sign pushes with error feedback: a bit per element and a scale
  bool sign_pull = false;          // scaled-sign pulls of what changed, error feedback on the servers
  unsigned sign_pull_passes = 1;   // passes of scaled signs per pull
  std::size_t piece_floats = hpcps::ps::Layout::default_piece_floats;  // largest push/pull message
  bool overlap = true;             // push pieces during backpropagation
  bool shared_memory = true;       // ranks on one node exchange through a shared-memory window
  bool shared_data = true;         // one copy of the data per node, in a shared-memory window
  std::string data_per_node = "full";  // ranges: each node holds only its workers' shards (sharded order)
  std::string balance = "none";  // speed: bsp splits by measured speed, ssp and async workers draw their parts
  int slow_worker = -1;  // straggler study: this worker computes `slowdown` times slower
  double slowdown = 1.0;
  std::size_t backup_workers = 0;  // bsp: each clock sums the first W - b pushes and drops the late ones
  int slow_period = 0;  // clocks slow, then as many at full speed, alternating; 0: slow throughout
  std::string checkpoint;            // folder of checkpoints; empty: none
  std::string checkpoint_every = "1epoch";
  std::size_t checkpoint_keep = 2;
  std::string resume;                // checkpoint (or folder of them) to continue from
  std::string save_model;            // .npz of the trained parameters
  std::string load_model;            // .npz to evaluate (--evaluate-only)
  bool evaluate_only = false;
};

inline float default_lr(const std::string& optimizer) {
  if (optimizer == "adam") return 0.001f;
  if (optimizer == "sgd") return 0.1f;
  return 0.02f;  // momentum, nesterov
}

// Straggler study: whether the slowed worker is slow at `clock` (after_compute's: this process's
// clocks, from 0). A period of N clocks alternates N slow clocks with N at full speed, starting
// slow, so a balanced split has to follow a speed that changes; 0 keeps the worker slow throughout.
inline bool slow_at(std::size_t clock, int period) {
  return period <= 0 || (clock / static_cast<std::size_t>(period)) % 2 == 0;
}

// The rank the launcher gave this process, before MPI is initialised: usage errors found while
// parsing the command line are printed by rank 0 alone. Hydra and Slurm's PMI set PMI_RANK, Open
// MPI its own variable, srun SLURM_PROCID; a process started without a launcher is rank 0.
inline bool launched_as_rank_zero() {
  for (const char* name : {"PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) return std::strcmp(value, "0") == 0;
  }
  return true;
}

// A number flag whose value must be finite and within [low, high] (or (low, high] when
// `low_open`): CLI11's own checks let "nan" through and print a 309-digit bound for "1e309".
inline CLI::Validator finite_in(double low, double high, bool low_open = false) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool parsed = end != text.c_str() && *end == '\0';
        if (parsed && std::isfinite(v) && (low_open ? v > low : v >= low) && v <= high) return {};
        return fmt::format("'{}' is not a number in {}{:g}, {:g}]", text, low_open ? "(" : "[", low, high);
      },
      fmt::format("FLOAT in {}{:g}, {:g}]", low_open ? "(" : "[", low, high));
}

// The options every example takes; the caller adds its network's.
inline void add_common_options(CLI::App& app, Config& cfg) {
  app.add_option("--data", cfg.data, "Folder with the Fashion-MNIST IDX files (.gz or not)")->capture_default_str();
  app.add_option("--epochs", cfg.epochs, "Passes over the training set")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--batch", cfg.batch, "Global minibatch per clock, split among the workers")
      ->capture_default_str()->check(CLI::Range(1, 1 << 24));
  app.add_option("--backend", cfg.backend, "Gradient backend: cpu, thrust-omp, cuda (where built with CUDA)")
      ->capture_default_str()->check(CLI::IsMember({"cpu", "thrust-omp", "cuda"}));
  app.add_option("--sync", cfg.sync, "Synchronization: bsp (synchronous), ssp (stale-bounded), async")
      ->capture_default_str()->check(CLI::IsMember({"bsp", "ssp", "async"}));
  app.add_option("--staleness", cfg.staleness,
                 "Staleness bound s of --sync ssp: clocks a worker may run ahead (0..10000; beyond, use --sync async)")
      ->capture_default_str()->check(CLI::Range(0, 10000));
  app.add_option("--optimizer", cfg.optimizer, "Server-side update rule: sgd, momentum, nesterov, adam")
      ->capture_default_str()->check(CLI::IsMember({"sgd", "momentum", "nesterov", "adam"}));
  app.add_option("--lr", cfg.lr, "Learning rate in (0, 10] (default: 0.1 sgd, 0.02 momentum/nesterov, 0.001 adam)")
      ->check(finite_in(0.0, 10.0, true));
  app.add_option("--schedule", cfg.schedule, "Learning-rate schedule over the run: cosine (to 0), step (x0.1 every third), constant")
      ->capture_default_str()->check(CLI::IsMember({"cosine", "step", "constant"}));
  app.add_option("--momentum", cfg.momentum, "Momentum of --optimizer momentum/nesterov, in [0, 0.999]")
      ->capture_default_str()->check(finite_in(0.0, 0.999));
  app.add_option("--weight-decay", cfg.weight_decay, "L2 weight decay, in [0, 1]")->capture_default_str()->check(finite_in(0.0, 1.0));
  app.add_option("--servers", cfg.servers,
                 "Server ranks (the last ones); the rest are workers. 0: colocated, every rank a worker and the "
                 "server of its own shard (synchronous only). Default: colocated for bsp, 1 server otherwise")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--threads", cfg.threads, "Compute threads per worker rank")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--seed", cfg.seed, "Seed for initialisation and shuffling")->capture_default_str();
  app.add_option("--augment-shift", cfg.augment_shift,
                 "Shift each training image by a random -N..N pixels in each direction (0: off)")
      ->capture_default_str()->check(CLI::Range(std::size_t{0}, std::size_t{64}));
  app.add_option("--augment-flip", cfg.augment_flip, "Mirror each training image left-right with probability 1/2")
      ->capture_default_str();
  app.add_option("--report", cfg.report, "Write a JSON summary to this file (rank 0; created before training)");
  app.add_option("--evaluations-per-epoch", cfg.evaluations_per_epoch,
                 "Test-set evaluations on rank 0 per epoch (time-to-accuracy curves in the report)")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--train-samples", cfg.train_samples, "Train on the first N training samples only (0: all)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("!--no-evaluation", cfg.evaluate,
               "Skip the test-set evaluations (benchmarks: they are not training time, but rank 0 spends them)");
  app.add_option("--wire", cfg.wire, "Number format of the pushed gradients: fp32, bf16, fp16 (servers sum in fp32)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--pull-wire", cfg.pull_wire,
                 "Number format of the pulled parameters: fp32, bf16, fp16 (servers keep fp32 masters)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--top-k", cfg.top_k,
                 "Push only this share of each gradient piece, its largest elements, and keep the rest on the worker "
                 "for the next push (error feedback); 0: every element")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--top-k-momentum", cfg.top_k_momentum,
                 "With --top-k or --sign-push: momentum correction (Deep Gradient Compression): each worker keeps the velocity "
                 "u = m u + g and pushes it through error feedback; use --optimizer sgd on the server. 0: off")
      ->capture_default_str()->check(CLI::Range(0.0, 0.999));
  app.add_flag("--sign-push", cfg.sign_push,
               "Push one bit per element, the sign of gradient plus residual, and one scale per 1024 elements (their "
               "mean magnitude); keep the rest on the worker for the next push (error feedback, 1/31 of fp32's bytes)");
  app.add_flag("--sign-pull", cfg.sign_pull,
               "Pull, after a run's first fp32 pull, the scaled signs of what changed since what the worker holds (one bit "
               "per element, one scale per 1024); the servers keep the rest for later pulls (error feedback). --pull-wire fp32");
  app.add_option("--sign-pull-passes", cfg.sign_pull_passes,
                 "With --sign-pull: passes of scaled signs per pull, each of what the passes before it left")
      ->capture_default_str()->check(CLI::Range(1u, 4u));
  app.add_option("--piece-floats", cfg.piece_floats, "Largest push/pull message in floats (a shard travels as pieces)")
      ->capture_default_str()->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40));
  app.add_flag("!--no-overlap", cfg.overlap, "Push after the whole gradient instead of during backpropagation");
  app.add_flag("!--no-shared-memory", cfg.shared_memory,
               "Send every byte in point-to-point messages, also between ranks on one node");
  app.add_flag("!--no-shared-data", cfg.shared_data,
               "Every rank that needs data reads a private copy, instead of one copy per node in shared memory");
  app.add_option("--data-per-node", cfg.data_per_node,
                 "full: every node holds the whole training set; ranges: each worker trains on its own contiguous "
                 "shard (its own order each epoch) and a node holds only its workers' shards")
      ->capture_default_str()->check(CLI::IsMember({"full", "ranges"}));
  app.add_option("--balance", cfg.balance,
                 "How the workers share the work: none (equal parts) or speed (bsp: each clock's batch split by "
                 "measured speed; ssp, async: each free worker takes the next part)")
      ->capture_default_str()->check(CLI::IsMember({"none", "speed"}));
  app.add_option("--slow-worker", cfg.slow_worker, "Straggler study: slow this worker down (-1: none)")->capture_default_str();
  app.add_option("--slowdown", cfg.slowdown, "Straggler study: the slow worker computes this many times slower")
      ->capture_default_str()->check(CLI::Range(1.0, 100.0));
  app.add_option("--backup-workers", cfg.backup_workers,
                 "bsp, dedicated servers: each clock's update sums the first W - b pushes and drops the late ones "
                 "(exchanges point to point, as with --no-shared-memory)")
      ->capture_default_str();
  app.add_option("--slow-period", cfg.slow_period,
                 "Straggler study: the slow worker is slow for N clocks, then at full speed for N, alternating "
                 "(0: slow throughout)")
      ->capture_default_str()->check(CLI::Range(0, 1000000000));
  app.add_option("--checkpoint", cfg.checkpoint,
                 "Write checkpoints into this folder (checked for writing before training; with ssp and async "
                 "the workers wait for each other at every epoch end and every N clocks of a clock interval)");
  app.add_option("--checkpoint-every", cfg.checkpoint_every,
                 "Checkpoint interval: N epochs (1, 2epochs), N clocks (500clocks) or a time (90s, 30min, 2h)")
      ->capture_default_str()->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              hpcps::ps::parse_checkpoint_interval(text);
            } catch (const hpcps::Error& e) {
              return e.what();
            }
            return {};
          },
          "INTERVAL"));
  app.add_option("--checkpoint-keep", cfg.checkpoint_keep, "Newest checkpoints kept")
      ->capture_default_str()->check(CLI::Range(std::size_t{1}, std::size_t{1000}));
  app.add_option("--resume", cfg.resume,
                 "Continue from this checkpoint, or from the newest one in this folder (e.g. the --checkpoint folder)");
  app.add_option("--save-model", cfg.save_model, "Write the trained parameters to this .npz file (numpy.load reads it)");
  app.add_option("--load-model", cfg.load_model, "Parameters to evaluate (.npz from --save-model; with --evaluate-only)");
  app.add_flag("--evaluate-only", cfg.evaluate_only, "Print the test accuracy of --load-model's parameters; no training");
}

// Parses the command line before MPI starts. A usage error is printed once (by rank 0) and every
// rank returns exit code 2; --help prints and returns 0. nullopt: go on.
inline std::optional<int> parse(CLI::App& app, Config& cfg, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream silent;
    const int code = launched_as_rank_zero() ? app.exit(e) : app.exit(e, silent, silent);
    return code == 0 ? 0 : 2;
  }
  if (!cfg.lr) cfg.lr = default_lr(cfg.optimizer);
  return std::nullopt;
}

// Servers for this launch: as given, or colocated for the synchronous strategy (the fastest
// layout on one node, and the only one for a single rank) and one server for the others, which
// need a rank that only serves.
inline int servers_for(const Config& cfg) { return cfg.servers ? *cfg.servers : (cfg.sync == "bsp" ? 0 : 1); }

// The shape of one training image, for a convolutional network; an error where the data set has
// no height x width layout.
inline hpcps::nn::Shape image_shape(const Config& cfg, const hpcps::data::TrainTest& data) {
  if (!data.train.has_layout() || data.train.height * data.train.width <= 1) {
    throw hpcps::Error(fmt::format("{}: the training images have no height x width layout (features {}): a "
                                   "convolutional network needs images", cfg.data, data.train.features));
  }
  return hpcps::nn::Shape{data.train.channels, data.train.height, data.train.width};
}

// A --backend this program was not built with: one sentence that says where it is.
inline std::string backend_problem(const Config& cfg) {
  if (cfg.backend == "cuda") {
#if defined(HPCPS_EXAMPLE_CUDA)
    return {};
#elif defined(HPCPS_EXAMPLE_CUDA_TWIN)
    return fmt::format("--backend cuda: {} runs on the CPU only and links no CUDA library ({} is the same program "
                       "with the CUDA backend)", cfg.program, HPCPS_EXAMPLE_CUDA_TWIN);
#else
    return "--backend cuda: this build has no CUDA (configure where nvcc is found, with -DHPCPS_CUDA=ON)";
#endif
  }
#if !defined(HPCPS_EXAMPLE_THRUST)
  if (cfg.backend == "thrust-omp") return "--backend thrust-omp: this build found no Thrust headers (CCCL)";
#endif
  return {};
}

// What can be checked once the launch's size and the training set are known, before any training:
// empty if nothing is wrong, else one sentence that names the flag. Every rank computes the same.
inline std::string usage_problem(const Config& cfg, int ranks, std::size_t train_samples) {
  if (auto problem = backend_problem(cfg); !problem.empty()) return problem;
  const int servers = servers_for(cfg);
  if (servers >= ranks && !cfg.servers) {
    return fmt::format("--sync {} needs a rank that only serves and at least one worker: launch at least {} ranks",
                       cfg.sync, servers + 1);
  }
  if (servers >= ranks) {
    return fmt::format("--servers {}: a launch of {} rank(s) then has no worker; use at most {} server(s)", servers,
                       ranks, ranks - 1);
  }
  if (servers == 0 && cfg.sync != "bsp") {
    return fmt::format("--servers 0 (colocated) works with --sync bsp only, not --sync {}; give at least one server",
                       cfg.sync);
  }
  const int workers = ranks - servers;
  if (cfg.batch < static_cast<std::size_t>(workers)) {
    return fmt::format("--batch {}: smaller than the {} workers of this launch; each needs at least one sample",
                       cfg.batch, workers);
  }
  if (cfg.batch > train_samples) {
    return fmt::format("--batch {}: larger than the {} training samples{}", cfg.batch, train_samples,
                       cfg.train_samples ? " (--train-samples)" : "");
  }
  if (cfg.evaluate_only != !cfg.load_model.empty()) {
    return cfg.evaluate_only ? "--evaluate-only needs --load-model FILE" : "--load-model works with --evaluate-only";
  }
  if (cfg.slow_worker >= workers) {
    return fmt::format("--slow-worker {}: this launch has workers 0..{}", cfg.slow_worker, workers - 1);
  }
  if (cfg.backup_workers > 0) {
    if (cfg.sync != "bsp") {
      return fmt::format("--backup-workers {} works with --sync bsp: backup workers are a rule of the synchronous "
                         "strategy, not '{}'", cfg.backup_workers, cfg.sync);
    }
    if (servers == 0) {
      return fmt::format("--backup-workers {} needs a dedicated server (--servers 1 or more): colocated ranks serve "
                         "each clock in lock step", cfg.backup_workers);
    }
    if (cfg.balance != "none") {
      return fmt::format("--backup-workers {} and --balance {}: two answers to one straggler, choose one",
                         cfg.backup_workers, cfg.balance);
    }
    if (cfg.backup_workers >= static_cast<std::size_t>(workers)) {
      return fmt::format("--backup-workers {}: this launch has {} worker(s); at least one must be waited for",
                         cfg.backup_workers, workers);
    }
  }
  if (cfg.data_per_node == "ranges" && (cfg.balance != "none" || cfg.backup_workers > 0)) {
    return fmt::format("--data-per-node ranges keeps each worker to its own shard, and {} moves samples between workers",
                       cfg.backup_workers > 0 ? "--backup-workers" : "--balance speed");
  }
  if (cfg.slow_period > 0 && cfg.slow_worker < 0) {
    return fmt::format("--slow-period {} works with --slow-worker W: no worker is slowed", cfg.slow_period);
  }
  return {};
}

// Rank 0 creates the report file now, so a path that cannot be written fails before training.
inline std::string report_problem(const Config& cfg) {
  if (cfg.report.empty()) return {};
  std::ofstream out(cfg.report);
  if (!out) return fmt::format("--report {}: cannot create the file: {}", cfg.report, std::strerror(errno));
  return {};
}

// Keeps the first `count` samples of the described `set`: short runs train on a prefix instead of
// the whole set, and only the prefix is read.
inline void keep_first(hpcps::data::Dataset& set, std::size_t count) { set.count = count; }

template <class Network>
struct Problem {
  const hpcps::comm::Communicator& world;
  const Config& cfg;
  const hpcps::data::TrainTest& data;  // described from the headers: counts, features, layout; no samples
  const Network& network;
  int servers;
  int workers;
  std::function<void(hpcps::metrics::JsonWriter&)> network_fields;  // the network's own options, in the report
};

// The start of every run, on every rank: the launch's checks, the data's description (its headers:
// no rank reads samples before its role is known, load_data). Returns the exit code if the run
// must stop (2: bad usage, printed by rank 0), else nullopt with `data` described.
inline std::optional<int> prepare(const hpcps::comm::Communicator& world, const Config& cfg,
                                  hpcps::data::TrainTest& data) {
  const bool root = world.rank() == 0;
  const auto stop = [&](const std::string& problem) {
    if (root) std::fprintf(stderr, "%s: %s\n", cfg.program.c_str(), problem.c_str());
    return 2;
  };
  const std::string report = root ? report_problem(cfg) : std::string();
  int report_ok = report.empty() ? 1 : 0;
  world.broadcast(&report_ok, 1, 0);
  if (!report_ok) return stop(report);
  data = hpcps::data::describe_fashion_mnist(hpcps::data::fashion_mnist_files(cfg.data));
  if (cfg.train_samples > data.train.count) {
    return stop(fmt::format("--train-samples {}: the training set in {} has only {} samples", cfg.train_samples,
                            cfg.data, data.train.count));
  }
  if (cfg.train_samples > 0) keep_first(data.train, cfg.train_samples);
  if (const std::string problem = usage_problem(cfg, world.size(), data.train.count); !problem.empty()) {
    return stop(problem);
  }
  const unsigned cores = std::thread::hardware_concurrency();
  if (root && cores > 0 && static_cast<unsigned>(cfg.threads) > cores) {
    std::fprintf(stderr, "%s: warning: --threads %d is more than this machine's %u cores: the threads will share "
                 "them and each step will be slower, not faster\n", cfg.program.c_str(), cfg.threads, cores);
  }
  return std::nullopt;
}

// The samples this rank needs, once its role is known: a worker the training set (one copy per
// node), the rank that evaluates (worker 0) the test set, a server nothing. Collective.
struct LoadedData {
  hpcps::ps::NodeDataset train, test;
};

inline hpcps::ps::NodeDataset::Options data_options(const Config& cfg) {
  hpcps::ps::NodeDataset::Options options;
  options.share = cfg.shared_data;
  return options;
}

// `worker`: this rank's worker index, or -1 on a rank that trains on nothing.
template <class Network>
std::unique_ptr<LoadedData> load_data(const Problem<Network>& p, int worker, bool evaluates) {
  const auto files = hpcps::data::fashion_mnist_files(p.cfg.data);
  const auto all = [](const hpcps::data::Dataset& set) { return hpcps::data::Range{0, set.count}; };
  using Rows = std::optional<hpcps::data::Range>;
  Rows train_rows;
  if (worker >= 0) {
    train_rows = p.cfg.data_per_node == "ranges"
                     ? hpcps::ps::sharded_rows(p.data.train.count, p.cfg.batch, worker, p.workers)
                     : all(p.data.train);
  }
  return std::unique_ptr<LoadedData>(new LoadedData{
      hpcps::ps::NodeDataset(p.world, files.train, p.data.train, train_rows,
                             data_options(p.cfg)),
      hpcps::ps::NodeDataset(p.world, files.test, p.data.test, evaluates ? Rows(all(p.data.test)) : Rows(),
                             data_options(p.cfg))});
}

// "ranks 0-2 colocated (each a worker and the server of its shard)", "workers 0-1, server 2".
inline std::string describe_layout(const hpcps::ps::Layout& layout, bool chosen) {
  const auto span = [](int first, int last) {
    return first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last);
  };
  std::string text = layout.colocated() && layout.workers() == 1
                         ? std::string("rank 0 alone (worker and server of the whole vector)")
                     : layout.colocated()
                         ? fmt::format("ranks {} colocated (each a worker and the server of its shard)",
                                       span(0, layout.workers() - 1))
                         : fmt::format("workers {}, server{} {}", span(0, layout.workers() - 1),
                                       layout.servers() > 1 ? "s" : "",
                                       span(layout.server_rank(0), layout.server_rank(layout.servers() - 1)));
  return chosen ? text + " [chosen for this launch; --servers sets it]" : text;
}

// How the workers and servers of a constructed ParameterServer exchange: shared memory within each
// group of ranks that joined one node's window, messages between the others, and (colocated) a
// rank's own slice in place.
template <class Server>
std::string describe_transport(const Server& ps) {
  const auto groups = ps.shared_memory_groups();
  const auto& layout = ps.layout();
  const int ranks = layout.colocated() ? layout.workers() : layout.workers() + layout.servers();
  if (groups.empty()) return ranks > 1 ? "messages between all ranks" : "nothing to exchange";
  std::vector<std::string> sets;
  for (const auto& g : groups) sets.push_back(fmt::format("{{{}}}", fmt::join(g, ",")));
  bool messages = false;
  for (int w = 0; w < layout.workers(); ++w) {
    for (int s = 0; s < layout.servers(); ++s) {
      const int server = layout.server_rank(s), worker = layout.worker_rank(w);
      if (server != worker && !ps.share_memory(worker, server)) messages = true;
    }
  }
  return fmt::format("shared memory among ranks {}{}", fmt::join(sets, " and "),
                     messages ? ", messages between the others" : "");
}

// The same, pair by pair, for the report: every worker-server pair with how it exchanges.
template <class Server>
void write_transport(hpcps::metrics::JsonWriter& json, const Server& ps) {
  json.key("shared_memory_groups").begin_array();
  for (const auto& g : ps.shared_memory_groups()) {
    json.begin_array();
    for (int r : g) json.value(r);
    json.end_array();
  }
  json.end_array();
  json.key("pairs").begin_array();
  const auto& layout = ps.layout();
  for (int w = 0; w < layout.workers(); ++w) {
    for (int s = 0; s < layout.servers(); ++s) {
      const int worker = layout.worker_rank(w), server = layout.server_rank(s);
      const char* via = worker == server && ps.uses_local_shortcut() ? "in place"
                        : ps.share_memory(worker, server)            ? "shared memory"
                                                                     : "messages";
      json.begin_object().field("worker", worker).field("server", server).field("transport", via).end_object();
    }
  }
  json.end_array();
}

template <class Backend, class Network, class Sync, class Optimizer>
int train(const Problem<Network>& p, Sync sync, Optimizer optimizer) {
  using Server = hpcps::ParameterServer<Network, Backend, Sync, Optimizer>;
  const Config& cfg = p.cfg;
  const bool root = p.world.rank() == 0;
  typename Server::Options options;
  options.servers = p.servers;
  options.seed = cfg.seed;
  // Worker 0 gets the largest equal share; a balanced split may give any worker up to the whole
  // batch (drawing workers take equal parts, only more of them).
  options.max_batch = cfg.balance == "speed" && cfg.sync == "bsp" ? cfg.batch : hpcps::ps::worker_batch(cfg.batch, 0, p.workers);
  options.wire = hpcps::ps::parse_wire_format(cfg.wire);
  options.pull_wire = hpcps::ps::parse_wire_format(cfg.pull_wire);
  options.top_k = cfg.top_k;
  options.top_k_momentum = cfg.top_k_momentum;
  options.sign_push = cfg.sign_push;
  options.sign_pull = cfg.sign_pull;
  options.sign_pull_passes = cfg.sign_pull_passes;
  options.piece_floats = cfg.piece_floats;
  options.overlap = cfg.overlap;
  options.shared_memory = cfg.shared_memory && cfg.backup_workers == 0;  // backup workers exchange point to point
  options.resume = cfg.resume;
  Server ps(p.world, p.network, Backend(cfg.threads), options, sync, optimizer);
  // Loaded once the roles are known: servers read no sample, only worker 0 the test set.
  const bool evaluates = ps.is_worker() && ps.worker_index() == 0 && cfg.evaluate;
  const auto loaded = load_data(p, ps.is_worker() ? ps.worker_index() : -1, evaluates);
  const hpcps::data::Dataset& train_set = loaded->train.set();
  const hpcps::data::Dataset& test_set = loaded->test.set();

  if (root) {
    fmt::print("hpcps {}: {} ({} parameters), {}, global batch {}, {} thread(s)/rank, sync {}{}, optimizer {} (lr {} "
               "{}), backend {}, wire {} push{} / {} pull; {}\n",
               hpcps::version_string, p.network.describe(), p.network.parameter_count(),
               describe_layout(ps.layout(), !cfg.servers), cfg.batch, cfg.threads, Sync::name,
               cfg.sync == "ssp" ? fmt::format(" (staleness {})", cfg.staleness) : std::string(), cfg.optimizer,
               *cfg.lr, cfg.schedule, Backend::name, cfg.wire,
               fmt::format("{}{}",
                           cfg.top_k > 0.0 ? fmt::format(" top-{}", cfg.top_k)
                           : cfg.sign_push ? std::string(" scaled-sign")
                                           : std::string(),
                           cfg.top_k_momentum > 0.0f ? fmt::format(" (momentum correction {})", cfg.top_k_momentum)
                                                     : std::string()),
               cfg.sign_pull ? (cfg.sign_pull_passes > 1 ? fmt::format("scaled-sign x{}", cfg.sign_pull_passes)
                                                         : std::string("scaled-sign"))
                             : cfg.pull_wire,
               describe_transport(ps));
    if (cfg.slow_worker >= 0) {
      fmt::print("worker {} is slowed down {}x{}\n", cfg.slow_worker, cfg.slowdown,
                 cfg.slow_period > 0 ? fmt::format(" for {0} clocks, then at full speed for {0}, alternating",
                                                   cfg.slow_period)
                                     : std::string());
    }
    if (ps.resumed()) {
      const auto& m = ps.resumed()->manifest;
      fmt::print("resumed from {}: clock {}, epoch {}, batch {} of {}\n", ps.resumed()->path, m.clock, m.epoch + 1,
                 m.batch, m.clocks_per_epoch);
    }
    if (!cfg.checkpoint.empty()) {
      fmt::print("checkpoints into {} {}, newest {} kept\n", cfg.checkpoint,
                 hpcps::ps::describe(hpcps::ps::parse_checkpoint_interval(cfg.checkpoint_every)), cfg.checkpoint_keep);
    }
    fmt::print("{:>5} {:>10} {:>9} {:>10} {:>9} {:>11} {:>8} {:>9} {:>9} {:>9}{}\n", "epoch", "train_loss", "train_acc",
               "test_loss", "test_acc", "samples/s", "time_s", "compute", "comm", "wait",
               cfg.checkpoint.empty() ? "" : fmt::format(" {:>7}", "ckpt_s"));
    std::fflush(stdout);
  }
  hpcps::ps::TrainOptions train_options;
  train_options.epochs = cfg.epochs;
  train_options.batch = cfg.batch;
  train_options.seed = cfg.seed;
  train_options.evaluations_per_epoch = cfg.evaluations_per_epoch;
  train_options.evaluate = cfg.evaluate;
  train_options.checkpoint = cfg.checkpoint;
  train_options.checkpoint_every = hpcps::ps::parse_checkpoint_interval(cfg.checkpoint_every);
  train_options.checkpoint_keep = cfg.checkpoint_keep;
  train_options.stop_on_signals = true;
  train_options.balance = cfg.balance == "speed" ? hpcps::ps::Balance::speed : hpcps::ps::Balance::none;
  train_options.backup_workers = cfg.backup_workers;
  train_options.data_order = cfg.data_per_node == "ranges" ? hpcps::ps::DataOrder::sharded : hpcps::ps::DataOrder::global;
  train_options.augmentation = {p.data.train.channels, p.data.train.height, p.data.train.width, cfg.augment_shift,
                                cfg.augment_flip, 0.0f};
  if (cfg.slow_worker >= 0 && cfg.slowdown > 1.0) {
    train_options.after_compute = [&cfg](int w, std::size_t clock, double seconds) {
      if (w == cfg.slow_worker && slow_at(clock, cfg.slow_period)) {
        std::this_thread::sleep_for(std::chrono::duration<double>((cfg.slowdown - 1.0) * seconds));
      }
    };
  }
  const bool checkpointing = !cfg.checkpoint.empty();
  auto report = hpcps::ps::train(ps, train_set, &test_set, train_options, [checkpointing](const hpcps::ps::EpochReport& e) {
    fmt::print("{:>5} {:>10.4f} {:>9.4f} {:>10.4f} {:>9.4f} {:>11.0f} {:>8.2f} {:>9.2f} {:>9.2f} {:>9.2f}{}\n", e.epoch,
               e.train_loss, e.train_accuracy, e.test_loss, e.test_accuracy, e.samples_per_second, e.seconds,
               e.times.compute, e.times.communicate, e.times.wait,
               checkpointing ? fmt::format(" {:>7.2f}", e.checkpoint_seconds) : std::string());
    std::fflush(stdout);
  });
  if (report.stop_signal != 0) {
    // Every rank exits with 128 + the signal, as a process the signal ended would; rank 0 says why.
    if (root) {
      std::fprintf(stderr, "%s: stopped by signal %d (%s) after clock %llu; %s\n", cfg.program.c_str(),
                   report.stop_signal, strsignal(report.stop_signal), static_cast<unsigned long long>(report.clocks),
                   report.last_checkpoint.empty()
                       ? "no checkpoint (--checkpoint not set)"
                       : fmt::format("checkpoint {} written; continue with --resume {}", report.last_checkpoint,
                                     cfg.checkpoint).c_str());
      std::fflush(stderr);
    }
    return 128 + report.stop_signal;
  }

  if (root && report.epochs.empty() && !report.resumed_from.empty()) {
    // Resumed at the end of training: nothing was trained, so no epoch measured the accuracy of
    // the parameters the checkpoint holds (worker 0 received them).
    fmt::print("nothing left to train: {} is at clock {}, the end of {} epoch(s); raise --epochs to go on\n",
               report.resumed_from, report.clocks, cfg.epochs);
    if (cfg.evaluate) {
      auto& worker = ps.worker();
      hpcps::ps::EvaluationBuffer buffer;
      report.test_accuracy = hpcps::ps::evaluate_dataset(worker.network(), worker.backend(), worker.workspace(),
                                                         worker.compute_params(), test_set, buffer)
                                 .accuracy();
    }
  }
  if (root) {
    fmt::print("final test accuracy {}, {:.0f} samples/s, {:.2f} s training, {:.2f} s wall; "
               "server: {} updates, {:.2f} s waiting, {:.2f} s updating, largest staleness {}\n",
               cfg.evaluate ? fmt::format("{:.4f}", report.test_accuracy) : std::string("not evaluated"),
               report.samples_per_second, report.train_seconds, report.wall_seconds,
               report.server_updates, report.server_wait, report.server_update, report.server_max_staleness);
    if (cfg.backup_workers > 0) {
      fmt::print("backup workers: {} push(es) came too late for their clock and were dropped\n", report.dropped_pushes);
    }
    if (!report.splits.empty()) {
      fmt::print("split of the global batch among the workers: {} at the end, changed {} time(s)\n",
                 fmt::join(report.splits.back().split, "/"), report.splits.size() - 1);
    }
    if (!cfg.save_model.empty()) {
      hpcps::ps::save_model(cfg.save_model, p.network, ps.worker().parameters());
      fmt::print("model written to {}\n", cfg.save_model);
    }
    if (checkpointing) {
      fmt::print("{} checkpoint(s) of {:.1f} MiB in {:.2f} s; newest {}\n", report.checkpoints,
                 static_cast<double>(report.checkpoint_bytes) / (1 << 20), report.checkpoint_seconds,
                 report.last_checkpoint);
    }
    if (!cfg.report.empty()) {
      hpcps::metrics::JsonWriter json;
      json.begin_object();
      json.key("config").begin_object();
      json.field("program", cfg.program).field("network", p.network.describe());
      if (p.network_fields) p.network_fields(json);
      json.field("parameters", p.network.parameter_count()).field("data", cfg.data).field("epochs", cfg.epochs);
      json.field("train_samples", p.data.train.count).field("evaluate", cfg.evaluate);
      json.field("batch", cfg.batch).field("sync", cfg.sync).field("staleness", cfg.sync == "ssp" ? cfg.staleness : 0);
      json.field("optimizer", cfg.optimizer).field("lr", *cfg.lr).field("schedule", cfg.schedule);
      json.field("momentum", cfg.momentum).field("weight_decay", cfg.weight_decay);
      json.field("servers", p.servers).field("servers_chosen", !cfg.servers);
      json.field("workers", ps.layout().workers()).field("threads", cfg.threads);
      json.field("seed", cfg.seed).field("backend", cfg.backend).field("backend_type", Backend::name);
      json.field("slow_worker", cfg.slow_worker).field("slowdown", cfg.slowdown).field("balance", cfg.balance);
      json.field("slow_period", cfg.slow_period).field("backup_workers", cfg.backup_workers);
      json.field("wire", cfg.wire).field("pull_wire", cfg.pull_wire).field("top_k", cfg.top_k);
      json.field("top_k_momentum", cfg.top_k_momentum).field("sign_push", cfg.sign_push);
      json.field("sign_pull", cfg.sign_pull).field("sign_pull_passes", cfg.sign_pull_passes);
      json.field("piece_floats", cfg.piece_floats).field("overlap", cfg.overlap);
      json.field("shared_memory_requested", cfg.shared_memory).field("shared_data_requested", cfg.shared_data);
      json.field("data_per_node", cfg.data_per_node);
      json.field("augment_shift", cfg.augment_shift).field("augment_flip", cfg.augment_flip);
      json.field("shared_memory", !ps.shared_memory_groups().empty());
      write_transport(json, ps);
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
template <class Network>
hpcps::optim::Schedule make_schedule(const Problem<Network>& p, bool aggregates) {
  const Config& cfg = p.cfg;
  const std::size_t per_clock = aggregates ? 1 : static_cast<std::size_t>(p.workers);
  const std::size_t steps = cfg.epochs * hpcps::ps::clocks_per_epoch(p.data.train.count, cfg.batch) * per_clock;
  const float lr = *cfg.lr / static_cast<float>(per_clock);
  if (cfg.schedule == "cosine") return hpcps::optim::Schedule::cosine(lr, steps);
  if (cfg.schedule == "step") return hpcps::optim::Schedule::step_decay(lr, std::max<std::size_t>(steps / 3, 1), 0.1f);
  return hpcps::optim::Schedule::constant(lr);
}

template <class Backend, class Network, class Sync>
int with_optimizer(const Problem<Network>& p, Sync sync) {
  const Config& cfg = p.cfg;
  const auto schedule = make_schedule(p, Sync::aggregates);
  if (cfg.optimizer == "sgd") return train<Backend>(p, sync, hpcps::optim::StandardSgd(schedule, cfg.weight_decay));
  if (cfg.optimizer == "adam") return train<Backend>(p, sync, hpcps::optim::Adam(schedule, 0.9f, 0.999f, 1e-8f, cfg.weight_decay));
  return train<Backend>(p, sync,
               hpcps::optim::MomentumSgd(schedule, cfg.weight_decay,
                                         hpcps::optim::MomentumUpdate(cfg.momentum, cfg.optimizer == "nesterov")));
}

// Every synchronization strategy for one backend: the compositions a program holds for it.
template <class Backend, class Network>
int with_backend(const Problem<Network>& p) {
  if (p.cfg.sync == "ssp") {
    return with_optimizer<Backend>(p, hpcps::sync::StaleSynchronous(static_cast<std::size_t>(p.cfg.staleness)));
  }
  if (p.cfg.sync == "async") return with_optimizer<Backend>(p, hpcps::sync::Asynchronous{});
  return with_optimizer<Backend>(p, hpcps::sync::Synchronous{});
}

// --evaluate-only: rank 0 loads --load-model's parameters and evaluates them on the test set.
template <class Network>
int evaluate_model(const Problem<Network>& p) {
  const auto loaded = load_data(p, -1, p.world.rank() == 0);  // rank 0 reads the test set alone
  if (p.world.rank() != 0) return 0;
  const auto params = hpcps::ps::load_model(p.cfg.load_model, p.network);
  const hpcps::backend::Cpu backend(p.cfg.threads);
  auto workspace = p.network.make_workspace(backend, 256);
  hpcps::ps::EvaluationBuffer buffer;
  const auto t = hpcps::ps::evaluate_dataset(p.network, backend, workspace, params.data(), loaded->test.set(), buffer);
  fmt::print("{}: test accuracy {:.4f}, loss {:.4f} on {} samples\n", p.cfg.load_model, t.accuracy(), t.mean_loss(),
             p.data.test.count);
  return 0;
}

// --backend cuda: every rank checks its own device, and all stop alike with one line if any
// lacks one (a node without a GPU must not leave the others waiting in a collective).
inline void require_cuda_device(const hpcps::comm::Communicator& world, bool available) {
  hpcps::ps::throw_if_any_rank(world, available ? "" : fmt::format("rank {} has no usable CUDA device", world.rank()),
                               "--backend cuda", "another rank has no usable CUDA device");
}

// The backend --backend names. A program's Thrust compositions are its run_thrust_omp(const
// Problem<Network>&) and run_cuda(const Problem<Network>&), declared with its network type and
// defined in its own sources where the build has them (HPCPS_EXAMPLE_THRUST, HPCPS_EXAMPLE_CUDA).
template <class Network>
int with_chosen_backend(const Problem<Network>& p) {
  if (p.cfg.evaluate_only) return evaluate_model(p);
#if defined(HPCPS_EXAMPLE_CUDA)
  if (p.cfg.backend == "cuda") return run_cuda(p);
#endif
#if defined(HPCPS_EXAMPLE_THRUST)
  if (p.cfg.backend == "thrust-omp") return run_thrust_omp(p);
#endif
  if (const auto problem = backend_problem(p.cfg); !problem.empty()) throw hpcps::Error(problem);
  return with_backend<hpcps::backend::Cpu>(p);
}

}  // namespace fashion_mnist
