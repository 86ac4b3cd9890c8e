// Synchronization strategies under mpiexec, with workers slowed at random (fixed seeds) through
// the after-compute hook: every gradient slice is applied exactly once, the stale-synchronous
// bound holds (and is reached), and every strategy ends cleanly with uneven parts and idle pushes.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "hpcps/hpcps.hpp"
#include "synthetic_data.hpp"

static_assert(hpcps::sync::is_sync_v<hpcps::sync::Synchronous>);
static_assert(hpcps::sync::is_sync_v<hpcps::sync::StaleSynchronous>);
static_assert(hpcps::sync::is_sync_v<hpcps::sync::Asynchronous>);
static_assert(!hpcps::sync::is_sync_v<hpcps::optim::Adam>);

namespace {

using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;

using hpcps_test::synthetic;

struct Outcome {
  std::vector<std::size_t> pushed;   // by worker: gradient slices each worker pushed (to every server)
  std::vector<std::size_t> applied;  // on a server: slices it applied, by worker
  std::vector<std::size_t> clocks;   // on a server: pushes received, by worker
  std::size_t max_staleness = 0;     // on a server
  std::size_t expected_clocks = 0;
  bool is_server = false;
};

// Trains on 61 samples with a global batch of 4 (uneven parts for 3 workers; the epoch's last
// batch of one sample leaves the other workers idle); worker w
// sleeps at random after its gradients, and the last worker is a steady straggler if asked.
template <class Sync>
Outcome train_with_delays(Sync sync, std::uint64_t seed, bool straggler, std::size_t piece_floats = 5) {
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
  hpcps::data::Rng rng(seed * 31 + static_cast<std::uint64_t>(world.rank()));
  train.after_compute = [&](int w, std::size_t, double) {
    const bool slow = straggler && w == workers - 1;
    const auto micros = slow ? 1500 : static_cast<long>(hpcps::data::uniform_below(rng, 3) == 0 ? hpcps::data::uniform_below(rng, 400) : 0);
    if (micros > 0) std::this_thread::sleep_for(std::chrono::microseconds(micros));
  };
  const auto report = hpcps::ps::train(ps, data, nullptr, train);

  Outcome out;
  out.expected_clocks = train.epochs * hpcps::ps::clocks_per_epoch(data.count, train.batch);
  std::vector<std::size_t> mine(static_cast<std::size_t>(world.size()), 0);
  const std::size_t pushed = ps.is_worker() ? report.gradient_pushes : 0;
  world.allgather(&pushed, 1, mine.data());
  out.pushed.assign(mine.begin(), mine.begin() + workers);
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
    SECTION("bsp") { check_exactly_once(train_with_delays(hpcps::sync::Synchronous{}, seed, false, piece)); }
    SECTION("ssp s=0") { check_exactly_once(train_with_delays(hpcps::sync::StaleSynchronous(0), seed, false, piece)); }
    SECTION("ssp s=2") { check_exactly_once(train_with_delays(hpcps::sync::StaleSynchronous(2), seed, false, piece)); }
    SECTION("async") { check_exactly_once(train_with_delays(hpcps::sync::Asynchronous{}, seed, false, piece)); }
  }
}

TEST_CASE("the stale-synchronous bound holds and is reached under a straggler", "[sync][mpi]") {
  if (!enough_ranks()) return;
  const auto world = hpcps::comm::Communicator::world();
  const int workers = world.size() - 1;
  for (std::size_t s : {0u, 1u, 2u, 4u}) {
    const Outcome o = train_with_delays(hpcps::sync::StaleSynchronous(s), 7 + s, true);
    check_exactly_once(o);
    if (o.is_server) {
      INFO("staleness bound " << s << ", " << workers << " worker(s)");
      CHECK(o.max_staleness <= s);
      // With a steady straggler, the other workers run ahead to the bound: the test is not vacuous.
      if (workers > 1) CHECK(o.max_staleness == s);
    }
  }
  const Outcome async = train_with_delays(hpcps::sync::Asynchronous{}, 11, true);
  check_exactly_once(async);
  if (async.is_server && workers > 1) CHECK(async.max_staleness > 4);  // no bound: far ahead
  const Outcome bsp = train_with_delays(hpcps::sync::Synchronous{}, 12, true);
  check_exactly_once(bsp);
  if (bsp.is_server) CHECK(bsp.max_staleness == 0);
}
