#pragma once
// A small deterministic random number generator and the few distributions hpcps needs.
// std::shuffle and std::uniform_int_distribution are not used: their algorithms are unspecified,
// so libstdc++ and libc++ give different sequences for the same seed, and we promise that a run
// with a fixed seed is reproducible wherever it is built.
#include <hpcps/error.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <utility>

namespace hpcps::data {

// Steele, Lea & Flood's SplitMix64 step. A bijection on 64-bit values with good mixing, so it
// also serves to derive independent seeds (e.g. per epoch) from one user seed.
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman & Vigna): fast, 256 bits of state, passes BigCrush. Also models
// UniformRandomBitGenerator so it can be handed to standard algorithms where determinism across
// standard libraries does not matter.
class Rng {
 public:
  using result_type = std::uint64_t;

  // Seeding through SplitMix64 spreads even seeds like 0 and 1 over the whole state, and never
  // yields the all-zero state that xoshiro cannot leave.
  explicit constexpr Rng(std::uint64_t seed) noexcept : state_{} {
    for (auto& word : state_) word = splitmix64(seed);
  }

  constexpr std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  constexpr result_type operator()() noexcept { return next(); }
  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::uint64_t state_[4];
};

namespace detail {

// High and low 64 bits of a 64x64 product, in portable code (no __int128, which -Wpedantic
// rejects and MSVC lacks).
constexpr void mul_64x64(std::uint64_t a, std::uint64_t b, std::uint64_t& hi, std::uint64_t& lo) noexcept {
  const std::uint64_t a_lo = a & 0xFFFFFFFFULL, a_hi = a >> 32;
  const std::uint64_t b_lo = b & 0xFFFFFFFFULL, b_hi = b >> 32;
  const std::uint64_t p0 = a_lo * b_lo;
  const std::uint64_t p1 = a_lo * b_hi;
  const std::uint64_t p2 = a_hi * b_lo;
  const std::uint64_t p3 = a_hi * b_hi;
  const std::uint64_t mid = (p0 >> 32) + (p1 & 0xFFFFFFFFULL) + (p2 & 0xFFFFFFFFULL);
  lo = (mid << 32) | (p0 & 0xFFFFFFFFULL);
  hi = p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}

}  // namespace detail

// Unbiased integer in [0, n) by Lemire's multiply-and-reject method: one multiplication per draw
// and a division only in the rare rejection case. n must be at least 1.
inline std::uint64_t uniform_below(Rng& rng, std::uint64_t n) {
  if (n == 0) throw hpcps::Error("uniform_below: n must be at least 1, got 0");
  std::uint64_t hi = 0, lo = 0;
  detail::mul_64x64(rng.next(), n, hi, lo);
  if (lo < n) {
    const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    while (lo < threshold) detail::mul_64x64(rng.next(), n, hi, lo);
  }
  return hi;
}

// Float in [0, 1) with 24 random bits: every value is exactly representable, so it never
// rounds up to 1.0f.
inline float uniform_float(Rng& rng) noexcept {
  return static_cast<float>(rng.next() >> 40) * (1.0f / 16777216.0f);
}

// Standard normal by Box-Muller, computed in double. Only the cosine branch is used so the
// generator needs no cached second value and each call consumes exactly two draws. log and cos
// come from the platform's libm, so the last bit may differ between math libraries.
inline float normal_float(Rng& rng) noexcept {
  constexpr double two_pi = 6.283185307179586476925286766559;
  // u1 in (0, 1] keeps log finite; u2 in [0, 1).
  const double u1 = static_cast<double>((rng.next() >> 11) + 1) * 0x1.0p-53;
  const double u2 = static_cast<double>(rng.next() >> 11) * 0x1.0p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2));
}

// Fisher-Yates, drawing with uniform_below so the permutation depends only on the seed.
template <class RandomIt>
void shuffle(RandomIt first, RandomIt last, Rng& rng) {
  using Diff = typename std::iterator_traits<RandomIt>::difference_type;
  const Diff n = last - first;
  for (Diff i = n - 1; i > 0; --i) {
    const auto j = static_cast<Diff>(uniform_below(rng, static_cast<std::uint64_t>(i) + 1));
    using std::swap;
    swap(first[i], first[j]);
  }
}

}  // namespace hpcps::data
