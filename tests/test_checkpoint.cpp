// Checkpoint and resume under mpiexec: a synchronous run stopped at an epoch boundary or in the
// middle of an epoch (by SIGTERM, which also tests the stop agreement) and resumed ends with the
// bits of the uninterrupted run; a checkpoint resumes on another layout with every shard and
// state array where it belongs; damaged, foreign or missing checkpoints are refused on every rank
// with a sentence naming the file; an unwritable folder is found before training.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "hpcps/hpcps.hpp"
#include "ps_reference.hpp"
#include "synthetic_data.hpp"

namespace {

namespace fs = std::filesystem;
using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;
using Ps = hpcps::ParameterServer<Net, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::MomentumSgd>;
using AdamPs = hpcps::ParameterServer<Net, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::Adam>;
// Momentum correction moves the momentum to the workers: the server's rule has none.
using SgdPs = hpcps::ParameterServer<Net, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::StandardSgd>;

const hpcps::data::Dataset& train_set() {
  static const auto d = hpcps_test::synthetic(301, 12, 4, 7);
  return d;
}
const hpcps::data::Dataset& test_set() {
  static const auto d = hpcps_test::synthetic(97, 12, 4, 8);
  return d;
}
Net network() { return Net({12, 16, 4}); }

// A folder shared by every rank of this job, fresh for each use: named by rank 0's process id,
// so that the runs of this program at other rank counts, which ctest starts side by side, never
// write into or remove each other's checkpoints.
std::string fresh_folder(const hpcps::comm::Communicator& world, const std::string& name) {
  int job = static_cast<int>(::getpid());
  world.broadcast(&job, 1, 0);
  const std::string path = (fs::temp_directory_path() / ("hpcps-test-" + std::to_string(job)) / name).string();
  if (world.rank() == 0) fs::remove_all(path);
  world.barrier();
  return path;
}
// Collective: removes this job's folders once every rank is done with them.
void remove_folders(const hpcps::comm::Communicator& world) {
  const auto job = fs::path(fresh_folder(world, "done")).parent_path();
  if (world.rank() == 0) fs::remove_all(job);
}

template <class Server>
typename Server::Options options(int servers, const std::string& resume = {}, double top_k = 0.0,
                                 bool sign_push = false, float momentum_correction = 0.0f) {
  typename Server::Options o;
  o.servers = servers;
  o.top_k = top_k;
  o.sign_push = sign_push;
  o.top_k_momentum = momentum_correction;
  o.max_batch = 32;
  o.piece_floats = 100;  // several pieces per shard
  o.resume = resume;
  return o;
}

hpcps::ps::TrainOptions train_options(std::size_t epochs) {
  hpcps::ps::TrainOptions t;
  t.epochs = epochs;
  t.batch = 24;
  t.seed = 3;
  return t;
}

struct Outcome {
  std::vector<float> parameters;  // worker 0's
  double test_accuracy = 0.0;
  hpcps::ps::TrainingReport report;
};

template <class Server, class Optimizer>
Outcome run(const hpcps::comm::Communicator& world, int servers, const hpcps::ps::TrainOptions& t, Optimizer optimizer,
            const std::string& resume = {}, double top_k = 0.0, bool sign_push = false,
            float momentum_correction = 0.0f) {
  Server ps(world, network(), hpcps::backend::Cpu(1),
            options<Server>(servers, resume, top_k, sign_push, momentum_correction), {}, optimizer);
  Outcome o;
  o.report = hpcps::ps::train(ps, train_set(), &test_set(), t);
  if (world.rank() == 0) {
    o.parameters = ps.worker().parameters();
    o.test_accuracy = o.report.test_accuracy;
  }
  return o;
}

// The per-worker files of checkpoint `dir` (residual_file or velocity_file) as written, read by
// hand: `n` floats each.
std::vector<std::vector<float>> read_worker_files(const std::string& dir, std::string (*name)(std::size_t),
                                                 std::size_t workers, std::size_t n) {
  std::vector<std::vector<float>> written(workers, std::vector<float>(n));
  for (std::size_t w = 0; w < workers; ++w) {
    std::ifstream in(dir + "/" + name(w), std::ios::binary);
    in.read(reinterpret_cast<char*>(written[w].data()), static_cast<std::streamsize>(n * sizeof(float)));
    CHECK(in.gcount() == static_cast<std::streamsize>(n * sizeof(float)));
  }
  return written;
}

// What new worker `worker` of `workers` resumes with: the sum of the old workers w's with
// w % workers == worker, in old-worker order.
std::vector<float> worker_sum(const std::vector<std::vector<float>>& written, int worker, int workers) {
  std::vector<float> sum(written.front().size(), 0.0f);
  for (std::size_t w = static_cast<std::size_t>(worker); w < written.size(); w += static_cast<std::size_t>(workers)) {
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += written[w][i];
  }
  return sum;
}

std::vector<int> layouts(int ranks) {
  std::vector<int> servers{0};
  for (int s = 1; s < ranks && s <= 2; ++s) servers.push_back(s);
  return servers;
}

}  // namespace

