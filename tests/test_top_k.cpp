// Top-k sparsification with error feedback (ps/top_k.hpp): which elements leave (the largest
// magnitudes, ties to the lower index, NaN first), the invariant that nothing is lost (sent plus
// the new residual is exactly the gradient plus the old residual, at every step and summed over a
// run), and the server's sparse sum against the dense sum of the same pieces.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hpcps/ps/top_k.hpp"

namespace {

using hpcps::ps::scatter_add;
using hpcps::ps::top_k_count;
using hpcps::ps::TopKSelector;

// Multiples of 2^-10 of magnitude at most 1000 * 2^-10: any sum of a few thousand of them is
// exact in fp32 (fewer than 24 significant bits), so the invariant can be checked with ==.
std::vector<float> dyadic(std::mt19937& rng, std::size_t n) {
  std::uniform_int_distribution<int> m(-1000, 1000);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(m(rng)) / 1024.0f;
  return v;
}

}  // namespace

TEST_CASE("top_k_count rounds up, sends at least one element and checks the ratio", "[top_k]") {
  CHECK(top_k_count(0.01, 1000) == 10);
  CHECK(top_k_count(0.01, 1001) == 11);
  CHECK(top_k_count(0.001, 10) == 1);
  CHECK(top_k_count(1.0, 7) == 7);
  CHECK(top_k_count(0.5, 0) == 0);
  CHECK_THROWS_WITH(top_k_count(0.0, 10), Catch::Contains("ratio must be in (0, 1]"));
  CHECK_THROWS_WITH(top_k_count(1.5, 10), Catch::Contains("ratio must be in (0, 1]"));
  CHECK_THROWS(top_k_count(std::nan(""), 10));
}

TEST_CASE("top-k sends the largest magnitudes, ties to the lower index, NaN before any number", "[top_k]") {
  TopKSelector select(8);
  const std::vector<float> gradient{0.5f, -3.0f, 2.0f, 3.0f, -0.25f, 1.0f, -2.0f, 0.0f};
  std::vector<float> residual(8, 0.0f);
  std::vector<std::uint32_t> indices(4);
  std::vector<float> values(4);
  // |-3| and |3| tie: both go before the 2s, whose tie the lower index (2) wins over index 6.
  select.compress(gradient.data(), residual.data(), 8, 3, 100, indices.data(), values.data());
  CHECK(indices[0] == 101);
  CHECK(indices[1] == 102);
  CHECK(indices[2] == 103);
  CHECK(values[0] == -3.0f);
  CHECK(values[1] == 2.0f);
  CHECK(values[2] == 3.0f);
  CHECK(residual == std::vector<float>{0.5f, 0.0f, 0.0f, 0.0f, -0.25f, 1.0f, -2.0f, 0.0f});

  // The residual joins the next gradient: -2 held back plus -2 now is the largest.
  const std::vector<float> next{0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -2.0f, 0.0f};
  select.compress(next.data(), residual.data(), 8, 1, 0, indices.data(), values.data());
  CHECK(indices[0] == 6);
  CHECK(values[0] == -4.0f);

  // A NaN outranks an infinity, which outranks every number.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> odd{1.0f, -inf, 5.0f, nan, 2.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> held(8, 0.0f);
  select.compress(odd.data(), held.data(), 8, 2, 0, indices.data(), values.data());
  CHECK(indices[0] == 1);
  CHECK(indices[1] == 3);
  CHECK(values[0] == -inf);
  CHECK(std::isnan(values[1]));
}

