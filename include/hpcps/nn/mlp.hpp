#pragma once
// Multilayer perceptron with run-time layer sizes: a chain of nn::Dense layers (the same layer
// nn::Sequential composes), with the hidden activation fused into each layer's bias pass. All
// parameters live in ONE flat buffer, layer by layer (W_l as [out x in] row-major, then b_l), so
// servers can own contiguous ranges of it and a push or pull is a single message per server.
// For a depth fixed at compile time, nn::Sequential<nn::Dense, Act, ..., nn::Dense> is the same
// network with the same parameter layout.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hpcps/backend/gemm.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/activation.hpp"
#include "hpcps/nn/batch_stats.hpp"
#include "hpcps/nn/detail/chunks.hpp"
#include "hpcps/nn/layers/dense.hpp"
#include "hpcps/nn/shape.hpp"

namespace hpcps::nn {

template <class Activation = Relu>
class Mlp {
 public:
  using activation_type = Activation;

  // Scratch memory for one backend, sized once for the largest batch: the training step itself
  // never allocates.
  template <class Backend>
  struct Workspace {
    std::size_t max_batch = 0;
    std::vector<typename Backend::buffer_type> activations;  // one per layer, [max_batch x width]
    typename Backend::buffer_type delta_a, delta_b;           // ping-pong, [max_batch x widest]
    typename Backend::buffer_type input_stage;
    typename Backend::label_buffer_type label_stage;
  };

  explicit Mlp(std::vector<std::size_t> layer_sizes) : sizes_(std::move(layer_sizes)) {
    if (sizes_.size() < 2) {
      throw Error(fmt::format("nn::Mlp needs at least an input and an output size, got [{}]",
                              fmt::join(sizes_, ",")));
    }
    for (std::size_t s : sizes_) {
      if (s == 0) throw Error(fmt::format("nn::Mlp layer sizes must be positive, got [{}]", fmt::join(sizes_, ",")));
    }
    std::size_t offset = 0;
    for (std::size_t l = 0; l + 1 < sizes_.size(); ++l) {
      layers_.emplace_back(Shape{sizes_[l], 1, 1}, Dense::Config{sizes_[l + 1]});
      weight_offset_.push_back(offset);
      offset += layers_.back().parameter_count();
    }
    parameter_count_ = offset;
  }

  std::size_t parameter_count() const { return parameter_count_; }
  std::size_t input_size() const { return sizes_.front(); }
  std::size_t output_size() const { return sizes_.back(); }
  const std::vector<std::size_t>& layer_sizes() const { return sizes_; }
  std::size_t layer_count() const { return sizes_.size() - 1; }
  std::string describe() const { return fmt::format("mlp[{}]-{}", fmt::join(sizes_, "-"), Activation::name); }

  // Uniform He (ReLU) or Glorot (others) initialisation of host memory; biases start at zero.
  void initialize(float* params, std::uint64_t seed) const {
    data::Rng rng(seed);
    for (std::size_t l = 0; l < layer_count(); ++l) {
      const std::size_t in = sizes_[l], out = sizes_[l + 1];
      const double fan = std::is_same_v<Activation, Relu> ? 6.0 / static_cast<double>(in)
                                                          : 6.0 / static_cast<double>(in + out);
      const auto limit = static_cast<float>(std::sqrt(fan));
      float* w = params + weight_offset_[l];
      for (std::size_t i = 0; i < in * out; ++i) w[i] = (2.0f * data::uniform_float(rng) - 1.0f) * limit;
      std::fill(params + weight_offset_[l] + in * out, params + weight_offset_[l] + in * out + out, 0.0f);
    }
  }

  template <class Backend>
  Workspace<Backend> make_workspace(const Backend& backend, std::size_t max_batch) const {
    Workspace<Backend> ws;
    ws.max_batch = max_batch;
    std::size_t widest = 0;
    for (std::size_t l = 1; l < sizes_.size(); ++l) {
      ws.activations.push_back(backend.make_buffer(max_batch * sizes_[l]));
      widest = std::max(widest, sizes_[l]);
    }
    ws.delta_a = backend.make_buffer(max_batch * widest);
    ws.delta_b = backend.make_buffer(max_batch * widest);
    if constexpr (!Backend::host_accessible) {
      ws.input_stage = backend.make_buffer(max_batch * input_size());
      ws.label_stage = backend.make_label_buffer(max_batch);
    }
    return ws;
  }

