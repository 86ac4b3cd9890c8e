// The steady-state training step allocates nothing: counted by replacing the global operator new
// in this test program. A worker's steps after the first are counted directly; a server's loop
// runs to the end, so its count must not grow with the number of clocks.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "hpcps/hpcps.hpp"

#include "counting_new.hpp"

namespace {

using hpcps::ps::WireFormat;

template <class Sync>
using Server = hpcps::ParameterServer<hpcps::nn::Mlp<hpcps::nn::Relu>, hpcps::backend::Cpu, Sync,
                                      hpcps::optim::MomentumSgd>;

// Allocations made on this rank while the workers run `steps` clocks (after a first warm-up
// clock) and the servers serve them; on a worker, only the steady-state steps are counted.
template <class Sync = hpcps::sync::Synchronous>
long allocations_during(std::size_t steps, int servers, WireFormat push = WireFormat::fp32,
                        WireFormat pull = WireFormat::fp32, bool shared_memory = true, double top_k = 0.0,
                        bool sign = false, bool sign_pull = false) {
  const auto world = hpcps::comm::Communicator::world();
  const hpcps::nn::Mlp<hpcps::nn::Relu> net({20, 16, 8, 4});
  typename Server<Sync>::Options options;
  options.servers = servers;
  options.max_batch = 8;
  options.piece_floats = 100;  // 536 parameters: several pieces per shard, several request sets
  options.wire = push;
  options.pull_wire = pull;
  options.shared_memory = shared_memory;
  options.top_k = top_k;
  options.sign_push = sign;
  options.sign_pull = sign_pull;
  Server<Sync> ps(world, net, hpcps::backend::Cpu(1), options, {}, hpcps::optim::MomentumSgd(0.1f));
  // The synchronous fp32 runs exchange through shared memory unless told not to (one node).
  CHECK(ps.uses_shared_memory() ==
        (shared_memory && Sync::aggregates && push == WireFormat::fp32 && pull == WireFormat::fp32 && top_k == 0.0 &&
         !sign && !sign_pull));
  std::vector<float> x(8 * 20, 0.5f);
  std::vector<std::int32_t> y(8, 1);
  long counted = 0;
  if (ps.is_worker()) {
    auto& worker = ps.worker();
    worker.start();
    worker.step(x.data(), y.data(), 8);
    const long before = hpcps_test::allocations.load();
    for (std::size_t t = 0; t < steps; ++t) {
      worker.step(x.data(), y.data(), t % 3 == 2 ? 0 : 8 - t % 3);  // full, partial and idle clocks
    }
    counted = hpcps_test::allocations.load() - before;
    worker.finish();
  } else {
    const long before = hpcps_test::allocations.load();
    ps.server().run();
    counted = hpcps_test::allocations.load() - before;
  }
  world.barrier();
  return counted;
}

// Keeps the compiler from eliding a new/delete pair (GCC may remove an unused allocation).
void* volatile sink = nullptr;

}  // namespace

