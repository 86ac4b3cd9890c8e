// Scaled-sign pulls with error feedback on the servers (ParameterServer Options::sign_pull,
// ps/sign_pull.hpp): a message carries each block's mean magnitude of (parameters - view) with
// each element's sign, and the view takes exactly what the worker adds; each pull shrinks the
// distance to the parameters by n s^2 a block, so repeated pulls bring a worker the server's
// parameters; through the parameter server, in every strategy, each worker's parameters are the
// server's view of it bit for bit, and idle clocks bring them to the master copy (nothing of an
// update is lost); the compositions it cannot serve are refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "hpcps/hpcps.hpp"

#include "error_feedback.hpp"
#include "synthetic_data.hpp"
#include "train_clocks.hpp"

namespace {

double squared_distance(const std::vector<float>& a, const std::vector<float>& b, std::size_t begin, std::size_t end) {
  double sum = 0.0;
  for (std::size_t i = begin; i < end; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    sum += d * d;
  }
  return sum;
}

}  // namespace

TEST_CASE("a scaled-sign pull sends each block's mean distance and the view takes what the worker adds",
          "[sign_pull]") {
  using hpcps::ps::sign_block;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const std::size_t n : {std::size_t{1}, std::size_t{33}, sign_block, sign_block + 1, 2 * sign_block + 77}) {
    INFO("n = " << n);
    std::vector<float> parameters(n), view(n);
    for (std::size_t i = 0; i < n; ++i) {
      // Blocks of very different magnitude: each must get its own scale.
      const float magnitude = i / sign_block % 2 == 0 ? 1.0f : 1e-3f;
      view[i] = normal(rng) * magnitude;
      parameters[i] = view[i] + 0.1f * normal(rng) * magnitude;
    }
    parameters[0] = view[0];  // no difference: sends +scale
    std::vector<float> worker(view);  // the worker holds what the server thinks it holds
    const std::vector<float> before(view);
    std::vector<std::uint32_t> message(hpcps::ps::sign_pull_words(n) + 1, 0xFFFFFFFFu);  // one past: untouched
    hpcps::ps::compress_sign_pull(parameters.data(), view.data(), n, message.data());
    CHECK(message.back() == 0xFFFFFFFFu);
    hpcps::ps::add_sign_pull(message.data(), n, worker.data());
    CHECK(worker == view);  // bit for bit
    std::size_t wrong = 0;
    for (std::size_t b = 0; b * sign_block < n; ++b) {
      const std::size_t begin = b * sign_block, end = std::min(n, begin + sign_block);
      std::array<double, 8> lane{};
      for (std::size_t i = begin; i < end; ++i) {
        lane[(i - begin) % 8] += std::fabs(static_cast<double>(parameters[i] - before[i]));
      }
      const double total = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
      const auto scale = static_cast<float>(total / static_cast<double>(end - begin));
      CHECK(hpcps::ps::wire::float_of(message[b]) == scale);
      for (std::size_t i = begin; i < end; ++i) {
        const float step = std::signbit(parameters[i] - before[i]) ? -scale : scale;
        if (view[i] != before[i] + step) ++wrong;  // the sign travelled, with its block's scale
      }
      // |p - v|^2 shrinks by n s^2, up to the roundings of the view's additions.
      const double shrunk = squared_distance(parameters, before, begin, end) -
                            static_cast<double>(end - begin) * static_cast<double>(scale) * scale;
      CHECK(squared_distance(parameters, view, begin, end) ==
            Approx(shrunk).epsilon(1e-3).margin(1e-12 * squared_distance(parameters, before, begin, end)));
    }
    CHECK(wrong == 0);
    if (n % 32 != 0) CHECK((message[hpcps::ps::sign_pull_words(n) - 1] >> (n % 32)) == 0u);
  }
}

TEST_CASE("repeated scaled-sign pulls bring the view to the parameters", "[sign_pull]") {
  const std::size_t n = 3 * hpcps::ps::sign_block + 5;
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> parameters(n), view(n, 0.0f);
  for (float& p : parameters) p = normal(rng);
  std::vector<std::uint32_t> message(hpcps::ps::sign_pull_words(n));
  const double start = squared_distance(parameters, view, 0, n);
  double previous = start;
  bool shrinking = true;
  for (int pull = 0; pull < 300; ++pull) {
    hpcps::ps::compress_sign_pull(parameters.data(), view.data(), n, message.data());
    const double now = squared_distance(parameters, view, 0, n);
    shrinking = shrinking && (now <= previous || now < 1e-10 * start);
    previous = now;
  }
  CHECK(shrinking);
  // Slowly at the end (elements smaller than their block's scale swing around zero), but surely.
  CHECK(previous < 1e-3 * start);
}

