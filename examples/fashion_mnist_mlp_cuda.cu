// The CUDA compositions of the Fashion-MNIST MLP example (--backend cuda), compiled by nvcc into
// fashion_mnist_mlp_cuda.
#include "fashion_mnist_mlp.hpp"

#include <hpcps/backend/thrust.hpp>

namespace fashion_mnist {

int run_cuda(const Problem<MlpNetwork>& p) {
  require_cuda_device(p.world, hpcps::backend::detail::cuda_device_available());
  return with_backend<hpcps::backend::ThrustCuda>(p);
}

}  // namespace fashion_mnist