// The counter must see every form of operator new, and each form must be freed by the matching
// delete: the aligned forms were not counted, and under AddressSanitizer the forms left to the
// runtime (nothrow, aligned) met our free() and failed as alloc-dealloc-mismatch.
TEST_CASE("counting_new counts every form of operator new and frees each with its delete", "[allocation]") {
  struct alignas(64) Wide {
    float lane[16];
  };
  struct Tracked {
    ~Tracked() {}  // non-trivial: new[] adds a cookie and delete[] must find it
    int value = 0;
  };
  const auto counted = [](auto&& allocate_and_free) {
    const long before = hpcps_test::allocations.load();
    allocate_and_free();
    return hpcps_test::allocations.load() - before;
  };
  CHECK(counted([] {
          sink = new int(1);
          delete static_cast<int*>(sink);
        }) == 1);
  CHECK(counted([] {
          sink = new Tracked[3];
          delete[] static_cast<Tracked*>(sink);
        }) == 1);
  CHECK(counted([] {
          sink = new (std::nothrow) int(2);
          delete static_cast<int*>(sink);
        }) == 1);
  CHECK(counted([] {
          sink = new (std::nothrow) Tracked[2];
          delete[] static_cast<Tracked*>(sink);
        }) == 1);
  CHECK(counted([] {
          auto* w = new Wide{};
          sink = w;
          CHECK(reinterpret_cast<std::uintptr_t>(w) % alignof(Wide) == 0);
          delete w;
        }) == 1);
  CHECK(counted([] {
          auto* w = new Wide[5];
          sink = w;
          CHECK(reinterpret_cast<std::uintptr_t>(w) % alignof(Wide) == 0);
          delete[] w;
        }) == 1);
  CHECK(counted([] {
          auto* w = new (std::nothrow) Wide{};
          sink = w;
          delete w;
        }) == 1);
  CHECK(counted([] {
          // Sized and aligned deletes called directly, as a container's allocator does.
          void* p = ::operator new(24, std::align_val_t{128});
          sink = p;
          CHECK(reinterpret_cast<std::uintptr_t>(p) % 128 == 0);
          ::operator delete(p, 24, std::align_val_t{128});
          p = ::operator new[](40, std::align_val_t{32}, std::nothrow);
          sink = p;
          ::operator delete[](p, std::align_val_t{32}, std::nothrow);
        }) == 2);
}

TEST_CASE("no allocation in the steady-state training step", "[ps][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  if (world.size() < 2) {
    WARN("needs at least 2 ranks (a worker and a server)");
    return;
  }
  const long short_run = allocations_during(5, 1);
  const long long_run = allocations_during(25, 1);
  const bool server = world.rank() == world.size() - 1;
  INFO((server ? "server" : "worker") << ": " << short_run << " allocations for 5 clocks, " << long_run << " for 25");
  if (server) {
    CHECK(long_run == short_run);  // whatever run() allocates, it does once, not per clock
  } else {
    CHECK(short_run == 0);
    CHECK(long_run == 0);
  }
  // Colocated: each step also runs the rank's server clock; still nothing allocated.
  const long colocated = allocations_during(25, 0);
  INFO("colocated: " << colocated << " allocations for 25 clocks");
  CHECK(colocated == 0);
  // Every byte in messages instead of shared memory: the same.
  const long short_messages = allocations_during(5, 1, WireFormat::fp32, WireFormat::fp32, false);
  const long long_messages = allocations_during(25, 1, WireFormat::fp32, WireFormat::fp32, false);
  INFO("point-to-point: " << short_messages << " allocations for 5 clocks, " << long_messages << " for 25");
  if (server) {
    CHECK(long_messages == short_messages);
  } else {
    CHECK(long_messages == 0);
  }
  // The counter is live: a vector allocates.
  const long before = hpcps_test::allocations.load();
  std::vector<int> v(10);
  CHECK(hpcps_test::allocations.load() > before);
}

namespace {

// Dedicated (1 server), colocated and asynchronous runs with these pushes and pulls: a worker
// allocates nothing after its first clock, and a server's count does not grow with the clocks.
void check_steady_state_without_allocation(WireFormat push, WireFormat pull, double top_k, bool sign = false,
                                           bool sign_pull = false) {
  const auto world = hpcps::comm::Communicator::world();
  const bool server = world.rank() == world.size() - 1;
  using Sync = hpcps::sync::Synchronous;
  const long short_run = allocations_during<Sync>(5, 1, push, pull, true, top_k, sign, sign_pull);
  const long long_run = allocations_during<Sync>(25, 1, push, pull, true, top_k, sign, sign_pull);
  INFO((server ? "server" : "worker") << ": " << short_run << " allocations for 5 clocks, " << long_run << " for 25");
  if (server) {
    CHECK(long_run == short_run);
  } else {
    CHECK(short_run == 0);
    CHECK(long_run == 0);
  }
  const long colocated = allocations_during<Sync>(25, 0, push, pull, true, top_k, sign, sign_pull);
  INFO("colocated: " << colocated << " allocations for 25 clocks");
  CHECK(colocated == 0);
  // The individual loop (asynchronous): its server's count must not grow with the clocks either.
  using Async = hpcps::sync::Asynchronous;
  const long async_short = allocations_during<Async>(5, 1, push, pull, true, top_k, sign, sign_pull);
  const long async_long = allocations_during<Async>(25, 1, push, pull, true, top_k, sign, sign_pull);
  INFO("asynchronous: " << async_short << " allocations for 5 clocks, " << async_long << " for 25");
  if (server) {
    CHECK(async_long == async_short);
  } else {
    CHECK(async_long == 0);
  }
}

}  // namespace

