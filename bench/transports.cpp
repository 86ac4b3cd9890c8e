// One parameter-server clock through different MPI transports, side by side in one run: 1 server
// (rank 0) and W workers (ranks 1..W) run the same bulk-synchronous clock for a model of P floats
// (push every worker's gradient, sum in worker order, params -= lr * sum / W, pull the params):
//
//   point_to_point  Isend/Irecv of whole vectors, as hpcps's Worker and Server do today;
//   rma_put_get     passive target: MPI_Put into the worker's slot of a window on the server,
//                   flush, a zero-byte message to say so; the server sums and updates, answers with
//                   zero-byte messages, and each worker MPI_Get's the params from a second window;
//   rma_accumulate  the same, with MPI_Accumulate(MPI_SUM) of the gradient into one sum window
//                   (it is very slow in this MPICH, so by default it runs on the first
//                   min(P, 4M) floats only: --accumulate-parameters);
//   shared_window   MPI_Win_allocate_shared on the node's ranks: a worker copies its gradient into
//                   its own segment (the push), the server reads every segment and updates the
//                   params in its own, the workers copy them out (the pull); MPI_Win_sync plus a
//                   barrier orders the accesses (MPI-3's shared-memory model);
//   pingpong        the reference: an MPI_Send/MPI_Recv round trip of P floats between ranks 0, 1.
//
// Repeats interleave the transports (rotating which goes first). Every run starts from the same
// parameters and gradients (dyadic values, so every order of summation is exact) and ends with a
// check that the server's and every worker's parameters are bitwise the ones point_to_point
// computes: a transport that loses or reorders data fails the job instead of being timed.
// Seconds per clock: the slowest rank's time for --clocks clocks / clocks; median and range over
// --repeats. Table on stderr, JSON on stdout or to --out.
//
//   mpiexec -n 2 bench/transports [--parameters 25000000] [--clocks 10] [--repeats 7]
//           [--accumulate-parameters N] [--only rma_put_get,shared_window,...] [--out FILE]
//   mpiexec -n 3 bench/transports ...          (W = 2 workers)
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <hpcps/hpcps.hpp>

#include "timing.hpp"

namespace {

using hpcps::comm::check;

enum Tag : int { push_tag = 1, params_tag = 2, pushed_tag = 3, updated_tag = 4, ping_tag = 5, pong_tag = 6 };

int int_count(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw hpcps::Error(fmt::format("transports: {} of {} floats is above INT_MAX", what, n));
  }
  return static_cast<int>(n);
}

// Dyadic values with few significant bits: sums of up to millions of them are exact in float, so
// MPI_Accumulate's unspecified order of arrival gives the same bits as a sum in worker order.
float gradient_value(int worker, int parity, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(worker) * 13 + parity * 5) % 17) - 8) *
         (1.0f / 4096.0f);
}
float initial_value(std::size_t i) { return static_cast<float>(static_cast<int>(i % 251) - 125) * (1.0f / 256.0f); }

// FNV-1a over the bits: compares parameter vectors across ranks without sending them.
std::uint64_t fingerprint(const float* x, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}

// params -= scale * gradient; with Clear, also gradient = 0 in the same pass (the accumulate
// window must start the next clock at zero). One template so that every transport's update is
// the same machine code and the parameters agree to the bit.
template <bool Clear>
void apply(float* __restrict params, float* __restrict gradient, float scale, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    params[i] -= scale * gradient[i];
    if constexpr (Clear) gradient[i] = 0.0f;
  }
}

