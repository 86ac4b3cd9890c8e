#pragma once
// The geometry of a sliding window over NCHW samples, shared by convolution (im2col, col2im) and
// pooling. Plain data with host/device accessors, so Thrust functors can carry it to a GPU.
#include <cstddef>

#include "hpcps/nn/activation.hpp"  // HPCPS_HOST_DEVICE

namespace hpcps::backend {

struct Window2d {
  std::size_t channels = 1, height = 1, width = 1;  // one input sample
  std::size_t window = 1, stride = 1, padding = 0;  // square window, zero padding on every side
  std::size_t out_height = 1, out_width = 1;

  // Output sizes follow from the rest; the caller (a layer) has checked that the window fits.
  static Window2d make(std::size_t channels, std::size_t height, std::size_t width, std::size_t window,
                       std::size_t stride, std::size_t padding) {
    Window2d g;
    g.channels = channels;
    g.height = height;
    g.width = width;
    g.window = window;
    g.stride = stride;
    g.padding = padding;
    g.out_height = (height + 2 * padding - window) / stride + 1;
    g.out_width = (width + 2 * padding - window) / stride + 1;
    return g;
  }

  HPCPS_HOST_DEVICE std::size_t in_pixels() const { return height * width; }
  HPCPS_HOST_DEVICE std::size_t out_pixels() const { return out_height * out_width; }
  HPCPS_HOST_DEVICE std::size_t in_size() const { return channels * height * width; }
  HPCPS_HOST_DEVICE std::size_t out_size() const { return channels * out_height * out_width; }
  // Rows of one sample's im2col matrix: one per (channel, window row, window column).
  HPCPS_HOST_DEVICE std::size_t patch() const { return channels * window * window; }
};

}  // namespace hpcps::backend
