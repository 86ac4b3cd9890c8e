// Synchronization strategies under mpiexec, with workers delayed at random (fixed seeds) through
// the after-compute hook: every gradient slice is applied exactly once, the stale-synchronous
// bound holds (and is reached), and every strategy ends cleanly with uneven parts and idle pushes.
// Workers that draw their work (asynchronous and stale-synchronous with Balance::speed) use every
// sample of every epoch exactly once, an asynchronous straggler does less of it, and the bound
// holds in clocks.
// The random sleeps only vary the interleavings; where an assertion needs a straggler, a
// StragglerGate (straggler_gate.hpp) holds it until the others have got as far as the assertion
// needs, so no outcome depends on the machine's timing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "hpcps/hpcps.hpp"
#include "straggler_gate.hpp"
#include "synthetic_data.hpp"

static_assert(hpcps::sync::is_sync_v<hpcps::sync::Synchronous>);
static_assert(hpcps::sync::is_sync_v<hpcps::sync::StaleSynchronous>);
static_assert(hpcps::sync::is_sync_v<hpcps::sync::Asynchronous>);
static_assert(!hpcps::sync::is_sync_v<hpcps::optim::Adam>);

namespace {

using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;

using hpcps_test::StragglerGate;
using hpcps_test::synthetic;

// The network of these tests, knowing the global clock of the gradient it computes (ps::train
// tells it before every gradient of a non-empty part): the clock a ticketed worker is at, which
// after_compute's own count of its steps is not.
struct Clocked : Net {
  using Net::Net;
  static inline std::uint64_t clock = 0;  // this rank's worker
  template <class Workspace>
  void set_sample_position(Workspace&, hpcps::nn::SamplePosition position) const { clock = position.step; }
};

// Every worker's gradient pushes, by worker, on every rank (a collective over `world`).
template <class Server>
std::vector<std::size_t> pushes_by_worker(const hpcps::comm::Communicator& world, const Server& ps,
                                          const hpcps::ps::TrainingReport& report) {
  std::vector<std::size_t> all(static_cast<std::size_t>(world.size()), 0);
  const std::size_t pushed = ps.is_worker() ? report.gradient_pushes : 0;
  world.allgather(&pushed, 1, all.data());
  all.resize(static_cast<std::size_t>(ps.layout().workers()));  // workers are ranks [0, W)
  return all;
}

struct Outcome {
  std::vector<std::size_t> pushed;   // by worker: gradient slices each worker pushed (to every server)
  std::vector<std::size_t> applied;  // on a server: slices it applied, by worker
  std::vector<std::size_t> clocks;   // on a server: pushes received, by worker
  std::size_t max_staleness = 0;     // on a server
  std::size_t expected_clocks = 0;
  bool is_server = false;
};

// Trains on 61 samples with a global batch of 4 (uneven parts for 3 workers; the epoch's last
// batch of one sample leaves the other workers idle); every worker but a straggler sleeps at
// random after its gradients. With `straggler_lead` the last worker is a steady straggler: at each
// clock c it is held until every other worker has computed clock c + lead (the last clock at
// most). The server answers a worker whose clocks pushed are at most `staleness` ahead of the
// slowest's, and the held straggler has pushed c, so any lead up to the staleness bound is
// reachable (for BSP, 0).
template <class Sync>
Outcome train_with_delays(Sync sync, std::uint64_t seed, std::optional<std::size_t> straggler_lead,
                          std::size_t piece_floats = 5) {
  using Server = hpcps::ParameterServer<Net, hpcps::backend::Cpu, Sync, hpcps::optim::StandardSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const Net net({5, 6, 3});
  const auto data = synthetic(61, 5, 3, seed);
  typename Server::Options options;
  options.servers = 1;
  options.max_batch = 4;
  options.piece_floats = piece_floats;  // 57 parameters in pieces: a push is 12 messages
  Server ps(world, net, hpcps::backend::Cpu(1), options, sync, hpcps::optim::StandardSgd(0.05f));
  const int workers = ps.layout().workers();
  hpcps::ps::TrainOptions train;
  train.epochs = 2;
  train.batch = 4;
  train.seed = seed;
  train.evaluate = false;
  const std::size_t last_clock = train.epochs * hpcps::ps::clocks_per_epoch(data.count, train.batch) - 1;
  StragglerGate gate(world, workers, straggler_lead ? workers - 1 : -1);
  hpcps::data::Rng rng(seed * 31 + static_cast<std::uint64_t>(world.rank()));
  train.after_compute = [&](int w, std::size_t clock, double) {
    if (gate.is_straggler(w)) {
      const std::size_t target = std::min(clock + *straggler_lead, last_clock);
      gate.hold([&] { return gate.others_reached(target); });
      return;
    }
    const auto micros = static_cast<long>(hpcps::data::uniform_below(rng, 3) == 0 ? hpcps::data::uniform_below(rng, 400) : 0);
    if (micros > 0) std::this_thread::sleep_for(std::chrono::microseconds(micros));
    gate.report(clock);
  };
  const auto report = hpcps::ps::train(ps, data, nullptr, train);
  gate.finish();

  Outcome out;
  out.expected_clocks = last_clock + 1;
  out.pushed = pushes_by_worker(world, ps, report);
  if (ps.is_server()) {
    out.is_server = true;
    out.applied = ps.server().stats().pushes_per_worker;
    out.clocks = ps.server().stats().clocks_per_worker;
    out.max_staleness = ps.server().stats().max_staleness;
  }
  return out;
}

void check_exactly_once(const Outcome& o) {
  if (!o.is_server) return;
  REQUIRE(o.applied.size() == o.pushed.size());
  for (std::size_t w = 0; w < o.pushed.size(); ++w) {
    INFO("worker " << w);
    CHECK(o.pushed[w] > 0);
    CHECK(o.applied[w] == o.pushed[w]);      // no slice lost, none applied twice
    CHECK(o.clocks[w] == o.expected_clocks);  // idle clocks included: every worker finished
  }
}

bool enough_ranks() {
  const auto world = hpcps::comm::Communicator::world();
  if (world.size() < 2) WARN("needs at least 2 ranks (a worker and a server)");
  return world.size() >= 2;
}

}  // namespace