TEST_CASE("a pull of two passes is two pulls in one message and leaves less behind", "[sign_pull]") {
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const std::size_t n : {std::size_t{7}, 2 * hpcps::ps::sign_block + 77}) {
    INFO("n = " << n);
    std::vector<float> parameters(n), view(n);
    for (std::size_t i = 0; i < n; ++i) {
      view[i] = normal(rng);
      parameters[i] = view[i] + 0.1f * normal(rng);
    }
    std::vector<float> once(view), twice(view), worker(view);
    const std::size_t words = hpcps::ps::sign_pull_words(n);
    CHECK(hpcps::ps::sign_pull_words(n, 2) == 2 * words);
    std::vector<std::uint32_t> separate(2 * words), together(2 * words + 1, 0xFFFFFFFFu);
    hpcps::ps::compress_sign_pull(parameters.data(), once.data(), n, separate.data());
    const double after_one = squared_distance(parameters, once, 0, n);
    hpcps::ps::compress_sign_pull(parameters.data(), once.data(), n, separate.data() + words);
    hpcps::ps::compress_sign_pull(parameters.data(), twice.data(), n, together.data(), 2);
    CHECK(together.back() == 0xFFFFFFFFu);
    together.pop_back();
    CHECK(together == separate);
    CHECK(twice == once);
    hpcps::ps::add_sign_pull(together.data(), n, worker.data(), 2);
    CHECK(worker == twice);  // bit for bit
    CHECK(squared_distance(parameters, twice, 0, n) < after_one);
  }
}

TEST_CASE("a diverged model stays visible through a scaled-sign pull", "[sign_pull]") {
  std::vector<float> parameters{1.0f, std::numeric_limits<float>::quiet_NaN(), -2.0f}, view(3, 0.0f), worker(3, 0.0f);
  std::vector<std::uint32_t> message(hpcps::ps::sign_pull_words(3));
  hpcps::ps::compress_sign_pull(parameters.data(), view.data(), 3, message.data());
  hpcps::ps::add_sign_pull(message.data(), 3, worker.data());
  CHECK(std::isnan(worker[0]));
  CHECK(std::isnan(worker[2]));
}

namespace {

// Collective: `steps` clocks with data, then `idle` clocks without, pulls as scaled signs, pushes
// dense or as scaled signs; then every server checks that each worker holds its view of that
// worker bit for bit, and, after the idle clocks, the master copy up to `tolerance` of its
// largest magnitude (where no other worker pushes after them).
template <class Sync>
void check_views(std::size_t parameters, std::size_t piece, bool sign_push, std::size_t idle, double tolerance,
                 unsigned passes = 1) {
  using Net = hpcps_test::FixedGradient;
  using Server = hpcps::ParameterServer<Net, hpcps::backend::Cpu, Sync, hpcps::optim::MomentumSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const Net net(parameters, 8);
  const std::size_t b = 3, steps = 7;
  typename Server::Options options;
  options.servers = Sync::aggregates ? 0 : 1;
  options.max_batch = b;
  options.seed = 5;
  options.piece_floats = piece;
  options.sign_push = sign_push;
  options.sign_pull = true;
  options.sign_pull_passes = passes;
  Server ps(world, net, hpcps::backend::Cpu(1), options, Sync{}, hpcps::optim::MomentumSgd(0.05f));
  const auto workers = static_cast<std::size_t>(ps.layout().workers());
  const auto data = hpcps_test::dyadic(steps * b * workers, net.input_size());
  const hpcps_test::Trained trained = hpcps_test::train_clocks(ps, data, b, steps, idle);
  INFO(Sync::name << ", " << parameters << " parameters in pieces of " << piece << (sign_push ? ", sign pushes" : "")
                  << ", " << idle << " idle clocks, " << passes << " pass(es)");
  const std::size_t n = net.parameter_count();
  for (std::size_t w = 0; w < workers; ++w) {
    std::vector<float> held(n);
    const int rank = ps.layout().worker_rank(static_cast<int>(w));
    if (world.rank() == rank) held = trained.worker;
    world.broadcast(held.data(), n, rank);
    if (!ps.is_server()) continue;
    const auto range = trained.range;
    const float* view = ps.server().pull_view(w);
    const std::vector<float>& master = trained.master;
    std::size_t unequal = 0;
    double largest = 0.0, farthest = 0.0;
    for (std::size_t i = 0; i < range.size(); ++i) {
      if (view[i] != held[range.begin + i]) ++unequal;
      largest = std::max(largest, std::fabs(static_cast<double>(master[i])));
      farthest = std::max(farthest, std::fabs(static_cast<double>(master[i]) - held[range.begin + i]));
    }
    INFO("worker " << w);
    CHECK(unequal == 0);
    if (idle == 0) {
      CHECK(farthest > 1e-4 * largest);  // trained and not idle: a pull leaves a rest behind
    } else if (Sync::aggregates || workers == 1) {
      // Not with several individually served workers: one may still push after another's last pull.
      CHECK(farthest <= tolerance * largest);
    }
  }
  world.barrier();
}

}  // namespace

