// Must NOT compile: the update rule given where the gradient backend goes.
#include "hpcps/nn/mlp.hpp"
#include "hpcps/ps/parameter_server.hpp"

using Wrong = hpcps::ParameterServer<hpcps::nn::Mlp<>, hpcps::optim::StandardSgd>;
static_assert(sizeof(Wrong) > 0);
int main() { return 0; }
