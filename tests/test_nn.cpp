// Networks: analytic gradients against central finite differences, on every CPU GEMM provider,
// for each activation and for the second network type.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "hpcps/backend/backend_traits.hpp"
#include "hpcps/backend/cpu.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/nn/mlp.hpp"
#include "hpcps/nn/network_traits.hpp"
#include "hpcps/nn/softmax_regression.hpp"

namespace {

struct Batch {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  std::size_t count;
};

Batch random_batch(std::size_t count, std::size_t inputs, std::size_t classes, std::uint64_t seed) {
  hpcps::data::Rng rng(seed);
  Batch b{std::vector<float>(count * inputs), std::vector<std::int32_t>(count), count};
  for (float& v : b.x) v = hpcps::data::normal_float(rng);
  for (auto& l : b.y) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, classes));
  return b;
}

// Max over parameters of |analytic - numeric| / max(1, |numeric|), in double-precision loss.
template <class Network, class Backend>
double worst_gradient_error(const Network& net, const Backend& backend, const Batch& batch, std::uint64_t seed) {
  std::vector<float> params(net.parameter_count());
  net.initialize(params.data(), seed);
  // Non-zero biases so the bias gradients are exercised away from the kinks too.
  hpcps::data::Rng rng(seed + 1);
  for (float& p : params) p += 0.05f * hpcps::data::normal_float(rng);
  auto ws = net.make_workspace(backend, batch.count);
  std::vector<float> grad(net.parameter_count());
  net.gradient(backend, ws, params.data(), batch.x.data(), batch.y.data(), batch.count, grad.data());

  const float eps = 1e-2f;
  double worst = 0.0;
  for (std::size_t i = 0; i < params.size(); i += 1 + params.size() / 97) {
    const float saved = params[i];
    params[i] = saved + eps;
    const double up = net.evaluate(backend, ws, params.data(), batch.x.data(), batch.y.data(), batch.count).loss_sum;
    params[i] = saved - eps;
    const double down = net.evaluate(backend, ws, params.data(), batch.x.data(), batch.y.data(), batch.count).loss_sum;
    params[i] = saved;
    const double numeric = (up - down) / (2.0 * eps);
    worst = std::max(worst, std::abs(numeric - grad[i]) / std::max(1.0, std::abs(numeric)));
  }
  return worst;
}

}  // namespace

static_assert(hpcps::backend::is_backend_v<hpcps::backend::Cpu>);
static_assert(hpcps::backend::is_backend_v<hpcps::backend::CpuEigen>);
static_assert(!hpcps::backend::is_backend_v<int>);
static_assert(hpcps::nn::is_network_v<hpcps::nn::Mlp<>>);
static_assert(hpcps::nn::is_network_v<hpcps::nn::SoftmaxRegression>);
static_assert(hpcps::nn::is_network_for_v<hpcps::nn::Mlp<hpcps::nn::Tanh>, hpcps::backend::Cpu>);
static_assert(!hpcps::nn::is_network_v<hpcps::backend::Cpu>);
static_assert(hpcps::nn::reports_gradient_progress_v<hpcps::nn::Mlp<>, hpcps::backend::Cpu>);
static_assert(!hpcps::nn::reports_gradient_progress_v<hpcps::nn::SoftmaxRegression, hpcps::backend::Cpu>);