TEST_CASE("a run resumed at an epoch boundary ends with the bits of the uninterrupted run", "[checkpoint]") {
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::optim::MomentumSgd momentum(0.05f);
  const hpcps::optim::Adam adam(0.01f);
  for (const int servers : layouts(world.size())) {
    INFO("servers " << servers);
    const std::string folder = fresh_folder(world, "epoch-boundary");
    const Outcome whole = run<Ps>(world, servers, train_options(3), momentum);
    auto first = train_options(1);
    first.checkpoint = folder;
    const Outcome part = run<Ps>(world, servers, first, momentum);
    CHECK(part.report.checkpoints == 1);
    const Outcome resumed = run<Ps>(world, servers, train_options(3), momentum, folder);
    if (world.rank() == 0) {
      CHECK(resumed.report.epochs.size() == 2);
      CHECK(resumed.parameters == whole.parameters);
      CHECK(resumed.test_accuracy == whole.test_accuracy);
      CHECK(part.parameters != whole.parameters);  // the comparison can fail
    }
    // Adam's two moments and its bias correction's step count survive too.
    const std::string adam_folder = fresh_folder(world, "epoch-boundary-adam");
    const Outcome adam_whole = run<AdamPs>(world, servers, train_options(2), adam);
    auto adam_first = train_options(1);
    adam_first.checkpoint = adam_folder;
    run<AdamPs>(world, servers, adam_first, adam);
    const Outcome adam_resumed = run<AdamPs>(world, servers, train_options(2), adam, adam_folder);
    if (world.rank() == 0) CHECK(adam_resumed.parameters == adam_whole.parameters);
  }
  remove_folders(world);
}

namespace {

// Trains 3 epochs whole, 1 with a checkpoint, then resumes that for 2, with top-k and with scaled
// signs on every layout: the resumed run must end with the whole run's bits.
template <class Server, class Optimizer>
void check_compressed_resume(const hpcps::comm::Communicator& world, Optimizer optimizer, float momentum_correction) {
  for (const bool sign : {false, true}) {
    const double ratio = sign ? 0.0 : 0.1;
    for (const int servers : layouts(world.size())) {
      INFO("servers " << servers << (sign ? ", scaled sign" : ", top-k") << ", momentum correction "
                      << momentum_correction);
      const std::string folder = fresh_folder(world, sign ? "sign" : "top-k");
      const auto go = [&](const hpcps::ps::TrainOptions& t, const std::string& resume) {
        return run<Server>(world, servers, t, optimizer, resume, ratio, sign, momentum_correction);
      };
      const Outcome whole = go(train_options(3), {});
      auto first = train_options(1);
      first.checkpoint = folder;
      const Outcome part = go(first, {});
      CHECK(part.report.checkpoints == 1);
      const Outcome resumed = go(train_options(3), folder);
      if (world.rank() == 0) {
        CHECK(resumed.report.epochs.size() == 2);
        CHECK(resumed.parameters == whole.parameters);
        CHECK(part.parameters != whole.parameters);  // the comparison can fail
        const auto m = hpcps::checkpoint::read_manifest((fs::path(folder) / hpcps::checkpoint::checkpoint_name(13)).string());
        CHECK(m.residuals.size() == m.workers);
        CHECK(m.velocities.size() == (momentum_correction != 0.0f ? m.workers : 0));
      }
    }
  }
  remove_folders(world);
}

// One epoch of top-k pushes (ratio 0.1) with every rank a worker, checkpointed into a fresh
// folder `name`: returns the folder and its one checkpoint's directory.
template <class Server, class Optimizer>
std::pair<std::string, std::string> one_top_k_epoch(const hpcps::comm::Communicator& world, const std::string& name,
                                                    Optimizer optimizer, float momentum_correction = 0.0f) {
  const std::string folder = fresh_folder(world, name);
  auto t = train_options(1);
  t.checkpoint = folder;
  run<Server>(world, 0, t, optimizer, {}, 0.1, false, momentum_correction);
  return {folder, (fs::path(folder) / hpcps::checkpoint::checkpoint_name(13)).string()};
}

}  // namespace

// Top-k and scaled-sign pushes hold part of every gradient back on the workers (ps/top_k.hpp,
// ps/sign_push.hpp): a checkpoint that lost the residuals would resume to other bits, and lose
// gradient for good.
TEST_CASE("a top-k or scaled-sign run resumed at an epoch boundary ends with the bits of the uninterrupted run",
          "[checkpoint][top_k][sign]") {
  check_compressed_resume<Ps>(hpcps::comm::Communicator::world(), hpcps::optim::MomentumSgd(0.05f), 0.0f);
}

// Momentum correction keeps the momentum on the workers (ps/top_k.hpp), as velocities: a checkpoint
// that lost them would resume to other bits, and, the server's rule having no momentum, lose the
// momentum altogether.
TEST_CASE("a run with momentum correction resumed at an epoch boundary ends with the bits of the uninterrupted run",
          "[checkpoint][top_k][sign]") {
  check_compressed_resume<SgdPs>(hpcps::comm::Communicator::world(), hpcps::optim::StandardSgd(0.05f), 0.9f);
}

// Fewer (or more) workers than wrote the checkpoint: new worker w' holds the sum of the old
// residuals w with w % W' == w', in old-worker order, so nothing held back is dropped.
TEST_CASE("a top-k checkpoint resumes on another number of workers with every residual kept",
          "[checkpoint][top_k]") {
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::optim::MomentumSgd momentum(0.05f);
  const auto [folder, dir] = one_top_k_epoch<Ps>(world, "top-k-relayout", momentum);
  const std::size_t n = network().parameter_count();
  const auto written = read_worker_files(dir, hpcps::checkpoint::residual_file, static_cast<std::size_t>(world.size()), n);
  std::size_t nonzero = 0;
  for (const auto& r : written) nonzero += static_cast<std::size_t>(std::count_if(r.begin(), r.end(), [](float x) { return x != 0.0f; }));
  CHECK(nonzero > 0);
  for (int servers = 0; servers < world.size(); ++servers) {
    const int workers = servers == 0 ? world.size() : world.size() - servers;
    INFO("resumed with " << servers << " servers, " << workers << " workers");
    Ps ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(servers, folder, 0.1), {}, momentum);
    if (ps.is_worker()) CHECK(ps.worker().residual() == worker_sum(written, world.rank(), workers));
  }
  // What a residual holds is gradient not yet sent, whatever sends it next: scaled-sign pushes
  // take it over too.
  {
    Ps ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(0, folder, 0.0, true), {}, momentum);
    CHECK(ps.worker().residual() == written[static_cast<std::size_t>(world.rank())]);
  }
  // A dense run would drop what the residuals hold: refused, on every rank, with the reason.
  std::string message;
  try {
    Ps ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(0, folder), {}, momentum);
  } catch (const hpcps::CollectiveError& e) {
    message = e.reporter() ? e.what() : "not the reporter";
  }
  CHECK_THAT(message, Catch::Contains("not the reporter") ||
                          (Catch::Contains("MANIFEST") && Catch::Contains("written with compressed pushes") &&
                           Catch::Contains("resume with top-k pushes") && Catch::Contains("scaled-sign")));
  // A damaged residual file is refused by its checksum, naming the file.
  if (world.rank() == 0) {
    std::fstream f(dir + "/" + hpcps::checkpoint::residual_file(0), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put('\x5a');
  }
  world.barrier();
  message.clear();
  try {
    Ps ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(0, folder, 0.1), {}, momentum);
  } catch (const hpcps::CollectiveError& e) {
    message = e.reporter() ? e.what() : "not the reporter";
  }
  CHECK_THAT(message, Catch::Contains("not the reporter") ||
                          (Catch::Contains(hpcps::checkpoint::residual_file(0)) && Catch::Contains("checksum mismatch")));
  remove_folders(world);
}

