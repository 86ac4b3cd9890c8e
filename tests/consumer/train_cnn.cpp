// The program of docs/tutorial.md: a CNN with an activation of one's own, trained on Fashion-MNIST
// through a synchronous parameter server. Every rank runs it: mpiexec -n 2 ./train_cnn
//   train_cnn [EPOCHS [TRAIN_SAMPLES]]   (defaults: 3 epochs, all 60,000 samples)
#include <hpcps/hpcps.hpp>

#include <fmt/format.h>

#include <cstdlib>

namespace nn = hpcps::nn;

// An activation of one's own: leaky ReLU. Its derivative is written in terms of the output, which
// keeps the sign of the input, so backpropagation needs no second buffer. HPCPS_HOST_DEVICE lets
// the same function run in CUDA kernels (backend::ThrustCuda).
struct LeakyRelu {
  static constexpr const char* name = "leaky_relu";
  HPCPS_HOST_DEVICE static float forward(float x) { return x > 0.0f ? x : 0.01f * x; }
  HPCPS_HOST_DEVICE static float derivative_from_output(float y) { return y > 0.0f ? 1.0f : 0.01f; }
};

// The layers, in order; sizes come at run time, every shape after the input is inferred.
using Net = nn::Sequential<nn::Conv2d, LeakyRelu, nn::MaxPool2d, nn::Conv2d, LeakyRelu, nn::MaxPool2d, nn::Flatten,
                           nn::Dense, LeakyRelu, nn::Dense>;
using Server = hpcps::ParameterServer<Net, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::MomentumSgd>;

int main(int argc, char** argv) {
  return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment&) {
    const auto world = hpcps::comm::Communicator::world();
    auto data = hpcps::data::load_fashion_mnist();  // /usr/share/datasets/fashion-mnist
    if (argc > 2) {
      data.train.count = std::strtoul(argv[2], nullptr, 10);  // a prefix of the training set
      data.train.images.resize(data.train.count * data.train.features);
      data.train.labels.resize(data.train.count);
    }
    const Net net(nn::Shape{data.train.channels, data.train.height, data.train.width},
                  {{16, 5, 2}, {}, {2}, {32, 5, 2}, {}, {2}, {}, {64}, {}, {data.train.classes}});

    Server::Options options;
    options.servers = 0;      // colocated: every rank a worker and the server of its shard
    options.max_batch = 128;  // the largest batch one worker is given
    const float lr = 0.02f;
    Server ps(world, net, hpcps::backend::Cpu(1), options, {},
              hpcps::optim::MomentumSgd(lr, 0.0f, hpcps::optim::MomentumUpdate(0.9f)));

    hpcps::ps::TrainOptions train;
    train.epochs = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 3;
    train.batch = 128;  // global batch, split among the workers
    const auto report = hpcps::ps::train(ps, data.train, &data.test, train, [](const hpcps::ps::EpochReport& e) {
      fmt::print("epoch {}: test accuracy {:.4f}, {:.0f} samples/s\n", e.epoch, e.test_accuracy, e.samples_per_second);
    });
    if (world.rank() == 0) {
      fmt::print("{} ({} parameters): final test accuracy {:.4f}\n", net.describe(), net.parameter_count(),
                 report.test_accuracy);
    }
  });
}
