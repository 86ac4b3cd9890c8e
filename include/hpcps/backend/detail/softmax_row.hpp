#pragma once
// Softmax cross-entropy of one row of logits, shared by every backend so they do the same
// arithmetic: max, log-sum-exp loss, argmax, and (optionally) the logits overwritten with
// d(loss)/d(logits) = softmax - onehot.
#include <cmath>
#include <cstddef>

#include "hpcps/nn/activation.hpp"  // HPCPS_HOST_DEVICE

namespace hpcps::backend::detail {

struct RowLoss {
  float loss;
  bool hit;
};

HPCPS_HOST_DEVICE inline RowLoss softmax_cross_entropy_row(float* z, std::size_t label, std::size_t cols,
                                                           bool write_delta) {
  std::size_t arg = 0;
  float top = z[0];
  for (std::size_t c = 1; c < cols; ++c) {
    if (z[c] > top) {
      top = z[c];
      arg = c;
    }
  }
  float sum = 0.0f;
  for (std::size_t c = 0; c < cols; ++c) sum += expf(z[c] - top);
  const RowLoss result{logf(sum) - (z[label] - top), arg == label};
  if (write_delta) {
    const float inv = 1.0f / sum;
    for (std::size_t c = 0; c < cols; ++c) z[c] = expf(z[c] - top) * inv;
    z[label] -= 1.0f;
  }
  return result;
}

}  // namespace hpcps::backend::detail