  // grad := sum over the batch of d(cross-entropy)/d(params). Sums, not means, so the servers can
  // weight uneven batches exactly. `params` and `grad` are in the backend's memory; `inputs` and
  // `labels` are host arrays of `count` samples.
  template <class Backend>
  BatchStats gradient(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* inputs,
                      const std::int32_t* labels, std::size_t count, float* grad) const {
    return gradient(backend, ws, params, inputs, labels, count, grad, [](std::size_t) {});
  }

  // The same, calling ready(begin) once grad[begin, parameter_count()) is final: after each layer's
  // weight and bias gradients, last layer first (backpropagation's order), so the caller can send
  // those slices while the layers below are still being computed. On a device backend "final"
  // means queued on the backend's stream.
  template <class Backend, class Ready>
  BatchStats gradient(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* inputs,
                      const std::int32_t* labels, std::size_t count, float* grad, Ready&& ready) const {
    detail::check_batch_fits(*this, count, ws.max_batch);
    const float* x = backend.stage(inputs, count * input_size(), ws.input_stage);
    const std::int32_t* y = backend.stage(labels, count, ws.label_stage);
    forward(backend, ws, params, x, count);
    const std::size_t last = layer_count() - 1;
    float* logits = Backend::data(ws.activations[last]);
    const BatchStats stats = backend.softmax_cross_entropy(logits, y, count, output_size(), true);

    float* delta = logits;
    for (std::size_t l = layer_count(); l-- > 0;) {
      const float* below = l == 0 ? x : Backend::data(ws.activations[l - 1]);
      layers_[l].parameter_gradient(backend, below, delta, count, grad + weight_offset_[l]);
      ready(weight_offset_[l]);
      if (l == 0) break;  // no delta for the input layer: nothing consumes it
      float* next = delta == Backend::data(ws.delta_a) ? Backend::data(ws.delta_b) : Backend::data(ws.delta_a);
      layers_[l].input_gradient(backend, params + weight_offset_[l], delta, count, next);
      backend.template activation_backward<Activation>(next, below, count * sizes_[l]);
      delta = next;
    }
    return stats;
  }

  // Loss and accuracy over `count` samples, in chunks of the workspace's batch size.
  template <class Backend>
  BatchStats evaluate(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* inputs,
                      const std::int32_t* labels, std::size_t count) const {
    return detail::sum_over_chunks(count, ws.max_batch, [&](std::size_t begin, std::size_t n) {
      const float* x = backend.stage(inputs + begin * input_size(), n * input_size(), ws.input_stage);
      const std::int32_t* y = backend.stage(labels + begin, n, ws.label_stage);
      forward(backend, ws, params, x, n);
      return backend.softmax_cross_entropy(Backend::data(ws.activations[layer_count() - 1]), y, n, output_size(),
                                           false);
    });
  }

 private:
  template <class Backend>
  void forward(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x,
               std::size_t count) const {
    const float* below = x;
    for (std::size_t l = 0; l < layer_count(); ++l) {
      float* a = Backend::data(ws.activations[l]);
      if (l + 1 < layer_count()) {
        layers_[l].template forward_activated<Activation>(backend, params + weight_offset_[l], below, count, a);
      } else {
        layers_[l].template forward_activated<Identity>(backend, params + weight_offset_[l], below, count, a);
      }
      below = a;
    }
  }


  std::vector<std::size_t> sizes_;
  std::vector<Dense> layers_;              // layer l maps sizes_[l] to sizes_[l + 1]
  std::vector<std::size_t> weight_offset_;  // where layer l's [W, b] begins
  std::size_t parameter_count_ = 0;
};

}  // namespace hpcps::nn
