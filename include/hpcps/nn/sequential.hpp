#pragma once
// A network type composed of layers at compile time and sized at run time:
//
//   using Net = nn::Sequential<nn::Conv2d, nn::Relu, nn::MaxPool2d, nn::Flatten, nn::Dense>;
//   const Net net(nn::Shape{1, 28, 28}, {{32, 5, 2}, {}, {2}, {}, {10}});
//
// Each layer is built from the shape the layer before it produces, so only the input shape is
// given. The last layer's outputs are the logits of a softmax cross-entropy. The flat parameter
// vector is the layers' parameters one after another. Satisfies the network concept
// (nn/network_traits.hpp), gradient progress included: nothing in ps/ knows about layers.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hpcps/backend/channel_blocked.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/activation.hpp"
#include "hpcps/nn/batch_stats.hpp"
#include "hpcps/nn/detail/chunks.hpp"
#include "hpcps/nn/layer_traits.hpp"
#include "hpcps/nn/layers/activation_layer.hpp"
#include "hpcps/nn/sample_position.hpp"
#include "hpcps/nn/shape.hpp"
#include "hpcps/nn/state_slots.hpp"

namespace hpcps::nn {
namespace detail {

// An activation policy in a layer list stands for its ActivationLayer.
template <class L, bool = is_activation_v<L> && !is_layer_v<L>>
struct layer_for {
  using type = L;
};
template <class L>
struct layer_for<L, true> {
  using type = ActivationLayer<L>;
};

// Fusion (docs/layers.md#fusion): layer L applies the activation layer Next after it in its own
// forward pass, one sweep over the output instead of two (oneDNN's post-op in a convolution)...
template <class L, class Next, class B>
struct applies_next : std::false_type {};
template <class L, class Act, class B>
struct applies_next<L, ActivationLayer<Act>, B> : has_forward_activated<L, B, Act> {};
// ...and layer L, having applied the activation layer Next, also runs Next's backward pass (batch
// normalization recomputes the activation's input instead of reading its output)...
template <class L, class Next, class B>
struct activates_backward : std::false_type {};
template <class L, class Act, class B>
struct activates_backward<L, ActivationLayer<Act>, B>
    : std::bool_constant<has_forward_activated<L, B, Act>::value && has_backward_activated<L, B, Act>::value> {};
// ...and layer L runs the backward pass of the activation layer Prev before it (a max pooling
// scales the few gradients it routes, instead of a pass over the whole activation).
template <class Prev, class L, class B>
struct runs_previous : std::false_type {};
template <class Act, class L, class B>
struct runs_previous<ActivationLayer<Act>, L, B> : has_backward_through<L, B, Act> {};

// ...and layer L runs the activation layer Next and the pooling layer Pool after it as one, both
// ways (backend::Cpu's convolution pools its output in oneDNN's layout, never converting it).
template <class L, class Next, class Pool, class B>
struct pools_next : std::false_type {};
template <class L, class Act, class Pool, class B>
struct pools_next<L, ActivationLayer<Act>, Pool, B>
    : std::bool_constant<has_forward_pooled<L, B, Act, Pool>::value && has_backward_pooled<L, B, Act, Pool>::value> {};

}  // namespace detail

template <class L>
using layer_for_t = typename detail::layer_for<L>::type;

template <class... Layers>
class Sequential {
  static_assert(sizeof...(Layers) > 0, "hpcps: nn::Sequential needs at least one layer; see docs/layers.md");
  static_assert((check_layer<layer_for_t<Layers>>() && ...));

  using Indices = std::index_sequence_for<Layers...>;

 public:
  static constexpr std::size_t layer_count = sizeof...(Layers);
  using layer_types = std::tuple<layer_for_t<Layers>...>;
  template <std::size_t I>
  using layer_type = std::tuple_element_t<I, layer_types>;
  // One Config per layer, in order: Net(shape, {{32, 5, 2}, {}, {2}, ...}).
  using Configs = std::tuple<typename layer_for_t<Layers>::Config...>;

