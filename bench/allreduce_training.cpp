// The baseline a user would compare a parameter server with: Horovod-style data parallelism, no
// servers. Every rank computes the gradient sum of its share of the global batch, one
// MPI_Allreduce sums gradients and sample counts, and every rank applies the same MomentumSgd
// step to its full copy of the parameters. Same data sharding, model, batch and update rule as the
// demo (`fashion_mnist_mlp`), so the two run side by side:
//
//   mpiexec -n 2 bench/allreduce_training [--epochs 10] [--batch 64] [--lr 0.02]
//   mpiexec -n 2 build/examples/fashion_mnist_mlp --servers 0     # the colocated parameter server
//
// Prints a JSON summary on rank 0.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <hpcps/hpcps.hpp>

int main(int argc, char** argv) {
  return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment&) {
    std::size_t epochs = 10, global_batch = 64;
    float lr = 0.02f;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string flag = argv[i];
      if (flag == "--epochs") epochs = std::stoul(argv[i + 1]);
      else if (flag == "--batch") global_batch = std::stoul(argv[i + 1]);
      else if (flag == "--lr") lr = std::stof(argv[i + 1]);
    }
    const auto world = hpcps::comm::Communicator::world();
    const int w = world.rank(), workers = world.size();
    const auto data = hpcps::data::load_fashion_mnist();
    const hpcps::nn::Mlp<hpcps::nn::Relu> net({784, 256, 128, 10});
    const hpcps::backend::Cpu backend(1);
    const std::size_t clocks = hpcps::ps::clocks_per_epoch(data.train.count, global_batch);
    const hpcps::optim::MomentumSgd sgd(hpcps::optim::Schedule::cosine(lr, epochs * clocks), 0.0f,
                                        hpcps::optim::MomentumUpdate(0.9f));
    std::vector<float> params(net.parameter_count()), grad(net.parameter_count() + 1);  // + the sample count
    net.initialize(params.data(), 1);
    auto state = sgd.make_state(params.size());
    const std::size_t batch = hpcps::ps::worker_batch(global_batch, w, workers);
    auto ws = net.make_workspace(backend, batch);
    // The parameter server's data order (ps::train): one shuffle of the whole set, each rank its part.
    hpcps::data::Batcher batcher(data.train, {0, data.train.count}, global_batch, hpcps::ps::data_order_seed(1));
    double train_seconds = 0.0, allreduce_seconds = 0.0;
    std::size_t step = 0;
    double accuracy = 0.0;
    for (std::size_t epoch = 0; epoch < epochs; ++epoch) {
      batcher.start_epoch(epoch);
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t c = 0; c < clocks; ++c) {
        float& count = grad.back();
        const auto mine = hpcps::ps::worker_part(batcher.batch_count(c), w, workers);
        if (mine.size() > 0) {
          const auto view = batcher.part(c, mine);
          net.gradient(backend, ws, params.data(), view.inputs, view.labels, view.count, grad.data());
          count = static_cast<float>(view.count);
        } else {
          std::fill(grad.begin(), grad.end(), 0.0f);
        }
        const auto a0 = std::chrono::steady_clock::now();
        world.allreduce_in_place(grad.data(), grad.size(), MPI_SUM);
        allreduce_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count();
        sgd.step(state, params.data(), grad.data(), 1.0f / grad.back(), params.size(), step++);
      }
      train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (w == 0) {
        accuracy = net.evaluate(backend, ws, params.data(), data.test.images.data(), data.test.labels.data(),
                                data.test.count)
                       .accuracy();
      }
    }
    if (w == 0) {
      std::printf("{\"benchmark\": \"allreduce_training\", \"ranks\": %d, \"epochs\": %zu, \"batch\": %zu, "
                  "\"test_accuracy\": %.4f, \"samples_per_second\": %.0f, \"train_seconds\": %.3f, "
                  "\"allreduce_seconds\": %.3f}\n",
                  workers, epochs, global_batch, accuracy,
                  static_cast<double>(epochs * data.train.count) / train_seconds, train_seconds, allreduce_seconds);
    }
  });
}
