#pragma once
// A residual block (He et al. 2016) as one layer of an nn::Sequential: y = body(x) + shortcut(x),
// body and shortcut being nn::Sequential chains built from the block's input shape. The shortcut
// is the identity by default, or a chain of its own where the body changes the shape (a strided
// 1x1 convolution and a batch normalization):
//
//   using Block = nn::Residual<nn::Sequential<nn::Conv2d, nn::BatchNorm2d, nn::Relu, nn::Conv2d, nn::BatchNorm2d>>;
//   using Down = nn::Residual<nn::Sequential<nn::Conv2d, nn::BatchNorm2d, nn::Relu, nn::Conv2d, nn::BatchNorm2d>,
//                             nn::Sequential<nn::Conv2d, nn::BatchNorm2d>>;
//
// The ReLU after the addition is the next layer of the enclosing network. Parameters: the body's,
// then the shortcut's; their state slots (batch normalization's) are the block's.
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hpcps/data/random.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/sample_position.hpp"
#include "hpcps/nn/sequential.hpp"
#include "hpcps/nn/shape.hpp"
#include "hpcps/nn/state_slots.hpp"

namespace hpcps::nn {

// The identity shortcut: no layers, no parameters.
struct IdentityShortcut {};

namespace detail {
template <class T>
struct is_sequential_chain : std::false_type {};
template <class... L>
struct is_sequential_chain<Sequential<L...>> : std::true_type {};

// A shortcut's configs, workspace and state, the identity's being none.
template <class Chain>
struct chain_traits {
  using configs = typename Chain::Configs;
  template <class B>
  using workspace = typename Chain::template Workspace<B>;
  static constexpr bool has_state = Chain::has_state;
};
template <>
struct chain_traits<IdentityShortcut> {
  using configs = IdentityShortcut;
  template <class B>
  using workspace = IdentityShortcut;
  static constexpr bool has_state = false;
};
// Backends whose addition takes an activation (both shipped ones).
template <class B, class Act, class = void>
struct has_activated_add : std::false_type {};
template <class B, class Act>
struct has_activated_add<B, Act,
                         std::void_t<decltype(std::declval<const B&>().template add<Act>(
                             (const float*)nullptr, (const float*)nullptr, std::size_t{}, (float*)nullptr))>>
    : std::true_type {};
}  // namespace detail

template <class Body, class Shortcut = IdentityShortcut>
class Residual {
  static_assert(detail::is_sequential_chain<Body>::value,
                "hpcps: nn::Residual<Body, Shortcut>: Body must be an nn::Sequential<...> of layers; see "
                "docs/layers.md#residual-blocks");
  static_assert(std::is_same_v<Shortcut, IdentityShortcut> || detail::is_sequential_chain<Shortcut>::value,
                "hpcps: nn::Residual<Body, Shortcut>: Shortcut must be nn::IdentityShortcut or an nn::Sequential<...>; "
                "see docs/layers.md#residual-blocks");
  static constexpr bool identity = std::is_same_v<Shortcut, IdentityShortcut>;
  using ShortcutTraits = detail::chain_traits<Shortcut>;

 public:
  // {{body layers' configs...}} or, with a shortcut chain, {{body...}, {shortcut...}}.
  struct Config {
    typename Body::Configs body;
    typename ShortcutTraits::configs shortcut{};
  };
  static constexpr const char* name = "residual";
  static constexpr bool has_state = Body::has_state || ShortcutTraits::has_state;

  Residual(Shape input, const Config& config) : input_(input), body_(input, config.body), shortcut_(make_shortcut(input, config)) {
    const Shape from_body = body_.output_shape(Body::layer_count - 1);
    if (from_body != shortcut_output()) {
      throw Error(fmt::format("the body's output {} differs from the shortcut's {}{}", from_body, shortcut_output(),
                              identity ? " (the identity: give the block a shortcut chain that changes the shape)"
                                       : ""));
    }
  }