  // Scratch memory for backend B sized for max_batch samples: every layer's output, two gradient
  // buffers used in turn, and each layer's own workspace. The training step allocates nothing.
  template <class B>
  struct Workspace {
    std::size_t max_batch = 0;
    std::tuple<typename layer_for_t<Layers>::template Workspace<B>...> layers;
    std::vector<typename B::buffer_type> activations;  // activations[i]: layer i's output
    typename B::buffer_type delta_a, delta_b;
    typename B::buffer_type input_stage;
    typename B::label_buffer_type label_stage;
  };

  Sequential(Shape input, const Configs& configs) : input_(input), layers_(build<0>(input, configs)) {
    if (input.size() == 0) throw Error(fmt::format("nn::Sequential: the input shape {} is empty", input));
    std::size_t offset = 0;
    std::size_t i = 0;
    first_trainable_ = layer_count;
    std::apply(
        [&](const auto&... layer) {
          ((offsets_[i] = offset, shapes_[i] = layer.output_shape(), offset += layer.parameter_count(),
            first_trainable_ = (first_trainable_ == layer_count && layer.parameter_count() > 0) ? i : first_trainable_,
            ++i),
           ...);
        },
        layers_);
    parameter_count_ = offset;
  }

  std::size_t parameter_count() const { return parameter_count_; }
  std::size_t input_size() const { return input_.size(); }
  std::size_t output_size() const { return shapes_[layer_count - 1].size(); }
  Shape input_shape() const { return input_; }
  // Layer i's output shape, and where its parameters begin in the flat vector.
  Shape output_shape(std::size_t i) const { return shapes_.at(i); }
  std::size_t parameter_offset(std::size_t i) const { return offsets_.at(i); }
  template <std::size_t I>
  const layer_type<I>& layer() const {
    return std::get<I>(layers_);
  }

  // "sequential[1x28x28 -> conv2d 32x28x28 -> relu 32x28x28 -> ... -> dense 10]"
  std::string describe() const {
    std::string text = fmt::format("sequential[{}", input_);
    std::size_t i = 0;
    ((text += fmt::format(" -> {} {}", layer_for_t<Layers>::name, shapes_[i++])), ...);
    return text + "]";
  }

  // Each layer initialises its own slice from one generator, layer after layer: the same seed
  // gives the same vector.
  void initialize(float* params, std::uint64_t seed) const {
    data::Rng rng(seed);
    initialize(params, rng);
  }
  // The same from a generator already in use: a Sequential inside a layer (nn::Residual).
  void initialize(float* params, data::Rng& rng) const {
    std::size_t i = 0;
    std::apply([&](const auto&... layer) { ((layer.initialize(params + offsets_[i++], rng)), ...); }, layers_);
  }

  // Where state sits in the parameter vector (nn/state_slots.hpp): every layer's, at its offset.
  // Only where some layer has state, so a network without any is served without the check.
  static constexpr bool has_state = (has_state_slots_v<layer_for_t<Layers>> || ...);
  template <bool S = has_state, std::enable_if_t<S, int> = 0>
  std::vector<StateSlots> state_slots() const {
    std::vector<StateSlots> slots;
    std::size_t i = 0;
    std::apply(
        [&](const auto&... layer) {
          ((append_state_slots(slots, layer, offsets_[i++])), ...);
        },
        layers_);
    return slots;
  }

  template <class B>
  Workspace<B> make_workspace(const B& backend, std::size_t max_batch) const {
    static_assert((check_layer_for<layer_for_t<Layers>, B>() && ...));
    Workspace<B> ws;
    ws.max_batch = max_batch;
    ws.layers = std::apply(
        [&](const auto&... layer) { return std::make_tuple(layer.make_workspace(backend, max_batch)...); }, layers_);
    std::size_t widest = 0;
    for (const Shape& s : shapes_) {
      ws.activations.push_back(backend.make_buffer(max_batch * s.size()));
      widest = std::max(widest, s.size());
    }
    ws.delta_a = backend.make_buffer(max_batch * widest);
    ws.delta_b = backend.make_buffer(max_batch * widest);
    if constexpr (!B::host_accessible) {
      ws.input_stage = backend.make_buffer(max_batch * input_size());
      ws.label_stage = backend.make_label_buffer(max_batch);
    }
    return ws;
  }

