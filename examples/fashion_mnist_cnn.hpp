#pragma once
// The CNN example's network type, shared by fashion_mnist_cnn.cpp and its CUDA compositions
// (fashion_mnist_cnn_cuda.cu).
#include "fashion_mnist.hpp"

namespace fashion_mnist {

using CnnNetwork = hpcps::nn::Sequential<hpcps::nn::Conv2d, hpcps::nn::Relu, hpcps::nn::MaxPool2d, hpcps::nn::Conv2d,
                                         hpcps::nn::Relu, hpcps::nn::MaxPool2d, hpcps::nn::Flatten, hpcps::nn::Dense,
                                         hpcps::nn::Relu, hpcps::nn::Dropout, hpcps::nn::Dense>;

// Defined in fashion_mnist_cnn_cuda.cu, compiled by nvcc, when the build has CUDA.
int run_cuda(const Problem<CnnNetwork>& p);

}  // namespace fashion_mnist
