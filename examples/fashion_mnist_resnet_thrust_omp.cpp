// The Thrust compositions of the Fashion-MNIST ResNet example on the OpenMP system (--backend
// thrust-omp): a source of their own, so they compile in parallel with the program's.
#include "fashion_mnist_resnet.hpp"

#include <hpcps/backend/thrust.hpp>

namespace fashion_mnist {

int run_thrust_omp(const Problem<ResNetNetwork>& p) { return with_backend<hpcps::backend::ThrustOmp>(p); }

}  // namespace fashion_mnist
