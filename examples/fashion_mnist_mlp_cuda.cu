// The CUDA compositions of the Fashion-MNIST MLP example (--backend cuda), compiled by nvcc.
#include "fashion_mnist.hpp"

#include <hpcps/backend/thrust.hpp>

namespace fashion_mnist {

int run_cuda(const Problem<hpcps::nn::Mlp<hpcps::nn::Relu>>& p) {
  require_cuda_device(p.world, hpcps::backend::detail::cuda_device_available());
  return with_backend<hpcps::backend::ThrustCuda>(p);
}

}  // namespace fashion_mnist
