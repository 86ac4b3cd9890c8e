#pragma once
// The CNN example's network type and its Thrust compositions, shared by its sources:
// fashion_mnist_cnn.cpp (the program, with backend::Cpu), fashion_mnist_cnn_thrust_omp.cpp and
// fashion_mnist_cnn_cuda.cu.
#include "fashion_mnist.hpp"

namespace fashion_mnist {

using CnnNetwork = hpcps::nn::Sequential<hpcps::nn::Conv2d, hpcps::nn::Relu, hpcps::nn::MaxPool2d, hpcps::nn::Conv2d,
                                         hpcps::nn::Relu, hpcps::nn::MaxPool2d, hpcps::nn::Flatten, hpcps::nn::Dense,
                                         hpcps::nn::Relu, hpcps::nn::Dropout, hpcps::nn::Dense>;

// Defined in fashion_mnist_cnn_thrust_omp.cpp where Thrust's headers are found.
int run_thrust_omp(const Problem<CnnNetwork>& p);
// Defined in fashion_mnist_cnn_cuda.cu, compiled by nvcc into fashion_mnist_cnn_cuda only.
int run_cuda(const Problem<CnnNetwork>& p);

}  // namespace fashion_mnist
