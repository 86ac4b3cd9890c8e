#pragma once
// Every shipped layer and nn::Sequential (docs/layers.md).
#include "hpcps/nn/layer_traits.hpp"
#include "hpcps/nn/layers/activation_layer.hpp"
#include "hpcps/nn/layers/avg_pool2d.hpp"
#include "hpcps/nn/layers/conv2d.hpp"
#include "hpcps/nn/layers/dense.hpp"
#include "hpcps/nn/layers/dropout.hpp"
#include "hpcps/nn/layers/flatten.hpp"
#include "hpcps/nn/layers/max_pool2d.hpp"
#include "hpcps/nn/layers/stateless.hpp"
#include "hpcps/nn/sequential.hpp"
#include "hpcps/nn/shape.hpp"
