// A job where one rank fails while the others wait for a message that will never come. Without
// hpcps::comm::run it would hang; with it, the job must end at once with the failing rank's message.
// Used by the comm_abort test through expect_failure.cmake.
#include <hpcps/comm/comm.hpp>

int main(int argc, char** argv) {
  return hpcps::comm::run(argc, argv, [](hpcps::comm::Environment&) {
    const auto world = hpcps::comm::Communicator::world();
    const int failing = world.size() > 1 ? 1 : 0;
    if (world.rank() == failing) throw hpcps::Error("deliberate failure for the abort test");
    int never = 0;
    world.recv(&never, 1, hpcps::comm::Communicator::any_source, 77);
    return 0;
  });
}
