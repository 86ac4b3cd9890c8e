// Must NOT compile: an int where the network type goes.
#include "hpcps/ps/parameter_server.hpp"

using Wrong = hpcps::ParameterServer<int, hpcps::backend::Cpu>;
static_assert(sizeof(Wrong) > 0);
int main() { return 0; }
