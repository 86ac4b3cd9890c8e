// Every host backend computes what backend::Cpu computes: outputs (logits), loss, accuracy and
// gradients to within 1e-5 relative, on random data from a fresh seed each run (set
// HPCPS_TEST_SEED to replay one; the seed is printed with any failure).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <random>

#include "backend_equivalence.hpp"
#include "hpcps/backend/backend_traits.hpp"
#include "hpcps/backend/thrust.hpp"

static_assert(hpcps::backend::is_backend_v<hpcps::backend::ThrustOmp>);
static_assert(hpcps::backend::is_backend_v<hpcps::backend::ThrustCpp>);

namespace {
std::uint64_t fresh_seed() {
  if (const char* s = std::getenv("HPCPS_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
}
}  // namespace

TEMPLATE_TEST_CASE("backends agree with backend::Cpu", "[backend]", hpcps::backend::CpuEigen,
                   hpcps::backend::ThrustOmp, hpcps::backend::ThrustCpp) {
  const std::uint64_t seed = fresh_seed();
  INFO("HPCPS_TEST_SEED=" << seed << " reproduces this run");
  for (int threads : {1, 2}) {
    const TestType backend(threads);
    INFO("threads " << threads);
    SECTION("mlp relu, several batch sizes") {
      const hpcps::nn::Mlp<hpcps::nn::Relu> net({33, 40, 17, 10});
      for (std::size_t batch : {1u, 7u, 64u}) {
        const auto d = hpcps_test::compare_with_cpu(net, backend, batch, seed + batch);
        INFO("batch " << batch);
        CHECK(d.forward < 1e-5);
        CHECK(d.loss < 1e-5);
        CHECK(d.evaluation < 1e-5);
        CHECK(d.gradient < 1e-5);
        CHECK(d.correct_backend == d.correct_reference);
      }
    }
    SECTION("mlp tanh and sigmoid") {
      const auto t = hpcps_test::compare_with_cpu(hpcps::nn::Mlp<hpcps::nn::Tanh>({20, 30, 5}), backend, 16, seed);
      CHECK(t.forward < 1e-5);
      CHECK(t.gradient < 1e-5);
      CHECK(t.loss < 1e-5);
      const auto s = hpcps_test::compare_with_cpu(hpcps::nn::Mlp<hpcps::nn::Sigmoid>({20, 30, 5}), backend, 16, seed);
      CHECK(s.forward < 1e-5);
      CHECK(s.gradient < 1e-5);
      CHECK(s.loss < 1e-5);
    }
    SECTION("softmax regression") {
      const auto d = hpcps_test::compare_with_cpu(hpcps::nn::SoftmaxRegression(50, 10), backend, 32, seed);
      CHECK(d.forward < 1e-5);
      CHECK(d.gradient < 1e-5);
      CHECK(d.loss < 1e-5);
    }
  }
}
