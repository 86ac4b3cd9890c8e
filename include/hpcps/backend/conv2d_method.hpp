#pragma once
// Which convolution method a backend runs nn::Conv2d with, chosen by the backend's type: a backend
// names its own as `using conv2d_method_type = ...;` (backend::BasicCpu: oneDNN), any other runs
// im2col + GEMM on its primitives (the Thrust backends). A method is constructed once per layer
// workspace, `Method(backend, Window2d, out_channels, max_batch)`, and offers
// `forward(backend, params, x, count, y)`, `forward_activated<Act>(backend, params, x, count, y)`
// (y = Act(conv(x))) and `backward(backend, params, x, dy, count, dx, grad)`.
#include <type_traits>

#include "hpcps/backend/conv2d_im2col.hpp"

namespace hpcps::backend {

template <class Backend, class = void>
struct conv2d_method {
  using type = Im2colConv2d<Backend>;
};
template <class Backend>
struct conv2d_method<Backend, std::void_t<typename Backend::conv2d_method_type>> {
  using type = typename Backend::conv2d_method_type;
};
template <class Backend>
using conv2d_method_t = typename conv2d_method<Backend>::type;

}  // namespace hpcps::backend