// The server's clock, shared by every transport: sum the slots in worker order (the first two in
// one pass), then one update pass; a lone worker's slot is used where it arrived.
void reduce_and_apply(float* params, const std::vector<float*>& slots, float* sum, float scale, std::size_t n) {
  float* total = slots[0];
  if (slots.size() > 1) {
    const float* a = slots[0];
    const float* b = slots[1];
    for (std::size_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
    for (std::size_t k = 2; k < slots.size(); ++k) {
      const float* s = slots[k];
      for (std::size_t i = 0; i < n; ++i) sum[i] += s[i];
    }
    total = sum;
  }
  apply<false>(params, total, scale, n);
}

// Waits like hpcps's RequestSet (HPCPS_WAIT: by default spin 50 us, then yield between tests), so
// that on an oversubscribed node a waiting rank hands its core over as hpcps's own waits do.
void wait_adaptive(MPI_Request* requests, int n, const char* what) {
  if (hpcps::comm::default_wait_mode() == hpcps::comm::WaitMode::spin) {
    check(MPI_Waitall(n, requests, MPI_STATUSES_IGNORE), "MPI_Waitall", "{}", what);
    return;
  }
  int code = MPI_SUCCESS;
  hpcps::comm::detail::poll_until([&] {
    int flag = 0;
    code = MPI_Testall(n, requests, &flag, MPI_STATUSES_IGNORE);
    return flag != 0 || code != MPI_SUCCESS;
  });
  check(code, "MPI_Testall", "{}", what);
}

struct Context {
  const hpcps::comm::Communicator& world;
  int rank, workers;
  std::size_t parameters;
  float scale;
  std::vector<float> gradient[2];  // workers: two gradients, alternating by clock, so a stale push shows
  std::vector<float> pulled;       // workers: the parameters as pulled
  std::vector<float> sum;          // server: the sum of the slots when W > 1
  double update_seconds = 0.0;     // server: time in reduce_and_apply during the timed clocks

  bool is_server() const { return rank == 0; }
  int worker() const { return rank - 1; }
};

class Transport {
 public:
  explicit Transport(Context& ctx, std::size_t floats) : ctx_(ctx), floats_(floats) {}
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual const char* description() const = 0;
  virtual bool available() const { return true; }
  // Untimed: parameters back to their initial values, slots zeroed, pulled buffer poisoned.
  virtual void reset() = 0;
  virtual void clock(int c) = 0;
  // The server's parameters after the clocks (nullptr: nothing to verify).
  virtual float* server_params() = 0;
  // Whether run_once compares the parameters (the ping-pong computes none).
  virtual bool verified() const { return true; }
  // Collective; frees windows and communicators (only on the normal path: freeing is collective,
  // so it must not run while unwinding on one rank).
  virtual void release() {}
  std::size_t floats() const { return floats_; }

 protected:
  void reset_common(float* params) {
    if (ctx_.is_server() && params != nullptr) {
      for (std::size_t i = 0; i < floats_; ++i) params[i] = initial_value(i);
    }
    if (!ctx_.is_server()) std::fill(ctx_.pulled.begin(), ctx_.pulled.end(), std::numeric_limits<float>::quiet_NaN());
  }
  void timed_update(float* params, const std::vector<float*>& slots) {
    const double t0 = MPI_Wtime();
    reduce_and_apply(params, slots, ctx_.sum.data(), ctx_.scale, floats_);
    ctx_.update_seconds += MPI_Wtime() - t0;
  }

  Context& ctx_;
  std::size_t floats_;
};

class PointToPoint final : public Transport {
 public:
  explicit PointToPoint(Context& ctx) : Transport(ctx, ctx.parameters) {
    if (ctx.is_server()) {
      params_.resize(floats_);
      inbox_.resize(static_cast<std::size_t>(ctx.workers) * floats_);
      for (int w = 0; w < ctx.workers; ++w) slots_.push_back(inbox_.data() + static_cast<std::size_t>(w) * floats_);
    }
  }
  const char* name() const override { return "point_to_point"; }
  const char* description() const override { return "Isend/Irecv of whole vectors (hpcps today)"; }
  void reset() override {
    reset_common(params_.data());
    std::fill(inbox_.begin(), inbox_.end(), 0.0f);
  }
  void clock(int c) override {
    const auto& world = ctx_.world;
    if (ctx_.is_server()) {
      for (int w = 0; w < ctx_.workers; ++w) requests_.add(world.irecv(slots_[w], floats_, w + 1, push_tag));
      requests_.wait_all();
      requests_.clear();
      timed_update(params_.data(), slots_);
      for (int w = 0; w < ctx_.workers; ++w) requests_.add(world.isend(params_.data(), floats_, w + 1, params_tag));
    } else {
      requests_.add(world.isend(ctx_.gradient[c & 1].data(), floats_, 0, push_tag));
      requests_.add(world.irecv(ctx_.pulled.data(), floats_, 0, params_tag));
    }
    requests_.wait_all();
    requests_.clear();
  }
  float* server_params() override { return params_.data(); }

 private:
  std::vector<float> params_, inbox_;
  std::vector<float*> slots_;
  hpcps::comm::RequestSet requests_;
};

// Collective: a window of `floats` floats on this rank (0 for a rank that exposes nothing), with
// errors returned to check() instead of MPI's default abort for windows.
MPI_Win allocate_window(std::size_t floats, MPI_Comm comm, float** base, const char* what) {
  MPI_Win win = MPI_WIN_NULL;
  check(MPI_Win_allocate(static_cast<MPI_Aint>(floats * sizeof(float)), sizeof(float), MPI_INFO_NULL, comm, base, &win),
        "MPI_Win_allocate", "{}, floats={}", what, floats);
  check(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler", "{}", what);
  check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win), "MPI_Win_lock_all", "{}", what);
  return win;
}

