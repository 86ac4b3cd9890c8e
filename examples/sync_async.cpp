// Strategy example, asynchronous: updates applied as they arrive, nobody waits.
// The code of sync_bsp.cpp, sync_ssp.cpp and sync_async.cpp differs only in the line naming the server.
//   mpiexec -n 4 ./sync_async
#include "strategy_demo.hpp"

using Server = hpcps::AsyncServer<hpcps::nn::Mlp<hpcps::nn::Relu>>;

int main(int argc, char** argv) { return strategy_demo<Server>(argc, argv); }
