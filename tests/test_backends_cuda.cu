// backend::ThrustCuda against backend::Cpu: forward pass, loss, accuracy and gradients on random
// data (fresh seed; HPCPS_TEST_SEED replays one), each within the bound rounding allows whatever
// the order of the sums (hpcps_test::summation_bound, from the network's longest sum and its
// depth): cuBLAS and CUB sum in other orders than OpenBLAS. Data near a ReLU or max-pooling kink
// are drawn again (hpcps_test::near_kink). The bounds were checked on 1,000 seeds with CpuEigen, a
// host backend that sums in another order: 0 failures (docs/backends.md#tolerance). Built by nvcc.
// Without a usable CUDA device it says so and exits 77, which ctest reports as skipped.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "backend_equivalence.hpp"
#include "layer_equivalence.hpp"
#include "hpcps/backend/backend_traits.hpp"
#include "hpcps/backend/thrust.hpp"

static_assert(hpcps::backend::is_backend_v<hpcps::backend::ThrustCuda>);
static_assert(!hpcps::backend::ThrustCuda::host_accessible);

namespace {

int failures = 0;

void expect_small(const char* what, double value, double bound) {
  const bool ok = value < bound;
  std::printf("%-44s %.3g (bound %.2g) %s\n", what, value, bound, ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

// `longest`: the most terms one sum of the step adds (a dot product, or a weight gradient's sum
// over the batch and a convolution's pixels); `levels`: sums chained from input to gradient
// (twice the layers with parameters).
template <class Network>
void check(const char* name, const Network& net, const hpcps::backend::ThrustCuda& backend, std::size_t batch,
           std::uint64_t seed, std::size_t longest, std::size_t levels) {
  const auto d = hpcps_test::compare_with_cpu(net, backend, batch, seed);
  const double relative_bound = hpcps_test::summation_bound(longest, levels);
  std::printf("-- %s, batch %zu (longest sum %zu, %zu levels)\n", name, batch, longest, levels);
  expect_small("  outputs (logits), largest relative difference", d.forward, relative_bound);
  expect_small("  loss, relative difference", d.loss, relative_bound);
  expect_small("  evaluation loss, relative difference", d.evaluation, relative_bound);
  expect_small("  gradient, largest relative difference", d.gradient, relative_bound);
  if (d.correct_backend != d.correct_reference) {
    std::printf("  correct predictions differ: %zu vs %zu FAILED\n", d.correct_backend, d.correct_reference);
    ++failures;
  }
}

// One layer against backend::Cpu from the same inputs: each ratio of error to the derived bound
// must be <= 1 (layer_equivalence.hpp).
template <class L>
void check_layer(const hpcps::backend::ThrustCuda& backend, const L& layer, hpcps::nn::Shape in,
                 hpcps_test::Inputs kind, std::size_t terms, std::size_t count, std::uint64_t seed, double& worst) {
  const auto r = hpcps_test::compare_layer(backend, layer, in, kind, terms, count, seed);
  const double ratio = std::max({r.y, r.dx, r.grad});
  worst = std::max(worst, ratio);
  if (ratio > 1.0 || !r.nonzero) {
    std::printf("  %s on %s, batch %zu, seed %llu: error / bound %.3g (outputs %.3g, dx %.3g, grad %.3g)%s FAILED\n",
                L::name, hpcps::nn::to_string(in).c_str(), count, static_cast<unsigned long long>(seed), ratio, r.y,
                r.dx, r.grad, r.nonzero ? "" : ", outputs all zero");
    ++failures;
  }
}

}  // namespace

int main() {
  if (!hpcps::backend::detail::cuda_device_available()) {
    std::printf("SKIPPED: no usable CUDA device here (cudaGetDeviceCount failed or found none); "
                "run bench/gpu/check.sh on a GPU machine\n");
    return 77;
  }
  std::uint64_t seed = 0;
  if (const char* s = std::getenv("HPCPS_TEST_SEED")) {
    seed = std::strtoull(s, nullptr, 10);
  } else {
    seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  }
  std::printf("HPCPS_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  const hpcps::backend::ThrustCuda backend(1);
  {
    // Every layer, from the same inputs as the CPU's, over 20 seeds, plus the CNN example's
    // layers at width 32 (longest sums: C k k + 1, count P, out k k).
    namespace nn = hpcps::nn;
    double worst = 0.0;
    for (std::uint64_t s = seed; s < seed + 20; ++s) {
      hpcps_test::every_layer_case(
          [&](const auto& layer, nn::Shape in, hpcps_test::Inputs kind, std::size_t terms, std::size_t count) {
            check_layer(backend, layer, in, kind, terms, count, s, worst);
          },
          5);
      const nn::Shape in{3, 4, 4};
      check_layer(backend, nn::Dropout(in, {0.4f, s}), in, hpcps_test::Inputs::normal, 1, 5, s, worst);
    }
    const std::size_t n = 16;
    const nn::Shape first{1, 28, 28}, second{32, 14, 14};
    check_layer(backend, nn::Conv2d(first, {32, 5, 2}), first, hpcps_test::Inputs::normal, n * 784, n, seed, worst);
    check_layer(backend, nn::Conv2d(second, {64, 5, 2}), second, hpcps_test::Inputs::normal, n * 196, n, seed,
                worst);
    check_layer(backend, nn::MaxPool2d(nn::Shape{32, 28, 28}, {2}), nn::Shape{32, 28, 28}, hpcps_test::Inputs::normal,
                1, n, seed, worst);
    check_layer(backend, nn::Dense(nn::Shape{3136, 1, 1}, {128}), nn::Shape{3136, 1, 1}, hpcps_test::Inputs::normal,
                3137, n, seed, worst);
    std::printf("-- every layer, 20 seeds, and the CNN example's layers at width 32: worst error / bound %.3g %s\n",
                worst, worst <= 1.0 ? "ok" : "FAILED");
  }
  for (std::size_t batch : {1u, 7u, 64u, 256u}) {
    check("mlp relu 784-256-128-10", hpcps::nn::Mlp<hpcps::nn::Relu>({784, 256, 128, 10}), backend, batch, seed + batch,
          784, 6);
  }
  check("mlp tanh 20-30-5", hpcps::nn::Mlp<hpcps::nn::Tanh>({20, 30, 5}), backend, 16, seed, 30, 4);
  check("mlp sigmoid 20-30-5", hpcps::nn::Mlp<hpcps::nn::Sigmoid>({20, 30, 5}), backend, 16, seed, 30, 4);
  for (std::size_t batch : {1u, 7u, 64u}) {
    // A first convolution's weight gradient sums batch x 28 x 28 products; the smooth network's
    // strided one batch x 7 x 7.
    check("cnn: the example's at width 4", hpcps_test::example_cnn(), backend, batch, seed + batch, batch * 784, 8);
    check("cnn: strided, tanh, sigmoid, average pooling", hpcps_test::smooth_cnn(), backend, batch, seed + batch,
          std::max<std::size_t>(batch * 49, 18), 6);
  }
  check("softmax regression 50-10", hpcps::nn::SoftmaxRegression(50, 10), backend, 32, seed, 50, 2);
  std::printf("%s\n", failures == 0 ? "all CUDA equivalence checks passed" : "CUDA equivalence checks FAILED");
  return failures == 0 ? 0 : 1;
}
