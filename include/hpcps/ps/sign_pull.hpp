#pragma once
// Scaled-sign pulls with error feedback on the server: compression both ways (Tang, Yu, Lian,
// Zhang and Liu 2019, "DoubleSqueeze: parallel stochastic gradient descent with double-pass
// error-compensated compression"; Zheng, Huang and Kwok 2019, "Communication-efficient
// distributed blockwise momentum SGD with error-feedback"). The server keeps the parameters a
// worker holds (its view); a pull sends the difference between the shard's parameters and the
// view in ps/sign_push.hpp's encoding (a bit per element, its sign, and an fp32 scale per
// sign_block elements, their mean magnitude), and both sides add the same +-scales with the same
// function, the worker to its parameters and the server to the view, so the two stay equal bit
// for bit. What a pull does not carry stays in (parameters - view) and goes with the next pulls:
// nothing of an update is lost, only delayed. A pull with scale s over a block of n elements
// takes |parameters - view|^2 down by n s^2, so a view left alone converges to the parameters.
//
// Why: where one server's link carries every worker's pull (a dedicated server node), the two
// workers' fp16 pulls of the CNN took 15.8 ms of a 50 ms clock at 1 Gbit/s
// (docs/model.md#on-a-throttled-link); scaled signs carry 1/16 of fp16's bytes.
//
// A message of a piece of n elements is one array of 32-bit words, sign_pull_words(n) of them:
// the bits of each block's fp32 scale, then the words of signs. One contiguous array, so it
// leaves as one plain message, not a struct. No MPI here.
//
// A pull may carry several passes, one after the other in the message: pass j encodes what is
// left of (parameters - view) after passes 0 .. j-1 were added to the view. Two passes take two
// bits an element and leave less behind: 1 - 2/pi of the difference's energy stays after one pass
// of Gaussian values, about its square after two.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hpcps/ps/sign_push.hpp"
#include "hpcps/ps/wire_format.hpp"

namespace hpcps::ps {

// 32-bit words of a pull message of n elements: per pass, the scales, then the signs.
constexpr std::size_t sign_pull_words(std::size_t n, unsigned passes = 1) {
  return passes * (sign_scales(n) + sign_words(n));
}

// parameters[i] += +-scale of i's block, the sign from the message, pass after pass: what a
// worker does with a pull, and what the server does with its view of that worker.
inline void add_sign_pull(const std::uint32_t* message, std::size_t n, float* parameters, unsigned passes = 1) {
  for (unsigned pass = 0; pass < passes; ++pass, message += sign_pull_words(n)) {
    const std::uint32_t* words = message + sign_scales(n);
    for (std::size_t b = 0, begin = 0; begin < n; ++b, begin += sign_block) {
      const std::size_t size = n - begin < sign_block ? n - begin : sign_block;
      detail::add_signs_block(wire::float_of(message[b]), words + begin / 32, size, parameters + begin);
    }
  }
}

namespace detail {
// One pass of compress_sign_pull.
inline void compress_sign_pull_pass(const float* parameters, float* view, std::size_t n, std::uint32_t* message) {
  std::uint32_t* words = message + sign_scales(n);
  for (std::size_t b = 0, begin = 0; begin < n; ++b, begin += sign_block) {
    const std::size_t size = n - begin < sign_block ? n - begin : sign_block;
    const float* p = parameters + begin;
    const float* v = view + begin;
    // Element i in lane i % 8, added pairwise at the end, as in compress_sign: a fixed order the
    // compiler can vectorize.
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const std::size_t eights = size / 8 * 8;
    for (std::size_t i = 0; i < eights; i += 8) {
      for (std::size_t j = 0; j < 8; ++j) lane[j] += std::fabs(static_cast<double>(p[i + j] - v[i + j]));
    }
    for (std::size_t i = eights; i < size; ++i) lane[i % 8] += std::fabs(static_cast<double>(p[i] - v[i]));
    const double total = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    message[b] = wire::bits_of(size > 0 ? static_cast<float>(total / static_cast<double>(size)) : 0.0f);
    std::uint32_t* w = words + begin / 32;
    const std::size_t full = size / 32;
    for (std::size_t k = 0; k < full; ++k) {
      std::uint32_t word = 0;
      for (std::uint32_t j = 0; j < 32; ++j) word |= (wire::bits_of(p[k * 32 + j] - v[k * 32 + j]) >> 31) << j;
      w[k] = word;
    }
    if (full * 32 < size) {
      std::uint32_t word = 0;
      for (std::size_t i = full * 32; i < size; ++i) word |= (wire::bits_of(p[i] - v[i]) >> 31) << (i - full * 32);
      w[full] = word;
    }
  }
  add_sign_pull(message, n, view);
}
}  // namespace detail

// message <- the scaled signs of (parameters - view) over n elements, then view += them
// (add_sign_pull), `passes` times: the view is then what the worker holds once it has added the
// message. The magnitudes are summed in double in a fixed order, as in compress_sign: the same
// message on every run. A NaN or an inf in the parameters makes its block's scale NaN or inf, so
// a diverged model still shows on the worker.
inline void compress_sign_pull(const float* parameters, float* view, std::size_t n, std::uint32_t* message,
                               unsigned passes = 1) {
  for (unsigned pass = 0; pass < passes; ++pass, message += sign_pull_words(n)) {
    detail::compress_sign_pull_pass(parameters, view, n, message);
  }
}

}  // namespace hpcps::ps