// On another number of workers each new worker's velocity is the sum of the old ones that fall to
// it, like its residual; a run without momentum correction is refused (its server rule has no
// momentum, so the velocities would be dropped), and a checkpoint without velocities starts them
// at zero.
TEST_CASE("a checkpoint with momentum correction resumes on another number of workers with every velocity kept",
          "[checkpoint][top_k]") {
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::optim::StandardSgd sgd(0.05f);
  const auto [folder, dir] = one_top_k_epoch<SgdPs>(world, "top-k-mc-relayout", sgd, 0.9f);
  const std::size_t n = network().parameter_count();
  const auto ranks = static_cast<std::size_t>(world.size());
  const auto velocities = read_worker_files(dir, hpcps::checkpoint::velocity_file, ranks, n);
  const auto residuals = read_worker_files(dir, hpcps::checkpoint::residual_file, ranks, n);
  CHECK(velocities != residuals);  // two files, not one written twice
  CHECK(std::any_of(velocities[0].begin(), velocities[0].end(), [](float x) { return x != 0.0f; }));
  for (int servers = 0; servers < world.size(); ++servers) {
    const int workers = servers == 0 ? world.size() : world.size() - servers;
    INFO("resumed with " << servers << " servers, " << workers << " workers");
    SgdPs ps(world, network(), hpcps::backend::Cpu(1), options<SgdPs>(servers, folder, 0.1, false, 0.9f), {}, sgd);
    if (ps.is_worker()) {
      CHECK(ps.worker().velocity() == worker_sum(velocities, world.rank(), workers));
      CHECK(ps.worker().residual() == worker_sum(residuals, world.rank(), workers));
    }
  }
  std::string message;
  try {
    SgdPs ps(world, network(), hpcps::backend::Cpu(1), options<SgdPs>(0, folder, 0.1), {}, sgd);
  } catch (const hpcps::CollectiveError& e) {
    message = e.reporter() ? e.what() : "not the reporter";
  }
  CHECK_THAT(message, Catch::Contains("not the reporter") ||
                          (Catch::Contains("MANIFEST") && Catch::Contains("written with momentum correction") &&
                           Catch::Contains("--top-k-momentum")));
  // A top-k checkpoint without momentum correction: the velocities start at zero.
  const std::string plain = one_top_k_epoch<SgdPs>(world, "top-k-no-mc", sgd).first;
  SgdPs ps(world, network(), hpcps::backend::Cpu(1), options<SgdPs>(0, plain, 0.1, false, 0.9f), {}, sgd);
  CHECK(ps.worker().velocity() == std::vector<float>(n, 0.0f));
  remove_folders(world);
}

TEST_CASE("a manifest lists one residual (and velocity) file per worker, of the parameters' size, or none",
          "[checkpoint][top_k]") {
  namespace ck = hpcps::checkpoint;
  ck::Manifest m;
  m.network = "mlp[12-16-4]-tanh";
  m.parameters = 100;
  m.clocks_per_epoch = 10;
  m.workers = 2;
  m.shards = {{0, 100}};
  m.files = {{ck::shard_file(0), 400, 7}};
  CHECK(ck::parse(ck::to_text(m), "M").residuals.empty());
  m.residuals = {{ck::residual_file(0), 400, 1}, {ck::residual_file(1), 400, 2}};
  const auto refused = [](ck::Manifest bad, const std::string& reason) {
    CHECK_THROWS_WITH(ck::parse(ck::to_text(bad), "M"), Catch::Contains(reason));
  };
  // The residuals alone, then with momentum correction the velocities beside them: each list is
  // read back, and refused short, misnamed or with a file of the wrong size.
  using List = std::vector<ck::FileEntry> ck::Manifest::*;
  const auto check_list = [&](const ck::Manifest& good, List list, const std::string& what,
                              std::string (*name)(std::size_t)) {
    INFO(what);
    CHECK(name(1) == what + "-00001.bin");  // the file names the checkpoint folder holds
    const auto back = ck::parse(ck::to_text(good), "M");
    REQUIRE((back.*list).size() == 2);
    CHECK((back.*list)[1].name == name(1));
    CHECK((back.*list)[1].crc == (good.*list)[1].crc);
    auto one = good;
    (one.*list).pop_back();
    refused(one, "1 " + what + " files for 2 workers");
    auto renamed = good;
    (renamed.*list)[1].name = name(0);
    refused(renamed, what + " 1 is '" + name(0) + "', not '" + name(1) + "'");
    auto short_file = good;
    (short_file.*list)[0].bytes = 396;
    refused(short_file, name(0) + " is listed with 396 bytes; 100 parameters need 400");
  };
  check_list(m, &ck::Manifest::residuals, "residual", ck::residual_file);
  auto corrected = m;
  corrected.velocities = {{ck::velocity_file(0), 400, 3}, {ck::velocity_file(1), 400, 4}};
  check_list(corrected, &ck::Manifest::velocities, "velocity", ck::velocity_file);
  CHECK(ck::parse(ck::to_text(corrected), "M").residuals.size() == 2);
  auto no_residuals = corrected;
  no_residuals.residuals.clear();
  refused(no_residuals, "velocity files without residual files");
}

