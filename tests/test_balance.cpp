// Balancing the synchronous strategy (ps/balance.hpp): the proportional split in whole samples,
// and under mpiexec a slower worker's share shrinking while every sample of every epoch is still
// used once and the update stays minibatch SGD over the same global batches; equal speeds keep
// the static split and its bits. The balancer counts fake seconds (TrainOptions::balance_seconds),
// so what it decides does not depend on the machine's load. (Asynchronous and stale-synchronous
// workers balance by drawing their work: tests/test_sync.cpp.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "hpcps/hpcps.hpp"
#include "ps_reference.hpp"
#include "synthetic_data.hpp"

namespace {

using hpcps::ps::proportional_split;
using hpcps_test::difference_over_largest;
using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;
using Ps = hpcps::ParameterServer<Net, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::MomentumSgd>;

std::size_t sum(const std::vector<std::size_t>& v) { return std::accumulate(v.begin(), v.end(), std::size_t{0}); }

}  // namespace

TEST_CASE("proportional_split: whole samples, in proportion, within the bounds", "[balance]") {
  CHECK(proportional_split(24, {1.0, 1.0, 1.0}, 1, 24) == std::vector<std::size_t>{8, 8, 8});
  CHECK(proportional_split(25, {1.0, 1.0, 1.0}, 1, 25) == std::vector<std::size_t>{9, 8, 8});  // ties: lower index
  CHECK(proportional_split(24, {4.0, 4.0, 1.0}, 1, 24) == std::vector<std::size_t>{11, 10, 3});  // 10.67, 10.67, 2.67
  CHECK(proportional_split(24, {1.0, 0.0}, 1, 24) == std::vector<std::size_t>{23, 1});  // at least one sample each
  CHECK(proportional_split(24, {10.0, 1.0, 1.0}, 1, 12) == std::vector<std::size_t>{12, 6, 6});  // capped, rest shared
  CHECK(proportional_split(2, {1.0, 1.0, 1.0}, 1, 2) == std::vector<std::size_t>{1, 1, 0});  // fewer samples than parts
  CHECK(proportional_split(7, {1.0, 1.0, 1.0}, 1, 1) == std::vector<std::size_t>{3, 2, 2});  // a cap under the mean
  for (std::size_t total : {1u, 5u, 64u, 1000u}) {
    for (const auto& weights : {std::vector<double>{1, 2, 3, 4}, std::vector<double>{0.01, 5, 5, 0.2}}) {
      const auto split = proportional_split(total, weights, 1, total);
      CHECK(sum(split) == total);
      if (total >= 4) CHECK(*std::min_element(split.begin(), split.end()) >= 1);
      for (std::size_t p = 0; p < split.size(); ++p) {
        const double exact = static_cast<double>(total) * weights[p] / std::accumulate(weights.begin(), weights.end(), 0.0);
        CHECK(std::abs(static_cast<double>(split[p]) - exact) < 2.0);  // one for rounding, one for the floor
      }
    }
  }
}

namespace {

// Two epochs of 301 samples in global batches of 24 (13 clocks each). The balancer counts 2^-10 s
// per sample of a gradient, `slow` times that on the last worker: speeds of 1024 and 1024 / slow
// samples per second, whatever the machine does. With a `pause_period` the last worker also
// counts `pause_seconds` in the clocks c with c % pause_period in `paused_clocks`: stopped from
// outside during that clock's gradient.
hpcps::ps::TrainingReport train(const hpcps::comm::Communicator& world, int servers, hpcps::ps::Balance balance,
                                double slow, std::vector<float>& parameters, std::size_t pause_period = 0,
                                std::vector<std::size_t> paused_clocks = {}, double pause_seconds = 0.0,
                                std::size_t epochs = 2,
                                std::function<double(int, std::size_t, std::size_t, double)> counted = {}) {
  static const auto data = hpcps_test::synthetic(301, 64, 4, 7);
  hpcps::ps::TrainOptions t;
  t.epochs = epochs;
  t.batch = 24;
  t.seed = 4;
  t.evaluate = false;
  t.balance = balance;
  const int workers = servers == 0 ? world.size() : world.size() - servers;
  t.balance_seconds = [workers, slow, pause_period, paused_clocks, pause_seconds](int w, std::size_t clock,
                                                                                 std::size_t samples, double) {
    const bool paused = w == workers - 1 && pause_period > 0 &&
                        std::count(paused_clocks.begin(), paused_clocks.end(), clock % pause_period) > 0;
    return std::ldexp(static_cast<double>(samples) * (w == workers - 1 ? slow : 1.0), -10) + (paused ? pause_seconds : 0.0);
  };
  if (counted) t.balance_seconds = std::move(counted);  // a test's own count instead
  Ps::Options o;
  o.servers = servers;
  o.max_batch = t.batch;  // a balanced part may be up to the whole batch
  Ps ps(world, Net({64, 384, 384, 4}), hpcps::backend::Cpu(1), o, {}, hpcps::optim::MomentumSgd(0.05f));
  const auto report = hpcps::ps::train(ps, data, nullptr, t);
  if (ps.is_worker()) parameters = ps.worker().parameters();
  return report;
}

std::vector<int> layouts(int ranks) {
  std::vector<int> servers{0};  // colocated
  if (ranks >= 3) servers.push_back(1);
  return servers;
}

// The layouts with at least two workers: none on one rank.
std::vector<int> layouts_of_two_workers(const hpcps::comm::Communicator& world) {
  if (world.size() < 2) {
    WARN("needs two workers");
    return {};
  }
  return layouts(world.size());
}

}  // namespace

