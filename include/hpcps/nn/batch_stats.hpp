#pragma once
#include <cstddef>

namespace hpcps::nn {

// Sums, not means: workers add them up across ranks and divide once by the total count, which is
// exact for uneven batches.
struct BatchStats {
  double loss_sum = 0.0;
  std::size_t correct = 0;
  std::size_t count = 0;

  BatchStats& operator+=(const BatchStats& other) {
    loss_sum += other.loss_sum;
    correct += other.correct;
    count += other.count;
    return *this;
  }
  double mean_loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
  double accuracy() const { return count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0; }
};

}  // namespace hpcps::nn