// Dropout's masks follow the samples' place in training (nn::SamplePosition), not a count of the
// workspace's passes that would start again at 0 in the resumed run.
TEST_CASE("a network with dropout resumes to the same bits, at an epoch end and mid-epoch", "[checkpoint]") {
  using DropNet = hpcps::nn::Sequential<hpcps::nn::Dense, hpcps::nn::Relu, hpcps::nn::Dropout, hpcps::nn::Dense>;
  using DropPs = hpcps::ParameterServer<DropNet, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::MomentumSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::optim::MomentumSgd momentum(0.05f);
  const auto train = [&](int servers, const hpcps::ps::TrainOptions& t, const std::string& resume) {
    const DropNet net(hpcps::nn::Shape{12, 1, 1}, {{16}, {}, {0.3f, 5}, {4}});
    DropPs ps(world, net, hpcps::backend::Cpu(1), options<DropPs>(servers, resume), {}, momentum);
    hpcps::ps::train(ps, train_set(), &test_set(), t);
    return world.rank() == 0 ? ps.worker().parameters() : std::vector<float>{};
  };
  for (const int servers : layouts(world.size())) {
    INFO("servers " << servers);
    const std::string folder = fresh_folder(world, "dropout");
    const auto whole = train(servers, train_options(2), {});
    auto first = train_options(1);
    first.checkpoint = folder;
    first.checkpoint_every = hpcps::ps::parse_checkpoint_interval("5clocks");
    first.checkpoint_keep = 3;
    const auto part = train(servers, first, {});  // checkpoints after clocks 5, 10 and 13
    const auto at_end = train(servers, train_options(2), folder);
    const auto mid_epoch =
        train(servers, train_options(2), (fs::path(folder) / hpcps::checkpoint::checkpoint_name(5)).string());
    if (world.rank() == 0) {
      CHECK(at_end == whole);
      CHECK(mid_epoch == whole);
      CHECK(part != whole);
    }
  }
  remove_folders(world);
}

TEST_CASE("a network with batch normalization resumes to the same bits, running moments included", "[checkpoint]") {
  using BnNet = hpcps::nn::Sequential<hpcps::nn::Dense, hpcps::nn::BatchNorm1d, hpcps::nn::Relu, hpcps::nn::Dense>;
  using BnPs = hpcps::ParameterServer<BnNet, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::MomentumSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::optim::MomentumSgd momentum(0.05f);
  const BnNet net(hpcps::nn::Shape{12, 1, 1}, {{16}, {}, {}, {4}});
  const auto train = [&](int servers, const hpcps::ps::TrainOptions& t, const std::string& resume) {
    BnPs ps(world, net, hpcps::backend::Cpu(1), options<BnPs>(servers, resume), {}, momentum);
    const auto report = hpcps::ps::train(ps, train_set(), &test_set(), t);
    return std::make_pair(world.rank() == 0 ? ps.worker().parameters() : std::vector<float>{}, report.test_accuracy);
  };
  const auto slot = net.state_slots().front();
  for (const int servers : layouts(world.size())) {
    INFO("servers " << servers);
    const std::string folder = fresh_folder(world, "batch-norm");
    const auto whole = train(servers, train_options(2), {});
    auto first = train_options(1);
    first.checkpoint = folder;
    first.checkpoint_every = hpcps::ps::parse_checkpoint_interval("5clocks");
    first.checkpoint_keep = 3;
    const auto part = train(servers, first, {});
    const auto mid_epoch =
        train(servers, train_options(2), (fs::path(folder) / hpcps::checkpoint::checkpoint_name(5)).string());
    if (world.rank() == 0) {
      CHECK(mid_epoch.first == whole.first);
      CHECK(mid_epoch.second == whole.second);  // evaluated with the same running moments
      CHECK(part.first != whole.first);
      // The running moments moved from their initial values (0, then 1) and were carried over.
      CHECK(whole.first[slot.begin] != 0.0f);
      CHECK(whole.first[slot.begin + slot.size - 1] != 1.0f);
    }
  }
  remove_folders(world);
}

// Augmented images are drawn per (seed, epoch, row), not from a stream a worker consumes, so a run
// resumed mid-epoch sees the images the uninterrupted run saw.
TEST_CASE("a run with data augmentation resumes mid-epoch to the same bits", "[checkpoint][augment]") {
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::optim::MomentumSgd momentum(0.05f);
  auto augmented = [](std::size_t epochs) {
    auto t = train_options(epochs);
    t.augmentation = {1, 3, 4, 1, true, 0.0f};  // the 12 features as a 3 x 4 image
    return t;
  };
  const std::vector<int> servers_list = layouts(world.size());
  for (std::size_t i = 0; i < std::min<std::size_t>(2, servers_list.size()); ++i) {
    const int servers = servers_list[i];
    INFO("servers " << servers);
    const std::string folder = fresh_folder(world, "augment");
    const Outcome whole = run<Ps>(world, servers, augmented(2), momentum);
    const Outcome plain = run<Ps>(world, servers, train_options(2), momentum);
    auto first = augmented(1);
    first.checkpoint = folder;
    first.checkpoint_every = hpcps::ps::parse_checkpoint_interval("5clocks");
    first.checkpoint_keep = 3;  // clocks 5, 10 and 13
    run<Ps>(world, servers, first, momentum);
    const Outcome resumed = run<Ps>(world, servers, augmented(2), momentum,
                                    (fs::path(folder) / hpcps::checkpoint::checkpoint_name(5)).string());
    if (world.rank() == 0) {
      CHECK(resumed.parameters == whole.parameters);
      CHECK(plain.parameters != whole.parameters);  // the augmentation changed the training
    }
  }
  remove_folders(world);
}