void free_window(MPI_Win& win, const char* what) {
  check(MPI_Win_unlock_all(win), "MPI_Win_unlock_all", "{}", what);
  check(MPI_Win_free(&win), "MPI_Win_free", "{}", what);
}

// Zero-byte messages: the worker -> server "pushed" and server -> worker "updated" signals of the
// one-sided transports, waited on like hpcps's own requests.
class Signals {
 public:
  explicit Signals(Context& ctx) : ctx_(ctx), requests_(static_cast<std::size_t>(ctx.workers)) {}
  void server_await_pushes() { post_all(true, pushed_tag); }
  void server_announce_update() { post_all(false, updated_tag); }
  void worker_announce_push() {
    check(MPI_Send(nullptr, 0, MPI_BYTE, 0, pushed_tag, ctx_.world.native()), "MPI_Send", "pushed signal");
  }
  void worker_await_update() {
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Irecv(nullptr, 0, MPI_BYTE, 0, updated_tag, ctx_.world.native(), &r), "MPI_Irecv", "updated signal");
    wait_adaptive(&r, 1, "updated signal");
  }

 private:
  void post_all(bool receive, int tag) {
    for (int w = 0; w < ctx_.workers; ++w) {
      MPI_Request* r = &requests_[static_cast<std::size_t>(w)];
      if (receive) {
        check(MPI_Irecv(nullptr, 0, MPI_BYTE, w + 1, tag, ctx_.world.native(), r), "MPI_Irecv", "signal from {}", w + 1);
      } else {
        check(MPI_Isend(nullptr, 0, MPI_BYTE, w + 1, tag, ctx_.world.native(), r), "MPI_Isend", "signal to {}", w + 1);
      }
    }
    wait_adaptive(requests_.data(), ctx_.workers, receive ? "pushed signals" : "updated signals");
  }

  Context& ctx_;
  std::vector<MPI_Request> requests_;
};

