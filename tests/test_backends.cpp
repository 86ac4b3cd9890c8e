// Every host backend computes what backend::Cpu computes: outputs (logits), loss, accuracy and
// gradients to within 1e-5 relative (a convolution's weight gradients 5e-5), on random data from a
// fresh seed each run (set HPCPS_TEST_SEED to replay one; the seed is printed with any failure).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <utility>
#include <vector>

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
    // A convolution's weight gradient sums batch x 784 products in another order on each
    // backend: over 1,500 seeds the largest difference was 1.0e-5 (ExampleCnn, batch 9), so the
    // bound on it is 5e-5. Data near a ReLU or max-pooling kink are redrawn (near_kink).
    // The second case replays a CI failure: its first draw has a max-pooling tie on this machine.
    SECTION("convolutional networks, every layer") {
      for (const auto& [batch, draw] : {std::pair{1u, seed + 1}, std::pair{9u, seed + 9},
                                        std::pair{1u, std::uint64_t{16047766839016271263u}}}) {
        INFO("batch " << batch << ", data from seed " << draw);
        for (const auto& d : {hpcps_test::compare_with_cpu(hpcps_test::example_cnn(), backend, batch, draw),
                              hpcps_test::compare_with_cpu(hpcps_test::smooth_cnn(), backend, batch, draw)}) {
          CHECK(d.forward < 1e-5);
          CHECK(d.loss < 1e-5);
          CHECK(d.evaluation < 1e-5);
          CHECK(d.gradient < 5e-5);
          CHECK(d.correct_backend == d.correct_reference);
        }
      }
    }
    SECTION("softmax regression") {
      const auto d = hpcps_test::compare_with_cpu(hpcps::nn::SoftmaxRegression(50, 10), backend, 32, seed);
      CHECK(d.forward < 1e-5);
      CHECK(d.gradient < 1e-5);
      CHECK(d.loss < 1e-5);
    }
  }
}

// softmax_cross_entropy ends in one work item summing the per-row scratch. On an empty batch the
// scratch may still be empty (null data, rows == 0): the sums must be zero, and a batch after it
// must match backend::Cpu.
TEMPLATE_TEST_CASE("Thrust's softmax_cross_entropy sums an empty batch and a full one", "[backend]",
                   hpcps::backend::ThrustOmp, hpcps::backend::ThrustCpp) {
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    const TestType backend(threads);  // fresh: its scratch is empty
    const auto empty = backend.softmax_cross_entropy(nullptr, nullptr, 0, 10, true);
    CHECK(empty.loss_sum == 0.0);
    CHECK(empty.correct == 0);
    CHECK(empty.count == 0);

    std::vector<float> logits = {2.0f, 0.5f, -1.0f, 0.0f, 3.0f, 1.0f, 0.25f, 0.25f, 4.0f};
    std::vector<float> reference_logits = logits;
    const std::vector<std::int32_t> labels = {0, 2, 2};
    const auto full = backend.softmax_cross_entropy(logits.data(), labels.data(), 3, 3, true);
    const auto expected =
        hpcps::backend::Cpu(1).softmax_cross_entropy(reference_logits.data(), labels.data(), 3, 3, true);
    CHECK(full.loss_sum == Approx(expected.loss_sum).epsilon(1e-6));
    CHECK(full.correct == expected.correct);
    CHECK(full.correct == 2);
    CHECK(full.count == 3);
    for (std::size_t i = 0; i < logits.size(); ++i) CHECK(logits[i] == Approx(reference_logits[i]).margin(1e-6));

    const auto empty_again = backend.softmax_cross_entropy(logits.data(), labels.data(), 0, 3, true);
    CHECK(empty_again.loss_sum == 0.0);
    CHECK(empty_again.count == 0);
  }
}