// Asynchronous and stale-synchronous ranks meet at the end of every epoch and every N clocks of a
// clock interval: the workers stop pushing, the servers have applied every push, and the
// checkpoint is written there. A resumed run continues from that clock with the servers' update
// count (so the schedule goes on where it was).
// With Balance::speed the workers draw their work (ps/training.hpp), and a synchronous run with
// backup workers takes its clocks from server 0: the ranks meet at the same clocks, and every
// part of every clock is still applied once.
template <class Sync>
void check_meeting_point_checkpoints(Sync sync, hpcps::ps::Balance balance = hpcps::ps::Balance::none,
                                     std::size_t backups = 0) {
  using SyncPs = hpcps::ParameterServer<Net, hpcps::backend::Cpu, Sync, hpcps::optim::MomentumSgd>;
  const auto world = hpcps::comm::Communicator::world();
  if (world.size() < 2) {
    WARN("needs a server and a worker");
    return;
  }
  const hpcps::optim::MomentumSgd momentum(0.05f);
  const std::string folder = fresh_folder(world, std::string("meeting-") + Sync::name);
  const auto train = [&](hpcps::ps::TrainOptions t, const std::string& resume) {
    auto o = options<SyncPs>(1, resume);
    o.shared_memory = backups == 0;  // backup workers exchange point to point
    SyncPs ps(world, network(), hpcps::backend::Cpu(1), o, sync, momentum);
    t.balance = balance;
    t.backup_workers = backups;
    return hpcps::ps::train(ps, train_set(), &test_set(), t);
  };
  const bool drawing = balance == hpcps::ps::Balance::speed;
  const auto whole = train(train_options(2), {});
  auto t = train_options(2);
  t.checkpoint = folder;
  t.checkpoint_every = hpcps::ps::parse_checkpoint_interval("5clocks");
  t.checkpoint_keep = 10;
  const auto written = train(t, {});
  CHECK(written.checkpoints == 6);  // after clocks 5, 10, 15, 20, 25 and 26 (the end)
  CHECK(written.clocks == 26);
  CHECK(written.server_updates == whole.server_updates);
  const auto resumed = train(train_options(2), (fs::path(folder) / hpcps::checkpoint::checkpoint_name(10)).string());
  CHECK(resumed.resumed_from.find(hpcps::checkpoint::checkpoint_name(10)) != std::string::npos);
  // Every push of the 16 clocks left was applied once, after the 10 clocks' updates restored.
  CHECK(resumed.server_updates == whole.server_updates);
  if (world.rank() == 0) CHECK(resumed.epochs.size() == 2);  // the rest of the first epoch, and the second

  // SIGTERM to the last rank (a server) during worker 0's clock 16: that rank tells the others at
  // once, every worker stops after its clock, and the checkpoint is of the fewest clocks any
  // worker completed; with and without checkpoints.
  const int me = static_cast<int>(::getpid());
  std::vector<int> pids(static_cast<std::size_t>(world.size()));
  world.allgather(&me, 1, pids.data());
  for (const bool checkpointing : {true, false}) {
    INFO((checkpointing ? "with" : "without") << " checkpoints");
    const std::string stop_folder = fresh_folder(world, std::string("stopped-") + Sync::name);
    auto stopped = train_options(2);
    if (checkpointing) stopped.checkpoint = stop_folder;
    stopped.stop_on_signals = true;
    // Workers that take tickets share the clocks, and one of them may do few of them (a rank
    // descheduled on a machine with fewer cores than ranks; a backup worker whose pushes come
    // late): the first worker to reach its clock 15 / W (drawn work) or 8 (backups) sends the one
    // signal (an atomic mkdir decides which), and the stop may come some clocks later.
    const bool ticketed = drawing || backups > 0;
    const std::size_t signal_at = drawing ? 15 / static_cast<std::size_t>(world.size() - 1) : backups > 0 ? 8 : 15;
    const std::string signalled = fresh_folder(world, std::string("signalled-") + Sync::name);
    stopped.after_compute = [&](int w, std::size_t clock, double) {
      if ((w == 0 || ticketed) && clock == signal_at && fs::create_directory(signalled)) ::kill(pids.back(), SIGTERM);
    };
    const auto part = train(stopped, {});
    CHECK(part.stop_signal == SIGTERM);
    // How many clocks ticketed workers finish before the notice reaches them depends on how the
    // machine schedules the ranks (under a full load one run went on to the end, clock 26), so
    // only the bound every run keeps is checked; the resume below follows from where it stopped.
    if (ticketed) CHECK(part.clocks <= 26);
    else CHECK(part.clocks <= 17);  // worker 0 stops after clock 16; a slower worker earlier
    if (checkpointing) {
      // At the end of the first epoch (clock 13), and at the stop; ticketed workers may stop first.
      if (ticketed) CHECK(part.checkpoints >= 1);
      else CHECK(part.checkpoints == 2);
      const auto rest = train(train_options(2), stop_folder);
      CHECK(rest.stop_signal == 0);
      CHECK(rest.resumed_from == part.last_checkpoint);
      if (world.rank() == 0 && part.clocks < 26) CHECK(!rest.epochs.empty());  // something was left to train
    } else {
      CHECK(part.checkpoints == 0);
    }
  }
  remove_folders(world);
}

