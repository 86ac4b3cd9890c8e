// The CUDA compositions of the Fashion-MNIST CNN example (--backend cuda), compiled by nvcc.
#include "fashion_mnist_cnn.hpp"

#include <hpcps/backend/thrust.hpp>

namespace fashion_mnist {

int run_cuda(const Problem<CnnNetwork>& p) {
  if (!hpcps::backend::detail::cuda_device_available()) {
    throw hpcps::Error("--backend cuda: no usable CUDA device on this machine");
  }
  return with_backend<hpcps::backend::ThrustCuda>(p);
}

}  // namespace fashion_mnist
