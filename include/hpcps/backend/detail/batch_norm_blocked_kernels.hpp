#pragma once
// Batch normalization's training kernels over a convolution's channel-blocked output
// (backend/channel_blocked.hpp), for backend::BasicCpu: the forward pass reads x blocked and writes
// y in NCHW, the backward pass reads x blocked and dy in NCHW and writes dx blocked, where the
// convolution's backward pass reads it. The reorders to and from NCHW around the convolution are
// then not run: two passes over the tensor of the 4 of each convolution, which took 45 ms of a
// 225 ms ResNet step (docs/performance.md, section 9).
//
// A work item is a group of 8 channels, whose values lie next to each other at every pixel. Each
// channel's sums go through the same lanes in the same order as the NCHW kernels
// (batch_norm_kernels.hpp: value p of a plane into lane p % 8, samples in order), in vector
// registers across the 8 channels, and end in the same functions, and every elementwise value is
// the same expression: the floats are the NCHW kernels' exactly, which test_batch_norm checks.
// Between the layouts, tiles of 8 pixels x 8 channels are transposed in registers.
#include <algorithm>
#include <cstddef>
#include <type_traits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "hpcps/backend/channel_blocked.hpp"
#include "hpcps/backend/detail/batch_norm_kernels.hpp"
#include "hpcps/nn/activation.hpp"

namespace hpcps::backend::detail {

// Channels per work item; a block (8 or 16 in oneDNN's layouts) holds whole groups.
inline constexpr std::size_t batch_norm_group = 8;
// Pixels per tile of the elementwise passes: a tile of a group is 1 KB, in L1 between the steps.
inline constexpr std::size_t batch_norm_tile = 32;
static_assert(batch_norm_tile % batch_norm_lanes == 0 && batch_norm_lanes == batch_norm_group,
              "a tile starts at lane 0 and holds whole 8 x 8 squares");

// dst[i * dst_stride + j] = src[j * src_stride + i] for i, j < 8: moves values, computes nothing.
inline void transpose_8x8(const float* src, std::size_t src_stride, float* dst, std::size_t dst_stride) {
#if defined(__AVX__)
  const __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + src_stride),
               r2 = _mm256_loadu_ps(src + 2 * src_stride), r3 = _mm256_loadu_ps(src + 3 * src_stride),
               r4 = _mm256_loadu_ps(src + 4 * src_stride), r5 = _mm256_loadu_ps(src + 5 * src_stride),
               r6 = _mm256_loadu_ps(src + 6 * src_stride), r7 = _mm256_loadu_ps(src + 7 * src_stride);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
               t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
               u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
               u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
               u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2)),
               u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)),
               u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2)),
               u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)),
               u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + dst_stride, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * dst_stride, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * dst_stride, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * dst_stride, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * dst_stride, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * dst_stride, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * dst_stride, _mm256_permute2f128_ps(u3, u7, 0x31));
#else
  for (std::size_t i = 0; i < 8; ++i) {
    for (std::size_t j = 0; j < 8; ++j) dst[i * dst_stride + j] = src[j * src_stride + i];
  }
#endif
}

// Pixel-major rows (tile[i][k], pixel p0 + i) to channel planes (plane k at planes + k * pixels),
// `len` pixels; and back. Whole squares in registers, the rest value by value.
inline void tile_to_planes(const float (&tile)[batch_norm_tile][batch_norm_group], std::size_t len, float* planes,
                           std::size_t pixels, std::size_t p0) {
  std::size_t i = 0;
  for (; i + 8 <= len; i += 8) transpose_8x8(&tile[i][0], batch_norm_group, planes + p0 + i, pixels);
  for (; i < len; ++i) {
    for (std::size_t k = 0; k < batch_norm_group; ++k) planes[k * pixels + p0 + i] = tile[i][k];
  }
}
inline void planes_to_tile(const float* planes, std::size_t pixels, std::size_t p0, std::size_t len,
                           float (&tile)[batch_norm_tile][batch_norm_group]) {
  std::size_t i = 0;
  for (; i + 8 <= len; i += 8) transpose_8x8(planes + p0 + i, pixels, &tile[i][0], batch_norm_group);
  for (; i < len; ++i) {
    for (std::size_t k = 0; k < batch_norm_group; ++k) tile[i][k] = planes[k * pixels + p0 + i];
  }
}

// The lane sums of a group, [lane][channel]: copied into a local array around a sample's loop so
// the compiler keeps them in vector registers there.
using BatchNormLaneSums = double[batch_norm_lanes][batch_norm_group];
inline void copy_lane_sums(const BatchNormLaneSums& from, BatchNormLaneSums& to) {
  for (std::size_t j = 0; j < batch_norm_lanes; ++j) {
    for (std::size_t k = 0; k < batch_norm_group; ++k) to[j][k] = from[j][k];
  }
}

