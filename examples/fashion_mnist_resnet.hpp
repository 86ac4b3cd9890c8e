#pragma once
// The ResNet example's network type and its Thrust compositions, shared by its sources:
// fashion_mnist_resnet.cpp (the program, with backend::Cpu), fashion_mnist_resnet_thrust_omp.cpp
// and fashion_mnist_resnet_cuda.cu.
#include "fashion_mnist.hpp"

namespace fashion_mnist {

namespace resnet {
namespace nn = hpcps::nn;
// Two 3x3 convolutions with batch normalization; the identity shortcut, or a strided 1x1
// convolution and a batch normalization where the block halves the size and doubles the channels.
using Body = nn::Sequential<nn::Conv2d, nn::BatchNorm2d, nn::Relu, nn::Conv2d, nn::BatchNorm2d>;
using Block = nn::Residual<Body>;
using Down = nn::Residual<Body, nn::Sequential<nn::Conv2d, nn::BatchNorm2d>>;
}  // namespace resnet

// Stem, then 3 stages of 2 blocks (w, 2w and 4w channels), global average pooling, dense.
using ResNetNetwork =
    hpcps::nn::Sequential<hpcps::nn::Conv2d, hpcps::nn::BatchNorm2d, hpcps::nn::Relu,                  //
                          resnet::Block, hpcps::nn::Relu, resnet::Block, hpcps::nn::Relu,              // w
                          resnet::Down, hpcps::nn::Relu, resnet::Block, hpcps::nn::Relu,               // 2w
                          resnet::Down, hpcps::nn::Relu, resnet::Block, hpcps::nn::Relu,               // 4w
                          hpcps::nn::AvgPool2d, hpcps::nn::Flatten, hpcps::nn::Dense>;

// Defined in fashion_mnist_resnet_thrust_omp.cpp where Thrust's headers are found.
int run_thrust_omp(const Problem<ResNetNetwork>& p);
// Defined in fashion_mnist_resnet_cuda.cu, compiled by nvcc into fashion_mnist_resnet_cuda only.
int run_cuda(const Problem<ResNetNetwork>& p);

}  // namespace fashion_mnist