class RmaPutGet final : public Transport {
 public:
  explicit RmaPutGet(Context& ctx) : Transport(ctx, ctx.parameters), signals_(ctx) {
    const std::size_t n = static_cast<std::size_t>(ctx.workers) * floats_;
    gradients_ = allocate_window(ctx.is_server() ? n : 0, ctx.world.native(), &slot_base_, "gradient slots");
    params_win_ = allocate_window(ctx.is_server() ? floats_ : 0, ctx.world.native(), &params_, "params");
    if (ctx.is_server()) {
      for (int w = 0; w < ctx.workers; ++w) slots_.push_back(slot_base_ + static_cast<std::size_t>(w) * floats_);
    }
  }
  const char* name() const override { return "rma_put_get"; }
  const char* description() const override { return "MPI_Put to a slot + flush, MPI_Get of params (passive target)"; }
  void reset() override {
    reset_common(params_);
    if (ctx_.is_server()) std::fill(slot_base_, slot_base_ + slots_.size() * floats_, 0.0f);
  }
  void clock(int c) override {
    const int n = int_count(floats_, "MPI_Put");
    if (ctx_.is_server()) {
      signals_.server_await_pushes();
      // Unified memory model: the sync orders the workers' completed puts before our loads.
      check(MPI_Win_sync(gradients_), "MPI_Win_sync", "gradient slots");
      timed_update(params_, slots_);
      check(MPI_Win_sync(params_win_), "MPI_Win_sync", "params");
      signals_.server_announce_update();
    } else {
      const MPI_Aint displacement = static_cast<MPI_Aint>(ctx_.worker()) * static_cast<MPI_Aint>(floats_);
      check(MPI_Put(ctx_.gradient[c & 1].data(), n, MPI_FLOAT, 0, displacement, n, MPI_FLOAT, gradients_), "MPI_Put",
            "displacement={}, count={}", displacement, n);
      check(MPI_Win_flush(0, gradients_), "MPI_Win_flush", "gradient slots");
      signals_.worker_announce_push();
      signals_.worker_await_update();
      check(MPI_Get(ctx_.pulled.data(), n, MPI_FLOAT, 0, 0, n, MPI_FLOAT, params_win_), "MPI_Get", "count={}", n);
      check(MPI_Win_flush(0, params_win_), "MPI_Win_flush", "params");
    }
  }
  float* server_params() override { return params_; }
  void release() override {
    free_window(gradients_, "gradient slots");
    free_window(params_win_, "params");
  }

 private:
  Signals signals_;
  MPI_Win gradients_ = MPI_WIN_NULL, params_win_ = MPI_WIN_NULL;
  float* slot_base_ = nullptr;
  float* params_ = nullptr;
  std::vector<float*> slots_;
};

class RmaAccumulate final : public Transport {
 public:
  RmaAccumulate(Context& ctx, std::size_t floats) : Transport(ctx, floats), signals_(ctx) {
    sum_win_ = allocate_window(ctx.is_server() ? floats_ : 0, ctx.world.native(), &sum_, "accumulate sum");
    params_win_ = allocate_window(ctx.is_server() ? floats_ : 0, ctx.world.native(), &params_, "accumulate params");
  }
  const char* name() const override { return "rma_accumulate"; }
  const char* description() const override { return "MPI_Accumulate(SUM) into one slot + flush, MPI_Get of params"; }
  void reset() override {
    reset_common(params_);
    if (ctx_.is_server()) std::fill(sum_, sum_ + floats_, 0.0f);
  }
  void clock(int c) override {
    const int n = int_count(floats_, "MPI_Accumulate");
    if (ctx_.is_server()) {
      signals_.server_await_pushes();
      check(MPI_Win_sync(sum_win_), "MPI_Win_sync", "accumulate sum");
      const double t0 = MPI_Wtime();
      apply<true>(params_, sum_, ctx_.scale, floats_);
      ctx_.update_seconds += MPI_Wtime() - t0;
      check(MPI_Win_sync(sum_win_), "MPI_Win_sync", "accumulate sum");
      check(MPI_Win_sync(params_win_), "MPI_Win_sync", "accumulate params");
      signals_.server_announce_update();
    } else {
      check(MPI_Accumulate(ctx_.gradient[c & 1].data(), n, MPI_FLOAT, 0, 0, n, MPI_FLOAT, MPI_SUM, sum_win_),
            "MPI_Accumulate", "count={}", n);
      check(MPI_Win_flush(0, sum_win_), "MPI_Win_flush", "accumulate sum");
      signals_.worker_announce_push();
      signals_.worker_await_update();
      check(MPI_Get(ctx_.pulled.data(), n, MPI_FLOAT, 0, 0, n, MPI_FLOAT, params_win_), "MPI_Get", "count={}", n);
      check(MPI_Win_flush(0, params_win_), "MPI_Win_flush", "accumulate params");
    }
  }
  float* server_params() override { return params_; }
  void release() override {
    free_window(sum_win_, "accumulate sum");
    free_window(params_win_, "accumulate params");
  }

 private:
  Signals signals_;
  MPI_Win sum_win_ = MPI_WIN_NULL, params_win_ = MPI_WIN_NULL;
  float* sum_ = nullptr;
  float* params_ = nullptr;
};