// The k an ordering by (magnitude bits descending, index ascending) puts first, in index order.
std::vector<std::uint32_t> reference_top_k(const std::vector<float>& x, std::size_t k) {
  const auto bits = [](float v) {
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    return u & 0x7FFFFFFFu;
  };
  std::vector<std::uint32_t> order(x.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return bits(x[a]) > bits(x[b]); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

TEST_CASE("the radix selection picks what a sort by magnitude, then index, picks", "[top_k]") {
  // Values made to stress a selection by bits: magnitudes that share their high bits and differ
  // only in the low mantissa bits, runs of exact ties across the k-th place, both zeros,
  // subnormals, infinities and NaNs of different payloads.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float tiny = std::numeric_limits<float>::denorm_min();
  const int kind = GENERATE(0, 1, 2, 3);
  std::mt19937 rng(static_cast<unsigned>(17 + kind));
  const std::size_t n = 300;
  std::vector<float> x(n);
  std::uniform_int_distribution<int> pick(0, 9), low(0, 7);
  for (auto& v : x) {
    switch (kind) {
      case 0: v = 1.0f + static_cast<float>(low(rng)) * 1e-7f; break;        // one high-bits bucket, ties
      case 1: v = static_cast<float>(pick(rng) - 5) / 4.0f; break;         // few values, many ties, zeros
      case 2: v = static_cast<float>(low(rng)) * tiny * (pick(rng) < 5 ? -1.0f : 1.0f); break;  // subnormals
      default: {
        const int p = pick(rng);
        v = p == 0 ? nan : p == 1 ? -inf : p == 2 ? -0.0f : p == 3 ? std::nanf("7") : std::ldexp(1.0f, p * 10 - 60);
      }
    }
  }
  const std::size_t k = GENERATE(1, 2, 29, 150, 299, 300);
  TopKSelector select(n);
  std::vector<float> residual(n, 0.0f);
  std::vector<std::uint32_t> indices(k);
  std::vector<float> values(k);
  select.compress(x.data(), residual.data(), n, k, 0, indices.data(), values.data());
  for (auto& v : x) v = 0.0f + v;  // what the selection saw: -0 is +0 after the residual's add
  const auto expected = reference_top_k(x, k);
  CHECK(indices == expected);
  std::size_t wrong = 0;
  for (std::size_t j = 0; j < k; ++j) {
    if (std::memcmp(&values[j], &x[expected[j]], sizeof(float)) != 0) ++wrong;
    if (residual[expected[j]] != 0.0f) ++wrong;
  }
  CHECK(wrong == 0);
}

TEST_CASE("top-k of every element sends the sum and keeps nothing back", "[top_k]") {
  std::mt19937 rng(3);
  const auto gradient = dyadic(rng, 50);
  auto residual = dyadic(rng, 50);
  const auto before = residual;
  TopKSelector select(64);
  std::vector<std::uint32_t> indices(50);
  std::vector<float> values(50);
  select.compress(gradient.data(), residual.data(), 50, 50, 7, indices.data(), values.data());
  for (std::size_t i = 0; i < 50; ++i) {
    CHECK(indices[i] == 7 + i);
    CHECK(values[i] == gradient[i] + before[i]);
    CHECK(residual[i] == 0.0f);
  }
}

TEST_CASE("error feedback loses nothing: sent plus residual is the gradient plus the old residual, exactly",
          "[top_k]") {
  const std::size_t n = GENERATE(1, 37, 1000);
  const double ratio = GENERATE(0.001, 0.05, 0.5);
  std::mt19937 rng(static_cast<unsigned>(n * 131 + static_cast<std::size_t>(ratio * 1000)));
  const std::size_t k = top_k_count(ratio, n);
  TopKSelector select(n);
  std::vector<float> residual(n, 0.0f), total_gradient(n, 0.0f), total_sent(n, 0.0f);
  std::vector<std::uint32_t> indices(k);
  std::vector<float> values(k);
  for (int step = 0; step < 40; ++step) {
    const auto gradient = dyadic(rng, n);
    const auto old = residual;
    select.compress(gradient.data(), residual.data(), n, k, 0, indices.data(), values.data());
    std::vector<float> sent(n, 0.0f);
    scatter_add(indices.data(), values.data(), k, 0, sent.data());
    // Every element goes whole to one side: one of the two is zero, the other the fp32 sum.
    std::size_t mismatches = 0, split = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (sent[i] + residual[i] != gradient[i] + old[i]) ++mismatches;
      if (sent[i] != 0.0f && residual[i] != 0.0f) ++split;
      total_gradient[i] += gradient[i];
      total_sent[i] += sent[i];
    }
    CHECK(mismatches == 0);
    CHECK(split == 0);
    // Indices are ascending and distinct, and within the piece.
    for (std::size_t j = 0; j + 1 < k; ++j) CHECK(indices[j] < indices[j + 1]);
    CHECK(indices[k - 1] < n);
  }
  // Over the run: everything sent plus what is still held back is everything computed.
  std::size_t lost = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (total_sent[i] + residual[i] != total_gradient[i]) ++lost;
  }
  CHECK(lost == 0);
}

