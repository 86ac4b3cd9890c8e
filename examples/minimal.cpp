// The smallest complete hpcps program (shown in README.md): a synchronous parameter server
// training softmax regression on Fashion-MNIST. Run: mpiexec -n 3 ./minimal  (2 workers, 1 server)
#include <hpcps/hpcps.hpp>
#include <hpcps/ps/node_train_test.hpp>

#include <fmt/format.h>

using Server = hpcps::ParameterServer<hpcps::nn::SoftmaxRegression, hpcps::backend::Cpu,
                                      hpcps::sync::Synchronous, hpcps::optim::MomentumSgd>;

int main(int argc, char** argv) {
  return hpcps::comm::run(argc, argv, [](hpcps::comm::Environment&) {
    const auto world = hpcps::comm::Communicator::world();
    const auto files = hpcps::data::fashion_mnist_files();       // /usr/share/datasets/fashion-mnist
    const auto sets = hpcps::data::describe_fashion_mnist(files);  // the headers: sizes, no samples
    const hpcps::nn::SoftmaxRegression network(sets.train.features, sets.train.classes);

    Server::Options options;  // 1 server (the last rank), the other ranks are workers
    options.max_batch = 128;  // the largest per-worker batch
    Server ps(world, network, hpcps::backend::Cpu(1), options, {}, hpcps::optim::MomentumSgd(0.01f));
    // One copy per node of what each rank needs: workers the training set, worker 0 the test set.
    const auto data = hpcps::ps::load_node_data(ps, files, sets);

    hpcps::ps::TrainOptions train;  // global batch 64, split among the workers
    train.epochs = 3;
    const auto report = hpcps::ps::train(ps, data.train.set(), &data.test.set(), train, [](const hpcps::ps::EpochReport& e) {
      fmt::print("epoch {}: test accuracy {:.4f}, {:.0f} samples/s\n", e.epoch, e.test_accuracy, e.samples_per_second);
    });
    if (world.rank() == 0) fmt::print("final test accuracy {:.4f}\n", report.test_accuracy);
  });
}
