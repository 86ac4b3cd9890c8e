#pragma once
// Batch normalization's kernels (nn::BatchNorm), NCHW samples, as functors over raw pointers that
// both backends run: backend::BasicCpu over its OpenMP threads, backend::Thrust on its system. A
// channel's statistics are one work item (its count x pixels values, summed in double, so the mean
// and variance do not depend on how the batch was split into threads); the evaluation-mode affine
// map is one work item per element.
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "hpcps/nn/activation.hpp"

namespace hpcps::backend::detail {

// A channel's values, plane by plane, into Lanes partial sums in double: the order depends on the
// shape alone (never on threads or the backend), and independent sums let the compiler keep them
// in vector registers instead of waiting on one chain of additions.
inline constexpr std::size_t batch_norm_lanes = 8;

// Channel c's scale and shift, y = x scale + shift (before the activation).
struct BatchNormAffine {
  float scale, shift;
};

// The end of a training pass over channel c, from its Lanes partial sums of x and x^2 (`m` values):
// mean, 1 / sqrt(var + eps), the raw moments per sample and, where kept, scale and shift, written
// through `k`'s pointers (k: a train kernel). Every layout's kernel ends here, so they give the
// same floats from the same sums.
template <class Kernel>
HPCPS_HOST_DEVICE BatchNormAffine batch_norm_train_finish(const double* s, const double* q, double m, std::size_t c,
                                                          const Kernel& k) {
  double sum = 0.0, squares = 0.0;
  for (std::size_t j = 0; j < batch_norm_lanes; ++j) sum += s[j], squares += q[j];
  const double mu = sum / m;
  const double var = fmax(squares / m - mu * mu, 0.0);
  const double r = 1.0 / sqrt(var + static_cast<double>(k.epsilon));
  const float scale = static_cast<float>(k.gamma[c] * r), shift = static_cast<float>(k.beta[c] - k.gamma[c] * mu * r);
  if (k.affine != nullptr) {
    k.affine[c] = scale;
    k.affine[k.channels + c] = shift;
  }
  k.mean[c] = static_cast<float>(mu);
  k.inv_std[c] = static_cast<float>(r);
  const double per_sample = static_cast<double>(k.pixels);
  k.moments[c] = static_cast<float>(sum / per_sample);
  k.moments[k.channels + c] = static_cast<float>(squares / per_sample);
  return {scale, shift};
}

// Training mode, channel c over the batch: mean, 1 / sqrt(var + eps) (the biased variance, as the
// normalisation uses it), y = gamma (x - mean) / sqrt(var + eps) + beta, and the channel's two raw
// moments summed over samples, moments[c] = sum_n mean_p x, moments[C + c] = sum_n mean_p x^2:
// what a worker pushes so that the server's mean over all samples is the global batch's. One pass
// gathers the sums of x and x^2 (in double: the variance E[x^2] - E[x]^2 keeps 8 digits unless
// the mean exceeds the standard deviation 10^4 times), a second writes y.
//
// Act other than nn::Identity: y = Act(that), the activation layer after the normalisation in the
// same pass (nn::BatchNorm::forward_activated), and `affine` (2C floats) keeps each channel's
// scale and shift, so that the backward pass recomputes Act's input bit for bit from x instead of
// reading y again.
template <class Act = nn::Identity>
struct BatchNormTrainChannel {
  const float *x, *gamma, *beta;
  float *y, *mean, *inv_std, *moments;
  std::size_t count, channels, pixels;
  float epsilon;
  float* affine = nullptr;  // [scale per channel, shift per channel], with Act
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
    const BatchNormAffine a = batch_norm_train_finish(s, q, m, c, *this);
    for (std::size_t n = 0; n < count; ++n) {
      const float* in = x + (n * channels + c) * pixels;
      float* out = y + (n * channels + c) * pixels;
      for (std::size_t p = 0; p < pixels; ++p) out[p] = Act::forward(in[p] * a.scale + a.shift);
    }
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

// dx of one value from the normalisation's output gradient h and the input x, with channel c's
// constants: k = gamma / sqrt(var + eps), mean(dy), mean(dy xhat), the mean and 1 / sqrt(var + eps).
HPCPS_HOST_DEVICE inline float batch_norm_input_gradient(float h, float x, float k, float mean_dy, float mean_dy_xhat,
                                                         float mu, float r) {
  return k * (h - mean_dy - (x - mu) * r * mean_dy_xhat);
}
struct BatchNormInputGradient {
  float k, mean_dy, mean_dy_xhat, mu, r;
  HPCPS_HOST_DEVICE float operator()(float h, float x) const {
    return batch_norm_input_gradient(h, x, k, mean_dy, mean_dy_xhat, mu, r);
  }
};

// The end of a backward pass over channel c, from its Lanes partial sums of dy and dy x (`m`
// values): dgamma and dbeta written through `k`'s pointers (k: a backward kernel), and the
// constants of dx. Shared by every layout's kernel, as batch_norm_train_finish.
template <class Kernel>
HPCPS_HOST_DEVICE BatchNormInputGradient batch_norm_backward_finish(const double* s, const double* t, double m,
                                                                    std::size_t c, const Kernel& k) {
  const float mu = k.mean[c], r = k.inv_std[c];
  double sum_dy = 0.0, sum_dy_x = 0.0;
  for (std::size_t j = 0; j < batch_norm_lanes; ++j) sum_dy += s[j], sum_dy_x += t[j];
  // sum dy xhat = r (sum dy x - mu sum dy): products of floats, exact in double.
  const double sum_dy_xhat = static_cast<double>(r) * (sum_dy_x - static_cast<double>(mu) * sum_dy);
  k.dgamma[c] = static_cast<float>(sum_dy_xhat);
  k.dbeta[c] = static_cast<float>(sum_dy);
  return {k.gamma[c] * r, static_cast<float>(sum_dy / m), static_cast<float>(sum_dy_xhat / m), mu, r};
}

// The gradient of the normalisation's output where activation Act follows it: g, the gradient of
// Act's output, times Act' at Act(x scale + shift), recomputed from x (no pass reads Act's output).
template <class Act>
HPCPS_HOST_DEVICE float batch_norm_activated_gradient(float g, float x, float scale, float shift) {
  return g * Act::derivative_from_output(Act::forward(x * scale + shift));
}

// Backward, channel c: dgamma = sum dy xhat, dbeta = sum dy and, unless dx is null,
// dx = gamma / sqrt(var + eps) (dy - mean(dy) - xhat mean(dy xhat)), with the forward pass's
// mean and 1 / sqrt(var + eps). The sums as in the forward pass: lanes in double, a fixed order.
//
// Act other than nn::Identity: dy is the gradient of Act's output, and the gradient of the
// normalisation's output is dy Act'(Act(x scale + shift)), with the scale and shift the forward
// pass kept in `affine`: the activation layer's backward pass inside this one, with the floats it
// would have computed, and no pass over Act's output.
template <class Act = nn::Identity>
struct BatchNormBackwardChannel {
  const float *x, *dy, *gamma, *mean, *inv_std;
  float *dx, *dgamma, *dbeta;
  std::size_t count, channels, pixels;
  const float* affine = nullptr;  // BatchNormTrainChannel<Act>'s, with Act
  static constexpr bool activated = !std::is_same_v<Act, nn::Identity>;
  // With Act, a plane's gradient is formed a chunk at a time in a buffer on the stack, by a loop
  // of float operations alone, which the sums and dx then read as they read dy without Act. (The
  // activation's derivative inside the double-sum loop measured slower than the ReLU layer's pass
  // followed by the plain kernel: 2.35 against 2.1 ms at 128 x 16 x 28 x 28, one thread; chunked,
  // 1.5 ms.) A multiple of the lanes, so each value still meets the same partial sum.
  static constexpr std::size_t chunk = activated ? 32 * batch_norm_lanes : 1;  // the stack buffer's floats