TEST_CASE("an MLP reports each layer's gradient as final, last layer first", "[nn]") {
  // A worker sends grad[begin, P) when told it is final: it must be, and stay, the final value.
  const hpcps::nn::Mlp<> net({9, 7, 5, 3});
  const hpcps::backend::Cpu backend(1);
  const Batch batch = random_batch(6, 9, 3, 21);
  std::vector<float> params(net.parameter_count());
  net.initialize(params.data(), 4);
  auto ws = net.make_workspace(backend, batch.count);
  std::vector<float> plain(net.parameter_count()), reported(net.parameter_count(), 123.0f);
  net.gradient(backend, ws, params.data(), batch.x.data(), batch.y.data(), batch.count, plain.data());
  std::vector<std::size_t> begins;
  std::vector<std::vector<float>> snapshots;
  net.gradient(backend, ws, params.data(), batch.x.data(), batch.y.data(), batch.count, reported.data(),
               [&](std::size_t begin) {
                 begins.push_back(begin);
                 snapshots.emplace_back(reported.begin() + static_cast<std::ptrdiff_t>(begin), reported.end());
               });
  CHECK(reported == plain);
  const std::vector<std::size_t> expected{9 * 7 + 7 + 7 * 5 + 5, 9 * 7 + 7, 0};  // layer 2, 1, 0 begin
  CHECK(begins == expected);
  for (std::size_t i = 0; i < begins.size(); ++i) {
    INFO("report " << i << " at " << begins[i]);
    CHECK(std::equal(snapshots[i].begin(), snapshots[i].end(), plain.begin() + static_cast<std::ptrdiff_t>(begins[i])));
  }
}

TEMPLATE_TEST_CASE("MLP gradients match central finite differences", "[nn]", hpcps::backend::Cpu,
                   hpcps::backend::CpuEigen) {
  const TestType backend(1);
  const Batch batch = random_batch(6, 7, 4, 11);
  SECTION("relu") { CHECK(worst_gradient_error(hpcps::nn::Mlp<hpcps::nn::Relu>({7, 9, 5, 4}), backend, batch, 3) < 2e-2); }
  SECTION("tanh") { CHECK(worst_gradient_error(hpcps::nn::Mlp<hpcps::nn::Tanh>({7, 9, 5, 4}), backend, batch, 4) < 2e-2); }
  SECTION("sigmoid") {
    CHECK(worst_gradient_error(hpcps::nn::Mlp<hpcps::nn::Sigmoid>({7, 9, 5, 4}), backend, batch, 5) < 2e-2);
  }
  SECTION("single layer") { CHECK(worst_gradient_error(hpcps::nn::Mlp<>({7, 4}), backend, batch, 6) < 2e-2); }
  SECTION("softmax regression") {
    CHECK(worst_gradient_error(hpcps::nn::SoftmaxRegression(7, 4), backend, batch, 7) < 2e-2);
  }
}

TEST_CASE("a wrong gradient is caught by the finite-difference check", "[nn]") {
  // Guards the check itself: perturbing the analytic gradient must push the error over the bar.
  const hpcps::backend::Cpu backend(1);
  const hpcps::nn::Mlp<hpcps::nn::Tanh> net({5, 6, 3});
  const Batch batch = random_batch(4, 5, 3, 21);
  std::vector<float> params(net.parameter_count()), grad(net.parameter_count());
  net.initialize(params.data(), 1);
  auto ws = net.make_workspace(backend, batch.count);
  net.gradient(backend, ws, params.data(), batch.x.data(), batch.y.data(), batch.count, grad.data());
  const float eps = 1e-2f;
  params[0] += eps;
  const double up = net.evaluate(backend, ws, params.data(), batch.x.data(), batch.y.data(), batch.count).loss_sum;
  params[0] -= 2 * eps;
  const double down = net.evaluate(backend, ws, params.data(), batch.x.data(), batch.y.data(), batch.count).loss_sum;
  const double numeric = (up - down) / (2 * eps);
  CHECK(std::abs(numeric - grad[0]) < 2e-2 * std::max(1.0, std::abs(numeric)));
  CHECK(std::abs(numeric - 1.5 * grad[0]) > 2e-2 * std::max(1.0, std::abs(numeric)));
}

