// Strategy example, stale-synchronous: a worker may run up to 2 clocks (the default bound) ahead of the slowest.
// The code of sync_bsp.cpp, sync_ssp.cpp and sync_async.cpp differs only in the line naming the server.
//   mpiexec -n 4 ./sync_ssp
#include "strategy_demo.hpp"

using Server = hpcps::SspServer<hpcps::nn::Mlp<hpcps::nn::Relu>>;

int main(int argc, char** argv) { return strategy_demo<Server>(argc, argv); }