TEST_CASE("a slowed worker gets a smaller part, every sample is still used once, and the update is the same SGD",
          "[balance][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  for (const int servers : layouts_of_two_workers(world)) {
    const int workers = servers == 0 ? world.size() : world.size() - servers;
    INFO(workers << " workers, " << servers << " servers");
    std::vector<float> fixed, balanced;
    const auto plain = train(world, servers, hpcps::ps::Balance::none, 5.0, fixed);
    const auto report = train(world, servers, hpcps::ps::Balance::speed, 5.0, balanced);
    if (world.rank() != 0) continue;
    REQUIRE(!report.splits.empty());
    CHECK(plain.splits.empty());
    const auto& first = report.splits.front().split;
    const auto& last = report.splits.back().split;
    CHECK(report.splits.front().clock == 0);
    CHECK(first[static_cast<std::size_t>(workers - 1)] == hpcps::ps::worker_batch(24, workers - 1, workers));
    CAPTURE(last);
    CHECK(sum(last) == 24);
    CHECK(last.back() >= 1);
    CHECK(last.back() < first.back());  // the slow worker's part shrank
    // Once, to the split of the counted speeds, 5:1 (24 samples: 12/12 became 19/5, 8/8/8
    // 11/10/3, each part at least one sample first), after a window of 20 full clocks to compare
    // the new split's clocks with; the same speeds every clock never move it again.
    std::vector<double> speeds(static_cast<std::size_t>(workers), 5.0);
    speeds.back() = 1.0;
    CHECK(last == proportional_split(24, speeds, 1, 24));
    CHECK(report.splits.size() == 2);
    for (const auto& change : report.splits) CHECK(sum(change.split) == 24);
    for (const auto& e : report.epochs) CHECK(e.samples == 301);  // every sample, once per epoch
    // The same global batches in the same order: the same SGD, up to the order of fp32 sums.
    CHECK(difference_over_largest(balanced, fixed) < 1e-5);
  }
}

TEST_CASE("equal speeds keep the static split, and then its bits", "[balance][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  for (const int servers : layouts(world.size())) {
    if (servers == 0 && world.size() == 1) continue;
    INFO(servers << " servers");
    std::vector<float> fixed, balanced;
    train(world, servers, hpcps::ps::Balance::none, 1.0, fixed);
    const auto report = train(world, servers, hpcps::ps::Balance::speed, 1.0, balanced);
    if (world.rank() != 0) continue;
    CAPTURE(report.splits.size());
    CHECK(report.splits.size() == 1);  // equal counted speeds never move the split
    CHECK(balanced == fixed);          // so the balanced run is the static one, bit for bit
  }
}

TEST_CASE("a worker paused for longer than a clock loses samples only when the pauses fall in most clocks",
          "[balance][mpi]") {
  // Unpaused, every worker takes 2^-10 s a sample; in some clocks the last one also stops for 16
  // times an equal part's time (as from SIGSTOP, or a preempting job). A paused clock ends with
  // the pause whatever that worker's part, so moving samples to the others shortens no paused
  // clock and lengthens the unpaused ones: in 1 of every 4 clocks the split should stay static
  // (a mean of speeds, or samples over summed seconds, moved it to 14/10 of 24 with 2 workers and
  // 9/8/7 with 3); in 3 of every 4 the paused worker's part should fall to the floor (a mean of
  // speeds stopped at 19/5 and 11/11/2).
  const auto world = hpcps::comm::Communicator::world();
  for (const int servers : layouts_of_two_workers(world)) {
    const int workers = servers == 0 ? world.size() : world.size() - servers;
    INFO(workers << " workers, " << servers << " servers");
    const double part_seconds = std::ldexp(24.0 / workers, -10);
    std::vector<float> fixed, balanced;
    {
      INFO("paused in 1 of every 4 clocks");
      train(world, servers, hpcps::ps::Balance::none, 1.0, fixed, 4, {3}, 16 * part_seconds);
      const auto report = train(world, servers, hpcps::ps::Balance::speed, 1.0, balanced, 4, {3}, 16 * part_seconds);
      if (world.rank() == 0) {
        CHECK(report.splits.size() == 1);
        CHECK(balanced == fixed);  // the static split throughout, so its bits
      }
    }
    {
      INFO("paused in 3 of every 4 clocks");
      // 6 epochs: the part falls in two steps (22/2, then 23/1 of 24 with 2 workers: the floor
      // first, then a share of the rest), each after a window of 20 full clocks, the second
      // after the first one's trial.
      train(world, servers, hpcps::ps::Balance::none, 1.0, fixed, 4, {0, 1, 2}, 16 * part_seconds, 6);
      const auto report =
          train(world, servers, hpcps::ps::Balance::speed, 1.0, balanced, 4, {0, 1, 2}, 16 * part_seconds, 6);
      if (world.rank() == 0) {
        REQUIRE(report.splits.size() >= 2);
        const auto& last = report.splits.back().split;
        CAPTURE(last, report.splits.size());
        CHECK(sum(last) == 24);
        CHECK(last.back() == 1);  // the floor: at least one sample each
        for (const auto& e : report.epochs) CHECK(e.samples == 301);
        CHECK(difference_over_largest(balanced, fixed) < 1e-5);
      }
    }
  }
}