TEST_CASE("scaled-sign pulls keep every worker equal to the server's view and lose nothing in every strategy",
          "[sign_pull][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  constexpr std::size_t block = hpcps::ps::sign_block;
  // Pieces of a fraction of a block, and of several (a short block last).
  const std::pair<std::size_t, std::size_t> shapes[] = {{53, 10}, {2 * block + 77, 3 * block}};
  for (const auto& [parameters, piece] : shapes) {
    for (const bool sign_push : {false, true}) {
      check_views<hpcps::sync::Synchronous>(parameters, piece, sign_push, 0, 0.0);
      check_views<hpcps::sync::Synchronous>(parameters, piece, sign_push, 60, 1e-5);
      if (world.size() < 2) continue;  // a dedicated server and a worker
      check_views<hpcps::sync::Asynchronous>(parameters, piece, sign_push, 0, 0.0);
      check_views<hpcps::sync::Asynchronous>(parameters, piece, sign_push, 60, 1e-5);
      check_views<hpcps::sync::StaleSynchronous>(parameters, piece, sign_push, 60, 1e-5);
    }
  }
  // Two passes a pull: the same invariants, a message twice as long.
  check_views<hpcps::sync::Synchronous>(2 * block + 77, 3 * block, true, 0, 0.0, 2);
  check_views<hpcps::sync::Synchronous>(2 * block + 77, 3 * block, true, 60, 1e-5, 2);
  if (world.size() >= 2) check_views<hpcps::sync::Asynchronous>(53, 10, true, 0, 0.0, 2);
}

TEST_CASE("scaled-sign pulls train a network as dense pulls do", "[sign_pull][mpi]") {
  // Not bit for bit: the workers compute on parameters that trail the servers'.
  using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;
  using Server = hpcps::ParameterServer<Net, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::MomentumSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const Net net({8, 16, 3});
  const std::size_t b = 8, steps = 150;
  const auto workers = static_cast<std::size_t>(world.size());
  auto data = hpcps_test::synthetic(steps * b * workers, net.input_size(), net.output_size(), 29);
  for (std::size_t s = 0; s < data.count; ++s) {  // a class a linear rule picks: learnable
    const float* x = data.images.data() + s * data.features;
    float score[3] = {0.0f, 0.0f, 0.0f};
    for (std::size_t i = 0; i < data.features; ++i) {
      for (int c = 0; c < 3; ++c) score[c] += x[i] * static_cast<float>(static_cast<int>((i + c) % 3) - 1);
    }
    data.labels[s] = static_cast<std::int32_t>(std::max_element(score, score + 3) - score);
  }
  double losses[2] = {0.0, 0.0};
  for (const bool sign_pull : {false, true}) {
    Server::Options options;
    options.servers = 0;  // colocated: every rank a worker
    options.max_batch = b;
    options.seed = 3;
    options.sign_pull = sign_pull;
    options.local_shortcut = false;
    Server ps(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::MomentumSgd(0.05f));
    auto& worker = ps.worker();
    worker.start();
    double last = 0.0;  // the last 20 clocks' mean loss, summed over workers below
    for (std::size_t t = 0; t < steps; ++t) {
      const std::size_t first = (t * workers + static_cast<std::size_t>(ps.worker_index())) * b;
      const auto stats = worker.step(data.images.data() + first * data.features, data.labels.data() + first, b);
      if (t + 20 >= steps) last += stats.mean_loss() / 20.0;
    }
    worker.finish();
    world.allreduce_in_place(&last, 1, MPI_SUM);
    losses[sign_pull ? 1 : 0] = last / static_cast<double>(workers);
  }
  INFO("dense pulls " << losses[0] << ", scaled-sign pulls " << losses[1]);
  // Both learn the task (chance is log 3); the signs more slowly: this network's 195 parameters
  // share one scale, the first layer's weights and the last one's biases alike.
  CHECK(losses[0] < 0.5 * std::log(3.0));
  CHECK(losses[1] < 0.5 * std::log(3.0));
}

TEST_CASE("scaled-sign pulls refuse a 16-bit pull wire, passes out of range and backup workers on every rank",
          "[sign_pull][mpi]") {
  using Net = hpcps::nn::Mlp<hpcps::nn::Relu>;
  using Server = hpcps::ParameterServer<Net, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::StandardSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const Net net({6, 4, 2});
  Server::Options options;
  options.servers = world.size() > 1 ? 1 : 0;
  options.max_batch = 4;
  options.sign_pull = true;
  options.pull_wire = hpcps::ps::WireFormat::fp16;
  CHECK_THROWS_WITH(Server(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.1f)),
                    Catch::Contains("scaled-sign pull") && Catch::Contains("not fp16"));
  options.pull_wire = hpcps::ps::WireFormat::fp32;
  for (const unsigned passes : {0u, 5u}) {
    options.sign_pull_passes = passes;
    CHECK_THROWS_WITH(Server(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.1f)),
                      Catch::Contains("sign_pull_passes = " + std::to_string(passes)) && Catch::Contains("1 to 4"));
  }
  options.sign_pull_passes = 1;
  if (world.size() >= 3) {
    options.shared_memory = false;
    Server ps(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::StandardSgd(0.1f));
    const auto data = hpcps_test::synthetic(64, net.input_size(), net.output_size(), 31);
    hpcps::ps::TrainOptions train;
    train.epochs = 1;
    train.batch = 8;
    train.backup_workers = 1;
    train.evaluate = false;
    CHECK_THROWS_WITH(hpcps::ps::train(ps, data, &data, train), Catch::Contains("backup workers need dense pulls"));
  }
  world.barrier();
}
