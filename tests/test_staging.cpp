// The worker's staging for a device backend (the code backend::ThrustCuda runs), on the host: a
// backend whose memory is not the host's and whose uploads are queued, as cudaMemcpyAsync's are.
// A queued upload reads its host memory when it runs, not when it is queued, so memory MPI writes
// into must not hold an upload that has not run yet. On a clock where a worker computes nothing
// (an idle push: no gradient, so no download waits), the pull that follows used to post its
// receives into the parameter buffer the previous pull's uploads were still reading.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "hpcps/backend/thrust.hpp"
#include "hpcps/hpcps.hpp"
#include "ps_reference.hpp"
#include "synthetic_data.hpp"

namespace {

// backend::ThrustOmp as a device: host_accessible is false, so the worker stages through it, and
// every upload waits in a queue until the device would have run it (the next stage, download or
// synchronize). A queued upload remembers what its source held when it was queued: if the source
// changed before the upload ran, something wrote into memory a pending copy was reading.
class QueuedUploads : public hpcps::backend::ThrustOmp {
 public:
  static constexpr bool host_accessible = false;
  explicit QueuedUploads(int threads) : hpcps::backend::ThrustOmp(threads) {}

  // Shared by copies of the backend (the worker's, the workspace's), like a device's queue.
  struct Queue {
    struct Copy {
      const float* source;
      float* target;
      std::vector<float> queued;  // the source when the upload was queued
    };
    std::vector<Copy> copies;
    std::size_t overwritten = 0;  // uploads whose source changed before they ran
    std::size_t run = 0;
  };

  void upload(const float* host, std::size_t n, float* device) const {
    queue_->copies.push_back({host, device, std::vector<float>(host, host + n)});
  }
  const float* stage(const float* host, std::size_t n, buffer_type& buffer) const {
    run_queue();
    std::memcpy(data(buffer), host, n * sizeof(float));
    return data(buffer);
  }
  const std::int32_t* stage(const std::int32_t* host, std::size_t n, label_buffer_type& buffer) const {
    run_queue();
    std::memcpy(data(buffer), host, n * sizeof(std::int32_t));
    return data(buffer);
  }
  void download(const float* src, std::size_t n, float* host) const {
    run_queue();
    std::memcpy(host, src, n * sizeof(float));
  }
  void synchronize() const { run_queue(); }

  const Queue& queue() const { return *queue_; }

 private:
  void run_queue() const {
    for (auto& copy : queue_->copies) {
      const std::size_t n = copy.queued.size();
      if (std::memcmp(copy.source, copy.queued.data(), n * sizeof(float)) != 0) ++queue_->overwritten;
      std::memcpy(copy.target, copy.source, n * sizeof(float));  // what the device would read
      ++queue_->run;
    }
    queue_->copies.clear();
  }
  std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
};

static_assert(hpcps::backend::is_backend_v<QueuedUploads>);

using Net = hpcps::nn::Mlp<hpcps::nn::Tanh>;

struct Run {
  std::uint64_t fingerprint = 0;
  double loss = 0.0;
  bool worker = false;
};

template <class Backend>
Run train(const Backend& backend) {
  using Ps = hpcps::ParameterServer<Net, Backend, hpcps::sync::Synchronous, hpcps::optim::StandardSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const Net net({6, 8, 4});
  // 21 samples, global batch 5: each epoch's last batch has one sample, so every worker but the
  // first is idle at that clock and its next pull follows a pull no download waited for.
  const auto train_set = hpcps_test::synthetic(21, 6, 4, 3);
  hpcps::ps::TrainOptions options;
  options.epochs = 3;
  options.batch = 5;
  options.seed = 9;
  options.evaluate = false;
  typename Ps::Options ps_options;
  ps_options.servers = 1;
  ps_options.max_batch = 5;
  ps_options.piece_floats = 7;  // several pieces, each uploaded as it arrives
  Ps ps(world, net, backend, ps_options, {}, hpcps::optim::StandardSgd(0.3f));
  const auto report = hpcps::ps::train(ps, train_set, nullptr, options);
  Run run;
  run.worker = ps.is_worker();
  if (run.worker) {
    run.fingerprint = hpcps_test::fingerprint(ps.worker().parameters());
    for (const auto& e : report.epochs) run.loss += e.train_loss;
  }
  return run;
}

}  // namespace

TEST_CASE("a device backend's queued uploads finish before MPI writes their source", "[ps][mpi][staging]") {
  const auto world = hpcps::comm::Communicator::world();
  if (world.size() < 3) {
    WARN("needs at least 3 ranks (an idle worker needs another one that computes, and a server)");
    return;
  }
  const QueuedUploads device(1);
  const auto queued = train(device);
  const auto host = train(hpcps::backend::ThrustOmp(1));
  CHECK(queued.worker == host.worker);
  if (queued.worker) {
    CHECK(device.queue().run > 0);
    CHECK(device.queue().overwritten == 0);
    // The staged path computes what the host path computes, bit for bit, loss and accuracy
    // (handed over after the gradient's download) included.
    CHECK(queued.fingerprint == host.fingerprint);
    CHECK(queued.loss == host.loss);
  }
}