TEST_CASE("a worker's part is timed from the clock's release to its push's arrival, so a delay outside its compute counts",
          "[balance][mpi]") {
  // The last worker stops for 20 ms after every even clock, between its pull and its next
  // gradient, as a process stopped from outside would: its own compute time does not hold the
  // stop, the time server 0 sees its next part take must (it cannot push before it resumes). Its
  // counted seconds stay those of equal speeds, so the split stays static. Only lower bounds are
  // checked: load can lengthen what is measured, never shorten it.
  const auto world = hpcps::comm::Communicator::world();
  static constexpr double stop = 0.02;
  for (const int servers : layouts(world.size())) {
    const int workers = servers == 0 ? world.size() : world.size() - servers;
    INFO(workers << " workers, " << servers << " servers");
    std::vector<double> measured;
    std::vector<float> parameters;
    const auto report = train(world, servers, hpcps::ps::Balance::speed, 1.0, parameters, 0, {}, 0.0, 1,
                              [&measured, workers](int w, std::size_t clock, std::size_t samples, double seconds) {
                                if (w == workers - 1) {
                                  measured.push_back(seconds);
                                  if (clock % 2 == 0) std::this_thread::sleep_for(std::chrono::duration<double>(stop));
                                }
                                return std::ldexp(static_cast<double>(samples), -10);
                              });
    if (measured.empty()) continue;  // not the last worker
    REQUIRE(measured.size() == 13);  // 301 samples in batches of 24
    for (std::size_t c = 0; c < measured.size(); ++c) {
      CAPTURE(c, measured[c]);
      CHECK(measured[c] > 0.0);                   // a push comes after its clock's release
      if (c % 2 == 1) CHECK(measured[c] >= stop);  // after a stop that fell outside the compute
    }
    if (world.rank() == 0) CHECK(report.splits.size() == 1);  // equal counted speeds: the static split
  }
}

TEST_CASE("a new split that does not shorten the clocks is taken back", "[balance][mpi]") {
  // The last worker is counted a whole second every clock, whatever its part (as a worker stopped
  // for longer than any clock, or a colocated rank whose shard every clock waits for): its speed
  // says it should have fewer samples, so the split moves, but the clock stays a second. After
  // 20 full clocks to compare with and the trial of 20 more, the static split comes back, and
  // stays for the hold that follows.
  const auto world = hpcps::comm::Communicator::world();
  for (const int servers : layouts_of_two_workers(world)) {
    const int workers = servers == 0 ? world.size() : world.size() - servers;
    INFO(workers << " workers, " << servers << " servers");
    const auto one_second = [workers](int w, std::size_t, std::size_t samples, double) {
      return w == workers - 1 ? 1.0 : std::ldexp(static_cast<double>(samples), -10);
    };
    std::vector<float> fixed, balanced;
    train(world, servers, hpcps::ps::Balance::none, 1.0, fixed, 0, {}, 0.0, 4, one_second);
    const auto report = train(world, servers, hpcps::ps::Balance::speed, 1.0, balanced, 0, {}, 0.0, 4, one_second);
    if (world.rank() != 0) continue;
    const auto& splits = report.splits;
    REQUIRE(splits.size() == 3);
    // Clocks 12, 25, 38 and 51 are epochs' short last ones, which do not count: the window is full
    // with clock 20, the trial with clock 43, and each is learnt 2 clocks later.
    CHECK(splits[1].clock == 22);
    CHECK(splits[1].split.back() < splits[0].split.back());
    CHECK(splits[2].clock == 45);
    CHECK(splits[2].split == splits[0].split);
    for (const auto& e : report.epochs) CHECK(e.samples == 301);  // 4 epochs
    CHECK(difference_over_largest(balanced, fixed) < 1e-5);
  }
}
