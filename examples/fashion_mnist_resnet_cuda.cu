// The CUDA compositions of the Fashion-MNIST ResNet example (--backend cuda), compiled by nvcc into
// fashion_mnist_resnet_cuda.
#include "fashion_mnist_resnet.hpp"

#include <hpcps/backend/thrust.hpp>

namespace fashion_mnist {

int run_cuda(const Problem<ResNetNetwork>& p) {
  require_cuda_device(p.world, hpcps::backend::detail::cuda_device_available());
  return with_backend<hpcps::backend::ThrustCuda>(p);
}

}  // namespace fashion_mnist
