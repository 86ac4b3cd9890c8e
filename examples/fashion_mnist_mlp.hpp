#pragma once
// The MLP example's network type and its Thrust compositions, shared by its sources:
// fashion_mnist_mlp.cpp (the program, with backend::Cpu), fashion_mnist_mlp_thrust_omp.cpp and
// fashion_mnist_mlp_cuda.cu.
#include "fashion_mnist.hpp"

namespace fashion_mnist {

using MlpNetwork = hpcps::nn::Mlp<hpcps::nn::Relu>;

// Defined in fashion_mnist_mlp_thrust_omp.cpp where Thrust's headers are found.
int run_thrust_omp(const Problem<MlpNetwork>& p);
// Defined in fashion_mnist_mlp_cuda.cu, compiled by nvcc into fashion_mnist_mlp_cuda only.
int run_cuda(const Problem<MlpNetwork>& p);

}  // namespace fashion_mnist
