// Server-side update rules and learning-rate schedules against hand-computed values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "hpcps/optim/adam.hpp"
#include "hpcps/optim/optimizer_traits.hpp"
#include "hpcps/optim/schedule.hpp"
#include "hpcps/optim/sgd.hpp"

using hpcps::optim::MomentumSgd;
using hpcps::optim::MomentumUpdate;
using hpcps::optim::Schedule;
using hpcps::optim::StandardSgd;

static_assert(hpcps::optim::is_optimizer_v<StandardSgd>);
static_assert(hpcps::optim::is_optimizer_v<MomentumSgd>);
static_assert(!hpcps::optim::is_optimizer_v<MomentumUpdate>);
static_assert(hpcps::optim::is_optimizer_v<hpcps::optim::Adam>);

TEST_CASE("the scale turns a gradient sum into the mean", "[optim]") {
  // A server passes the sum over 4 samples with scale 1/4: the same step as the mean with scale 1.
  std::vector<float> a{1.0f, 2.0f}, b{1.0f, 2.0f};
  const std::vector<float> sum{4.0f, -8.0f}, mean{1.0f, -2.0f};
  const MomentumSgd opt(0.1f, 0.01f, MomentumUpdate(0.9f, true));
  auto sa = opt.make_state(2), sb = opt.make_state(2);
  opt.step(sa, a.data(), sum.data(), 0.25f, 2, 0);
  opt.step(sb, b.data(), mean.data(), 1.0f, 2, 0);
  CHECK(a[0] == Approx(b[0]));
  CHECK(a[1] == Approx(b[1]));
  CHECK(a[0] != 1.0f);
  const hpcps::optim::Adam adam(0.1f);
  auto s1 = adam.make_state(2), s2 = adam.make_state(2);
  std::vector<float> c{1.0f, 2.0f}, d{1.0f, 2.0f};
  const std::vector<float> big{40.0f, -8.0f}, mean2{10.0f, -2.0f};
  adam.step(s1, c.data(), big.data(), 0.25f, 2, 0);
  adam.step(s2, d.data(), mean2.data(), 1.0f, 2, 0);
  CHECK(c[0] == Approx(d[0]));
  CHECK(c[1] == Approx(d[1]));
}

TEST_CASE("plain SGD with and without weight decay", "[optim]") {
  std::vector<float> p{1.0f, -2.0f, 0.5f};
  const std::vector<float> g{0.5f, 1.0f, -1.0f};
  const StandardSgd sgd(0.1f);
  auto state = sgd.make_state(p.size());
  sgd.step(state, p.data(), g.data(), 1.0f, p.size(), 0);
  CHECK(p[0] == Approx(0.95f));
  CHECK(p[1] == Approx(-2.1f));
  CHECK(p[2] == Approx(0.6f));

  std::vector<float> q{1.0f, -2.0f};
  const StandardSgd decayed(0.1f, 0.01f);
  auto s2 = decayed.make_state(q.size());
  decayed.step(s2, q.data(), g.data(), 1.0f, q.size(), 0);
  CHECK(q[0] == Approx(1.0f - 0.1f * (0.5f + 0.01f * 1.0f)));
  CHECK(q[1] == Approx(-2.0f - 0.1f * (1.0f + 0.01f * -2.0f)));
}

TEST_CASE("momentum and Nesterov follow their recurrences", "[optim]") {
  const float lr = 0.1f, mu = 0.9f;
  const std::vector<float> grads{1.0f, 0.5f, -0.25f};
  for (bool nesterov : {false, true}) {
    const MomentumSgd opt(lr, 0.0f, MomentumUpdate(mu, nesterov));
    auto state = opt.make_state(1);
    float p = 2.0f;
    double ref = 2.0, v = 0.0;
    for (std::size_t t = 0; t < grads.size(); ++t) {
      opt.step(state, &p, &grads[t], 1.0f, 1, t);
      v = mu * v + grads[t];
      ref -= lr * (nesterov ? grads[t] + mu * v : v);
      CHECK(p == Approx(ref).epsilon(1e-6));
    }
  }
  CHECK_THROWS_AS(MomentumUpdate(1.0f), hpcps::Error);
  CHECK_THROWS_AS(StandardSgd(0.0f), hpcps::Error);
  CHECK_THROWS_AS(StandardSgd(0.1f, -1.0f), hpcps::Error);
}