TEST_CASE("no allocation in the steady-state step with 16-bit pushes and pulls", "[wire][mpi]") {
  if (hpcps::comm::Communicator::world().size() < 2) {
    WARN("needs at least 2 ranks (a worker and a server)");
    return;
  }
  for (const WireFormat pull : {WireFormat::fp32, WireFormat::bf16}) {
    INFO("bf16 pushes, " << hpcps::ps::wire_name(pull) << " pulls");
    check_steady_state_without_allocation(WireFormat::bf16, pull, 0.0);
  }
}

TEST_CASE("no allocation in the steady-state step with top-k pushes", "[top_k][mpi]") {
  if (hpcps::comm::Communicator::world().size() < 2) {
    WARN("needs at least 2 ranks (a worker and a server)");
    return;
  }
  check_steady_state_without_allocation(WireFormat::fp32, WireFormat::fp32, 0.1);
}

TEST_CASE("no allocation in the steady-state step with scaled-sign pushes", "[sign][mpi]") {
  if (hpcps::comm::Communicator::world().size() < 2) {
    WARN("needs at least 2 ranks (a worker and a server)");
    return;
  }
  check_steady_state_without_allocation(WireFormat::fp32, WireFormat::fp32, 0.0, true);
}

TEST_CASE("no allocation in the steady-state step with scaled-sign pulls", "[sign_pull][mpi]") {
  if (hpcps::comm::Communicator::world().size() < 2) {
    WARN("needs at least 2 ranks (a worker and a server)");
    return;
  }
  for (const bool sign_push : {false, true}) {
    INFO((sign_push ? "scaled-sign" : "fp32") << " pushes");
    check_steady_state_without_allocation(WireFormat::fp32, WireFormat::fp32, 0.0, sign_push, true);
  }
}

// Balancing (ps/balance.hpp) runs every clock: the parts of full and short batches and the speed
// exchange allocate nothing; only a change of the split, recorded in history(), may.
TEST_CASE("no allocation in the speed balancer's clocks", "[balance][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  if (world.size() < 2) {
    WARN("needs at least 2 ranks (a split to balance)");
    return;
  }
  const int w = world.rank();
  const std::size_t batch = 8 * static_cast<std::size_t>(world.size());
  hpcps::ps::SpeedBalancer balancer(world, batch, batch, 0);
  // The last worker runs 4x slower from clock 20 to 59: the split moves away from it and back.
  const auto seconds = [&](std::uint64_t clock, std::size_t samples) {
    const bool slow = w == world.size() - 1 && clock >= 20 && clock < 60;
    return static_cast<double>(samples) / (slow ? 250.0 : 1000.0);
  };
  std::uint64_t clock = 0;
  std::size_t used = 0;  // read afterwards, so the short parts are not optimised away
  const auto run_clock = [&] {
    const hpcps::data::Range full = balancer.part(batch, w);
    // Short batches of changing sizes: each size is split anew.
    used += balancer.part(batch - 1 - clock % 3, w).size();
    balancer.after_clock(clock + 1, seconds(clock, full.size()), full.size());
    ++clock;
  };
  for (int warm_up = 0; warm_up < 5; ++warm_up) run_clock();
  const std::size_t changes_before = balancer.history().size();
  const long before = hpcps_test::allocations.load();
  while (clock < 100) run_clock();
  const long counted = hpcps_test::allocations.load() - before;
  const auto changes = static_cast<long>(balancer.history().size() - changes_before);
  balancer.finish();
  INFO(counted << " allocations in " << clock - 5 << " clocks with " << changes << " changes of the split; " << used
               << " samples in short parts");
  CHECK(changes >= 2);  // away from the slow worker and back
  CHECK(counted <= changes);
}