TEST_CASE("every pushed gradient slice is applied exactly once, under every strategy", "[sync][mpi]") {
  if (!enough_ranks()) return;
  // Seed 1 sends each push and reply as 12 pieces of at most 5 floats, seed 2 as one message.
  for (std::uint64_t seed : {1u, 2u}) {
    const std::size_t piece = seed == 1 ? 5 : hpcps::ps::Layout::default_piece_floats;
    SECTION("bsp") { check_exactly_once(train_with_delays(hpcps::sync::Synchronous{}, seed, std::nullopt, piece)); }
    SECTION("ssp s=0") { check_exactly_once(train_with_delays(hpcps::sync::StaleSynchronous(0), seed, std::nullopt, piece)); }
    SECTION("ssp s=2") { check_exactly_once(train_with_delays(hpcps::sync::StaleSynchronous(2), seed, std::nullopt, piece)); }
    SECTION("async") { check_exactly_once(train_with_delays(hpcps::sync::Asynchronous{}, seed, std::nullopt, piece)); }
  }
}

TEST_CASE("the stale-synchronous bound holds and is reached under a straggler", "[sync][mpi]") {
  if (!enough_ranks()) return;
  const auto world = hpcps::comm::Communicator::world();
  const int workers = world.size() - 1;
  for (std::size_t s : {0u, 1u, 2u, 4u}) {
    // The straggler holds at clock c until the others have computed clock c + s: the one that
    // computed it was answered s clocks ahead of the straggler, so the bound is reached for certain.
    const Outcome o = train_with_delays(hpcps::sync::StaleSynchronous(s), 7 + s, s);
    check_exactly_once(o);
    if (o.is_server) {
      INFO("staleness bound " << s << ", " << workers << " worker(s)");
      CHECK(o.max_staleness <= s);
      if (workers > 1) CHECK(o.max_staleness == s);  // the test is not vacuous
    }
  }
  const Outcome async = train_with_delays(hpcps::sync::Asynchronous{}, 11, std::size_t{5});
  check_exactly_once(async);
  if (async.is_server && workers > 1) CHECK(async.max_staleness > 4);  // no bound: 5 clocks ahead
  const Outcome bsp = train_with_delays(hpcps::sync::Synchronous{}, 12, std::size_t{0});
  check_exactly_once(bsp);
  if (bsp.is_server) CHECK(bsp.max_staleness == 0);
}

