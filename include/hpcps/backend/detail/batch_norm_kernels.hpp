#pragma once
// Batch normalization's kernels (nn::BatchNorm), NCHW samples, as functors over raw pointers that
// both backends run: backend::BasicCpu over its OpenMP threads, backend::Thrust on its system. A
// channel's statistics are one work item (its count x pixels values, summed in double, so the mean
// and variance do not depend on how the batch was split into threads); the evaluation-mode affine
// map is one work item per element.
#include <cmath>
#include <cstddef>

#include "hpcps/nn/activation.hpp"  // HPCPS_HOST_DEVICE

namespace hpcps::backend::detail {

// A channel's values, plane by plane, into Lanes partial sums in double: the order depends on the
// shape alone (never on threads or the backend), and independent sums let the compiler keep them
// in vector registers instead of waiting on one chain of additions.
inline constexpr std::size_t batch_norm_lanes = 8;

// Training mode, channel c over the batch: mean, 1 / sqrt(var + eps) (the biased variance, as the
// normalisation uses it), y = gamma (x - mean) / sqrt(var + eps) + beta, and the channel's two raw
// moments summed over samples, moments[c] = sum_n mean_p x, moments[C + c] = sum_n mean_p x^2:
// what a worker pushes so that the server's mean over all samples is the global batch's. One pass
// gathers the sums of x and x^2 (in double: the variance E[x^2] - E[x]^2 keeps 8 digits unless
// the mean exceeds the standard deviation 10^4 times), a second writes y.
struct BatchNormTrainChannel {
  const float *x, *gamma, *beta;
  float *y, *mean, *inv_std, *moments;
  std::size_t count, channels, pixels;
  float epsilon;
  HPCPS_HOST_DEVICE void operator()(std::size_t c) const {
    constexpr std::size_t L = batch_norm_lanes;
    const double m = static_cast<double>(count) * static_cast<double>(pixels);
    double s[L] = {}, q[L] = {};
    const std::size_t body = pixels - pixels % L;
    for (std::size_t n = 0; n < count; ++n) {
      const float* plane = x + (n * channels + c) * pixels;
      for (std::size_t p = 0; p < body; p += L) {
        for (std::size_t j = 0; j < L; ++j) {
          const double v = plane[p + j];
          s[j] += v;
          q[j] += v * v;
        }
      }
      for (std::size_t p = body; p < pixels; ++p) {
        const double v = plane[p];
        s[p - body] += v;
        q[p - body] += v * v;
      }
    }
    double sum = 0.0, squares = 0.0;
    for (std::size_t j = 0; j < L; ++j) sum += s[j], squares += q[j];
    const double mu = sum / m;
    const double var = fmax(squares / m - mu * mu, 0.0);
    const double r = 1.0 / sqrt(var + static_cast<double>(epsilon));
    const float scale = static_cast<float>(gamma[c] * r), shift = static_cast<float>(beta[c] - gamma[c] * mu * r);
    for (std::size_t n = 0; n < count; ++n) {
      const float* in = x + (n * channels + c) * pixels;
      float* out = y + (n * channels + c) * pixels;
      for (std::size_t p = 0; p < pixels; ++p) out[p] = in[p] * scale + shift;
    }
    mean[c] = static_cast<float>(mu);
    inv_std[c] = static_cast<float>(r);
    const double per_sample = static_cast<double>(pixels);
    moments[c] = static_cast<float>(sum / per_sample);
    moments[channels + c] = static_cast<float>(squares / per_sample);
  }
};

// Evaluation mode, element i: normalised by the running moments, var = E[x^2] - E[x]^2.
struct BatchNormInferElement {
  const float *x, *gamma, *beta, *running;  // running: E[x] for each channel, then E[x^2]
  float* y;
  std::size_t channels, pixels;
  float epsilon;
  HPCPS_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t c = (i / pixels) % channels;
    const float mu = running[c];
    const float var = fmaxf(running[channels + c] - mu * mu, 0.0f);
    y[i] = gamma[c] * (x[i] - mu) / sqrtf(var + epsilon) + beta[c];
  }
};

// Backward, channel c: dgamma = sum dy xhat, dbeta = sum dy and, unless dx is null,
// dx = gamma / sqrt(var + eps) (dy - mean(dy) - xhat mean(dy xhat)), with the forward pass's
// mean and 1 / sqrt(var + eps). The sums as in the forward pass: lanes in double, a fixed order.
struct BatchNormBackwardChannel {
  const float *x, *dy, *gamma, *mean, *inv_std;
  float *dx, *dgamma, *dbeta;
  std::size_t count, channels, pixels;
  HPCPS_HOST_DEVICE void operator()(std::size_t c) const {
    constexpr std::size_t L = batch_norm_lanes;
    const double m = static_cast<double>(count) * static_cast<double>(pixels);
    const float mu = mean[c], r = inv_std[c];
    // sum dy xhat = r (sum dy x - mu sum dy): products of floats, exact in double.
    double s[L] = {}, t[L] = {};
    const std::size_t body = pixels - pixels % L;
    for (std::size_t n = 0; n < count; ++n) {
      const float* in = x + (n * channels + c) * pixels;
      const float* g = dy + (n * channels + c) * pixels;
      for (std::size_t p = 0; p < body; p += L) {
        for (std::size_t j = 0; j < L; ++j) {
          const double gj = g[p + j];
          s[j] += gj;
          t[j] += gj * in[p + j];
        }
      }
      for (std::size_t p = body; p < pixels; ++p) {
        const double gj = g[p];
        s[p - body] += gj;
        t[p - body] += gj * in[p];
      }
    }
    double sum_dy = 0.0, sum_dy_x = 0.0;
    for (std::size_t j = 0; j < L; ++j) sum_dy += s[j], sum_dy_x += t[j];
    const double sum_dy_xhat = static_cast<double>(r) * (sum_dy_x - static_cast<double>(mu) * sum_dy);
    dgamma[c] = static_cast<float>(sum_dy_xhat);
    dbeta[c] = static_cast<float>(sum_dy);
    if (dx == nullptr) return;
    const float k = gamma[c] * r, mean_dy = static_cast<float>(sum_dy / m),
                mean_dy_xhat = static_cast<float>(sum_dy_xhat / m);
    for (std::size_t n = 0; n < count; ++n) {
      const float* in = x + (n * channels + c) * pixels;
      const float* g = dy + (n * channels + c) * pixels;
      float* out = dx + (n * channels + c) * pixels;
      for (std::size_t p = 0; p < pixels; ++p) out[p] = k * (g[p] - mean_dy - (in[p] - mu) * r * mean_dy_xhat);
    }
  }
};

}  // namespace hpcps::backend::detail