TEMPLATE_TEST_CASE("GEMM providers agree on every transpose case", "[backend]", hpcps::backend::Cpu,
                   hpcps::backend::CpuEigen) {
  using hpcps::backend::Transpose;
  const TestType backend(1);
  const std::size_t m = 5, n = 7, k = 3;
  hpcps::data::Rng rng(9);
  std::vector<float> a(m * k), b(k * n);
  for (float& v : a) v = hpcps::data::normal_float(rng);
  for (float& v : b) v = hpcps::data::normal_float(rng);
  for (auto ta : {Transpose::no, Transpose::yes}) {
    for (auto tb : {Transpose::no, Transpose::yes}) {
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        std::vector<float> c(m * n, 2.0f), expected(m * n);
        for (std::size_t i = 0; i < m; ++i) {
          for (std::size_t j = 0; j < n; ++j) {
            double s = 0.0;
            for (std::size_t p = 0; p < k; ++p) {
              const float av = ta == Transpose::no ? a[i * k + p] : a[p * m + i];
              const float bv = tb == Transpose::no ? b[p * n + j] : b[j * k + p];
              s += static_cast<double>(av) * bv;
            }
            expected[i * n + j] = static_cast<float>(1.5 * s + beta * 2.0);
          }
        }
        backend.gemm(ta, tb, m, n, k, 1.5f, a.data(), ta == Transpose::no ? k : m, b.data(),
                     tb == Transpose::no ? n : k, beta, c.data(), n);
        for (std::size_t i = 0; i < c.size(); ++i) CHECK(c[i] == Approx(expected[i]).epsilon(1e-5).margin(1e-5));
      }
    }
  }
}

// BLAS semantics: with beta = 0 the old C is not read (NaN in it must not survive), and only the
// n columns of each row are written when ldc > n (CblasGemm clears C itself before the call).
TEMPLATE_TEST_CASE("GEMM with beta = 0 ignores C and keeps to its columns", "[backend]", hpcps::backend::Cpu,
                   hpcps::backend::CpuEigen) {
  using hpcps::backend::Transpose;
  const TestType backend(1);
  const std::size_t m = 4, n = 3, k = 2, ldc = n + 2;
  const std::vector<float> a{1, 2, 3, 4, 5, 6, 7, 8}, b{1, 0, -1, 2, 1, 0};
  const float sentinel = -7.0f;
  std::vector<float> c(m * ldc, std::numeric_limits<float>::quiet_NaN());
  for (std::size_t i = 0; i < m; ++i) c[i * ldc + n] = c[i * ldc + n + 1] = sentinel;
  backend.gemm(Transpose::no, Transpose::no, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), ldc);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) CHECK(c[i * ldc + j] == a[i * k] * b[j] + a[i * k + 1] * b[n + j]);
    CHECK(c[i * ldc + n] == sentinel);
    CHECK(c[i * ldc + n + 1] == sentinel);
  }
}

TEST_CASE("softmax cross-entropy: loss, accuracy and delta", "[backend]") {
  const hpcps::backend::Cpu backend(1);
  std::vector<float> logits{1.0f, 2.0f, 3.0f, 0.0f, 0.0f, 0.0f};
  std::vector<std::int32_t> labels{2, 1};
  const auto stats = backend.softmax_cross_entropy(logits.data(), labels.data(), 2, 3, true);
  const double row0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
  const double row1 = std::log(3.0);
  CHECK(stats.loss_sum == Approx(row0 + row1).epsilon(1e-6));
  CHECK(stats.correct == 1);  // row 1 ties: argmax picks class 0, label is 1
  CHECK(stats.count == 2);
  CHECK(logits[2] == Approx(std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 1.0).epsilon(1e-6));
  CHECK(logits[4] == Approx(1.0 / 3.0 - 1.0).epsilon(1e-6));
}

TEST_CASE("networks reject bad shapes and oversized batches", "[nn]") {
  CHECK_THROWS_AS(hpcps::nn::Mlp<>({784}), hpcps::Error);
  CHECK_THROWS_AS(hpcps::nn::Mlp<>({784, 0, 10}), hpcps::Error);
  CHECK_THROWS_AS(hpcps::nn::SoftmaxRegression(0, 10), hpcps::Error);
  const hpcps::backend::Cpu backend(1);
  const hpcps::nn::Mlp<> net({4, 3, 2});
  auto ws = net.make_workspace(backend, 2);
  std::vector<float> params(net.parameter_count()), grad(net.parameter_count()), x(12);
  std::vector<std::int32_t> y(3);
  CHECK_THROWS_WITH(net.gradient(backend, ws, params.data(), x.data(), y.data(), 3, grad.data()),
                    Catch::Contains("batch of 3 samples"));
  CHECK(net.parameter_count() == 4 * 3 + 3 + 3 * 2 + 2);
}