// Work-conserving asynchronous and stale-synchronous training (TrainOptions::balance = speed): the
// workers draw their parts of the epoch's clocks from a shared counter as they become free.
namespace {

// The network of the tests above, recording which samples it computes a gradient of and at which
// clock: the data's first feature is the sample's index / 100.
struct Recording : Clocked {
  using Clocked::Clocked;
  static inline std::vector<std::pair<std::uint64_t, std::size_t>> seen;  // (clock, sample), this rank
  template <class B, class... Rest>
  hpcps::nn::BatchStats gradient(const B& backend, typename Net::template Workspace<B>& ws, const float* params,
                                 const float* inputs, const std::int32_t* labels, std::size_t count, Rest&&... rest) const {
    for (std::size_t i = 0; i < count; ++i) {
      seen.emplace_back(clock, static_cast<std::size_t>(std::lround(inputs[i * input_size()] * 100.0f)));
    }
    return Net::gradient(backend, ws, params, inputs, labels, count, std::forward<Rest>(rest)...);
  }
};

struct Drawn {
  std::vector<int> uses;              // rank 0: by epoch * samples + sample, how often any worker used it
  std::vector<std::size_t> pushed;    // by worker
  Outcome server;                     // on a server
  hpcps::ps::TrainingReport report;
};

// The straggler of draw_with_delays takes at most one part for every `parts_per_straggler_part`
// the others take between them, per other worker.
constexpr std::size_t parts_per_straggler_part = 8;

// 61 samples, global batch 4 (16 clocks an epoch, the last of one sample), 3 epochs: tickets 0 to
// 48 W - 1, a part of a clock each, handed out in order by server 0 with its replies. Random
// delays on every worker but a straggler. With `straggler` the last worker, after its part c
// (counted from 0), is held until the others have computed k (c + 1) parts between them, k = 8
// (W - 1), or, if that is less, every part they can get while it is held: each ticket not yet
// handed out goes to one of them and is computed, but a stale-synchronous server answers a push
// only while its clock is at most s past the straggler's latest pushed one, p; so every ticket of
// a clock below min(48, p + s) but the straggler's own (at most c + 1 of them).
template <class Sync>
Drawn draw_with_delays(Sync sync, std::uint64_t seed, bool straggler) {
  using Server = hpcps::ParameterServer<Recording, hpcps::backend::Cpu, Sync, hpcps::optim::StandardSgd>;
  const auto world = hpcps::comm::Communicator::world();
  auto data = synthetic(61, 5, 3, seed);
  for (std::size_t i = 0; i < data.count; ++i) data.images[i * data.features] = static_cast<float>(i) / 100.0f;
  typename Server::Options options;
  options.servers = 1;
  options.max_batch = 4;
  options.piece_floats = 5;
  Server ps(world, Recording({5, 6, 3}), hpcps::backend::Cpu(1), options, sync, hpcps::optim::StandardSgd(0.05f));
  const int workers = ps.layout().workers();
  hpcps::ps::TrainOptions train;
  train.epochs = 3;
  train.batch = 4;
  train.seed = seed;
  train.evaluate = false;
  train.balance = hpcps::ps::Balance::speed;
  const std::uint64_t end = train.epochs * hpcps::ps::clocks_per_epoch(data.count, train.batch);
  const auto w_count = static_cast<std::uint64_t>(workers);
  StragglerGate gate(world, workers, straggler ? workers - 1 : -1);
  std::uint64_t pushed_clock = 0;  // the straggler's: the clock its latest push completed (at most)
  hpcps::data::Rng rng(seed * 17 + static_cast<std::uint64_t>(world.rank()));
  train.after_compute = [&](int w, std::size_t part, double) {
    if (gate.is_straggler(w)) {
      // Recording::clock is this part's clock, or an earlier one for an empty part: p too low errs
      // towards a smaller target, never towards a hang.
      const std::uint64_t reachable_clock =
          sync.staleness() >= end - pushed_clock ? end : std::min<std::uint64_t>(end, pushed_clock + sync.staleness());
      const std::uint64_t mine = part + 1, reachable = reachable_clock * w_count;
      const std::uint64_t target = std::min<std::uint64_t>(parts_per_straggler_part * (w_count - 1) * mine,
                                                           reachable > mine ? reachable - mine : 0);
      gate.hold([&] { return gate.others_reports() >= target; });
      pushed_clock = Recording::clock + 1;
      return;
    }
    const long jitter = hpcps::data::uniform_below(rng, 3) == 0 ? static_cast<long>(hpcps::data::uniform_below(rng, 300)) : 0;
    if (jitter > 0) std::this_thread::sleep_for(std::chrono::microseconds(jitter));
    gate.report(part);
  };
  Recording::seen.clear();
  Drawn out;
  out.report = hpcps::ps::train(ps, data, nullptr, train);
  gate.finish();
  const std::size_t clocks = hpcps::ps::clocks_per_epoch(data.count, train.batch);
  std::vector<int> uses(train.epochs * data.count, 0);
  for (const auto& [clock, sample] : Recording::seen) {
    const std::size_t epoch = clock / clocks;
    if (epoch < train.epochs && sample < data.count) ++uses[epoch * data.count + sample];
  }
  world.allreduce_in_place(uses.data(), uses.size(), MPI_SUM);
  out.uses = uses;
  out.pushed = pushes_by_worker(world, ps, out.report);
  if (ps.is_server()) {
    out.server.is_server = true;
    out.server.applied = ps.server().stats().pushes_per_worker;
    out.server.max_staleness = ps.server().stats().max_staleness;
  }
  return out;
}

void check_every_sample_once(const Drawn& d) {
  CAPTURE(d.pushed);
  std::size_t wrong = 0;
  for (int u : d.uses) wrong += u != 1 ? 1 : 0;
  CHECK(wrong == 0);  // every sample of every epoch used by exactly one worker, once
  if (d.server.is_server) {
    for (std::size_t w = 0; w < d.pushed.size(); ++w) CHECK(d.server.applied[w] == d.pushed[w]);
  }
}

// Asynchronous: the others can compute every part the straggler does not hold, so the straggler
// takes a next part only if one is left after its own c + 1 and the others' k (c + 1): it computes
// at most 1 + (48 W - 1) / (k + 1) parts (11, 9, 8 for W = 2, 3, 4), and the others the rest, at
// most 3 (W - 1) of them idle (each epoch's last batch has one sample): the busiest of them pushes
// at least 82, 65, 59 gradients, more than three times as many.
void check_straggler_did_less(const Drawn& d) {
  if (d.pushed.size() < 2) return;
  CAPTURE(d.pushed);
  const std::size_t w = d.pushed.size(), k = parts_per_straggler_part * (w - 1);
  CHECK(d.pushed.back() <= 1 + (48 * w - 1) / (k + 1));
  CHECK(3 * d.pushed.back() < *std::max_element(d.pushed.begin(), d.pushed.end() - 1));
}

}  // namespace

