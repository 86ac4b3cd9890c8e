// Single-process training with hpcps's components and no parameter server: the Batcher, the MLP on
// backend::Cpu, and MomentumSgd applied in place. The compute path a colocated single-rank server
// would run; bench/peers/compare_pytorch.py runs it beside PyTorch. Prints one JSON line per
// epoch timing: {"epoch": e, "seconds": s, "samples": n, "test_accuracy": a}.
//
//   local_training [--epochs 5] [--batch 128] [--threads 1] [--lr 0.02] [--data DIR]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <hpcps/hpcps.hpp>

int main(int argc, char** argv) {
  std::size_t epochs = 5, batch = 128;
  int threads = 1;
  float lr = 0.02f;
  std::string dir = hpcps::data::default_fashion_mnist_dir();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--epochs") epochs = std::stoul(argv[i + 1]);
    else if (flag == "--batch") batch = std::stoul(argv[i + 1]);
    else if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    else if (flag == "--lr") lr = std::stof(argv[i + 1]);
    else if (flag == "--data") dir = argv[i + 1];
  }
  try {
    const auto data = hpcps::data::load_fashion_mnist(dir);
    const hpcps::nn::Mlp<hpcps::nn::Relu> net({784, 256, 128, 10});
    const hpcps::backend::Cpu backend(threads);
    const hpcps::optim::MomentumSgd sgd(lr, 0.0f, hpcps::optim::MomentumUpdate(0.9f));
    std::vector<float> params(net.parameter_count()), grad(net.parameter_count());
    net.initialize(params.data(), 1);
    auto state = sgd.make_state(params.size());
    auto ws = net.make_workspace(backend, batch);
    hpcps::data::Batcher batcher(data.train, {0, data.train.count}, batch, 1);
    std::size_t step = 0;
    for (std::size_t epoch = 0; epoch < epochs; ++epoch) {
      batcher.start_epoch(epoch);
      const auto t0 = std::chrono::steady_clock::now();
      std::size_t samples = 0;
      for (std::size_t b = 0; b < batcher.batches_per_epoch(); ++b) {
        const auto view = batcher.batch(b);
        net.gradient(backend, ws, params.data(), view.inputs, view.labels, view.count, grad.data());
        sgd.step(state, params.data(), grad.data(), 1.0f / static_cast<float>(view.count), params.size(), step++);
        samples += view.count;
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const auto test = net.evaluate(backend, ws, params.data(), data.test.images.data(), data.test.labels.data(),
                                     data.test.count);
      std::printf("{\"epoch\": %zu, \"seconds\": %.6f, \"samples\": %zu, \"test_accuracy\": %.4f}\n", epoch + 1, seconds,
                  samples, test.accuracy());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "local_training: %s\n", e.what());
    return 1;
  }
  return 0;
}
