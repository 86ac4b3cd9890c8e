// ps::detail::aggregate_and_step (the server's blocked sum of W slices plus update) against the
// naive loop: sum every slice into a shard-sized buffer in order, then one call of the rule. The
// server promises the same bits whatever the block size and however the shard is cut into pieces,
// so the comparisons are exact, over several steps so the rule's state carries errors forward.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <vector>

#include "hpcps/optim/adam.hpp"
#include "hpcps/optim/sgd.hpp"
#include "hpcps/ps/detail/aggregate.hpp"

namespace {

using hpcps::ps::detail::aggregate_and_step;
using hpcps::ps::detail::aggregate_block;

// Not a multiple of the block, nor of any vector width: the last block and the loop tails are short.
constexpr std::size_t shard = 2 * aggregate_block + 37;
constexpr std::size_t steps = 3;

// The rule's state as plain arrays, to compare them.
std::vector<const std::vector<float>*> arrays(const hpcps::optim::MomentumSgd::State& s) { return {&s.velocity}; }
std::vector<const std::vector<float>*> arrays(const hpcps::optim::Adam::State& s) { return {&s.m, &s.v}; }
std::vector<const std::vector<float>*> arrays(const hpcps::optim::StandardSgd::State&) { return {}; }

template <class Optimizer>
Optimizer make_optimizer();
template <>
hpcps::optim::MomentumSgd make_optimizer() {
  return hpcps::optim::MomentumSgd(0.05f, 0.01f, hpcps::optim::MomentumUpdate(0.9f, true));
}
template <>
hpcps::optim::Adam make_optimizer() {
  return hpcps::optim::Adam(0.01f, 0.9f, 0.999f, 1e-8f, 0.01f);
}
template <>
hpcps::optim::StandardSgd make_optimizer() {
  return hpcps::optim::StandardSgd(0.05f, 0.01f);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Values differ per element, per contributor and per step, and their sums round, so a slice read
// at the wrong place, a slice missed or added twice, or another addition order changes bits.
std::vector<std::vector<float>> make_slices(std::size_t count, std::size_t step) {
  std::vector<std::vector<float>> slices(count, std::vector<float>(shard));
  for (std::size_t c = 0; c < count; ++c) {
    for (std::size_t i = 0; i < shard; ++i) {
      const auto k = static_cast<float>((i * 31 + c * 17 + step * 7) % 1013);
      slices[c][i] = 0.1f * k / 1013.0f - 0.05f + 1e-7f * static_cast<float>(c + 1);
    }
  }
  return slices;
}

std::vector<const float*> pointers(const std::vector<std::vector<float>>& slices, std::size_t offset) {
  std::vector<const float*> p;
  for (const auto& s : slices) p.push_back(s.data() + offset);
  return p;
}

std::vector<float> initial_parameters() {
  std::vector<float> p(shard);
  for (std::size_t i = 0; i < shard; ++i) p[i] = 0.01f * static_cast<float>(i % 113) - 0.5f;
  return p;
}

// One copy of the parameters and the rule's state, updated one way.
template <class Optimizer>
struct Replica {
  explicit Replica(const Optimizer& o) : params(initial_parameters()), state(o.make_state(shard)) {}
  std::vector<float> params;
  typename Optimizer::State state;
};

template <class Optimizer>
void expect_same(const Replica<Optimizer>& got, const Replica<Optimizer>& want) {
  CHECK(same_bits(got.params, want.params));
  const auto a = arrays(got.state), b = arrays(want.state);
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) CHECK(same_bits(*a[k], *b[k]));
}

template <class Optimizer>
void naive_step(const Optimizer& o, Replica<Optimizer>& r, const std::vector<std::vector<float>>& slices, float scale,
                std::size_t step) {
  std::vector<float> sum(slices[0]);
  for (std::size_t c = 1; c < slices.size(); ++c)
    for (std::size_t i = 0; i < shard; ++i) sum[i] += slices[c][i];
  o.step(r.state, 0, r.params.data(), sum.data(), scale, shard, step);
}

// aggregate_and_step on the pieces [cuts[k], cuts[k+1]) of the shard, each with its offset
// (`offsets` replaces the true offsets where a test wants a wrong one).
template <class Optimizer>
void pieces_step(const Optimizer& o, Replica<Optimizer>& r, const std::vector<std::vector<float>>& slices, float scale,
                 std::size_t step, const std::vector<std::size_t>& cuts, const std::vector<std::size_t>& offsets) {
  std::vector<float> block(aggregate_block, -1.0f);
  for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
    const auto p = pointers(slices, cuts[k]);
    aggregate_and_step(o, r.state, offsets[k], r.params.data() + cuts[k], p.data(), p.size(), scale, cuts[k + 1] - cuts[k],
                       step, block.data());
  }
}

}  // namespace

TEMPLATE_TEST_CASE("aggregate_and_step equals the sum of all slices followed by one step", "[ps][aggregate]",
                   hpcps::optim::MomentumSgd, hpcps::optim::Adam, hpcps::optim::StandardSgd) {
  const auto optimizer = make_optimizer<TestType>();
  // A cut inside the first block and one off any vector boundary inside the second.
  const std::vector<std::size_t> whole{0, shard}, two{0, aggregate_block + 1001, shard},
      three{0, 5000, aggregate_block + 3, shard};
  for (std::size_t count = 1; count <= 4; ++count) {
    DYNAMIC_SECTION("contributors: " << count) {
      const float scale = 1.0f / static_cast<float>(3 * count);
      Replica<TestType> naive(optimizer), fused(optimizer), halves(optimizer), thirds(optimizer);
      for (std::size_t step = 0; step < steps; ++step) {
        const auto slices = make_slices(count, step);
        naive_step(optimizer, naive, slices, scale, step);
        pieces_step(optimizer, fused, slices, scale, step, whole, whole);
        pieces_step(optimizer, halves, slices, scale, step, two, two);
        pieces_step(optimizer, thirds, slices, scale, step, three, three);
      }
      CHECK(!same_bits(naive.params, initial_parameters()));  // the steps did move the parameters
      SECTION("one call on the whole shard") { expect_same(fused, naive); }
      SECTION("pieces with their offsets") {
        expect_same(halves, naive);
        expect_same(thirds, naive);
      }
    }
  }
}

TEMPLATE_TEST_CASE("a piece given the wrong offset updates the wrong state", "[ps][aggregate]", hpcps::optim::MomentumSgd,
                   hpcps::optim::Adam) {
  // The comparison above must be able to see an offset error: the second piece indexing the state
  // from 0 (as a kernel that forgot its offset would) reads and writes the first piece's state.
  const auto optimizer = make_optimizer<TestType>();
  const std::vector<std::size_t> cuts{0, aggregate_block + 1001, shard}, wrong{0, 0};
  Replica<TestType> naive(optimizer), shifted(optimizer);
  for (std::size_t step = 0; step < steps; ++step) {
    const auto slices = make_slices(2, step);
    naive_step(optimizer, naive, slices, 0.5f, step);
    pieces_step(optimizer, shifted, slices, 0.5f, step, cuts, wrong);
  }
  CHECK(!same_bits(shifted.params, naive.params));
  CHECK(!same_bits(*arrays(shifted.state)[0], *arrays(naive.state)[0]));
}
