// Trains a convolutional network on Fashion-MNIST with an hpcps parameter server:
//
//   conv 5x5 (--width channels, pad 2) - relu - maxpool 2 - conv 5x5 (2 x --width) - relu - maxpool 2
//   - flatten - dense --dense - relu - dropout --dropout - dense 10
//
//   mpiexec -n 3 ./fashion_mnist_cnn --servers 1               # 2 workers + 1 server, synchronous
//   mpiexec -n 2 ./fashion_mnist_cnn                           # 2 colocated ranks
//   mpiexec -n 3 ./fashion_mnist_cnn --servers 1 --sync ssp    # stale-synchronous
//   mpiexec -n 1 ./fashion_mnist_cnn --threads 2 --width 16    # one rank, two compute threads
//
// The network is a type listing its layers; the sizes are given at run time and every shape after
// the input (1x28x28, from the data) is inferred. The rest is the MLP example's: the same flags,
// strategies, update rules, backends and report.
#include "fashion_mnist_cnn.hpp"

namespace fashion_mnist {

namespace nn = hpcps::nn;
using Network = CnnNetwork;

struct CnnConfig {
  std::size_t width = 32;   // channels of the first convolution; the second has twice as many
  std::size_t dense = 128;  // units of the hidden dense layer
  float dropout = 0.25f;    // dropout rate before the last layer (0: none)
};

int run(const Config& cfg, const CnnConfig& cnn) {
  const auto world = hpcps::comm::Communicator::world();
  hpcps::data::TrainTest data;
  if (const auto stop = prepare(world, cfg, data)) return *stop;
  const nn::Shape input = image_shape(cfg, data);
  const Network network(input, {{cnn.width, 5, 2}, {}, {2}, {2 * cnn.width, 5, 2}, {}, {2}, {}, {cnn.dense}, {},
                                {cnn.dropout, cfg.seed}, {data.train.classes}});
  const int servers = servers_for(cfg);
  const Problem<Network> p{world, cfg, data, network, servers, world.size() - servers,
                           [&](hpcps::metrics::JsonWriter& json) {
                             json.field("width", cnn.width).field("dense", cnn.dense).field("dropout", cnn.dropout);
                           }};
  return with_chosen_backend(p);
}

}  // namespace fashion_mnist

int main(int argc, char** argv) {
  using namespace fashion_mnist;
  Config cfg;
  cfg.program = "fashion_mnist_cnn";
  cfg.epochs = 15;
  CnnConfig cnn;
  CLI::App app{"Train a CNN on Fashion-MNIST with an hpcps parameter server (run under mpiexec)"};
  add_common_options(app, cfg);
  app.add_option("--width", cnn.width, "Channels of the first convolution (the second has twice as many)")
      ->capture_default_str()->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--dense", cnn.dense, "Units of the hidden dense layer")->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  app.add_option("--dropout", cnn.dropout, "Dropout rate before the last layer, in [0, 0.95] (0: none)")
      ->capture_default_str()->check(finite_in(0.0, 0.95));
  if (const auto code = parse(app, cfg, argc, argv)) return *code;
  return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment&) { return run(cfg, cnn); });
}