TEST_CASE("runs whose ranks meet (ssp, async, drawn work, backup workers) checkpoint there and resume there",
          "[checkpoint]") {
  SECTION("ssp, staleness 1") { check_meeting_point_checkpoints(hpcps::sync::StaleSynchronous(1)); }
  SECTION("async") { check_meeting_point_checkpoints(hpcps::sync::Asynchronous{}); }
  SECTION("ssp, staleness 1, drawing") {
    check_meeting_point_checkpoints(hpcps::sync::StaleSynchronous(1), hpcps::ps::Balance::speed);
  }
  SECTION("async, drawing") { check_meeting_point_checkpoints(hpcps::sync::Asynchronous{}, hpcps::ps::Balance::speed); }
  // A signal may reach one worker before an epoch's end and another after it: the epoch reports
  // must not wait for each other there.
  SECTION("bsp, a backup worker") {
    if (hpcps::comm::Communicator::world().size() >= 3) {
      check_meeting_point_checkpoints(hpcps::sync::Synchronous{}, hpcps::ps::Balance::none, 1);
    }
  }
}

// A crash while a checkpoint is written leaves .partial-ckpt-<clock>: here one of a later clock than
// any published checkpoint, whose files look complete but for a shard cut short. Resuming from the
// folder takes the newest published checkpoint and never reads the partial one; the next
// checkpoint written into the folder removes it.
TEST_CASE("a checkpoint half-written by a crash is never read and is removed by the next one", "[checkpoint]") {
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::optim::MomentumSgd momentum(0.05f);
  const int servers = world.size() >= 2 ? 1 : 0;
  const std::string folder = fresh_folder(world, "crashed");
  auto first = train_options(1);
  first.checkpoint = folder;
  run<Ps>(world, servers, first, momentum);  // a checkpoint after clock 13
  const auto published = (fs::path(folder) / hpcps::checkpoint::checkpoint_name(13)).string();
  const auto partial = (fs::path(folder) / hpcps::checkpoint::partial_name(26)).string();
  if (world.rank() == 0) {
    fs::copy(published, partial, fs::copy_options::recursive);
    const auto shard = fs::path(partial) / "shard-00000.bin";
    fs::resize_file(shard, fs::file_size(shard) / 2);
  }
  world.barrier();
  const Outcome whole = run<Ps>(world, servers, train_options(2), momentum);
  auto second = train_options(2);
  second.checkpoint = folder;
  const Outcome resumed = run<Ps>(world, servers, second, momentum, folder);
  CHECK(resumed.report.resumed_from == published);
  if (world.rank() == 0) {
    CHECK(resumed.parameters == whole.parameters);
    CHECK_FALSE(fs::exists(partial));
    CHECK(hpcps::checkpoint::published(folder).size() == 2);  // clocks 13 and 26
  }
  remove_folders(world);
}

TEST_CASE("a run stopped by SIGTERM in the middle of an epoch resumes to the same bits", "[checkpoint][signals]") {
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::optim::MomentumSgd momentum(0.05f);
  for (const int servers : layouts(world.size())) {
    INFO("servers " << servers);
    const std::string folder = fresh_folder(world, "mid-epoch");
    const Outcome whole = run<Ps>(world, servers, train_options(3), momentum);
    auto stopped = train_options(3);
    stopped.checkpoint = folder;
    stopped.checkpoint_every = hpcps::ps::parse_checkpoint_interval("4clocks");
    stopped.stop_on_signals = true;
    // Worker 0 sends the last rank (a server where there is one) SIGTERM during clock 17 of 39
    // (the second epoch has 13 clocks).
    const int me = static_cast<int>(::getpid());
    std::vector<int> pids(static_cast<std::size_t>(world.size()));
    world.allgather(&me, 1, pids.data());
    stopped.after_compute = [&](int w, std::size_t clock, double) {
      if (w == 0 && clock == 16) ::kill(pids.back(), SIGTERM);
    };
    const Outcome part = run<Ps>(world, servers, stopped, momentum);
    CHECK(part.report.stop_signal == SIGTERM);
    // Stopped within two clocks of the signal, in the middle of the second epoch, with a checkpoint.
    CHECK(part.report.clocks >= 17);
    CHECK(part.report.clocks <= 20);
    CHECK(part.report.last_checkpoint.find(hpcps::checkpoint::checkpoint_name(part.report.clocks)) != std::string::npos);
    const Outcome resumed = run<Ps>(world, servers, train_options(3), momentum, folder);
    CHECK(resumed.report.stop_signal == 0);
    if (world.rank() == 0) {
      CHECK(resumed.parameters == whole.parameters);
      CHECK(resumed.test_accuracy == whole.test_accuracy);
    }
    // The newest two are kept.
    if (world.rank() == 0) CHECK(hpcps::checkpoint::published(folder).size() == 2);
  }
  remove_folders(world);
}

namespace {

// The whole parameter vector and velocity of a ParameterServer on `comm`, on every rank of it
// (shards are disjoint, so a sum gathers them).
std::vector<float> whole_state(const hpcps::comm::Communicator& comm, Ps& ps) {
  const std::size_t n = network().parameter_count();
  std::vector<float> all(2 * n, 0.0f);
  if (ps.is_server()) {
    const auto r = ps.server().range();
    const auto& v = ps.server().optimizer_state().velocity;
    for (std::size_t i = 0; i < r.size(); ++i) {
      all[r.begin + i] = ps.server().parameter_data()[i];
      all[n + r.begin + i] = v[i];
    }
  }
  comm.allreduce_in_place(all.data(), all.size(), MPI_SUM);
  return all;
}

}  // namespace