TEST_CASE("momentum correction: the velocity goes through error feedback, losing nothing, and outlives it",
          "[top_k]") {
  // m = 1/2 and dyadic values: every product and sum below is exact, so the checks are equalities.
  const std::size_t n = GENERATE(1, 37, 1000);
  const double ratio = GENERATE(0.001, 0.05, 0.5);
  const float m = 0.5f;
  std::mt19937 rng(static_cast<unsigned>(n * 17 + static_cast<std::size_t>(ratio * 1000)));
  const std::size_t k = top_k_count(ratio, n);
  TopKSelector select(n);
  std::vector<float> velocity(n, 0.0f), residual(n, 0.0f);
  std::vector<std::uint32_t> indices(k);
  std::vector<float> values(k);
  const std::uint32_t base = 5;
  for (int step = 0; step < 40; ++step) {
    const auto gradient = dyadic(rng, n);
    const auto old_velocity = velocity, old_residual = residual;
    hpcps::ps::accumulate_velocity(gradient.data(), velocity.data(), n, m);
    std::size_t wrong_velocity = 0;
    for (std::size_t i = 0; i < n; ++i) wrong_velocity += velocity[i] != m * old_velocity[i] + gradient[i];
    CHECK(wrong_velocity == 0);
    const auto accumulated = velocity;
    select.compress(velocity.data(), residual.data(), n, k, base, indices.data(), values.data());
    std::vector<float> sent(n, 0.0f);
    scatter_add(indices.data(), values.data(), k, base, sent.data());
    std::size_t lost = 0;
    for (std::size_t i = 0; i < n; ++i) lost += sent[i] + residual[i] != accumulated[i] + old_residual[i];
    CHECK(lost == 0);
    CHECK(velocity == accumulated);  // sending an element does not reset its velocity
  }
}

TEST_CASE("a sparse sum in worker order equals the dense sum of the same pieces", "[top_k]") {
  std::mt19937 rng(11);
  const std::size_t n = 500, k = 40, workers = 3;
  const std::uint32_t base = 1000;  // a piece that starts inside a shard
  TopKSelector select(n);
  std::vector<float> sparse_sum(n, 0.0f), dense_sum(n, 0.0f);
  for (std::size_t w = 0; w < workers; ++w) {
    // Arbitrary floats this time: the claim is about order, not exactness of the arithmetic.
    std::normal_distribution<float> normal;
    std::vector<float> gradient(n), residual(n, 0.0f);
    for (auto& g : gradient) g = normal(rng);
    std::vector<std::uint32_t> indices(k);
    std::vector<float> values(k);
    select.compress(gradient.data(), residual.data(), n, k, base, indices.data(), values.data());
    scatter_add(indices.data(), values.data(), k, base, sparse_sum.data());
    std::vector<float> dense(n, 0.0f);
    for (std::size_t j = 0; j < k; ++j) dense[indices[j] - base] = values[j];
    for (std::size_t i = 0; i < n; ++i) dense_sum[i] += dense[i];
  }
  CHECK(sparse_sum == dense_sum);
}

TEST_CASE("top-k refuses a piece it was not sized for and more elements than the piece has", "[top_k]") {
  TopKSelector select(4);
  std::vector<float> g(5, 1.0f), r(5, 0.0f), values(5);
  std::vector<std::uint32_t> indices(5);
  CHECK_THROWS_WITH(select.compress(g.data(), r.data(), 5, 1, 0, indices.data(), values.data()),
                    Catch::Contains("a piece of 5 elements exceeds the 4"));
  CHECK_THROWS_WITH(select.compress(g.data(), r.data(), 3, 4, 0, indices.data(), values.data()),
                    Catch::Contains("4 of 3 elements"));
  CHECK_THROWS_WITH(select.compress(g.data(), r.data(), 4, 1, 0xFFFFFFFEu, indices.data(), values.data()),
                    Catch::Contains("do not fit 32 bits"));
}