  // Where the next gradient's samples sit in training, for every layer whose workspace has a
  // `position` (nn::Dropout), and every layer that passes it on to chains of its own
  // (nn::Residual): the layers' random numbers then depend on it alone.
  template <class B>
  void set_sample_position(Workspace<B>& ws, SamplePosition position) const {
    set_positions(ws, position, Indices{});
  }

  // grad := sum over the batch of d(cross-entropy)/d(params), in the backend's memory.
  template <class B>
  BatchStats gradient(const B& backend, Workspace<B>& ws, const float* params, const float* inputs,
                      const std::int32_t* labels, std::size_t count, float* grad) const {
    return gradient(backend, ws, params, inputs, labels, count, grad, [](std::size_t) {});
  }

  // The same, calling ready(begin) once grad[begin, parameter_count()) is final: after each layer
  // that has parameters, last layer first.
  template <class B, class Ready>
  BatchStats gradient(const B& backend, Workspace<B>& ws, const float* params, const float* inputs,
                      const std::int32_t* labels, std::size_t count, float* grad, Ready&& ready) const {
    detail::check_batch_fits(*this, count, ws.max_batch);
    const float* x = backend.stage(inputs, count * input_size(), ws.input_stage);
    const std::int32_t* y = backend.stage(labels, count, ws.label_stage);
    forward(backend, ws, params, x, count, true);
    // The softmax writes its gradient in place: on a copy, so every layer's output stays what
    // its backward pass may read (an activation's derivative is computed from its output).
    float* delta = B::data(ws.delta_a);
    backend.copy(B::data(ws.activations.back()), count * output_size(), delta);
    const BatchStats stats = backend.softmax_cross_entropy(delta, y, count, output_size(), true);
    backward(backend, ws, params, x, count, grad, delta, nullptr, first_trainable_, ready,
             std::make_index_sequence<layer_count>{});
    return stats;
  }

  // Every layer's backward pass after forward(..., training = true) on the same x: grad = the
  // parameters' gradient given dy = d(loss)/d(output), and dx = d(loss)/dx unless null. What a
  // layer that holds a Sequential (nn::Residual) runs; dy must stay unchanged until it returns.
  template <class B>
  void backward(const B& backend, Workspace<B>& ws, const float* params, const float* x, std::size_t count,
                const float* dy, float* dx, float* grad) const {
    const auto none = [](std::size_t) {};
    const std::size_t lowest = dx != nullptr ? 0 : first_trainable_;
    backward(backend, ws, params, x, count, grad, dy, dx, lowest, none, std::make_index_sequence<layer_count>{});
  }

  // Loss and accuracy over any number of samples, in workspace-sized chunks, layers in
  // evaluation mode (dropout off). Leaves the last chunk's logits in ws.activations.back().
  template <class B>
  BatchStats evaluate(const B& backend, Workspace<B>& ws, const float* params, const float* inputs,
                      const std::int32_t* labels, std::size_t count) const {
    return detail::sum_over_chunks(count, ws.max_batch, [&](std::size_t begin, std::size_t n) {
      const float* x = backend.stage(inputs + begin * input_size(), n * input_size(), ws.input_stage);
      const std::int32_t* y = backend.stage(labels + begin, n, ws.label_stage);
      forward(backend, ws, params, x, n, false);
      return backend.softmax_cross_entropy(B::data(ws.activations.back()), y, n, output_size(), false);
    });
  }

  // Every layer's forward pass on `count` samples already in the backend's memory; layer i's
  // output lands in ws.activations[i] (for a layer fused with the activation after it, only that
  // activation's output is stored, in its own slot).
  template <class B>
  void forward(const B& backend, Workspace<B>& ws, const float* params, const float* x, std::size_t count,
               bool training) const {
    forward(backend, ws, params, x, count, training, Indices{});
  }