TEST_CASE("a checkpoint resumes on another layout with every shard and state array in place", "[checkpoint][layout]") {
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::optim::MomentumSgd momentum(0.05f);
  const std::string folder = fresh_folder(world, "relayout");
  const int writer = world.size() >= 3 ? 2 : (world.size() == 2 ? 1 : 0);
  std::vector<float> saved;
  {
    auto t = train_options(1);
    t.checkpoint = folder;
    Ps ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(writer), {}, momentum);
    hpcps::ps::train(ps, train_set(), &test_set(), t);
    saved = whole_state(world, ps);
  }
  for (int servers = 0; servers < world.size(); ++servers) {
    INFO("written with " << writer << " servers, resumed with " << servers);
    Ps ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(servers, folder), {}, momentum);
    CHECK(whole_state(world, ps) == saved);
    CHECK(ps.resumed()->manifest.servers == static_cast<std::uint64_t>(writer));
    const auto report = hpcps::ps::train(ps, train_set(), &test_set(), train_options(2));
    if (world.rank() == 0) CHECK(report.epochs.size() == 1);
  }
  remove_folders(world);
}

// Every layout trains each clock on the same samples (ps::train's data order does not depend on
// the number of workers), so a run resumed on other ranks computes what the original would have,
// up to the order of fp32 additions: the workers' gradient sums and the servers' sum of them.
TEST_CASE("a checkpoint of 2 servers and 3 workers continues on other layouts with the same samples",
          "[checkpoint][layout]") {
  const auto world = hpcps::comm::Communicator::world();
  if (world.size() != 5) {
    WARN("needs 5 ranks: written by 2 servers and 3 workers");
    return;
  }
  const hpcps::optim::MomentumSgd momentum(0.05f);
  const std::string folder = fresh_folder(world, "layouts");
  // Written with 2 servers + 3 workers: checkpoints after clocks 5 and 10, and 13 at the end of
  // the epoch (301 samples in global batches of 24).
  auto t = train_options(1);
  t.checkpoint = folder;
  t.checkpoint_every = hpcps::ps::parse_checkpoint_interval("5clocks");
  t.checkpoint_keep = 3;
  std::vector<float> reference;  // after clock 13
  {
    Ps ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(2), {}, momentum);
    const auto report = hpcps::ps::train(ps, train_set(), &test_set(), t);
    CHECK(report.clocks == 13);
    reference = whole_state(world, ps);
  }
  const std::string after_10 = (fs::path(folder) / hpcps::checkpoint::checkpoint_name(10)).string();
  {
    Ps ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(2, after_10), {}, momentum);
    // The three clocks left change the parameters well beyond rounding: the comparisons can fail.
    const auto before = whole_state(world, ps);
    if (world.rank() == 0) CHECK(hpcps_test::difference_over_largest(before, reference) > 1e-3);
  }
  struct Resumed {
    int ranks, servers;
    const char* name;
  };
  for (const Resumed& r : {Resumed{5, 2, "2 servers + 3 workers"}, Resumed{3, 1, "1 server + 2 workers"},
                           Resumed{4, 3, "3 servers + 1 worker"}, Resumed{3, 0, "3 colocated ranks"}}) {
    // The ranks of the new layout run it; the others wait at the next collective of the world.
    const auto ranks = world.split(world.rank() < r.ranks ? 0 : 1, world.rank());
    if (world.rank() >= r.ranks) continue;
    Ps ps(ranks, network(), hpcps::backend::Cpu(1), options<Ps>(r.servers, after_10), {}, momentum);
    const auto report = hpcps::ps::train(ps, train_set(), &test_set(), train_options(1));
    const auto state = whole_state(ranks, ps);
    if (world.rank() == 0) {
      INFO("resumed after clock 10 on " << r.name);
      CHECK(report.epochs.size() == 1);
      // Measured: 0 on 3 colocated ranks (the same three gradient sums), 1e-7 (one ulp of the
      // largest value) with 1 or 2 workers.
      if (r.servers == 2 && r.ranks == 5) CHECK(state == reference);  // the same layout: the same bits
      CHECK(hpcps_test::difference_over_largest(state, reference) < 1e-6);
    }
  }
  remove_folders(world);
}