  HPCPS_HOST_DEVICE void operator()(std::size_t c) const {
    const double m = static_cast<double>(count) * static_cast<double>(pixels);
    double s[batch_norm_lanes] = {}, t[batch_norm_lanes] = {};
    float scratch[chunk];
    const std::size_t step = activated ? chunk : pixels;  // without Act, a plane at once
    for (std::size_t n = 0; n < count; ++n) {
      const float* in = x + (n * channels + c) * pixels;
      const float* g = dy + (n * channels + c) * pixels;
      for (std::size_t p = 0; p < pixels; p += step) {
        const std::size_t len = pixels - p < step ? pixels - p : step;
        sum_into(s, t, p, len, in + p, through(g + p, in + p, len, c, scratch));
      }
    }
    const BatchNormInputGradient d = batch_norm_backward_finish(s, t, m, c, *this);
    if (dx == nullptr) return;
    for (std::size_t n = 0; n < count; ++n) {
      const float* in = x + (n * channels + c) * pixels;
      const float* g = dy + (n * channels + c) * pixels;
      float* out = dx + (n * channels + c) * pixels;
      for (std::size_t p = 0; p < pixels; p += step) {
        const std::size_t len = pixels - p < step ? pixels - p : step;
        const float* h = through(g + p, in + p, len, c, scratch);
        for (std::size_t i = 0; i < len; ++i) out[p + i] = d(h[i], in[p + i]);
      }
    }
  }

 private:
  // The gradient of the normalisation's output for `len` values from `g` on: g itself without Act.
  HPCPS_HOST_DEVICE const float* through(const float* g, const float* in, std::size_t len, std::size_t c,
                                         float* scratch) const {
    if constexpr (activated) {
      const float scale = affine[c], shift = affine[channels + c];
      for (std::size_t i = 0; i < len; ++i) scratch[i] = batch_norm_activated_gradient<Act>(g[i], in[i], scale, shift);
      return scratch;
    } else {
      (void)in, (void)len, (void)c, (void)scratch;
      return g;
    }
  }
  // Values `first`..`first + len` of a plane into the lanes: value p meets lane p % L, the plane's
  // last pixels % L values lanes 0.. in order (the order fixed by the shape alone).
  HPCPS_HOST_DEVICE void sum_into(double* s, double* t, std::size_t first, std::size_t len, const float* in,
                                  const float* g) const {
    constexpr std::size_t L = batch_norm_lanes;
    const std::size_t body = pixels - pixels % L;
    const std::size_t vector_end = first >= body ? 0 : (first + len < body ? len : body - first);
    for (std::size_t p = 0; p < vector_end; p += L) {
      for (std::size_t j = 0; j < L; ++j) {
        const double gj = g[p + j];
        s[j] += gj;
        t[j] += gj * in[p + j];
      }
    }
    for (std::size_t p = vector_end; p < len; ++p) {
      const double gj = g[p];
      s[first + p - body] += gj;
      t[first + p - body] += gj * in[p];
    }
  }
};

}  // namespace hpcps::backend::detail
