#pragma once
// The gradient-backend concept (docs/architecture.md#the-backend-concept), checked by a trait so
// a composition with a wrong type fails with a sentence instead of a page of template errors.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "hpcps/backend/gemm.hpp"
#include "hpcps/backend/window.hpp"
#include "hpcps/nn/activation.hpp"
#include "hpcps/nn/batch_stats.hpp"

namespace hpcps::backend {
namespace detail {

template <class B, class = void>
struct has_buffers : std::false_type {};
template <class B>
struct has_buffers<B, std::void_t<typename B::buffer_type, typename B::label_buffer_type,
                                  decltype(B::host_accessible),
                                  decltype(std::declval<const B&>().make_buffer(std::size_t{})),
                                  decltype(B::data(std::declval<typename B::buffer_type&>()))>>
    : std::true_type {};

template <class B, class = void>
struct has_kernels : std::false_type {};
template <class B>
struct has_kernels<
    B, std::void_t<decltype(std::declval<const B&>().gemm(Transpose::no, Transpose::no, std::size_t{}, std::size_t{},
                                                          std::size_t{}, 1.0f, (const float*)nullptr, std::size_t{},
                                                          (const float*)nullptr, std::size_t{}, 0.0f,
                                                          (float*)nullptr, std::size_t{})),
                   decltype(std::declval<const B&>().template bias_activation<nn::Relu>(
                       (float*)nullptr, (const float*)nullptr, std::size_t{}, std::size_t{})),
                   decltype(std::declval<const B&>().template activation_backward<nn::Relu>(
                       (float*)nullptr, (const float*)nullptr, std::size_t{})),
                   decltype(std::declval<const B&>().column_sums((const float*)nullptr, std::size_t{},
                                                                 std::size_t{}, (float*)nullptr)),
                   decltype(std::declval<const B&>().softmax_cross_entropy(
                       (float*)nullptr, (const std::int32_t*)nullptr, std::size_t{}, std::size_t{}, true))>>
    : std::true_type {};

// The primitives nn's layers need beyond the network ones (docs/layers.md#backend-primitives).
template <class B, class = void>
struct has_layer_kernels : std::false_type {};
template <class B>
struct has_layer_kernels<
    B, std::void_t<decltype(B::data(std::declval<typename B::label_buffer_type&>())),
                   decltype(std::declval<const B&>().im2col((const float*)nullptr, std::size_t{}, Window2d{}, (float*)nullptr)),
                   decltype(std::declval<const B&>().col2im((const float*)nullptr, std::size_t{}, Window2d{}, (float*)nullptr)),
                   decltype(std::declval<const B&>().channel_bias((float*)nullptr, (const float*)nullptr, std::size_t{},
                                                                  std::size_t{}, std::size_t{})),
                   decltype(std::declval<const B&>().channel_sums((const float*)nullptr, std::size_t{}, std::size_t{},
                                                                  std::size_t{}, (float*)nullptr)),
                   decltype(std::declval<const B&>().max_pool((const float*)nullptr, std::size_t{}, Window2d{},
                                                              (float*)nullptr, (std::int32_t*)nullptr)),
                   decltype(std::declval<const B&>().max_pool_backward((const float*)nullptr, (const std::int32_t*)nullptr,
                                                                       std::size_t{}, Window2d{}, (float*)nullptr)),
                   decltype(std::declval<const B&>().avg_pool((const float*)nullptr, std::size_t{}, Window2d{}, (float*)nullptr)),
                   decltype(std::declval<const B&>().avg_pool_backward((const float*)nullptr, std::size_t{}, Window2d{},
                                                                       (float*)nullptr)),
                   decltype(std::declval<const B&>().template activation<nn::Relu>((const float*)nullptr, std::size_t{},
                                                                                   (float*)nullptr)),
                   decltype(std::declval<const B&>().template activation_gradient<nn::Relu>(
                       (const float*)nullptr, (const float*)nullptr, std::size_t{}, (float*)nullptr)),
                   decltype(std::declval<const B&>().copy((const float*)nullptr, std::size_t{}, (float*)nullptr)),
                   decltype(std::declval<const B&>().multiply((const float*)nullptr, (const float*)nullptr, std::size_t{},
                                                              (float*)nullptr)),
                   decltype(std::declval<const B&>().dropout_mask((float*)nullptr, std::size_t{}, 1.0f, std::uint64_t{},
                                                                  std::size_t{}))>>
    : std::true_type {};

}  // namespace detail

// Optional: convolution, pooling and the elementwise kernels of nn's layers. Every shipped backend
// has them; a backend without them still runs nn::Mlp and nn::SoftmaxRegression.
template <class B>
inline constexpr bool has_layer_kernels_v = detail::has_layer_kernels<B>::value;

template <class B>
inline constexpr bool is_backend_v = detail::has_buffers<B>::value && detail::has_kernels<B>::value;

}  // namespace hpcps::backend