 private:
  template <class W, class = void>
  struct has_position : std::false_type {};
  template <class W>
  struct has_position<W, std::void_t<decltype(std::declval<W&>().position = SamplePosition{})>> : std::true_type {};
  template <class B, std::size_t... I>
  void set_positions(Workspace<B>& ws, SamplePosition position, std::index_sequence<I...>) const {
    (set_position(std::get<I>(layers_), std::get<I>(ws.layers), position), ...);
  }
  template <class L, class W>
  static void set_position(const L& layer, W& layer_ws, SamplePosition position) {
    if constexpr (has_position<W>::value) {
      layer_ws.position = position;
    } else {
      nn::set_sample_position(layer, layer_ws, position);
    }
  }

  // Layer I built from the shape before it; its error names its place in the list.
  template <std::size_t I>
  static auto build(Shape in, const Configs& configs) {
    using L = layer_type<I>;
    L layer = make_layer<I>(in, std::get<I>(configs));
    if constexpr (I + 1 == layer_count) {
      return std::tuple<L>(std::move(layer));
    } else {
      const Shape out = layer.output_shape();
      auto rest = build<I + 1>(out, configs);
      return std::tuple_cat(std::tuple<L>(std::move(layer)), std::move(rest));
    }
  }
  template <std::size_t I>
  static layer_type<I> make_layer(Shape in, const typename layer_type<I>::Config& config) {
    using L = layer_type<I>;
    try {
      L layer(in, config);
      if (layer.output_shape().size() == 0) throw Error(fmt::format("output shape {} is empty", layer.output_shape()));
      return layer;
    } catch (const Error& e) {
      throw Error(fmt::format("nn::Sequential layer {} ({}), input {}: {}", I, L::name, in, e.what()));
    }
  }

  // Layer I applies the activation layer I + 1 in its forward pass (detail::applies_next).
  template <class B, std::size_t I>
  static constexpr bool fused_forward() {
    if constexpr (I + 1 < layer_count) {
      return detail::applies_next<layer_type<I>, layer_type<I + 1>, B>::value;
    } else {
      return false;
    }
  }
  // Layer I runs the backward pass of the activation layer I + 1 too (detail::activates_backward),
  // unless layer I + 2 runs it (detail::runs_previous), or layer I runs the activation before it
  // (its backward_through: one backward call cannot do both).
  template <class B, std::size_t I>
  static constexpr bool fused_backward() {
    if constexpr (I + 1 < layer_count) {
      return fused_forward<B, I>() && detail::activates_backward<layer_type<I>, layer_type<I + 1>, B>::value &&
             !folds_previous<B, I + 2>() && !folds_previous<B, I>();
    } else {
      return false;
    }
  }
  // Layer I runs the backward pass of the activation layer I - 1 (detail::runs_previous).
  template <class B, std::size_t I>
  static constexpr bool folds_previous() {
    if constexpr (I > 0 && I < layer_count) {
      return detail::runs_previous<layer_type<I - 1>, layer_type<I>, B>::value;
    } else {
      return false;
    }
  }

  // Layer I runs the activation layer I + 1 and the pooling layer I + 2 with it, both ways
  // (detail::pools_next); not a layer that runs the activation before it (it has no place to).
  template <class B, std::size_t I>
  static constexpr bool fused_pooling() {
    if constexpr (I + 2 < layer_count) {
      return detail::pools_next<layer_type<I>, layer_type<I + 1>, layer_type<I + 2>, B>::value &&
             !folds_previous<B, I>();
    } else {
      return false;
    }
  }
  // The activation layer I runs inside its forward / backward pass (the one after it), or Identity.
  template <std::size_t I, bool Inside>
  struct activation_inside {
    using type = Identity;
  };
  template <std::size_t I>
  struct activation_inside<I, true> {
    using type = typename layer_type<I + 1>::activation_type;
  };
  template <class B, std::size_t I>
  using forward_activation = activation_inside<I, fused_forward<B, I>()>;
  template <class B, std::size_t I>
  using backward_activation = activation_inside<I, fused_backward<B, I>()>;