class SharedWindow final : public Transport {
 public:
  explicit SharedWindow(Context& ctx) : Transport(ctx, ctx.parameters) {
    // Key = world rank keeps the node communicator's ranks in world order (server = 0).
    check(MPI_Comm_split_type(ctx.world.native(), MPI_COMM_TYPE_SHARED, ctx.rank, MPI_INFO_NULL, &node_),
          "MPI_Comm_split_type", "MPI_COMM_TYPE_SHARED");
    int node_size = 0;
    check(MPI_Comm_size(node_, &node_size), "MPI_Comm_size", "node");
    // Every rank sees the same answer: if one rank is elsewhere, every node communicator is short.
    available_ = node_size == ctx.world.size();
    if (!available_) return;
    // The server's segment holds the params, each worker's its gradient slot.
    float* base = nullptr;
    check(MPI_Win_allocate_shared(static_cast<MPI_Aint>(floats_ * sizeof(float)), sizeof(float), MPI_INFO_NULL, node_,
                                  &base, &win_),
          "MPI_Win_allocate_shared", "floats={}", floats_);
    check(MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler", "shared window");
    for (int r = 0; r < node_size; ++r) {
      MPI_Aint size = 0;
      int unit = 0;
      float* segment = nullptr;
      check(MPI_Win_shared_query(win_, r, &size, &unit, &segment), "MPI_Win_shared_query", "rank={}", r);
      if (r == 0) params_ = segment;
      else slots_.push_back(segment);
    }
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_), "MPI_Win_lock_all", "shared window");
  }
  const char* name() const override { return "shared_window"; }
  const char* description() const override {
    return "MPI_Win_allocate_shared: copy into own segment, server sums in place, copy params out";
  }
  bool available() const override { return available_; }
  void reset() override {
    reset_common(params_);
    if (!ctx_.is_server()) std::fill(slots_[ctx_.worker()], slots_[ctx_.worker()] + floats_, 0.0f);
  }
  void clock(int c) override {
    if (ctx_.is_server()) {
      barrier();  // every worker's gradient is in its segment
      sync();
      timed_update(params_, slots_);
      sync();
      barrier();  // the params are updated
    } else {
      std::memcpy(slots_[ctx_.worker()], ctx_.gradient[c & 1].data(), floats_ * sizeof(float));
      sync();
      barrier();
      barrier();
      sync();
      std::memcpy(ctx_.pulled.data(), params_, floats_ * sizeof(float));
    }
  }
  float* server_params() override { return params_; }
  void release() override {
    if (available_) free_window(win_, "shared window");
    check(MPI_Comm_free(&node_), "MPI_Comm_free", "node");
  }

 private:
  void sync() { check(MPI_Win_sync(win_), "MPI_Win_sync", "shared window"); }
  // Nonblocking and waited on like hpcps's requests: MPI_Barrier would spin and, with more ranks
  // than cores, take the core from the rank everyone waits for.
  void barrier() {
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(node_, &r), "MPI_Ibarrier", "node");
    wait_adaptive(&r, 1, "node barrier");
  }

  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  bool available_ = false;
  float* params_ = nullptr;
  std::vector<float*> slots_;
};

// The reference: what MPI itself moves between two ranks, a blocking round trip of P floats.
class PingPong final : public Transport {
 public:
  explicit PingPong(Context& ctx) : Transport(ctx, ctx.parameters) {
    if (ctx.rank <= 1) buffer_.assign(floats_, 1.0f);
  }
  const char* name() const override { return "pingpong"; }
  const char* description() const override { return "reference: MPI_Send/MPI_Recv round trip of P floats, ranks 0-1"; }
  void reset() override {}
  void clock(int) override {
    if (ctx_.rank == 0) {
      ctx_.world.send(buffer_.data(), floats_, 1, ping_tag);
      ctx_.world.recv(buffer_.data(), floats_, 1, pong_tag);
    } else if (ctx_.rank == 1) {
      ctx_.world.recv(buffer_.data(), floats_, 0, ping_tag);
      ctx_.world.send(buffer_.data(), floats_, 0, pong_tag);
    }
  }
  float* server_params() override { return nullptr; }
  bool verified() const override { return false; }

