// The Thrust compositions of the Fashion-MNIST MLP example on the OpenMP system (--backend
// thrust-omp): a source of their own, so they compile in parallel with the program's.
#include "fashion_mnist_mlp.hpp"

#include <hpcps/backend/thrust.hpp>

namespace fashion_mnist {

int run_thrust_omp(const Problem<MlpNetwork>& p) { return with_backend<hpcps::backend::ThrustOmp>(p); }

}  // namespace fashion_mnist
