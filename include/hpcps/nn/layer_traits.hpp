#pragma once
// The layer concept (docs/layers.md), as traits: one per member, so nn::Sequential can say which
// member a type lacks instead of printing a page of template errors.
#include <cstddef>
#include <type_traits>
#include <utility>

#include "hpcps/backend/channel_blocked.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/nn/activation.hpp"
#include "hpcps/nn/shape.hpp"

namespace hpcps::nn {
namespace detail {

template <class L, class = void>
struct has_config : std::false_type {};
template <class L>
struct has_config<L, std::void_t<typename L::Config>> : std::true_type {};

template <class L, class = void>
struct has_name : std::false_type {};
template <class L>
struct has_name<L, std::void_t<decltype(static_cast<const char*>(L::name))>> : std::true_type {};

template <class L, class = void>
struct constructs_from_shape : std::false_type {};
template <class L>
struct constructs_from_shape<L, std::void_t<typename L::Config>>
    : std::bool_constant<std::is_constructible_v<L, Shape, const typename L::Config&> &&
                         std::is_move_constructible_v<L>> {};

template <class L, class = void>
struct has_output_shape : std::false_type {};
template <class L>
struct has_output_shape<L, std::void_t<decltype(Shape{std::declval<const L&>().output_shape()})>> : std::true_type {};

template <class L, class = void>
struct has_parameter_count : std::false_type {};
template <class L>
struct has_parameter_count<L, std::void_t<decltype(std::size_t{std::declval<const L&>().parameter_count()})>>
    : std::true_type {};

template <class L, class = void>
struct has_initialize : std::false_type {};
template <class L>
struct has_initialize<L, std::void_t<decltype(std::declval<const L&>().initialize((float*)nullptr,
                                                                                  std::declval<data::Rng&>()))>>
    : std::true_type {};

template <class L, class B, class = void>
struct has_workspace : std::false_type {};
template <class L, class B>
struct has_workspace<L, B,
                     std::void_t<typename L::template Workspace<B>,
                                 decltype(static_cast<typename L::template Workspace<B>>(
                                     std::declval<const L&>().make_workspace(std::declval<const B&>(), std::size_t{})))>>
    : std::true_type {};

template <class L, class B, class = void>
struct has_forward : std::false_type {};
template <class L, class B>
struct has_forward<L, B,
                   std::void_t<decltype(std::declval<const L&>().forward(
                       std::declval<const B&>(), std::declval<typename L::template Workspace<B>&>(), (const float*)nullptr,
                       (const float*)nullptr, std::size_t{}, (float*)nullptr, true))>> : std::true_type {};

template <class L, class B, class = void>
struct has_backward : std::false_type {};
template <class L, class B>
struct has_backward<L, B,
                    std::void_t<decltype(std::declval<const L&>().backward(
                        std::declval<const B&>(), std::declval<typename L::template Workspace<B>&>(), (const float*)nullptr,
                        (const float*)nullptr, (const float*)nullptr, (const float*)nullptr, std::size_t{},
                        (float*)nullptr, (float*)nullptr))>> : std::true_type {};

// Optional members that let nn::Sequential fuse a layer with the activation layer next to it
// (docs/layers.md#fusion): `forward_activated<Act>(...)`, the forward pass with Act applied to its
// output, and `backward_through<Act>(...)`, the backward pass that also multiplies dx by the
// derivative of the activation before the layer, given this layer's input (that activation's output).
template <class L, class B, class Act, class = void>
struct has_forward_activated : std::false_type {};
template <class L, class B, class Act>
struct has_forward_activated<L, B, Act,
                             std::void_t<decltype(std::declval<const L&>().template forward_activated<Act>(
                                 std::declval<const B&>(), std::declval<typename L::template Workspace<B>&>(),
                                 (const float*)nullptr, (const float*)nullptr, std::size_t{}, (float*)nullptr, true))>>
    : std::true_type {};

template <class L, class B, class Act, class = void>
struct has_backward_through : std::false_type {};
template <class L, class B, class Act>
struct has_backward_through<L, B, Act,
                            std::void_t<decltype(std::declval<const L&>().template backward_through<Act>(
                                std::declval<const B&>(), std::declval<typename L::template Workspace<B>&>(),
                                (const float*)nullptr, (const float*)nullptr, (const float*)nullptr,
                                (const float*)nullptr, std::size_t{}, (float*)nullptr, (float*)nullptr))>>
    : std::true_type {};

// And `backward_activated<Act>(backend, ws, params, x, y, dy, count, dx, grad)`, with
// forward_activated: the backward pass of the activation after the layer inside the layer's own
// (y and dy: the activation's output and its gradient).
template <class L, class B, class Act, class = void>
struct has_backward_activated : std::false_type {};
template <class L, class B, class Act>
struct has_backward_activated<L, B, Act,
                              std::void_t<decltype(std::declval<const L&>().template backward_activated<Act>(
                                  std::declval<const B&>(), std::declval<typename L::template Workspace<B>&>(),
                                  (const float*)nullptr, (const float*)nullptr, (const float*)nullptr,
                                  (const float*)nullptr, std::size_t{}, (float*)nullptr, (float*)nullptr))>>
    : std::true_type {};

// And `forward_pooled<Act>(..., const Pool& pool, y, training)` with `backward_pooled<Act>(..., x, y,
// dy, count, pool, dx, grad)`: the layer, the activation Act after it and the pooling layer Pool
// after that as one, both ways (y and dy: the pooling's output and its gradient).
template <class L, class B, class Act, class Pool, class = void>
struct has_forward_pooled : std::false_type {};
template <class L, class B, class Act, class Pool>
struct has_forward_pooled<L, B, Act, Pool,
                          std::void_t<decltype(std::declval<const L&>().template forward_pooled<Act>(
                              std::declval<const B&>(), std::declval<typename L::template Workspace<B>&>(),
                              (const float*)nullptr, (const float*)nullptr, std::size_t{},
                              std::declval<const Pool&>(), (float*)nullptr, true))>> : std::true_type {};

template <class L, class B, class Act, class Pool, class = void>
struct has_backward_pooled : std::false_type {};
template <class L, class B, class Act, class Pool>
struct has_backward_pooled<L, B, Act, Pool,
                           std::void_t<decltype(std::declval<const L&>().template backward_pooled<Act>(
                               std::declval<const B&>(), std::declval<typename L::template Workspace<B>&>(),
                               (const float*)nullptr, (const float*)nullptr, (const float*)nullptr,
                               (const float*)nullptr, std::size_t{}, std::declval<const Pool&>(), (float*)nullptr,
                               (float*)nullptr))>> : std::true_type {};

// And, for a layer that keeps its training output in a channel-blocked layout for the layer after
// it (backend/channel_blocked.hpp): `blocked_output(ws)` (empty where this workspace keeps none),
// `forward_blocked(backend, ws, params, x, count)`, `blocked_output_gradient(ws, count)` and
// `backward_blocked(backend, ws, params, x, count, dx, grad)`...
template <class L, class B, class = void>
struct produces_blocked : std::false_type {};
template <class L, class B>
struct produces_blocked<
    L, B,
    std::void_t<decltype(backend::ChannelBlocked{std::declval<const L&>().blocked_output(
                    std::declval<const typename L::template Workspace<B>&>())}),
                decltype(std::declval<const L&>().forward_blocked(
                    std::declval<const B&>(), std::declval<typename L::template Workspace<B>&>(), (const float*)nullptr,
                    (const float*)nullptr, std::size_t{})),
                decltype(backend::ChannelBlocked{std::declval<const L&>().blocked_output_gradient(
                    std::declval<typename L::template Workspace<B>&>(), std::size_t{})}),
                decltype(std::declval<const L&>().backward_blocked(
                    std::declval<const B&>(), std::declval<typename L::template Workspace<B>&>(), (const float*)nullptr,
                    (const float*)nullptr, std::size_t{}, (float*)nullptr, (float*)nullptr))>> : std::true_type {};
// ...and for the layer that reads it: `forward_from_blocked<Act>(backend, ws, params, x, count, y)`
// (training; y = Act(its output)) and `backward_to_blocked<Act>(backend, ws, params, x, dy, count,
// dx, grad)` (dy: the gradient of Act's output; dx written blocked).
template <class L, class B, class Act, class = void>
struct consumes_blocked : std::false_type {};
template <class L, class B, class Act>
struct consumes_blocked<L, B, Act,
                        std::void_t<decltype(std::declval<const L&>().template forward_from_blocked<Act>(
                                        std::declval<const B&>(), std::declval<typename L::template Workspace<B>&>(),
                                        (const float*)nullptr, backend::ChannelBlocked{}, std::size_t{},
                                        (float*)nullptr)),
                                    decltype(std::declval<const L&>().template backward_to_blocked<Act>(
                                        std::declval<const B&>(), std::declval<typename L::template Workspace<B>&>(),
                                        (const float*)nullptr, backend::ChannelBlocked{}, (const float*)nullptr,
                                        std::size_t{}, backend::ChannelBlocked{}, (float*)nullptr))>>
    : std::true_type {};

template <class A, class = void>
struct is_activation : std::false_type {};
template <class A>
struct is_activation<A, std::void_t<decltype(float{A::forward(0.0f)}), decltype(float{A::derivative_from_output(0.0f)}),
                                    decltype(static_cast<const char*>(A::name))>> : std::true_type {};

}  // namespace detail

// Config, name, L(Shape, Config), output_shape(), parameter_count(), initialize(float*, Rng&).
template <class L>
inline constexpr bool is_layer_v = detail::has_config<L>::value && detail::has_name<L>::value &&
                                   detail::constructs_from_shape<L>::value && detail::has_output_shape<L>::value &&
                                   detail::has_parameter_count<L>::value && detail::has_initialize<L>::value;

// Workspace<B>, make_workspace(B, max_batch), forward(...) and backward(...) on backend B.
template <class L, class B>
inline constexpr bool is_layer_for_v = detail::has_workspace<L, B>::value && detail::has_forward<L, B>::value &&
                                       detail::has_backward<L, B>::value;

// An activation policy of nn/activation.hpp (Relu, Tanh, Sigmoid, Identity, or one of the same form).
template <class A>
inline constexpr bool is_activation_v = detail::is_activation<A>::value;

// Static checks with one sentence per missing member; true when they all pass.
template <class L>
constexpr bool check_layer() {
  static_assert(detail::has_config<L>::value,
                "hpcps: a layer type needs a nested `struct Config` (its run-time settings); see docs/layers.md");
  static_assert(detail::has_name<L>::value,
                "hpcps: a layer type needs `static constexpr const char* name`; see docs/layers.md");
  static_assert(detail::constructs_from_shape<L>::value,
                "hpcps: a layer type needs a constructor L(nn::Shape input, const L::Config&) and must be movable; "
                "see docs/layers.md");
  static_assert(detail::has_output_shape<L>::value,
                "hpcps: a layer type needs `nn::Shape output_shape() const`; see docs/layers.md");
  static_assert(detail::has_parameter_count<L>::value,
                "hpcps: a layer type needs `std::size_t parameter_count() const`; see docs/layers.md");
  static_assert(detail::has_initialize<L>::value,
                "hpcps: a layer type needs `void initialize(float* params, data::Rng&) const`; see docs/layers.md");
  return true;
}

template <class L, class B>
constexpr bool check_layer_for() {
  static_assert(detail::has_workspace<L, B>::value,
                "hpcps: a layer type needs `template <class B> struct Workspace` and "
                "`Workspace<B> make_workspace(const B&, std::size_t max_batch) const` for this backend; "
                "see docs/layers.md");
  static_assert(detail::has_forward<L, B>::value,
                "hpcps: a layer type needs `forward(backend, ws, params, x, count, y, training) const` for this "
                "backend; see docs/layers.md");
  static_assert(detail::has_backward<L, B>::value,
                "hpcps: a layer type needs `backward(backend, ws, params, x, y, dy, count, dx, grad) const` for this "
                "backend; see docs/layers.md");
  return true;
}

}  // namespace hpcps::nn
