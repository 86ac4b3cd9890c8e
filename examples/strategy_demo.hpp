#pragma once
// Shared body of the three strategy examples (sync_bsp.cpp, sync_ssp.cpp, sync_async.cpp): they
// differ in the one line that names the composition. Trains the Fashion-MNIST MLP for 3 epochs.
#include <hpcps/hpcps.hpp>
#include <hpcps/ps/node_train_test.hpp>

#include <fmt/format.h>

#include <type_traits>

template <class Server>
int strategy_demo(int argc, char** argv) {
  return hpcps::comm::run(argc, argv, [](hpcps::comm::Environment&) {
    using Optimizer = typename Server::optimizer_type;
    using Sync = typename Server::sync_type;
    const auto world = hpcps::comm::Communicator::world();
    const auto files = hpcps::data::fashion_mnist_files();
    const auto sets = hpcps::data::describe_fashion_mnist(files);
    const typename Server::network_type network({sets.train.features, 256, 128, sets.train.classes});

    typename Server::Options options;  // 1 server; every other rank is a worker
    options.max_batch = 64;
    // Plain SGD takes a larger rate than SGD with momentum (which multiplies it by ~1/(1-0.9)).
    const float lr = std::is_same_v<Optimizer, hpcps::optim::StandardSgd> ? 0.05f : 0.01f;
    Server ps(world, network, typename Server::backend_type(1), options, Sync{}, Optimizer(lr));
    const auto data = hpcps::ps::load_node_data(ps, files, sets);  // servers read nothing

    hpcps::ps::TrainOptions train;
    train.epochs = 3;
    const auto report = hpcps::ps::train(ps, data.train.set(), &data.test.set(), train, [](const hpcps::ps::EpochReport& e) {
      fmt::print("epoch {}: test accuracy {:.4f} after {:.1f} s\n", e.epoch, e.test_accuracy, e.elapsed_seconds);
    });
    if (world.rank() == 0) {
      fmt::print("{}: final test accuracy {:.4f}, {:.0f} samples/s, largest staleness {}\n", Sync::name,
                 report.test_accuracy, report.samples_per_second, report.server_max_staleness);
    }
  });
}