  // Layer I keeps its training output channel-blocked for layer I + 1, which reads it so and
  // writes its input gradient back so (detail::produces_blocked, consumes_blocked): a convolution
  // and the batch normalization after it on backend::Cpu. Neither takes part in another fusion but
  // layer I + 1's with the activation after it. Whether a workspace hands over is known at run time
  // (blocked_output): where it does not, the layers run as they would apart.
  template <class B, std::size_t I>
  static constexpr bool hands_blocked() {
    if constexpr (I + 1 < layer_count) {
      return detail::produces_blocked<layer_type<I>, B>::value &&
             detail::consumes_blocked<layer_type<I + 1>, B, typename forward_activation<B, I + 1>::type>::value &&
             detail::consumes_blocked<layer_type<I + 1>, B, typename backward_activation<B, I + 1>::type>::value &&
             !fused_forward<B, I>() && !folds_previous<B, I>() && !fused_pooling<B, I>() &&
             !folds_previous<B, I + 1>() && !fused_pooling<B, I + 1>() && !runs_inside_another<B, I>() &&
             !runs_inside_another<B, I + 1>();
    } else {
      return false;
    }
  }

  // Layer I's passes run inside layer I - 1's or I - 2's.
  template <class B, std::size_t I>
  static constexpr bool runs_inside_another() {
    if constexpr (I >= 2) {
      if constexpr (fused_pooling<B, I - 2>()) return true;
    }
    if constexpr (I >= 1) {
      if constexpr (fused_pooling<B, I - 1>()) return true;
    }
    return false;
  }

  template <class B, std::size_t... I>
  void forward(const B& backend, Workspace<B>& ws, const float* params, const float* x, std::size_t count,
               bool training, std::index_sequence<I...>) const {
    (forward_layer<I>(backend, ws, params, x, count, training), ...);
  }
  template <std::size_t I, class B>
  void forward_layer(const B& backend, Workspace<B>& ws, const float* params, const float* x, std::size_t count,
                     bool training) const {
    if constexpr (I > 0) {
      if constexpr (fused_forward<B, I - 1>()) return;  // layer I - 1 applied this activation
    }
    if constexpr (runs_inside_another<B, I>()) return;
    const float* below = I == 0 ? x : B::data(ws.activations[I == 0 ? 0 : I - 1]);
    const auto& layer = std::get<I>(layers_);
    if constexpr (hands_blocked<B, I>()) {
      if (training && layer.blocked_output(std::get<I>(ws.layers))) {
        layer.forward_blocked(backend, std::get<I>(ws.layers), params + offsets_[I], below, count);
        return;
      }
    }
    if constexpr (I > 0) {
      if constexpr (hands_blocked<B, I - 1>()) {
        const backend::ChannelBlocked blocked = std::get<I - 1>(layers_).blocked_output(std::get<I - 1>(ws.layers));
        if (training && blocked) {
          layer.template forward_from_blocked<typename forward_activation<B, I>::type>(
              backend, std::get<I>(ws.layers), params + offsets_[I], blocked, count,
              B::data(ws.activations[fused_forward<B, I>() ? I + 1 : I]));
          return;
        }
      }
    }
    if constexpr (fused_pooling<B, I>()) {
      layer.template forward_pooled<typename layer_type<I + 1>::activation_type>(
          backend, std::get<I>(ws.layers), params + offsets_[I], below, count, std::get<I + 2>(layers_),
          B::data(ws.activations[I + 2]), training);
    } else if constexpr (fused_forward<B, I>()) {
      layer.template forward_activated<typename layer_type<I + 1>::activation_type>(
          backend, std::get<I>(ws.layers), params + offsets_[I], below, count, B::data(ws.activations[I + 1]),
          training);
    } else {
      layer.forward(backend, std::get<I>(ws.layers), params + offsets_[I], below, count, B::data(ws.activations[I]),
                    training);
    }
  }

