// The control for the compile-fail tests: the same headers, a correct composition, compiles.
#include "hpcps/nn/mlp.hpp"
#include "hpcps/ps/parameter_server.hpp"

using Right = hpcps::ParameterServer<hpcps::nn::Mlp<>, hpcps::backend::Cpu, hpcps::sync::Synchronous,
                                     hpcps::optim::MomentumSgd>;
static_assert(sizeof(Right) > 0);
int main() { return 0; }