TEST_CASE("learning-rate schedules", "[optim]") {
  const auto c = Schedule::constant(0.5f);
  CHECK(c.at(0) == 0.5f);
  CHECK(c.at(1000000) == 0.5f);
  const auto s = Schedule::step_decay(1.0f, 10, 0.1f);
  CHECK(s.at(9) == Approx(1.0f));
  CHECK(s.at(10) == Approx(0.1f));
  CHECK(s.at(25) == Approx(0.01f));
  const auto cos = Schedule::cosine(1.0f, 100, 0.1f);
  CHECK(cos.at(0) == Approx(1.0f));
  CHECK(cos.at(50) == Approx(0.55f));
  CHECK(cos.at(100) == Approx(0.1f));
  CHECK(cos.at(1000) == Approx(0.1f));
  // The schedule reaches the update: step 50 of a cosine over 100 moves half as far as step 0.
  const StandardSgd sgd(Schedule::cosine(1.0f, 100), 0.0f);
  auto state = sgd.make_state(1);
  float p = 0.0f;
  const float g = 1.0f;
  sgd.step(state, &p, &g, 1.0f, 1, 50);
  CHECK(p == Approx(-0.5f));
  CHECK_THROWS_AS(Schedule::constant(0.0f), hpcps::Error);
  CHECK_THROWS_AS(Schedule::step_decay(0.1f, 0, 0.5f), hpcps::Error);
  CHECK_THROWS_AS(Schedule::cosine(0.1f, 10, 0.5f), hpcps::Error);
}

TEST_CASE("Adam follows its bias-corrected recurrence", "[optim]") {
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  const hpcps::optim::Adam adam(lr, b1, b2, eps);
  auto state = adam.make_state(2);
  std::vector<float> p{1.0f, -1.0f};
  const std::vector<std::vector<float>> grads{{0.5f, -2.0f}, {0.1f, 1.0f}, {-0.3f, 0.2f}};
  std::vector<double> ref{1.0, -1.0}, m(2, 0.0), v(2, 0.0);
  for (std::size_t t = 0; t < grads.size(); ++t) {
    adam.step(state, p.data(), grads[t].data(), 1.0f, 2, t);
    for (std::size_t i = 0; i < 2; ++i) {
      m[i] = b1 * m[i] + (1 - b1) * grads[t][i];
      v[i] = b2 * v[i] + (1 - b2) * grads[t][i] * grads[t][i];
      const double mhat = m[i] / (1 - std::pow(b1, t + 1.0)), vhat = v[i] / (1 - std::pow(b2, t + 1.0));
      ref[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      CHECK(p[i] == Approx(ref[i]).epsilon(1e-5));
    }
  }
  // The first step moves every coordinate by lr against the gradient's sign, whatever its size.
  const hpcps::optim::Adam fresh(0.01f);
  auto s0 = fresh.make_state(2);
  std::vector<float> q{0.0f, 0.0f};
  const std::vector<float> g{1e-3f, -50.0f};
  fresh.step(s0, q.data(), g.data(), 1.0f, 2, 0);
  CHECK(q[0] == Approx(-0.01f).epsilon(1e-4));
  CHECK(q[1] == Approx(0.01f).epsilon(1e-4));
  CHECK_THROWS_AS(hpcps::optim::Adam(0.01f, 1.0f), hpcps::Error);
  CHECK_THROWS_AS(hpcps::optim::Adam(0.01f, 0.9f, 0.999f, 0.0f), hpcps::Error);
}

TEMPLATE_TEST_CASE("an update applied piece by piece equals the whole-shard update", "[optim]", StandardSgd, MomentumSgd,
                   hpcps::optim::Adam) {
  // A server applies its shard in pieces (cache blocks, pieces of a push as they arrive): each
  // piece must find its own optimizer state at its offset, or momentum and moments would mix.
  const std::size_t n = 37;
  std::vector<float> whole(n), pieces(n), sum(n);
  for (std::size_t i = 0; i < n; ++i) {
    whole[i] = pieces[i] = 0.01f * static_cast<float>(i) - 0.2f;
    sum[i] = std::sin(static_cast<float>(i));
  }
  const TestType opt{};
  auto whole_state = opt.make_state(n), piece_state = opt.make_state(n);
  for (std::size_t step = 0; step < 3; ++step) {
    opt.step(whole_state, whole.data(), sum.data(), 0.5f, n, step);
    for (std::size_t begin = 0; begin < n; begin += 8) {
      const std::size_t count = std::min<std::size_t>(8, n - begin);
      opt.step(piece_state, begin, pieces.data() + begin, sum.data() + begin, 0.5f, count, step);
    }
  }
  // To rounding: a vectorised loop and its scalar remainder may contract a * b + c into an FMA
  // differently, and pieces move elements between the two (Adam does, with -fno-math-errno). A
  // wrong offset would be off by far more than this.
  for (std::size_t i = 0; i < n; ++i) CHECK(pieces[i] == Approx(whole[i]).epsilon(1e-6).margin(1e-9));
}