  // Layers from last to first down to layer `lowest`, which writes its input gradient to dx_out
  // (null: none). The network's own gradient stops at the first layer with parameters (the input
  // gradients below it would reach nothing); a Sequential inside a layer may go down to layer 0.
  template <class B, class Ready, std::size_t... I>
  void backward(const B& backend, Workspace<B>& ws, const float* params, const float* x, std::size_t count,
                float* grad, const float* delta, float* dx_out, std::size_t lowest, Ready& ready,
                std::index_sequence<I...>) const {
    (backward_layer<layer_count - 1 - I>(backend, ws, params, x, count, grad, delta, dx_out, lowest, ready), ...);
    // A layer below `lowest` whose pass ran inside another's left its gradient in a scratch buffer.
    if (dx_out != nullptr && delta != dx_out) backend.copy(delta, count * input_size(), dx_out);
  }
  template <std::size_t I, class B, class Ready>
  void backward_layer(const B& backend, Workspace<B>& ws, const float* params, const float* x, std::size_t count,
                      float* grad, const float*& delta, float* dx_out, std::size_t lowest, Ready& ready) const {
    if (I < lowest) return;
    if constexpr (folds_previous<B, I + 1>()) return;  // layer I + 1 ran it
    if constexpr (I > 0) {
      if constexpr (fused_backward<B, I - 1>()) return;  // layer I - 1 will run it; delta passes on unchanged
    }
    if constexpr (runs_inside_another<B, I>()) return;  // delta passes on to that layer unchanged
    const auto& layer = std::get<I>(layers_);
    float* dx = dx_out;
    if (I != lowest) dx = delta == B::data(ws.delta_a) ? B::data(ws.delta_b) : B::data(ws.delta_a);
    const float* below = I == 0 ? x : B::data(ws.activations[I == 0 ? 0 : I - 1]);
    // A layer fused with the activation after it never stored its own output.
    const float* y = fused_forward<B, I>() ? nullptr : B::data(ws.activations[I]);
    // Layer I - 1 kept its output blocked: this layer's input gradient goes into layer I - 1's
    // buffer, not dx. (Where I is `lowest`, no dx is asked for: a caller that wants dx passes
    // lowest 0.)
    if constexpr (I > 0) {
      if constexpr (hands_blocked<B, I - 1>()) {
        const auto& producer = std::get<I - 1>(layers_);
        auto& producer_ws = std::get<I - 1>(ws.layers);
        const backend::ChannelBlocked blocked = producer.blocked_output(producer_ws);
        if (blocked) {
          layer.template backward_to_blocked<typename backward_activation<B, I>::type>(
              backend, std::get<I>(ws.layers), params + offsets_[I], blocked, delta, count,
              producer.blocked_output_gradient(producer_ws, count), grad + offsets_[I]);
          if (layer.parameter_count() > 0) ready(offsets_[I]);
          delta = dx;
          return;
        }
      }
    }
    if constexpr (hands_blocked<B, I>()) {
      if (layer.blocked_output(std::get<I>(ws.layers))) {
        layer.backward_blocked(backend, std::get<I>(ws.layers), params + offsets_[I], below, count, dx,
                               grad + offsets_[I]);
        if (layer.parameter_count() > 0) ready(offsets_[I]);
        delta = dx;
        return;
      }
    }
    if constexpr (fused_pooling<B, I>()) {
      layer.template backward_pooled<typename layer_type<I + 1>::activation_type>(
          backend, std::get<I>(ws.layers), params + offsets_[I], below, B::data(ws.activations[I + 2]), delta, count,
          std::get<I + 2>(layers_), dx, grad + offsets_[I]);
    } else if constexpr (fused_backward<B, I>()) {
      layer.template backward_activated<typename layer_type<I + 1>::activation_type>(
          backend, std::get<I>(ws.layers), params + offsets_[I], below, B::data(ws.activations[I + 1]), delta, count,
          dx, grad + offsets_[I]);
    } else if constexpr (folds_previous<B, I>()) {
      layer.template backward_through<typename layer_type<I - 1>::activation_type>(
          backend, std::get<I>(ws.layers), params + offsets_[I], below, y, delta, count, dx, grad + offsets_[I]);
    } else {
      layer.backward(backend, std::get<I>(ws.layers), params + offsets_[I], below, y, delta, count, dx,
                     grad + offsets_[I]);
    }
    if (layer.parameter_count() > 0) ready(offsets_[I]);
    delta = dx;
  }

  Shape input_;
  layer_types layers_;
  std::array<Shape, layer_count> shapes_{};
  std::array<std::size_t, layer_count> offsets_{};
  std::size_t first_trainable_ = 0;
  std::size_t parameter_count_ = 0;
};

}  // namespace hpcps::nn