// A work item: `span` groups of 8 channels that share the pixels' cache lines (a block of 16
// channels is 64 bytes a pixel), sample by sample, so each line is read from memory once and its
// second half from cache. (Groups as separate items read each line twice: 1.5 against 1.15 ms for
// a training pass at 128 x 16 x 28 x 28 on one thread.) One group per item where there are fewer
// blocks than threads.
inline constexpr std::size_t batch_norm_max_span = 2;  // blocks of up to 16 channels

// batch_norm_train's work for `span` groups from 8 item span on (BatchNormTrainChannel's comment).
template <class Act, std::size_t Block>
struct BatchNormTrainBlocked {
  ChannelBlocked x;
  const float *gamma, *beta;
  float *y, *mean, *inv_std, *moments;
  std::size_t count, channels, pixels;
  float epsilon;
  float* affine = nullptr;
  std::size_t span = 1;

  static constexpr std::size_t L = batch_norm_lanes, G = batch_norm_group, T = batch_norm_tile;

  void operator()(std::size_t item) const {
    const double m = static_cast<double>(count) * static_cast<double>(pixels);
    BatchNormLaneSums s[batch_norm_max_span] = {}, q[batch_norm_max_span] = {};
    for (std::size_t n = 0; n < count; ++n) {
      for (std::size_t g = 0; g < span; ++g) accumulate(n, (item * span + g) * G, s[g], q[g]);
    }
    float scale[batch_norm_max_span][G], shift[batch_norm_max_span][G];
    for (std::size_t g = 0; g < span; ++g) {
      for (std::size_t k = 0; k < G; ++k) {
        double sk[L], qk[L];
        for (std::size_t j = 0; j < L; ++j) sk[j] = s[g][j][k], qk[j] = q[g][j][k];
        const BatchNormAffine a = batch_norm_train_finish(sk, qk, m, (item * span + g) * G + k, *this);
        scale[g][k] = a.scale, shift[g][k] = a.shift;
      }
    }
    for (std::size_t n = 0; n < count; ++n) {
      for (std::size_t g = 0; g < span; ++g) normalize(n, (item * span + g) * G, scale[g], shift[g]);
    }
  }

 private:
  // Sample n's values of channels c0 .. c0 + 7 into the lanes (in registers here, stored after).
  void accumulate(std::size_t n, std::size_t c0, BatchNormLaneSums& s_out, BatchNormLaneSums& q_out) const {
    BatchNormLaneSums s, q;
    copy_lane_sums(s_out, s);
    copy_lane_sums(q_out, q);
    const float* in = x.data + x.index(n, c0, 0, channels, pixels);
    constexpr std::size_t b = Block;
    const std::size_t body = pixels - pixels % L;
    for (std::size_t p = 0; p < body; p += L) {
      for (std::size_t j = 0; j < L; ++j) {
        for (std::size_t k = 0; k < G; ++k) {
          const double v = in[(p + j) * b + k];
          s[j][k] += v;
          q[j][k] += v * v;
        }
      }
    }
    for (std::size_t p = body; p < pixels; ++p) {
      for (std::size_t k = 0; k < G; ++k) {
        const double v = in[p * b + k];
        s[p - body][k] += v;
        q[p - body][k] += v * v;
      }
    }
    copy_lane_sums(s, s_out);
    copy_lane_sums(q, q_out);
  }
  void normalize(std::size_t n, std::size_t c0, const float (&scale)[G], const float (&shift)[G]) const {
    const float* in = x.data + x.index(n, c0, 0, channels, pixels);
    float* out = y + (n * channels + c0) * pixels;
    float tile[T][G];
    for (std::size_t p0 = 0; p0 < pixels; p0 += T) {
      const std::size_t len = std::min(T, pixels - p0);
      for (std::size_t i = 0; i < len; ++i) {
        for (std::size_t k = 0; k < G; ++k) tile[i][k] = Act::forward(in[(p0 + i) * Block + k] * scale[k] + shift[k]);
      }
      tile_to_planes(tile, len, out, pixels, p0);
    }
  }
};

// batch_norm_backward's work for `span` groups (BatchNormBackwardChannel's comment), dx blocked.
template <class Act, std::size_t Block>
struct BatchNormBackwardBlocked {
  ChannelBlocked x;
  const float *dy, *gamma, *mean, *inv_std;
  ChannelBlocked dx;
  float *dgamma, *dbeta;
  std::size_t count, channels, pixels;
  const float* affine = nullptr;
  std::size_t span = 1;

  static constexpr std::size_t L = batch_norm_lanes, G = batch_norm_group, T = batch_norm_tile;

