#pragma once
// A batch of NCHW-shaped samples held channel-blocked, as oneDNN's convolutions keep their output
// (nChw8c, nChw16c): value (n, c, p) at ((n * channels / block + c / block) * pixels + p) * block
// + c % block. backend::BasicCpu's convolution hands its output to the batch normalization after
// it in this layout, and takes that layer's input gradient back in it (docs/layers.md#fusion):
// the two conversions to and from NCHW between them are never run.
#include <cstddef>

namespace hpcps::backend {

struct ChannelBlocked {
  float* data = nullptr;  // null: the producer keeps no blocked copy, it wrote NCHW
  std::size_t block = 0;  // channels per block

  explicit operator bool() const { return data != nullptr; }
  // Where value (n, c, p) of a batch of `channels` x `pixels` samples lies.
  std::size_t index(std::size_t n, std::size_t c, std::size_t p, std::size_t channels, std::size_t pixels) const {
    return ((n * (channels / block) + c / block) * pixels + p) * block + c % block;
  }
};

}  // namespace hpcps::backend