TEST_CASE("drawing workers use every sample of every epoch once, and a fast worker does more", "[sync][mpi][balance]") {
  if (!enough_ranks()) return;
  const auto world = hpcps::comm::Communicator::world();
  const int workers = world.size() - 1;
  for (std::uint64_t seed : {3u, 4u}) {
    INFO(workers << " worker(s), seed " << seed);
    SECTION("async, even speeds") { check_every_sample_once(draw_with_delays(hpcps::sync::Asynchronous{}, seed, false)); }
    SECTION("ssp s=1, even speeds") { check_every_sample_once(draw_with_delays(hpcps::sync::StaleSynchronous(1), seed, false)); }
    SECTION("async, a straggler") {
      const Drawn d = draw_with_delays(hpcps::sync::Asynchronous{}, seed, true);
      check_every_sample_once(d);
      // Work-conserving: the other workers take over most of the straggler's share.
      check_straggler_did_less(d);
    }
    SECTION("ssp s=3, a straggler") {
      // The bound holds the others back too, so how much of the epoch the straggler does depends
      // on where it is held, not on the gate alone: only the bound is checked.
      const Drawn d = draw_with_delays(hpcps::sync::StaleSynchronous(3), seed, true);
      check_every_sample_once(d);
      if (d.server.is_server) CHECK(d.server.max_staleness <= 3);  // in global clocks
    }
  }
}

