// Trains a multilayer perceptron on Fashion-MNIST with an hpcps parameter server.
//
//   mpiexec -n 4 ./fashion_mnist_mlp                          # 4 colocated ranks, synchronous
//   mpiexec -n 4 ./fashion_mnist_mlp --servers 1              # 3 workers, 1 dedicated server
//   mpiexec -n 5 ./fashion_mnist_mlp --servers 2              # 3 workers, 2 servers
//   mpiexec -n 4 ./fashion_mnist_mlp --sync ssp --staleness 2 # stale-synchronous (3 workers + 1 server)
//   mpiexec -n 4 ./fashion_mnist_mlp --sync async --optimizer adam
//   mpiexec -n 2 ./fashion_mnist_mlp --backend thrust-omp --threads 2
//   mpiexec -n 3 ./fashion_mnist_mlp --hidden 4096,4096 --batch 256 --train-samples 4096 --no-evaluation
//   mpiexec -n 2 ./fashion_mnist_mlp --wire bf16 --servers 1  # gradients pushed as bfloat16
//
// Ranks [0, W) are workers and the last --servers ranks are servers; rank 0 prints progress.
// Each --sync and --optimizer choice selects a composition compiled into this program.
#include "fashion_mnist_mlp.hpp"

namespace fashion_mnist {

using Network = MlpNetwork;

int run(const Config& cfg, const std::vector<std::size_t>& hidden) {
  const auto world = hpcps::comm::Communicator::world();
  hpcps::data::TrainTest data;
  if (const auto stop = prepare(world, cfg, data)) return *stop;
  std::vector<std::size_t> sizes{data.train.features};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(data.train.classes);
  const Network network(sizes);
  const int servers = servers_for(cfg);
  const Problem<Network> p{world, cfg, data, network, servers, world.size() - servers,
                           [&](hpcps::metrics::JsonWriter& json) { json.field("hidden", fmt::format("{}", fmt::join(hidden, ","))); }};
  return with_chosen_backend(p);
}

}  // namespace fashion_mnist

int main(int argc, char** argv) {
  using namespace fashion_mnist;
  Config cfg;
  cfg.program = "fashion_mnist_mlp";
  std::vector<std::size_t> hidden{256, 128};
  CLI::App app{"Train an MLP on Fashion-MNIST with an hpcps parameter server (run under mpiexec)"};
  add_common_options(app, cfg);
  app.add_option("--hidden", hidden, "Hidden layer sizes, e.g. 256,128")->delimiter(',')->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  if (const auto code = parse(app, cfg, argc, argv)) return *code;
  return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment&) { return run(cfg, hidden); });
}
