#pragma once
// Epoch-level training over a ParameterServer: one shuffled order of the whole training set per
// epoch, the same on every rank; clock c trains on the c-th global minibatch of that order, split
// among the workers (a worker whose part is empty, in a last short batch, takes part with an idle
// push, so nothing can hang the servers); reports loss, accuracy, throughput and a time breakdown
// on rank 0. The samples of each clock do not depend on the number of workers, so a checkpoint
// resumes on another layout with the same data order.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <mpi.h>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/data/augment.hpp"
#include "hpcps/data/batcher.hpp"
#include "hpcps/data/dataset.hpp"
#include "hpcps/data/shard.hpp"
#include "hpcps/error.hpp"
#include "hpcps/metrics/stopwatch.hpp"
#include "hpcps/nn/batch_stats.hpp"
#include "hpcps/nn/sample_position.hpp"
#include "hpcps/ps/agreed_verdict.hpp"
#include "hpcps/ps/balance.hpp"
#include "hpcps/ps/checkpoint_interval.hpp"
#include "hpcps/ps/checkpoint_writer.hpp"
#include "hpcps/ps/evaluation.hpp"
#include "hpcps/ps/layout.hpp"
#include "hpcps/ps/run_control.hpp"
#include "hpcps/ps/server.hpp"

namespace hpcps::ps {

// Which samples make up each clock's global batch (TrainOptions::data_order).
enum class DataOrder {
  global,   // one shuffled order of the whole set per epoch; worker w takes its part of each batch
  sharded,  // worker w draws its part from its own contiguous shard (sharded_rows), in its own order
};
inline const char* data_order_name(DataOrder order) { return order == DataOrder::sharded ? "sharded" : "global"; }

struct TrainOptions {
  std::size_t epochs = 10;
  std::size_t batch = 64;       // global minibatch per clock, split among the workers
  std::uint64_t seed = 1;       // per-epoch shuffling
  bool evaluate = true;         // test-set loss and accuracy on rank 0 after each epoch
  std::size_t evaluations_per_epoch = 1;  // more: also evaluate on rank 0 at evenly spaced clocks
  // Called on worker w after the gradient of each clock with (w, clock, seconds it took); its
  // time counts as compute. Straggler studies and tests slow workers down with it.
  std::function<void(int, std::size_t, double)> after_compute;
  // The seconds Balance::speed counts for worker w's part of a clock, called with (w, global
  // clock from 0, samples, measured seconds: from server 0's release of the clock before to the
  // arrival of w's push there) on worker w; unset: the measured ones. A fake clock
  // for tests and simulations: the split then follows counted time, not the machine's load. Each
  // worker's count reaches the others through the balancer's exchange, so every worker still
  // splits alike. Only the synchronous split reads it: drawing workers time nothing.
  std::function<double(int, std::size_t, std::size_t, double)> balance_seconds;
  // Checkpoints (docs/reliability.md): written into this folder, one directory per checkpoint, at
  // the end of the clocks `checkpoint_every` says, when training stops on a signal, and at the
  // end; the newest `checkpoint_keep` are kept. Empty: none. A ParameterServer built with
  // Options::resume continues where its checkpoint left off. Asynchronous and stale-synchronous
  // ranks meet for it at the end of every epoch and every N clocks of an interval in clocks, where
  // the workers wait for the slowest (a wall-clock interval is checked at epoch ends).
  std::string checkpoint;
  CheckpointInterval checkpoint_every;
  std::size_t checkpoint_keep = 2;
  // SIGTERM or SIGINT on any rank: every rank finishes the clock it is in, a checkpoint is written
  // (with `checkpoint` set), and train returns early with TrainingReport::stop_signal set. A second
  // signal ends the process at once. In an asynchronous or stale-synchronous run the rank that
  // gets the signal tells the others at once (ps/stop_notice.hpp); each worker stops after its
  // clock, and the checkpoint is of the fewest clocks any worker completed.
  bool stop_on_signals = false;
  // Balance::speed: a slow worker no longer sets the pace (docs/synchronization.md#load-balancing).
  // - Synchronous strategy: each clock's global batch is split among the workers in proportion
  //   to their measured speed, not equally (ps/balance.hpp); no part exceeds the
  //   ParameterServer's max_batch, so raise that to `batch` to let a fast worker take more.
  // - Asynchronous and stale-synchronous: the workers draw their work from the epoch's one order
  //   as they become free (the first server hands out the next part with each reply), one
  //   worker's part of a clock at a time, so a fast worker does more of the epoch and every
  //   sample is still used once. A stale-synchronous bound then counts the clocks of the data,
  //   not each worker's pushes. After a signal, up to W - 1 parts done before the stop are done
  //   again on resume (the checkpoint is of whole clocks).
  Balance balance = Balance::none;
  // Synchronous strategy with backup workers (ps::Server::serve_with_backups): each clock's update
  // sums the first W - backup_workers pushes to arrive and drops the late ones (their samples go
  // unused), and a late worker moves on to the clock being collected. Beats balancing against
  // sudden, unpredictable stragglers; loses to it against a steady slow worker, whose part is
  // then always dropped. Needs a dedicated server and point-to-point pushes (ParameterServer
  // Options::shared_memory = false); the ranks meet for checkpoints as asynchronous ones do.
  std::size_t backup_workers = 0;
  // DataOrder::sharded: worker w trains only on the contiguous rows sharded_rows(N, batch, w, W),
  // shuffled anew each epoch, taking from them as many samples per clock as its part of the global
  // batch has; so a worker, and a node, needs only those rows (ps::NodeDataset given them holds
  // only its workers' shards), for sets larger than one node's memory. Every sample is still used
  // once per epoch and the batch, the learning rate and the clocks are unchanged, but which samples
  // meet in a clock now depends on the number of workers: such a run resumes only with as many
  // workers (its checkpoints record the order; ps::train refuses another).
  // Not with a balanced split or drawn work (Balance::speed) nor with backup workers, which move
  // samples between workers.
  DataOrder data_order = DataOrder::global;
  // Random shifts and mirrors of the training images (data/augment.hpp), drawn per (seed, epoch,
  // sample), so they are the same on every layout and after a resume. The test set is not
  // augmented. Inactive by default.
  data::Augmentation augmentation;
};

struct EpochReport {
  std::size_t epoch = 0;
  double train_loss = 0.0, train_accuracy = 0.0;  // running, over the epoch's batches (all workers, or rank 0's)
  double test_loss = 0.0, test_accuracy = 0.0;
  std::size_t samples = 0;
  double seconds = 0.0;            // training only, evaluation excluded
  double samples_per_second = 0.0;
  double eval_seconds = 0.0;
  double elapsed_seconds = 0.0;    // since training started, at the end of this epoch's evaluation
  double checkpoint_seconds = 0.0;  // writing checkpoints during this epoch (excluded from `seconds`)
  WorkerTimes times;               // mean over workers (bulk-synchronous) or rank 0's own (otherwise)
};

// One test-set evaluation on rank 0, for time-to-accuracy curves.
struct Evaluation {
  double epoch = 0.0;            // fractional: 2.5 is half way through the third epoch
  double elapsed_seconds = 0.0;  // since training started, at the end of this evaluation
  double test_loss = 0.0, test_accuracy = 0.0;
  // Training time before this evaluation: elapsed time less every evaluation so far (this one
  // included), so time-to-accuracy compares with peers that do not count evaluation either.
  double train_seconds = 0.0;
};

struct TrainingReport {
  std::vector<EpochReport> epochs;
  std::vector<Evaluation> evaluations;  // rank 0: every evaluation, in order
  double test_accuracy = 0.0;
  double samples_per_second = 0.0;  // all training samples over all training seconds
  double train_seconds = 0.0;
  double wall_seconds = 0.0;        // the whole call, evaluation included
  double server_wait = 0.0, server_update = 0.0;  // mean over servers
  std::size_t server_updates = 0;
  std::size_t server_max_staleness = 0;  // largest clock gap any server allowed
  std::size_t gradient_pushes = 0;       // this worker's non-idle pushes (to each server)
  std::size_t dropped_pushes = 0;        // backup workers: pushes too late for their clock (mean over servers)
  int workers = 0, servers = 0;
  // Checkpoints written, the time they took (every rank waits for them), the newest one's path.
  std::size_t checkpoints = 0;
  double checkpoint_seconds = 0.0;
  std::string last_checkpoint;
  std::uint64_t checkpoint_bytes = 0;  // of one checkpoint, manifest excluded
  std::uint64_t clocks = 0;            // completed, those before a resume included
  std::string resumed_from;            // the checkpoint this run started from, if any
  int stop_signal = 0;                 // the signal that stopped training early, or 0
  // With TrainOptions::balance: the split of a full global batch among the workers, from the
  // first clock on and at every change (workers).
  std::vector<SplitChange> splits;
};

// Worker `w`'s part of a global minibatch of `samples` (the epoch's last one may be short):
// contiguous, balanced to within one sample.
inline data::Range worker_part(std::size_t samples, int worker, int workers) {
  return data::shard_range(samples, static_cast<std::size_t>(worker), static_cast<std::size_t>(workers));
}
// Samples of a full global minibatch that worker `w` of `workers` computes (worker 0's is largest).
inline std::size_t worker_batch(std::size_t global_batch, int worker, int workers) {
  return worker_part(global_batch, worker, workers).size();
}

// Clocks in one epoch: one per global minibatch, the last one short if the batch does not divide
// the samples. A pure function of the numbers, so every rank (servers and a learning-rate schedule
// too) knows it without communication, and it does not depend on the number of workers.
inline std::size_t clocks_per_epoch(std::size_t samples, std::size_t global_batch) {
  return global_batch == 0 ? 0 : (samples + global_batch - 1) / global_batch;
}

// The seed of the epochs' shared order, from TrainOptions::seed.
inline std::uint64_t data_order_seed(std::uint64_t seed) { return seed * 0x9E3779B97F4A7C15ull; }

// DataOrder::sharded: the rows worker `w` trains on, exactly the samples its parts of an epoch's
// clocks take (clocks_per_epoch(N, B) - 1 full parts and its part of the last, short, batch), so
// the shards of the W workers partition [0, samples) in worker order.
inline data::Range sharded_rows(std::size_t samples, std::size_t global_batch, int worker, int workers) {
  const std::size_t clocks = clocks_per_epoch(samples, global_batch);
  if (clocks == 0) return data::Range{0, 0};
  const std::size_t last = samples - (clocks - 1) * global_batch;
  std::size_t begin = 0;
  for (int v = 0;; ++v) {
    const std::size_t size = (clocks - 1) * worker_batch(global_batch, v, workers) + worker_part(last, v, workers).size();
    if (v == worker) return data::Range{begin, begin + size};
    begin += size;
  }
}

namespace detail {

template <class N, class = void>
struct has_input_shape : std::false_type {};
template <class N>
struct has_input_shape<N, std::void_t<decltype(std::declval<const N&>().input_shape().channels),
                                      decltype(std::declval<const N&>().input_shape().height),
                                      decltype(std::declval<const N&>().input_shape().width)>> : std::true_type {};

// Empty if `network` takes `set`'s samples, else why not. A network with an input shape of more
// than one pixel (a convolutional one) needs the data's layout to be exactly that shape; a flat
// input takes any layout with as many features, as a dense layer reads the sample as one vector.
template <class Network>
std::string input_mismatch(const char* which, const data::Dataset& set, const Network& network) {
  if (set.features != network.input_size()) {
    return fmt::format("{} data has {} features per sample, the network takes {}", which, set.features,
                       network.input_size());
  }
  if constexpr (has_input_shape<Network>::value) {
    const auto shape = network.input_shape();
    if (shape.height * shape.width > 1 && set.has_layout() &&
        (set.channels != shape.channels || set.height != shape.height || set.width != shape.width)) {
      return fmt::format("{} data has samples of {}x{}x{} (channels x height x width), the network takes {}x{}x{}",
                         which, set.channels, set.height, set.width, shape.channels, shape.height, shape.width);
    }
  }
  return {};
}

// Before each run of a server whose workers take tickets: drawn work, or backup workers.
template <class Sync, class Optimizer>
void serve_tickets(Server<Sync, Optimizer>& server, bool drawing, std::size_t backup_workers, std::uint64_t first_clock) {
  if constexpr (Sync::aggregates) {
    if (backup_workers > 0) server.serve_with_backups(backup_workers, first_clock);
  } else {
    if (drawing) server.serve_drawn_work(first_clock);
  }
}

}  // namespace detail

// Runs on every rank of the ParameterServer's world. The returned report is complete on rank 0.
template <class Server>
TrainingReport train(Server& ps, const data::Dataset& train_set, const data::Dataset* test_set,
                     const TrainOptions& options, const std::function<void(const EpochReport&)>& on_epoch = {}) {
  const auto started = std::chrono::steady_clock::now();
  const comm::Communicator& world = ps.world();
  const Layout& layout = ps.layout();
  const int workers = layout.workers();
  TrainingReport report;
  report.workers = workers;
  report.servers = layout.servers();

  // Where training starts: at the beginning, or where the checkpoint it resumes left off. Every
  // rank reads the same manifest, so every rank finds the same problem, if any.
  const std::size_t clocks = clocks_per_epoch(train_set.count, options.batch);
  CheckpointPosition start{0, 0, 0, clocks, options.batch, train_set.count, options.seed,
                           data_order_name(options.data_order)};
  if (const auto* resumed = ps.resumed()) {
    const auto& m = resumed->manifest;
    const std::string order = m.data_order.empty() ? "global" : m.data_order;  // a version 1 manifest
    std::string problem;
    if (order != start.data_order) {
      problem = fmt::format("it was trained with the {} data order, this run has the {} one", order, start.data_order);
    } else if (options.data_order == DataOrder::sharded && m.workers != static_cast<std::uint64_t>(workers)) {
      // Each worker's rows and their order follow from the number of workers.
      problem = fmt::format("its sharded data order gave each of {} workers its own rows, this run has {} workers: "
                            "resume it with {}",
                            m.workers, workers, m.workers);
    } else if (m.global_batch != options.batch) {
      problem = fmt::format("it was trained with a global batch of {}, this run has {}", m.global_batch, options.batch);
    } else if (m.shuffle_seed != options.seed) {
      problem = fmt::format("it was trained with shuffling seed {}, this run has {}", m.shuffle_seed, options.seed);
    } else if (m.train_samples != train_set.count) {
      problem = fmt::format("it was trained on {} samples, this run has {}", m.train_samples, train_set.count);
    } else if (m.clocks_per_epoch != clocks) {
      problem = fmt::format("its epochs have {} clocks, this run's have {} (written by an hpcps whose data order "
                            "depended on the number of workers)",
                            m.clocks_per_epoch, clocks);
    }
    if (!problem.empty()) {
      throw CollectiveError(fmt::format("ps::train: cannot resume from {}: {}", resumed->path, problem), world.rank() == 0);
    }
    start.clock = m.clock;
    start.epoch = m.epoch;
    start.batch = m.batch;
    report.resumed_from = resumed->path;
  }
  const std::uint64_t end_clock = std::max<std::uint64_t>(
      start.clock, start.clock + (options.epochs * clocks) - std::min<std::uint64_t>(options.epochs * clocks, start.epoch * clocks + start.batch));
  const bool controlled = !options.checkpoint.empty() || options.stop_on_signals;
  // Asynchronous and stale-synchronous workers balanced: each draws its next part of a clock.
  const bool drawing = options.balance == Balance::speed && !Server::sync_type::aggregates;
  const bool backups = options.backup_workers > 0;
  // Workers take their next part of a clock from server 0's replies: drawn work, backup workers.
  const bool ticketed = drawing || backups;
  if (backups) {  // every rank knows these alike
    std::string problem;
    if (!Server::sync_type::aggregates) {
      problem = fmt::format("backup workers are a rule of the synchronous strategy, not '{}'", Server::sync_type::name);
    } else if (options.balance != Balance::none) {
      problem = "backup workers and a balanced split are two answers to one straggler: choose one";
    } else if (options.backup_workers >= static_cast<std::size_t>(workers)) {
      problem = fmt::format("{} backup worker(s) among {} worker(s) leave none to wait for", options.backup_workers, workers);
    } else if (layout.colocated() || ps.uses_shared_memory()) {
      problem = "backup workers need a dedicated server and point-to-point pushes (ParameterServer Options "
                "servers >= 1 and shared_memory = false; in the examples --servers 1 --no-shared-memory)";
    } else if (ps.options().sign_pull) {
      problem = "backup workers need dense pulls: a dropped push is answered out of turn (Options::sign_pull off)";
    }
    if (!problem.empty()) throw CollectiveError("ps::train: " + problem, world.rank() == 0);
  }
  const bool sharded = options.data_order == DataOrder::sharded;
  if (sharded && (options.balance != Balance::none || backups)) {
    throw CollectiveError(fmt::format("ps::train: the sharded data order keeps each worker to its own rows; {} moves "
                                      "samples between workers",
                                      backups ? "backup workers drop a late worker's part, which" : "Balance::speed"),
                          world.rank() == 0);
  }
  report.checkpoint_bytes = checkpoint_bytes(ps);
  if (!options.checkpoint.empty()) {
    // Found out now, not after the first hour: rank 0, the servers and compressing workers must be able to write.
    const bool writes = world.rank() == 0 || ps.is_server() || (ps.is_worker() && ps.keeps_residuals());
    throw_if_any_rank(world,
                      writes ? checkpoint::writable_problem(options.checkpoint, report.checkpoint_bytes) : std::string(),
                      "ps::train", fmt::format("another rank cannot write checkpoints into {}", options.checkpoint));
  }
  // After the checks every rank makes alike, so a run refused by them can be asked for again.
  if (!ps.begin_training()) {
    throw CollectiveError("ps::train: this ParameterServer has trained already, and its servers stopped when that run "
                          "ended; build a new one (with Options::resume to go on from a checkpoint)",
                          world.rank() == 0);
  }
  // Every rank takes part in the split; workers then agree among themselves without the servers.
  // After the checks above: a communicator left behind by their exception would never be freed.
  const comm::Communicator team = world.split(ps.is_worker() ? 0 : 1, world.rank());
  std::optional<RunControl<Server>> control;
  if (controlled) {
    control.emplace(ps,
                    typename RunControl<Server>::Settings{options.checkpoint, options.checkpoint_every,
                                                          options.checkpoint_keep, options.stop_on_signals, end_clock,
                                                          !Server::sync_type::aggregates || backups},
                    start);
  }
  bool stopped = false;
  // A balanced synchronous split learns each worker's speed from the time server 0 saw its part
  // take (ps::Server::time_responses), so a pause outside its compute counts too.
  const bool timed = options.balance == Balance::speed && !drawing;
  if constexpr (Server::sync_type::aggregates) {
    if (ps.is_server() && layout.server_index(world.rank()) == 0) ps.server().time_responses(timed);
  }
  if (ps.is_worker()) ps.worker().receive_response_times(timed);

  if (ps.is_worker()) {
    auto& worker = ps.worker();
    const int w = ps.worker_index();
    const std::size_t batch = worker_batch(options.batch, w, workers);
    // Check every condition before the first collective, and agree on the verdict, so one
    // worker's bad argument cannot leave the others waiting.
    std::string problem;
    if (options.batch < static_cast<std::size_t>(workers)) {
      problem = fmt::format("global batch {} is smaller than the number of workers {}", options.batch, workers);
    } else if (batch > ps.options().max_batch) {
      problem = fmt::format("worker batch {} exceeds the ParameterServer's max_batch {}", batch, ps.options().max_batch);
    } else {
      problem = detail::input_mismatch("training", train_set, worker.network());
      if (problem.empty() && test_set != nullptr) problem = detail::input_mismatch("test", *test_set, worker.network());
      if (problem.empty()) problem = data::augmentation_problem(options.augmentation, train_set.features);
    }
    throw_if_any_rank(team, problem, "ps::train", "another worker rejected the options");
    // Sharded: this worker's rows in their own order, a batch of its part of the global batch; the
    // worker index in the seed, so equal shards are not shuffled alike.
    data::Batcher batcher = sharded ? data::Batcher(train_set, sharded_rows(train_set.count, options.batch, w, workers),
                                                    batch, data_order_seed(options.seed) + static_cast<std::uint64_t>(w) + 1)
                                    : data::Batcher(train_set, data::Range{0, train_set.count}, options.batch,
                                                    data_order_seed(options.seed));
    batcher.set_augmentation(options.augmentation, options.seed);
    std::optional<SpeedBalancer> balancer;
    if (options.balance == Balance::speed && !drawing) {
      balancer.emplace(team, options.batch, ps.options().max_batch, start.clock);
    }

    if (options.after_compute) {
      worker.set_after_compute([&options, w](std::size_t clock, double seconds) { options.after_compute(w, clock, seconds); });
    }
    // Bulk-synchronous workers are in lock step anyway: their epoch figures are summed over all
    // of them. Asynchronous and stale-bounded workers must not be made to wait for each other at
    // epoch ends (that would undo what they are for): each keeps its own figures, and rank 0
    // reports its own, until the totals at the end.
    // Workers that take tickets (drawn work, backup workers) cross epoch ends at their own times
    // and may stop on a signal on either side of one: they too keep their own figures.
    const bool lockstep = Server::sync_type::aggregates && !ticketed;
    std::size_t local_samples = 0;
    double local_seconds = 0.0;
    const bool evaluating = w == 0 && options.evaluate && test_set != nullptr;
    if (evaluating) report.evaluations.reserve(options.epochs * (options.evaluations_per_epoch + 1));
    const std::size_t evaluate_every = std::max<std::size_t>(1, clocks / std::max<std::size_t>(1, options.evaluations_per_epoch));
    double evaluating_seconds = 0.0;  // rank 0's time in evaluations so far
    EvaluationBuffer evaluation_buffer;  // a test set of stored bytes is converted through it
    if (evaluating) evaluation_buffer.reserve(evaluation_chunk(worker.workspace()), test_set->features);
    auto evaluate = [&](double epoch) -> const Evaluation& {
      const double before = metrics::seconds_since(started);
      const nn::BatchStats t = evaluate_dataset(worker.network(), worker.backend(), worker.workspace(),
                                                worker.compute_params(), *test_set, evaluation_buffer);
      const double after = metrics::seconds_since(started);
      evaluating_seconds += after - before;
      report.evaluations.push_back({epoch, after, t.mean_loss(), t.accuracy(), after - evaluating_seconds});
      return report.evaluations.back();
    };
    // One epoch's running figures on this worker, from open_epoch to close_epoch.
    struct OpenEpoch {
      std::size_t epoch = 0;
      std::chrono::steady_clock::time_point started;
      double evaluating_before = 0.0, checkpointing_before = 0.0;
      nn::BatchStats stats;
    };
    auto open_epoch = [&](std::size_t epoch) {
      worker.reset_times();
      batcher.start_epoch(epoch);
      return OpenEpoch{epoch, std::chrono::steady_clock::now(), evaluating_seconds,
                       control ? control->checkpoint_seconds() : 0.0, {}};
    };
    auto close_epoch = [&](const OpenEpoch& open) {
      EpochReport e;
      e.epoch = open.epoch + 1;
      e.checkpoint_seconds = control ? control->checkpoint_seconds() - open.checkpointing_before : 0.0;
      // Evaluations inside the epoch (evaluations_per_epoch > 1) stall every worker of a
      // bulk-synchronous run at rank 0's next clock: that time is evaluation, not training.
      const double evaluated_in_epoch = evaluating_seconds - open.evaluating_before;
      e.seconds = metrics::seconds_since(open.started);
      local_samples += open.stats.count;
      double sums[7] = {open.stats.loss_sum, static_cast<double>(open.stats.count), static_cast<double>(open.stats.correct),
                        worker.times().compute, worker.times().communicate, worker.times().wait, evaluated_in_epoch};
      int contributors = 1;
      if (lockstep) {
        e.seconds = team.allreduce_value(e.seconds, MPI_MAX);
        team.allreduce_in_place(sums, 7, MPI_SUM);
        contributors = workers;
      }
      e.seconds = std::max(0.0, e.seconds - sums[6] - e.checkpoint_seconds);  // only rank 0 evaluates
      local_seconds += e.seconds;
      e.samples = static_cast<std::size_t>(sums[1]);
      e.train_loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
      e.train_accuracy = sums[1] > 0 ? sums[2] / sums[1] : 0.0;
      e.times = {sums[3] / contributors, sums[4] / contributors, sums[5] / contributors};
      e.samples_per_second = e.seconds > 0 ? static_cast<double>(e.samples) / e.seconds : 0.0;
      if (evaluating) {
        const auto eval_started = std::chrono::steady_clock::now();
        const Evaluation& t = evaluate(static_cast<double>(open.epoch + 1));
        e.test_loss = t.test_loss;
        e.test_accuracy = t.test_accuracy;
        e.eval_seconds = metrics::seconds_since(eval_started);
      }
      e.elapsed_seconds = metrics::seconds_since(started);
      if (w == 0 && on_epoch) on_epoch(e);
      report.epochs.push_back(e);
      // Start the next epoch together, so worker 0's evaluation is nobody's compute or wait time.
      if (lockstep) team.barrier();
    };
    if (ticketed) {
      worker.set_push_clock(start.clock);  // its servers expect a clock with every push, the stop too
      worker.receive_tickets();
    }
    worker.start();
    bool finished = false;  // this worker has told the servers it stopped
    if (ticketed && start.clock < end_clock) {
      std::uint64_t at = start.clock;  // where the segment starts
      std::uint64_t evaluated_at = at;  // the latest in-epoch evaluation point, in clocks
      OpenEpoch open = open_epoch(start.epoch);
      for (;;) {
        const std::uint64_t segment_end = control ? control->next_boundary(at) : end_clock;
        std::uint64_t undone = 0;  // the ticket this worker holds and will not do
        for (;;) {
          // Ticket t is part t % W of global clock t / W; one comes with every reply.
          const std::uint64_t ticket = worker.ticket();
          const std::uint64_t clock = ticket / static_cast<std::uint64_t>(workers);
          if (clock >= segment_end || (control && control->should_stop())) {
            undone = ticket;
            break;
          }
          const auto epoch = static_cast<std::size_t>(clock / clocks), c = static_cast<std::size_t>(clock % clocks);
          while (open.epoch < epoch) {
            close_epoch(open);
            open = open_epoch(open.epoch + 1);
          }
          const auto part = static_cast<int>(ticket % static_cast<std::uint64_t>(workers));
          const data::Range mine = worker_part(batcher.batch_count(c), part, workers);
          worker.set_push_clock(clock + 1);
          if (mine.size() > 0) {
            const data::BatchView b = batcher.part(c, mine);
            nn::set_sample_position(worker.network(), worker.workspace(), {clock, mine.begin});
            open.stats += worker.step(b.inputs, b.labels, b.count);
          } else {
            worker.step(nullptr, nullptr, 0);  // the epoch's short last batch has fewer samples than parts
          }
          // Worker 0 draws only some clocks: it evaluates at the latest point it has passed.
          const std::uint64_t point = clock + 1 - (clock + 1) % clocks % evaluate_every;
          if (evaluating && point % clocks != 0 && point > evaluated_at) {
            evaluated_at = point;
            evaluate(static_cast<double>(point) / static_cast<double>(clocks));
          }
        }
        worker.finish();
        finished = true;
        if (!control) break;  // the segment ran to end_clock
        // Tickets are handed out in order and each one held is done before its worker stops, but
        // the one it holds then: every ticket below the lowest of those is done.
        if (control->meet(std::min(segment_end, undone / static_cast<std::uint64_t>(workers)))) {
          stopped = true;
          break;
        }
        at = control->position().clock;
        if (at >= end_clock) break;
        worker.start();  // the first ticket from `at` on comes with the parameters
        finished = false;
      }
      if (!stopped) {
        // A slow worker may have drawn nothing in the last epochs: they are reported, empty.
        while (open.epoch + 1 < options.epochs) {
          close_epoch(open);
          open = open_epoch(open.epoch + 1);
        }
        close_epoch(open);
      }
    }
    for (std::size_t epoch = start.epoch; !ticketed && epoch < options.epochs && !stopped; ++epoch) {
      OpenEpoch open = open_epoch(epoch);
      for (std::size_t c = epoch == start.epoch ? start.batch : 0; c < clocks; ++c) {
        const std::size_t in_clock = sharded ? (c + 1 < clocks ? options.batch : train_set.count - c * options.batch)
                                             : batcher.batch_count(c);
        const data::Range mine = balancer ? balancer->part(in_clock, w) : worker_part(in_clock, w, workers);
        if (mine.size() > 0) {
          const data::BatchView b = sharded ? batcher.batch(c) : batcher.part(c, mine);
          nn::set_sample_position(worker.network(), worker.workspace(), {epoch * clocks + c, mine.begin});
          open.stats += worker.step(b.inputs, b.labels, b.count);
        } else {
          worker.step(nullptr, nullptr, 0);
        }
        if (balancer) {
          const double measured = worker.response_seconds();
          balancer->after_clock(epoch * clocks + c + 1,
                                options.balance_seconds ? options.balance_seconds(w, epoch * clocks + c, mine.size(), measured)
                                                        : measured,
                                mine.size());
        }
        if constexpr (Server::sync_type::aggregates) {
          if (control && control->after_clock()) {
            stopped = true;  // every rank agreed to stop after this clock
            break;
          }
        } else if (control && (control->should_stop() || control->is_boundary(epoch * clocks + c + 1))) {
          // The ranks meet here: every worker stops pushing, the servers finish serving.
          worker.finish();
          finished = true;
          if (control->meet(epoch * clocks + c + 1)) {
            stopped = true;
            break;
          }
          if (epoch * clocks + c + 1 < end_clock) {
            worker.start();
            finished = false;
          }
        }
        if (evaluating && c + 1 < clocks && (c + 1) % evaluate_every == 0) {
          evaluate(static_cast<double>(epoch) + static_cast<double>(c + 1) / static_cast<double>(clocks));
        }
      }
      if (stopped) break;  // a partial epoch has no report; every worker leaves here alike
      close_epoch(open);
    }
    if (!finished) worker.finish();
    if (balancer) {
      balancer->finish();
      report.splits = balancer->history();
    }
    worker.set_after_compute({});  // it refers to `options`, which the caller may drop now
    report.gradient_pushes = worker.gradient_pushes();
    // Totals over all workers: every sample trained on, over the slowest worker's training time.
    report.train_seconds = team.allreduce_value(local_seconds, MPI_MAX);
    const std::size_t samples = team.allreduce_value(local_samples, MPI_SUM);
    report.samples_per_second = report.train_seconds > 0 ? static_cast<double>(samples) / report.train_seconds : 0.0;
  } else if (control) {
    if (Server::sync_type::aggregates && !backups) {
      ps.server().run([&control] { control->after_clock(); });
    } else if (start.clock == end_clock) {
      ps.server().run();  // the workers start and stop at once
    } else {
      // Served until the workers stop where they meet (see the workers' loop), then met there.
      for (;;) {
        detail::serve_tickets(ps.server(), drawing, options.backup_workers, control->position().clock);
        ps.server().run([&control] { control->poll(); });
        if (control->meet(std::nullopt) || control->position().clock >= end_clock) break;
      }
    }
  } else {
    detail::serve_tickets(ps.server(), drawing, options.backup_workers, start.clock);
    ps.server().run();
  }
  if (control) {
    control->finish();
    report.checkpoints = control->checkpoints();
    report.checkpoint_seconds = control->checkpoint_seconds();
    report.last_checkpoint = control->last_checkpoint();
    report.stop_signal = control->stop_signal();
    report.clocks = control->position().clock;
  }

  // Server figures to rank 0 (a worker): the one collective both roles share after training.
  double server_figures[4] = {0.0, 0.0, 0.0, 0.0};
  std::size_t staleness = 0;
  if (ps.is_server()) {
    const ServerStats& stats = ps.server().stats();
    server_figures[0] = stats.wait;
    server_figures[1] = stats.update;
    server_figures[2] = static_cast<double>(stats.updates);
    for (std::size_t d : stats.dropped_per_worker) server_figures[3] += static_cast<double>(d);
    staleness = stats.max_staleness;
  }
  world.allreduce_in_place(server_figures, 4, MPI_SUM);
  report.server_max_staleness = world.allreduce_value(staleness, MPI_MAX);
  report.server_wait = server_figures[0] / layout.servers();
  report.server_update = server_figures[1] / layout.servers();
  report.server_updates = static_cast<std::size_t>(server_figures[2]) / static_cast<std::size_t>(layout.servers());
  report.dropped_pushes = static_cast<std::size_t>(server_figures[3]) / static_cast<std::size_t>(layout.servers());
  if (!report.epochs.empty()) report.test_accuracy = report.epochs.back().test_accuracy;
  report.wall_seconds = metrics::seconds_since(started);
  return report;
}

}  // namespace hpcps::ps