  void operator()(std::size_t item) const {
    const double m = static_cast<double>(count) * static_cast<double>(pixels);
    BatchNormLaneSums s[batch_norm_max_span] = {}, t[batch_norm_max_span] = {};  // as the training pass's
    for (std::size_t n = 0; n < count; ++n) {
      for (std::size_t g = 0; g < span; ++g) accumulate(n, (item * span + g) * G, s[g], t[g]);
    }
    Constants d[batch_norm_max_span];
    for (std::size_t g = 0; g < span; ++g) {
      const std::size_t c0 = (item * span + g) * G;
      for (std::size_t k = 0; k < G; ++k) {
        double sk[L], tk[L];
        for (std::size_t j = 0; j < L; ++j) sk[j] = s[g][j][k], tk[j] = t[g][j][k];
        const BatchNormInputGradient e = batch_norm_backward_finish(sk, tk, m, c0 + k, *this);
        d[g].k[k] = e.k, d[g].mean_dy[k] = e.mean_dy, d[g].mean_dy_xhat[k] = e.mean_dy_xhat, d[g].mu[k] = e.mu;
        d[g].r[k] = e.r;
      }
    }
    for (std::size_t n = 0; n < count; ++n) {
      for (std::size_t g = 0; g < span; ++g) input_gradient(n, (item * span + g) * G, d[g]);
    }
  }

 private:
  // dx's per-channel constants (BatchNormInputGradient's) of a group, channel by channel.
  struct Constants {
    float k[G], mean_dy[G], mean_dy_xhat[G], mu[G], r[G];
  };
  void accumulate(std::size_t n, std::size_t c0, BatchNormLaneSums& s_out, BatchNormLaneSums& t_out) const {
    BatchNormLaneSums s, t;
    copy_lane_sums(s_out, s);
    copy_lane_sums(t_out, t);
    const float* in = x.data + x.index(n, c0, 0, channels, pixels);
    constexpr std::size_t b = Block;
    float h[T][G];  // a tile's gradient of the normalisation's output, pixel by pixel
    for (std::size_t p0 = 0; p0 < pixels; p0 += T) {
      const std::size_t len = std::min(T, pixels - p0);
      gather(n, c0, p0, len, in, h);
      // Tiles start at lane 0, so pixel p0 + i0 + j meets lane j.
      std::size_t i0 = 0;
      for (; i0 + L <= len; i0 += L) {
        for (std::size_t j = 0; j < L; ++j) {
          for (std::size_t k = 0; k < G; ++k) {
            const double g = h[i0 + j][k];
            s[j][k] += g;
            t[j][k] += g * in[(p0 + i0 + j) * b + k];
          }
        }
      }
      for (std::size_t j = 0; i0 + j < len; ++j) {
        for (std::size_t k = 0; k < G; ++k) {
          const double g = h[i0 + j][k];
          s[j][k] += g;
          t[j][k] += g * in[(p0 + i0 + j) * b + k];
        }
      }
    }
    copy_lane_sums(s, s_out);
    copy_lane_sums(t, t_out);
  }
  void input_gradient(std::size_t n, std::size_t c0, const Constants& d) const {
    const float* in = x.data + x.index(n, c0, 0, channels, pixels);
    float* out = dx.data + dx.index(n, c0, 0, channels, pixels);
    float h[T][G];
    for (std::size_t p0 = 0; p0 < pixels; p0 += T) {
      const std::size_t len = std::min(T, pixels - p0);
      gather(n, c0, p0, len, in, h);
      for (std::size_t i = 0; i < len; ++i) {
        for (std::size_t k = 0; k < G; ++k) {
          out[(p0 + i) * Block + k] = batch_norm_input_gradient(h[i][k], in[(p0 + i) * Block + k], d.k[k],
                                                                   d.mean_dy[k], d.mean_dy_xhat[k], d.mu[k], d.r[k]);
        }
      }
    }
  }
  // h[i][k] = the normalisation's output gradient at pixel p0 + i of channel c0 + k: dy, or with
  // Act the same product as BatchNormBackwardChannel's.
  void gather(std::size_t n, std::size_t c0, std::size_t p0, std::size_t len, const float* in, float (&h)[T][G]) const {
    planes_to_tile(dy + (n * channels + c0) * pixels, pixels, p0, len, h);
    if constexpr (!std::is_same_v<Act, nn::Identity>) {
      float scale[G], shift[G];
      for (std::size_t k = 0; k < G; ++k) scale[k] = affine[c0 + k], shift[k] = affine[channels + c0 + k];
      for (std::size_t i = 0; i < len; ++i) {
        for (std::size_t k = 0; k < G; ++k) {
          h[i][k] = batch_norm_activated_gradient<Act>(h[i][k], in[(p0 + i) * Block + k], scale[k], shift[k]);
        }
      }
    }
  }
};

}  // namespace hpcps::backend::detail