// Backup workers (TrainOptions::backup_workers): each update sums the first W - b pushes of its
// clock, every later one is dropped, and no push is both.
namespace {

struct Backed {
  std::vector<std::size_t> pushed;  // by worker
  std::vector<std::size_t> applied, dropped;  // on a server, by worker
  std::size_t updates = 0;
  bool is_server = false;
};

// 2 epochs of 16 clocks; every worker but the last sleeps at random after its gradients. The last
// is slow: computing clock g (but the last clock), it is held until some other worker has computed
// a clock of at least g and then another one. That worker's push of its clock >= g was answered
// by every server, and a server answers a push of clock q only once it has updated q (with it, or
// without it as a late one): so every server has updated g before the slow worker pushes it, and
// that push comes too late. Reachable: server 0 updates g from the others' pushes alone (W - b <=
// W - 1 of them; the slow one has pushed every clock before g, and every server has answered it),
// a second server updates every clock server 0 did (its W - b workers pushed it there too), and the
// workers it counted then compute g + 1.
Backed train_with_backups(std::size_t backups, std::uint64_t seed, int servers) {
  using Server = hpcps::ParameterServer<Clocked, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::StandardSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const auto data = synthetic(64, 5, 3, seed);  // 16 full clocks an epoch for every W <= 4: no empty part
  Server::Options options;
  options.servers = servers;
  options.max_batch = 4;
  options.piece_floats = 5;
  options.shared_memory = false;
  Server ps(world, Clocked({5, 6, 3}), hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.05f));
  const int workers = ps.layout().workers();
  hpcps::ps::TrainOptions train;
  train.epochs = 2;
  train.batch = 4;
  train.seed = seed;
  train.evaluate = false;
  train.backup_workers = backups;
  const std::uint64_t last_clock = train.epochs * hpcps::ps::clocks_per_epoch(data.count, train.batch) - 1;
  StragglerGate gate(world, workers, workers - 1);
  hpcps::data::Rng rng(seed * 13 + static_cast<std::uint64_t>(world.rank()));
  // A ticketed worker skips the clocks its late pushes missed: its clock is the network's.
  train.after_compute = [&](int w, std::size_t, double) {
    const std::uint64_t g = Clocked::clock;
    if (gate.is_straggler(w)) {
      if (g == last_clock) return;
      gate.hold([&] {
        for (const auto& clocks : gate.reports()) {
          if (clocks.size() >= 2 && clocks[clocks.size() - 2] >= g) return true;
        }
        return false;
      });
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(hpcps::data::uniform_below(rng, 400)));
    gate.report(g);
  };
  const auto report = hpcps::ps::train(ps, data, nullptr, train);
  gate.finish();
  Backed out;
  out.pushed = pushes_by_worker(world, ps, report);
  if (ps.is_server()) {
    out.is_server = true;
    out.applied = ps.server().stats().pushes_per_worker;
    out.dropped = ps.server().stats().dropped_per_worker;
    out.updates = ps.server().stats().updates;
  }
  return out;
}

}  // namespace

TEST_CASE("with backup workers each update sums the first W - b pushes and drops the late ones", "[sync][mpi]") {
  if (!enough_ranks()) return;
  const auto world = hpcps::comm::Communicator::world();
  for (const int servers : {1, 2}) {
    const int workers = world.size() - servers;
    if (workers < 2) continue;
    for (std::size_t b = 1; b < static_cast<std::size_t>(workers); ++b) {
      INFO(workers << " workers, " << servers << " server(s), " << b << " backup(s)");
      const Backed o = train_with_backups(b, 5 + b, servers);
      if (!o.is_server) continue;
      CAPTURE(o.pushed, o.applied, o.dropped);
      std::size_t applied = 0;
      for (std::size_t w = 0; w < o.pushed.size(); ++w) {
        CHECK(o.applied[w] + o.dropped[w] == o.pushed[w]);  // every push applied or dropped, once
        applied += o.applied[w];
      }
      CHECK(o.updates == 2 * 16);  // every clock updated once
      // One server sees no push early: exactly W - b per update. Two may count an early one too.
      if (servers == 1) CHECK(applied == o.updates * (static_cast<std::size_t>(workers) - b));
      else CHECK(applied >= o.updates * (static_cast<std::size_t>(workers) - b));
      // The slow worker's pushes came too late, all but one of the last clock: its first, of
      // clock 0, at least. So it is applied less than the busiest other worker (with W - b = 1
      // only the first push of each clock counts, and which worker that is depends on the
      // machine: any but the slow one).
      CHECK(o.dropped.back() > 0);
      CHECK(o.applied.back() <= 1);
      CHECK(o.applied.back() < *std::max_element(o.applied.begin(), o.applied.end() - 1));
    }
  }
}

TEST_CASE("backup workers refuse a composition they cannot serve, in one sentence", "[sync][mpi][errors]") {
  const auto world = hpcps::comm::Communicator::world();
  if (world.size() < 3) return;
  using Server = hpcps::ParameterServer<Net, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::StandardSgd>;
  Server::Options options;
  options.servers = 1;
  options.max_batch = 4;  // shared memory on: one node
  Server ps(world, Net({5, 6, 3}), hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.05f));
  hpcps::ps::TrainOptions train;
  train.batch = 4;
  train.backup_workers = 1;
  static const auto data = synthetic(16, 5, 3, 1);
  if (ps.uses_shared_memory()) {
    CHECK_THROWS_WITH(hpcps::ps::train(ps, data, nullptr, train),
                      Catch::Contains("backup workers need a dedicated server and point-to-point pushes"));
  }
  train.backup_workers = static_cast<std::size_t>(world.size());
  CHECK_THROWS_WITH(hpcps::ps::train(ps, data, nullptr, train), Catch::Contains("leave none to wait for"));
}