  Shape output_shape() const { return shortcut_output(); }
  std::size_t parameter_count() const { return body_.parameter_count() + shortcut_parameter_count(); }
  void initialize(float* params, data::Rng& rng) const {
    body_.initialize(params, rng);
    if constexpr (!identity) shortcut_.initialize(params + body_.parameter_count(), rng);
  }
  template <bool S = has_state, std::enable_if_t<S, int> = 0>
  std::vector<StateSlots> state_slots() const {
    std::vector<StateSlots> slots = state_slots_of(body_);
    if constexpr (!identity) append_state_slots(slots, shortcut_, body_.parameter_count());
    return slots;
  }
  const Body& body() const { return body_; }
  template <class B>
  struct Workspace {
    typename Body::template Workspace<B> body;
    typename ShortcutTraits::template workspace<B> shortcut;
    typename B::buffer_type dx_shortcut;  // the shortcut chain's input gradient, before the sum
  };
  template <class B>
  Workspace<B> make_workspace(const B& backend, std::size_t max_batch) const {
    Workspace<B> ws{body_.make_workspace(backend, max_batch), {}, {}};
    if constexpr (!identity) {
      ws.shortcut = shortcut_.make_workspace(backend, max_batch);
      ws.dx_shortcut = backend.make_buffer(max_batch * input_.size());
    }
    return ws;
  }

  template <class B>
  void forward(const B& backend, Workspace<B>& ws, const float* params, const float* x, std::size_t count, float* y,
               bool training) const {
    sum_of_branches<Identity>(backend, ws, params, x, count, y, training);
  }
  // y = Act(body(x) + shortcut(x)): nn::Sequential fuses the activation layer after the block into
  // the sum (docs/layers.md#fusion), one pass over the output instead of two. Its backward pass
  // stays the activation layer's: both branches need the gradient it writes.
  template <class Act, class B, std::enable_if_t<detail::has_activated_add<B, Act>::value, int> = 0>
  void forward_activated(const B& backend, Workspace<B>& ws, const float* params, const float* x, std::size_t count,
                         float* y, bool training) const {
    sum_of_branches<Act>(backend, ws, params, x, count, y, training);
  }

  // ps::train's sample position, for a dropout layer inside either chain.
  template <class B>
  void set_sample_position(Workspace<B>& ws, SamplePosition position) const {
    body_.set_sample_position(ws.body, position);
    if constexpr (!identity) shortcut_.set_sample_position(ws.shortcut, position);
  }

  // dy reaches both branches whole; dx is the sum of their input gradients.
  template <class B>
  void backward(const B& backend, Workspace<B>& ws, const float* params, const float* x, const float* /*y*/,
                const float* dy, std::size_t count, float* dx, float* grad) const {
    body_.backward(backend, ws.body, params, x, count, dy, dx, grad);
    if constexpr (identity) {
      if (dx != nullptr) backend.add(dx, dy, count * input_.size(), dx);
    } else {
      float* dx_shortcut = dx != nullptr ? B::data(ws.dx_shortcut) : nullptr;
      shortcut_.backward(backend, ws.shortcut, params + body_.parameter_count(), x, count, dy, dx_shortcut,
                         grad + body_.parameter_count());
      if (dx != nullptr) backend.add(dx, dx_shortcut, count * input_.size(), dx);
    }
  }

 private:
  template <class Act, class B>
  void sum_of_branches(const B& backend, Workspace<B>& ws, const float* params, const float* x, std::size_t count,
                       float* y, bool training) const {
    body_.forward(backend, ws.body, params, x, count, training);
    const float* from_body = B::data(ws.body.activations.back());
    const float* from_shortcut = x;
    if constexpr (!identity) {
      shortcut_.forward(backend, ws.shortcut, params + body_.parameter_count(), x, count, training);
      from_shortcut = B::data(ws.shortcut.activations.back());
    }
    if constexpr (std::is_same_v<Act, Identity>) {
      backend.add(from_body, from_shortcut, count * output_shape().size(), y);
    } else {
      backend.template add<Act>(from_body, from_shortcut, count * output_shape().size(), y);
    }
  }

  static Shortcut make_shortcut(Shape input, const Config& config) {
    if constexpr (identity) {
      (void)input, (void)config;
      return {};
    } else {
      return Shortcut(input, config.shortcut);
    }
  }
  Shape shortcut_output() const {
    if constexpr (identity) {
      return input_;
    } else {
      return shortcut_.output_shape(Shortcut::layer_count - 1);
    }
  }
  std::size_t shortcut_parameter_count() const {
    if constexpr (identity) {
      return 0;
    } else {
      return shortcut_.parameter_count();
    }
  }

  Shape input_;
  Body body_;
  Shortcut shortcut_;
};

}  // namespace hpcps::nn
