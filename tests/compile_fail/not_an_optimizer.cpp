// Must NOT compile: a backend given as the update rule.
#include "hpcps/nn/mlp.hpp"
#include "hpcps/ps/parameter_server.hpp"

using Wrong = hpcps::ParameterServer<hpcps::nn::Mlp<>, hpcps::backend::Cpu, hpcps::sync::Synchronous,
                                     hpcps::backend::Cpu>;
static_assert(sizeof(Wrong) > 0);
int main() { return 0; }