 private:
  std::vector<float> buffer_;
};

struct Options {
  std::size_t parameters = 25'000'000, accumulate_parameters = 0, clocks = 10;
  int repeats = 7;
  float lr = 0.1f;
  std::string out, only;  // only: comma-separated transport names to run (point_to_point always runs)
};

Options parse(int argc, char** argv) {
  Options o;
  bool accumulate_set = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw hpcps::Error(fmt::format("transports: {} needs a value", flag));
    const std::string value = argv[i + 1];
    if (flag == "--parameters") o.parameters = std::stoul(value);
    else if (flag == "--accumulate-parameters") o.accumulate_parameters = std::stoul(value), accumulate_set = true;
    else if (flag == "--clocks") o.clocks = std::stoul(value);
    else if (flag == "--repeats") o.repeats = std::stoi(value);
    else if (flag == "--out") o.out = value;
    else if (flag == "--only") o.only = value;
    else
      throw hpcps::Error(fmt::format("transports: unknown option {} (options: --parameters, --clocks, --repeats, "
                                     "--accumulate-parameters, --only, --out)",
                                     flag));
  }
  if (!accumulate_set) o.accumulate_parameters = std::min<std::size_t>(o.parameters, 4'000'000);
  if (o.parameters == 0 || o.clocks == 0 || o.repeats < 1 || o.accumulate_parameters > o.parameters) {
    throw hpcps::Error("transports: need --parameters >= 1, --clocks >= 1, --repeats >= 1 and "
                       "--accumulate-parameters <= --parameters (0 skips it)");
  }
  return o;
}

std::string hex(std::uint64_t h) { return fmt::format("{:016x}", h); }

}  // namespace

