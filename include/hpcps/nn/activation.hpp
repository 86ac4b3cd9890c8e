#pragma once
// Activation policies for hidden layers. Each exposes the forward function and its derivative
// written in terms of the activation's OUTPUT, so the backward pass needs only the stored
// post-activation values (no second buffer of pre-activations per layer).
#include <cmath>

#ifndef HPCPS_HOST_DEVICE
#if defined(__CUDACC__)
#define HPCPS_HOST_DEVICE __host__ __device__
#else
#define HPCPS_HOST_DEVICE
#endif
#endif

namespace hpcps::nn {

struct Relu {
  static constexpr const char* name = "relu";
  HPCPS_HOST_DEVICE static float forward(float x) { return x > 0.0f ? x : 0.0f; }
  HPCPS_HOST_DEVICE static float derivative_from_output(float y) { return y > 0.0f ? 1.0f : 0.0f; }
};

struct Tanh {
  static constexpr const char* name = "tanh";
  HPCPS_HOST_DEVICE static float forward(float x) { return std::tanh(x); }
  HPCPS_HOST_DEVICE static float derivative_from_output(float y) { return 1.0f - y * y; }
};

struct Sigmoid {
  static constexpr const char* name = "sigmoid";
  HPCPS_HOST_DEVICE static float forward(float x) { return 1.0f / (1.0f + std::exp(-x)); }
  HPCPS_HOST_DEVICE static float derivative_from_output(float y) { return y * (1.0f - y); }
};

// The output layer of a classifier: logits go straight into the softmax cross-entropy.
struct Identity {
  static constexpr const char* name = "identity";
  HPCPS_HOST_DEVICE static float forward(float x) { return x; }
  HPCPS_HOST_DEVICE static float derivative_from_output(float) { return 1.0f; }
};

}  // namespace hpcps::nn
