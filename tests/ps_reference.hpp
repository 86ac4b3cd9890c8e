#pragma once
// References the parameter-server tests compare with: plain minibatch SGD in one process, a
// relative difference, and a bitwise fingerprint of a parameter vector.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "hpcps/backend/cpu.hpp"
#include "hpcps/data/dataset.hpp"

namespace hpcps_test {

// Plain minibatch SGD in one process: the reference a synchronous PS must reproduce.
template <class Network>
std::vector<float> sequential_sgd(const Network& net, const hpcps::data::Dataset& d, std::size_t global_batch,
                                  std::size_t steps, float lr, std::uint64_t seed) {
  const hpcps::backend::Cpu backend(1);
  std::vector<float> params(net.parameter_count()), grad(net.parameter_count());
  net.initialize(params.data(), seed);
  auto ws = net.make_workspace(backend, global_batch);
  for (std::size_t t = 0; t < steps; ++t) {
    const std::size_t first = t * global_batch;
    net.gradient(backend, ws, params.data(), d.images.data() + first * d.features, d.labels.data() + first,
                 global_batch, grad.data());
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= lr * grad[i] / static_cast<float>(global_batch);
  }
  return params;
}

inline double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / std::max(1e-3, std::abs(static_cast<double>(b[i]))));
  }
  return worst;
}

// max |a - b| over max |b|: differences in the order of fp32 additions move each element by a
// few ulps of the values it was summed from, so small elements are compared at the scale of the large.
inline double difference_over_largest(const std::vector<float>& a, const std::vector<float>& b) {
  double difference = 0.0, largest = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference = std::max(difference, std::abs(static_cast<double>(a[i]) - b[i]));
    largest = std::max(largest, std::abs(static_cast<double>(b[i])));
  }
  return difference / largest;
}

// FNV-1a over the bytes: equal on every worker iff their parameters are bitwise equal.
inline std::uint64_t fingerprint(const std::vector<float>& v) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

}  // namespace hpcps_test