namespace {

// Copies checkpoint `from` to `to` (rank 0), then applies `damage` to the copy.
template <class Damage>
void damaged_copy(const hpcps::comm::Communicator& world, const std::string& from, const std::string& to, Damage damage) {
  if (world.rank() == 0) {
    fs::remove_all(to);
    fs::copy(from, to, fs::copy_options::recursive);
    damage(to);
  }
  world.barrier();
}

void flip_byte(const std::string& path, std::size_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x10));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("bad checkpoints are refused on every rank with the file and the reason", "[checkpoint][robustness]") {
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::optim::MomentumSgd momentum(0.05f);
  const int servers = world.size() > 1 ? 1 : 0;
  const std::string folder = fresh_folder(world, "bad");
  auto t = train_options(1);
  t.checkpoint = folder;
  run<Ps>(world, servers, t, momentum);
  const std::string good = (fs::path(folder) / hpcps::checkpoint::checkpoint_name(13)).string();
  const std::string manifest = good + "/MANIFEST", shard = good + "/" + hpcps::checkpoint::shard_file(0);
  const std::string copy = folder + "/damaged";

  // Every rank throws; the reporter's sentence names the file and the reason.
  const auto refused = [&](auto make, const std::string& file, const std::string& reason) {
    INFO("expected: " << file << ": ..." << reason);
    std::string message;
    bool reporter = false;
    try {
      make();
    } catch (const hpcps::CollectiveError& e) {
      message = e.what();
      reporter = e.reporter();
    }
    CHECK(message.find("cannot resume from") != std::string::npos);
    const int reporters = world.allreduce_value(reporter ? 1 : 0, MPI_SUM);
    CHECK(reporters == 1);
    if (reporter) {
      CHECK_THAT(message, Catch::Contains(file) && Catch::Contains(reason));
    }
  };
  const auto resume_momentum = [&](const std::string& from) {
    return [&world, &momentum, servers, from] {
      Ps ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(servers, from), {}, momentum);
    };
  };
  const std::string manifest_text = world.rank() == 0 ? slurp(manifest) : std::string();

  damaged_copy(world, good, copy, [&](const std::string& d) { fs::resize_file(d + "/" + hpcps::checkpoint::shard_file(0), 100); });
  refused(resume_momentum(copy), hpcps::checkpoint::shard_file(0), "truncated");
  damaged_copy(world, good, copy, [&](const std::string& d) { fs::remove(d + "/" + hpcps::checkpoint::shard_file(0)); });
  refused(resume_momentum(copy), hpcps::checkpoint::shard_file(0), "missing");
  damaged_copy(world, good, copy, [&](const std::string& d) { flip_byte(d + "/" + hpcps::checkpoint::shard_file(0), 1000); });
  refused(resume_momentum(copy), hpcps::checkpoint::shard_file(0), "checksum mismatch");
  damaged_copy(world, good, copy, [&](const std::string& d) { flip_byte(d + "/MANIFEST", 30); });
  refused(resume_momentum(copy), "MANIFEST", "checksum mismatch");
  damaged_copy(world, good, copy, [&](const std::string& d) {
    std::ofstream(d + "/MANIFEST", std::ios::binary) << "hpcps-checkpoint " << hpcps::checkpoint::format_version + 1 << "\n" << manifest_text.substr(manifest_text.find('\n') + 1);
  });
  refused(resume_momentum(copy), "MANIFEST", "newer than this hpcps reads");
  damaged_copy(world, good, copy, [&](const std::string& d) { fs::remove(d + "/MANIFEST"); });
  refused(resume_momentum(copy), copy, "not a checkpoint");
  refused(resume_momentum(folder + "/no-such-thing"), "no-such-thing", "no such directory");
  refused(
      [&] {
        using Other = hpcps::ParameterServer<Net, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::MomentumSgd>;
        Other ps(world, Net({12, 17, 4}), hpcps::backend::Cpu(1), options<Other>(servers, good), {}, momentum);
      },
      "MANIFEST", "written for the network mlp[12-16-4]-tanh, but this run has mlp[12-17-4]-tanh");
  refused(
      [&] { AdamPs ps(world, network(), hpcps::backend::Cpu(1), options<AdamPs>(servers, good), {}, hpcps::optim::Adam(0.01f)); },
      "MANIFEST", "written for the update rule momentum 0.9");
  // Nothing of the good checkpoint was touched, and it still resumes.
  if (world.rank() == 0) CHECK(slurp(manifest) == manifest_text);
  CHECK_NOTHROW(Ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(servers, good), {}, momentum));
  remove_folders(world);
}

// Under DataOrder::sharded each worker's rows and their order follow from the number of workers,
// so its checkpoints resume only with that order and that many workers (and a global-order one
// not as sharded); a checkpoint records its order (manifest format 2).
TEST_CASE("a sharded run resumes only with its data order and its number of workers", "[checkpoint][robustness]") {
  const auto world = hpcps::comm::Communicator::world();
  if (world.size() < 2) {
    WARN("needs at least 2 ranks (two layouts with different numbers of workers)");
    return;
  }
  const hpcps::optim::MomentumSgd momentum(0.05f);
  const std::string folder = fresh_folder(world, "sharded");
  auto first = train_options(1);
  first.data_order = hpcps::ps::DataOrder::sharded;
  first.checkpoint = folder;
  run<Ps>(world, 0, first, momentum);  // colocated: every rank is a worker
  // The server is destroyed after the refusal is caught, not while it unwinds: a communicator or
  // window destroyed by an unwinding exception skips its collective free (comm/detail/teardown.hpp),
  // which LeakSanitizer reports.
  const auto resume_from = [&](const std::string& from, int servers, hpcps::ps::DataOrder order) {
    auto t = train_options(2);
    t.data_order = order;
    Ps ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(servers, from), {}, momentum);
    try {
      hpcps::ps::train(ps, train_set(), &test_set(), t);
    } catch (const hpcps::CollectiveError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto resume = [&](int servers, hpcps::ps::DataOrder order) { return resume_from(folder, servers, order); };
  CHECK_THAT(resume(0, hpcps::ps::DataOrder::global),
             Catch::Contains("cannot resume") && Catch::Contains("trained with the sharded data order, this run has the global one"));
  CHECK_THAT(resume(1, hpcps::ps::DataOrder::sharded),
             Catch::Contains(fmt::format("gave each of {} workers its own rows, this run has {} workers: resume it with {}",
                                         world.size(), world.size() - 1, world.size())));
  CHECK(resume(0, hpcps::ps::DataOrder::sharded).empty());  // the same order and workers resume
  // A global-order checkpoint does not resume as sharded.
  const std::string global = fresh_folder(world, "global");
  auto plain = train_options(1);
  plain.checkpoint = global;
  run<Ps>(world, 0, plain, momentum);
  CHECK_THAT(resume_from(global, 0, hpcps::ps::DataOrder::sharded),
             Catch::Contains("trained with the global data order, this run has the sharded one"));
  remove_folders(world);
}

TEST_CASE("a checkpoint folder that cannot be written stops training before it starts", "[checkpoint][robustness]") {
  const auto world = hpcps::comm::Communicator::world();
  const int servers = world.size() > 1 ? 1 : 0;
  Ps ps(world, network(), hpcps::backend::Cpu(1), options<Ps>(servers), {}, hpcps::optim::MomentumSgd(0.05f));
  auto t = train_options(1);
  t.checkpoint = "/proc/hpcps-checkpoints";  // not even root can create it
  std::size_t clocks_trained = 0;
  t.after_compute = [&](int, std::size_t, double) { ++clocks_trained; };
  CHECK_THROWS_WITH(hpcps::ps::train(ps, train_set(), &test_set(), t),
                    Catch::Contains("ps::train") && Catch::Contains("/proc/hpcps-checkpoints"));
  CHECK(clocks_trained == 0);
}
