// A training job in which one rank raises an error at a chosen moment, for the fail_at.* tests
// (expect_failure.cmake): the whole job must end within seconds with that rank's message, whatever
// the layout, strategy or transport, and never hang in a collective while the error unwinds.
//
//   fail_program POINT SYNC SERVERS TRANSPORT
//     POINT      construction | first-clock | mid-epoch | evaluation | server-update | options
//     SYNC       bsp | ssp | async
//     SERVERS    number of dedicated servers (0: colocated)
//     TRANSPORT  shm | p2p (Options::shared_memory on or off)
//
// The failing rank is the last worker (rank 0 for evaluation, which only rank 0 runs; the last rank
// for server-update). `options` is a global batch smaller than the number of workers: every worker
// rejects it in ps::train while the servers already wait for the first clock.
#include <hpcps/hpcps.hpp>

#include <cstdlib>
#include <string>
#include <utility>

#include "synthetic_data.hpp"

namespace {

struct Injection {
  std::string point;
  int rank = -1;  // the failing rank; -1: none
  mutable std::size_t gradients = 0;
  bool here(const char* p) const { return point == p && hpcps::comm::Communicator::world().rank() == rank; }
  [[noreturn]] void fail() const { throw hpcps::Error("injected failure at " + point); }
};
Injection injection;

// The MLP, failing on the chosen rank at the chosen point.
class FailingNetwork : public hpcps::nn::Mlp<hpcps::nn::Relu> {
 public:
  using Base = hpcps::nn::Mlp<hpcps::nn::Relu>;
  using Base::Base;
  template <class Backend>
  typename Base::template Workspace<Backend> make_workspace(const Backend& backend, std::size_t max_batch) const {
    if (injection.here("construction")) injection.fail();
    return Base::make_workspace(backend, max_batch);
  }
  template <class Backend, class Ready>
  hpcps::nn::BatchStats gradient(const Backend& backend, typename Base::template Workspace<Backend>& ws,
                                 const float* params, const float* inputs, const std::int32_t* labels,
                                 std::size_t count, float* grad, Ready&& ready) const {
    const std::size_t clock = injection.gradients++;
    if (clock == 0 && injection.here("first-clock")) injection.fail();
    if (clock == 5 && injection.here("mid-epoch")) injection.fail();
    return Base::gradient(backend, ws, params, inputs, labels, count, grad, std::forward<Ready>(ready));
  }
  template <class Backend>
  hpcps::nn::BatchStats gradient(const Backend& backend, typename Base::template Workspace<Backend>& ws,
                                 const float* params, const float* inputs, const std::int32_t* labels,
                                 std::size_t count, float* grad) const {
    return gradient(backend, ws, params, inputs, labels, count, grad, [](std::size_t) {});
  }
  template <class Backend>
  hpcps::nn::BatchStats evaluate(const Backend& backend, typename Base::template Workspace<Backend>& ws,
                                 const float* params, const float* inputs, const std::int32_t* labels,
                                 std::size_t count) const {
    if (injection.here("evaluation")) injection.fail();
    return Base::evaluate(backend, ws, params, inputs, labels, count);
  }
};

// Plain SGD, failing on the chosen (server) rank at its third update.
class FailingSgd : public hpcps::optim::StandardSgd {
 public:
  using Base = hpcps::optim::StandardSgd;
  using Base::Base;
  void step(State& state, std::size_t offset, float* params, const float* sum, float scale, std::size_t n,
            std::size_t step) const {
    if (step == 2 && injection.here("server-update")) injection.fail();
    Base::step(state, offset, params, sum, scale, n, step);
  }
  void step(State& state, float* params, const float* sum, float scale, std::size_t n, std::size_t step) const {
    this->step(state, 0, params, sum, scale, n, step);
  }
};

template <class Sync>
void train(const hpcps::comm::Communicator& world, Sync sync, int servers, bool shared_memory) {
  using Server = hpcps::ParameterServer<FailingNetwork, hpcps::backend::Cpu, Sync, FailingSgd>;
  const auto train_set = hpcps_test::synthetic(1200, 16, 4, 7);
  const auto test_set = hpcps_test::synthetic(200, 16, 4, 8);
  typename Server::Options options;
  options.servers = servers;
  options.max_batch = 16;
  options.shared_memory = shared_memory;
  options.piece_floats = 64;  // several pieces per shard: errors can strike between them
  Server ps(world, FailingNetwork({16, 32, 4}), hpcps::backend::Cpu(1), options, sync, FailingSgd(0.05f));
  hpcps::ps::TrainOptions train;
  train.epochs = 2;
  train.batch = injection.point == "options" ? 1 : 16;
  train.evaluations_per_epoch = 2;
  hpcps::ps::train(ps, train_set, &test_set, train);
}

}  // namespace

int main(int argc, char** argv) {
  return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment&) {
    if (argc != 5) throw hpcps::Error("usage: fail_program POINT SYNC SERVERS TRANSPORT");
    const auto world = hpcps::comm::Communicator::world();
    const std::string sync = argv[2];
    const int servers = std::atoi(argv[3]);
    const bool shared_memory = std::string(argv[4]) == "shm";
    const int workers = servers == 0 ? world.size() : world.size() - servers;
    injection.point = argv[1];
    if (injection.point == "evaluation") {
      injection.rank = 0;
    } else if (injection.point == "server-update") {
      injection.rank = world.size() - 1;
    } else {
      injection.rank = workers - 1;
    }
    if (sync == "ssp") {
      train(world, hpcps::sync::StaleSynchronous(1), servers, shared_memory);
    } else if (sync == "async") {
      train(world, hpcps::sync::Asynchronous{}, servers, shared_memory);
    } else {
      train(world, hpcps::sync::Synchronous{}, servers, shared_memory);
    }
    // Reaching here means the injection never fired: the test must not pass silently.
    throw hpcps::Error("the injected failure at " + injection.point + " did not happen");
  });
}