int main(int argc, char** argv) {
  return hpcps::comm::run(argc, argv, [&](hpcps::comm::Environment&) {
    const Options options = parse(argc, argv);
    const auto world = hpcps::comm::Communicator::world();
    if (world.size() < 2) throw hpcps::Error("transports: run with 1 server + W >= 1 workers: mpiexec -n (W + 1)");
    const int workers = world.size() - 1;
    const std::size_t p = options.parameters;

    Context ctx{world, world.rank(), workers, p, options.lr / static_cast<float>(workers), {}, {}, {}, 0.0};
    if (ctx.is_server()) {
      if (workers > 1) ctx.sum.resize(p);
    } else {
      for (int parity = 0; parity < 2; ++parity) {
        ctx.gradient[parity].resize(p);
        for (std::size_t i = 0; i < p; ++i) ctx.gradient[parity][i] = gradient_value(ctx.worker(), parity, i);
      }
      ctx.pulled.resize(p);
    }

    std::vector<std::unique_ptr<Transport>> transports;
    transports.push_back(std::make_unique<PointToPoint>(ctx));  // first: it sets the reference checksums
    transports.push_back(std::make_unique<RmaPutGet>(ctx));
    if (options.accumulate_parameters > 0) {
      transports.push_back(std::make_unique<RmaAccumulate>(ctx, options.accumulate_parameters));
    }
    auto shared = std::make_unique<SharedWindow>(ctx);
    const bool shared_available = shared->available();
    transports.push_back(std::move(shared));
    transports.push_back(std::make_unique<PingPong>(ctx));
    std::vector<Transport*> active;
    for (auto& t : transports) {
      const bool wanted = options.only.empty() || t.get() == transports.front().get() ||
                          ("," + options.only + ",").find("," + std::string(t->name()) + ",") != std::string::npos;
      if (t->available() && wanted) active.push_back(t.get());
    }

    int unified = 0;
    {
      // Recorded because the one-sided transports rely on it for MPI_Win_sync to be enough.
      MPI_Win probe = MPI_WIN_NULL;
      float* base = nullptr;
      probe = allocate_window(0, world.native(), &base, "model probe");
      int* model = nullptr;
      int flag = 0;
      check(MPI_Win_get_attr(probe, MPI_WIN_MODEL, &model, &flag), "MPI_Win_get_attr", "MPI_WIN_MODEL");
      unified = flag && *model == MPI_WIN_UNIFIED;
      free_window(probe, "model probe");
    }

    // Reference fingerprints per (clocks, floats), set by point_to_point (which runs first in
    // every round) and checked for every other transport. Only rank 0 keeps them.
    std::map<std::pair<std::size_t, std::size_t>, std::uint64_t> reference;
    std::vector<std::vector<double>> seconds(active.size());
    std::vector<double> update(active.size(), 0.0);
    const std::uint64_t initial_fingerprint = [&] {
      std::vector<float> v(ctx.is_server() ? p : 0);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = initial_value(i);
      return fingerprint(v.data(), v.size());
    }();

    // One run: reset, time `clocks` clocks, verify. Returns the slowest rank's seconds (rank 0).
    auto run_once = [&](std::size_t k, std::size_t clocks) {
      Transport& t = *active[k];
      t.reset();
      ctx.update_seconds = 0.0;
      world.barrier();
      const double t0 = MPI_Wtime();
      for (std::size_t c = 0; c < clocks; ++c) t.clock(static_cast<int>(c));
      double elapsed = MPI_Wtime() - t0, slowest = 0.0;
      check(MPI_Reduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, world.native()), "MPI_Reduce", "elapsed");
      const double update_seconds = ctx.update_seconds;

      if (t.verified()) {
        // Each rank's fingerprint of the first n floats it holds: the server's parameters, and
        // each worker's last pull. Over the accumulate transport's floats too, for its check.
        std::uint64_t mine[2] = {0, 0};
        const float* data = ctx.is_server() ? t.server_params() : ctx.pulled.data();
        mine[0] = fingerprint(data, t.floats());
        mine[1] = fingerprint(data, std::min(t.floats(), options.accumulate_parameters));
        std::vector<std::uint64_t> all(ctx.is_server() ? 2 * static_cast<std::size_t>(world.size()) : 0);
        check(MPI_Gather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, 0, world.native()), "MPI_Gather",
              "fingerprints");
        if (ctx.is_server()) {
          for (int r = 1; r < world.size(); ++r) {
            if (all[2 * r] != all[0]) {
              throw hpcps::Error(fmt::format("transports: {} after {} clocks: worker rank {} pulled parameters {} but "
                                             "the server holds {}",
                                             t.name(), clocks, r, hex(all[2 * r]), hex(all[0])));
            }
          }
          if (t.floats() == p && all[0] == initial_fingerprint) {
            throw hpcps::Error(fmt::format("transports: {}: parameters unchanged after {} clocks", t.name(), clocks));
          }
          for (int prefix = 0; prefix < 2; ++prefix) {
            const std::size_t n = prefix ? std::min(t.floats(), options.accumulate_parameters) : t.floats();
            if (n == 0) continue;
            const auto key = std::make_pair(clocks, n);
            const auto found = reference.find(key);
            if (found == reference.end()) {
              if (k != 0) {
                throw hpcps::Error(fmt::format("transports: no point_to_point reference for {} floats", n));
              }
              reference.emplace(key, all[prefix]);
            } else if (found->second != all[prefix]) {
              throw hpcps::Error(fmt::format("transports: {} after {} clocks computed parameters {} over the first {} "
                                             "floats, point_to_point computed {}",
                                             t.name(), clocks, hex(all[prefix]), n, hex(found->second)));
            }
          }
        }
      }
      return std::make_pair(slowest, update_seconds);
    };

    // Warm-up (untimed, verified): first-touch page faults, UCX registrations, window setup costs.
    for (std::size_t k = 0; k < active.size(); ++k) run_once(k, 2);
    for (int r = 0; r < options.repeats; ++r) {
      // Rotate the order, but point_to_point must run first in round 0 to set the references.
      for (std::size_t j = 0; j < active.size(); ++j) {
        const std::size_t k = (j + static_cast<std::size_t>(r)) % active.size();
        const auto [slowest, update_seconds] = run_once(k, options.clocks);
        seconds[k].push_back(slowest / static_cast<double>(options.clocks));
        update[k] += update_seconds / static_cast<double>(options.clocks);
      }
    }
    for (auto& t : transports) t->release();

    if (!ctx.is_server()) return;
    char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    check(MPI_Get_library_version(library, &length), "MPI_Get_library_version");
    std::string library_version(library, static_cast<std::size_t>(length));
    library_version = library_version.substr(0, library_version.find('\n'));

    const double p2p_median = hpcps_bench::summarize(seconds[0]).median;
    double pingpong_median = std::numeric_limits<double>::quiet_NaN();
    for (std::size_t k = 0; k < active.size(); ++k) {
      if (!active[k]->verified()) pingpong_median = hpcps_bench::summarize(seconds[k]).median;
    }
    hpcps::metrics::JsonWriter json;
    json.begin_object().field("benchmark", "transports").field("parameters", p).field("workers", workers);
    json.field("ranks", world.size()).field("clocks_per_repeat", options.clocks).field("repeats", options.repeats);
    json.field("accumulate_parameters", options.accumulate_parameters).field("mpi_library", library_version);
    json.field("window_model_unified", unified != 0).field("shared_window_available", shared_available);
    json.field("reference_fingerprint", hex(reference.at({options.clocks, p})));
    json.key("transports").begin_array();
    std::string table = fmt::format(
        "transports: P = {} floats ({:.1f} MB), 1 server + {} worker(s), {} clocks x {} repeats (median, min-max)\n"
        "{:<16} {:>10} {:>28} {:>9} {:>12} {:>14}\n",
        p, 4.0 * static_cast<double>(p) / 1e6, workers, options.clocks, options.repeats, "transport", "floats",
        "ms per clock", "GB/s", "p2p / this", "server update");
    for (std::size_t k = 0; k < active.size(); ++k) {
      const Transport& t = *active[k];
      const auto s = hpcps_bench::summarize(seconds[k]);
      const bool pingpong = !t.verified();
      // Bytes moved per clock: every worker's push and pull, or the ping-pong's two messages.
      const double bytes = 4.0 * static_cast<double>(t.floats()) * 2.0 * (pingpong ? 1.0 : workers);
      const double update_per_clock = update[k] / options.repeats;
      json.begin_object().field("name", t.name()).field("description", t.description()).field("floats", t.floats());
      json.field("seconds_per_clock_median", s.median).field("seconds_per_clock_min", s.low)
          .field("seconds_per_clock_max", s.high);
      json.key("seconds_per_clock").begin_array();
      for (double v : seconds[k]) json.value(v);
      json.end_array();
      json.field("bytes_per_clock", bytes).field("gbytes_per_second", bytes / s.median / 1e9);
      if (!pingpong) json.field("server_update_seconds_per_clock", update_per_clock);
      if (t.floats() == p) {
        json.field("point_to_point_over_this", p2p_median / s.median);
        // The communication ratio (ping-pong round trip / clock, target 0.8), for W = 1.
        json.field("pingpong_over_this", pingpong_median / s.median);
      }
      json.end_object();
      table += fmt::format("{:<16} {:>10} {:>28} {:>9.2f} {:>12} {:>14}\n", t.name(), t.floats(),
                           fmt::format("{:.3f} ({:.3f}-{:.3f})", s.median * 1e3, s.low * 1e3, s.high * 1e3),
                           bytes / s.median / 1e9, t.floats() == p ? fmt::format("{:.2f}", p2p_median / s.median) : "-",
                           pingpong ? "-" : fmt::format("{:.3f} ms", update_per_clock * 1e3));
    }
    json.end_array().end_object();
    if (!shared_available) table += "shared_window: skipped (the ranks are not all on one node)\n";
    table += fmt::format("all transports computed the same parameters (fingerprint {})\n",
                         hex(reference.at({options.clocks, p})));
    std::fputs(table.c_str(), stderr);
    if (options.out.empty()) {
      std::printf("%s\n", json.str().c_str());
    } else {
      const std::filesystem::path out(options.out);
      if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
      std::ofstream file(out);
      file << json.str() << '\n';
      if (!file) throw hpcps::Error(fmt::format("transports: cannot write {}", options.out));
    }
  });
}
