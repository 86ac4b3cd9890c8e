#pragma once
// The composition users write: a network type, a gradient backend, a synchronization strategy and
// a server-side update rule, checked at compile time, then split at run time into worker and
// server roles over MPI_COMM_WORLD.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hpcps/backend/backend_traits.hpp"
#include "hpcps/backend/cpu.hpp"
#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/shared_window.hpp"
#include "hpcps/nn/network_traits.hpp"
#include "hpcps/nn/state_slots.hpp"
#include "hpcps/optim/optimizer_traits.hpp"
#include "hpcps/optim/running_statistics.hpp"
#include "hpcps/optim/sgd.hpp"
#include "hpcps/optim/state_arrays.hpp"
#include "hpcps/ps/composition.hpp"
#include "hpcps/ps/layout.hpp"
#include "hpcps/ps/resume.hpp"
#include "hpcps/ps/server.hpp"
#include "hpcps/ps/wire_format.hpp"
#include "hpcps/ps/worker.hpp"
#include "hpcps/sync/sync_traits.hpp"
#include "hpcps/sync/synchronous.hpp"
#include "hpcps/version.hpp"

namespace hpcps {

template <class Network, class Backend = backend::Cpu, class Sync = sync::Synchronous, class Optimizer = optim::StandardSgd>
class ParameterServer {
  static_assert(nn::is_network_v<Network>,
                "hpcps::ParameterServer: the first policy must be a network type with parameter_count(), "
                "input_size(), output_size() and initialize(float*, uint64_t); see "
                "docs/architecture.md#the-network-concept");
  static_assert(backend::is_backend_v<Backend>,
                "hpcps::ParameterServer: the second policy must be a gradient backend (buffer_type, "
                "host_accessible, make_buffer, gemm, bias_activation, activation_backward, column_sums, "
                "softmax_cross_entropy); see docs/architecture.md#the-backend-concept");
  static_assert(sync::is_sync_v<Sync>,
                "hpcps::ParameterServer: the third policy must be a synchronization strategy (name, "
                "aggregates, staleness()); see docs/architecture.md#the-synchronization-concept");
  static_assert(optim::is_optimizer_v<Optimizer>,
                "hpcps::ParameterServer: the fourth policy must be an update rule (State, name, "
                "make_state(n), step(state, offset, params, sum, scale, n, step)); see "
                "docs/architecture.md#the-optimizer-concept");
  static_assert(!backend::is_backend_v<Backend> || nn::is_network_for_v<Network, Backend>,
                "hpcps::ParameterServer: the network type cannot compute on this backend: it needs "
                "Workspace<Backend>, make_workspace(backend, max_batch), gradient(...) and evaluate(...); see "
                "docs/architecture.md#the-network-concept");

 public:
  using network_type = Network;
  using backend_type = Backend;
  using sync_type = Sync;
  using optimizer_type = Optimizer;
  using worker_type = ps::Worker<Network, Backend>;
  // A network with state (batch normalization's running moments, nn/state_slots.hpp) is served by
  // the rule that averages the state and steps the rest with Optimizer.
  static constexpr bool network_has_state = nn::has_state_slots_v<Network>;
  using server_rule_type = std::conditional_t<network_has_state, optim::RunningStatistics<Optimizer>, Optimizer>;
  using server_type = ps::Server<Sync, server_rule_type>;

  struct Options {
    int servers = 1;             // 0: colocated, every rank a worker and the server of its shard
    std::size_t max_batch = 64;  // largest per-worker batch a step will be given
    std::uint64_t seed = 1;      // parameter initialisation
    // Largest message of a push or pull: a shard travels as pieces of this many floats, so a push
    // can leave during backpropagation and the server can update piece k while later pieces
    // arrive (ps/layout.hpp). With shared memory the worker copies piece k while the server
    // updates piece k + 1 (25M floats: 18.7 ms a clock against 21.5 ms whole); with point-to-point
    // messages on one node, where the receiver makes the copies, whole shards move faster
    // (docs/performance.md, section 3).
    std::size_t piece_floats = ps::Layout::default_piece_floats;
    // Number format of the gradients pushed (ps/wire_format.hpp): bf16 or fp16 halve the push
    // bytes; servers still sum in fp32 and the sample counts stay exact.
    ps::WireFormat wire = ps::WireFormat::fp32;
    // Number format of the parameters pulled: fp32 by default, because a worker computing on
    // parameters rounded to bf16 sees every one moved by up to 2^-9 of its value at every clock,
    // an error that does not average out over workers as the gradient's does. The servers keep
    // the fp32 master copy either way, so the rounding does not accumulate across updates.
    ps::WireFormat pull_wire = ps::WireFormat::fp32;
    // Top-k pushes with error feedback (ps/top_k.hpp): in (0, 1], each piece of a push sends the
    // ceil(top_k * size) largest elements of gradient plus residual as (value, index) pairs and
    // keeps the rest on the worker for the next push; 0 sends every element. fp32 values (wire
    // fp32); no local shortcut or shared memory (every piece is a message). Checkpoints hold each
    // worker's residual.
    double top_k = 0.0;
    // With compressed pushes (top-k or scaled sign): momentum correction (DGC; ps/top_k.hpp) in
    // (0, 1): each worker keeps the velocity u <- m u + g and sends it through error feedback, so an
    // element's momentum is not lost while it waits; pair it with a server rule without momentum
    // (optim::StandardSgd). 0: off. Checkpoints hold each worker's velocity.
    // With scaled signs it needs a small learning rate: the MLP example collapsed at 0.1 and
    // trained at 0.02 (docs/performance.md#scaled-sign-pushes).
    float top_k_momentum = 0.0f;
    // Scaled-sign pushes with error feedback (ps/sign_push.hpp): a push sends one bit per element,
    // the sign of gradient plus residual, and one fp32 scale per ps::sign_block (1024) elements,
    // their mean magnitude; the rest stays on the worker for the next push. 1/31 of fp32's bytes,
    // every element every clock.
    // Not with top-k; fp32 push wire; no local shortcut or shared memory. Checkpoints hold each
    // worker's residual.
    bool sign_push = false;
    // Scaled-sign pulls with error feedback on the servers (ps/sign_pull.hpp): a run's first pull
    // brings the parameters in fp32, every later one the scaled signs of what changed since what
    // the worker holds, 1/31 of fp32's bytes; the rest follows in later pulls. Each server keeps
    // its shard as the workers hold it (synchronous: one copy; otherwise one per worker). pull_wire
    // fp32; no local shortcut, shared memory or backup workers. With any push.
    bool sign_pull = false;
    // Passes of scaled signs per sign pull, 1 to 4: pass j sends what passes 0 .. j-1 left of the
    // difference, so each pass costs a pull's bytes again and leaves less for later pulls.
    unsigned sign_pull_passes = 1;
    // Push each piece of the gradient as soon as backpropagation has finished it, while the
    // layers below are still computed (networks that report progress, host-memory backends).
    bool overlap = true;
    // Colocated layout, host backend, fp32 wires: a rank's own slice and shard skip MPI (the
    // server sums the worker's gradient where it is and updates the worker's parameters in place).
    bool local_shortcut = true;
    // Ranks on one node exchange through an MPI-3 shared-memory window: a server sums each such
    // worker's gradient where the worker computed it, the worker copies the new parameters out of
    // the server's shard, and only empty "ready" messages travel (docs/architecture.md#shared-memory).
    // Synchronous strategy, host-memory backends, fp32 wires, and in the colocated layout with
    // local_shortcut on; elsewhere, or with this off, point-to-point messages carry the data.
    bool shared_memory = true;
    // A checkpoint to resume from (ps::train writes them, TrainOptions::checkpoint): its
    // directory, or the folder of checkpoints, whose newest is taken. The servers start from its
    // parameters, update rule state and update count, on this run's layout (which may differ from
    // the one that wrote it), and ps::train continues at the clock it was taken at.
    std::string resume;
  };

  // Whether a ParameterServer built with `options` shares memory between the ranks of a node.
  static constexpr bool can_share_memory = Sync::aggregates && Backend::host_accessible;
  static bool shares_memory(const Options& options) {
    return can_share_memory && options.shared_memory && fp32_wires(options) && !compressed_pushes(options) &&
           (options.servers != 0 || options.local_shortcut);
  }
  // The passes of a scaled-sign pull; 0: dense pulls.
  static unsigned sign_pull_passes(const Options& options) { return options.sign_pull ? options.sign_pull_passes : 0; }
  // Top-k or scaled-sign pushes: every piece is a message, and each worker keeps a residual.
  static bool compressed_pushes(const Options& options) { return options.top_k > 0.0 || options.sign_push; }
  // Both directions in fp32: what working on another component's arrays in place needs.
  static bool fp32_wires(const Options& options) {
    return options.wire == ps::WireFormat::fp32 && options.pull_wire == ps::WireFormat::fp32 && !options.sign_pull;
  }

  // Collective over `world`: every rank constructs its ParameterServer. The server works on its
  // own duplicate of `world`, so its messages never match the application's receives. First of
  // all the ranks check that they agree on the composition (composition()): a rank launched with
  // other options or another build throws the same sentence everywhere instead of crashing later.
  ParameterServer(const comm::Communicator& world, Network network, Backend backend, Options options,
                  Sync sync = Sync{}, Optimizer optimizer = Optimizer{})
      : world_(agreed_world(world, network, options, sync)),
        layout_(world_.size(), options.servers, network.parameter_count(), options.piece_floats),
        options_(options),
        identity_(resume_expectation(network, sync, optimizer, compressed_pushes(options),
                                     options.top_k_momentum != 0.0f)) {
    const bool serves = layout_.colocated() || layout_.role(world_.rank()) == ps::Role::server;
    std::optional<data::Range> shard;
    if (serves) shard = layout_.shard(layout_.server_index(world_.rank()));
    if (!options.resume.empty()) {
      try {
        std::optional<int> worker;
        if (layout_.role(world_.rank()) == ps::Role::worker) worker = worker_index();
        resumed_ = std::make_unique<ps::ResumedCheckpoint>(
            ps::load_checkpoint(world_, options.resume, identity_, shard, worker, layout_.workers()));
      } catch (const CollectiveError&) {
        world_ = comm::Communicator();  // raised on every rank alike: the collective free is safe (agreed_world)
        throw;
      }
    }
    if (serves) {
      // Every server derives the same initial vector from the seed and keeps its own range, so
      // no rank has to send the initial model.
      std::vector<float> initial(network.parameter_count());
      network.initialize(initial.data(), options.seed);
      if (resumed_) std::copy(resumed_->parameters.begin(), resumed_->parameters.end(), initial.begin() + shard->begin);
      server_ = std::make_unique<server_type>(world_, layout_, layout_.server_index(world_.rank()), initial.data(),
                                              sync, server_rule(network, *shard, optimizer), options.wire,
                                              options.pull_wire, options.top_k, options.sign_push,
                                              sign_pull_passes(options));
      if (resumed_) restore_server_state();
    }
    if (layout_.role(world_.rank()) == ps::Role::worker) {
      worker_ = std::make_unique<worker_type>(world_, layout_, network, backend, options.max_batch, options.wire,
                                              options.pull_wire, options.overlap, options.top_k, options.sign_push,
                                              sign_pull_passes(options));
      if (options.top_k_momentum != 0.0f) worker_->set_momentum_correction(options.top_k_momentum);
      if (resumed_ && !resumed_->residual.empty()) {
        worker_->restore_residual(resumed_->residual);
        std::vector<float>().swap(resumed_->residual);
      }
      if (resumed_ && !resumed_->velocity.empty()) {
        worker_->restore_velocity(resumed_->velocity);
        std::vector<float>().swap(resumed_->velocity);
      }
    }
    if constexpr (can_share_memory) {
      if (shares_memory(options)) share_node_memory();
    }
    // Every rank learns which ranks share a window, so any of them can tell the whole job's truth.
    const int group = shared_group_leader_;
    shared_group_.resize(static_cast<std::size_t>(world_.size()));
    world_.allgather(&group, 1, shared_group_.data());
    if (layout_.colocated()) {
      if constexpr (Sync::aggregates) {
        if constexpr (Backend::host_accessible) {
          // The rank's own slice and shard need no message: the server works in the worker's arrays.
          if (options.local_shortcut && fp32_wires(options) && !compressed_pushes(options)) {
            const auto local = worker_->attach_local_server(layout_.server_index(world_.rank()));
            server_->attach_local_worker(static_cast<std::size_t>(world_.rank()), local.count, local.gradient,
                                         local.parameters);
            local_shortcut_ = true;
          }
        }
        worker_->set_local_server([server = server_.get()] { server->start_aggregating(); },
                                  [server = server_.get()] { server->serve_clock(); });
      }
    }
  }
  // What the constructor checks every rank agrees on, in that order.
  static ps::Composition composition(const Network& network, const Options& options, const Sync& sync) {
    ps::Composition c;
    c.add("hpcps version", version_string);
    c.add("network", ps::describe_network(network));
    c.add("parameter count", std::to_string(network.parameter_count()));
    c.add("backend", Backend::name);
    c.add("synchronization", fmt::format("{} (staleness {})", Sync::name, sync.staleness()));
    c.add("update rule", Optimizer::name);
    c.add("push wire format", ps::wire_name(options.wire));
    c.add("pull wire format", ps::wire_name(options.pull_wire));
    c.add("top-k ratio (Options::top_k)", options.top_k == 0.0 ? "off" : fmt::format("{}", options.top_k));
    c.add("top-k momentum correction (Options::top_k_momentum)",
          options.top_k_momentum == 0.0f ? "off" : fmt::format("{}", options.top_k_momentum));
    c.add("scaled-sign pushes (Options::sign_push)", options.sign_push ? "on" : "off");
    c.add("scaled-sign pulls (Options::sign_pull)",
          options.sign_pull ? fmt::format("on, {} pass(es)", options.sign_pull_passes) : std::string("off"));
    c.add("piece size (Options::piece_floats)", std::to_string(options.piece_floats));
    c.add("number of servers (Options::servers)", std::to_string(options.servers));
    c.add("initialisation seed (Options::seed)", std::to_string(options.seed));
    c.add("local shortcut (Options::local_shortcut)", options.local_shortcut ? "on" : "off");
    c.add("shared memory (Options::shared_memory)", options.shared_memory ? "on" : "off");
    c.add("checkpoint to resume from (Options::resume)", options.resume.empty() ? "none" : options.resume);
    return c;
  }
  // What a checkpoint of this composition records, and what resuming checks.
  static ps::ResumeExpectation resume_expectation(const Network& network, const Sync& sync, const Optimizer& optimizer,
                                                  bool residuals, bool velocities) {
    ps::ResumeExpectation e;
    e.residuals = residuals;
    e.velocities = velocities;
    e.network = ps::describe_network(network);
    e.parameters = network.parameter_count();
    e.sync = fmt::format("{} (staleness {})", Sync::name, sync.staleness());
    e.optimizer = optim::description_of(optimizer);
    if constexpr (optim::has_state_arrays_v<typename Optimizer::State>) {
      auto state = optimizer.make_state(0);
      for (const auto& a : optim::state_arrays(state)) e.state_arrays.emplace_back(a.name);
    }
    return e;
  }
  // What a checkpoint of this run records about the composition (the same on every rank).
  const ps::ResumeExpectation& checkpoint_identity() const { return identity_; }
  // The checkpoint this ParameterServer resumed from (Options::resume), or null.
  const ps::ResumedCheckpoint* resumed() const { return resumed_.get(); }
  // One training run per ParameterServer: at its end the workers told the servers they were done
  // and each server left its loop, so a second run's pushes would find nobody listening. Returns
  // false once a run has begun; every rank of the world answers alike (ps::train asks on all).
  bool begin_training() { return !std::exchange(trained_, true); }

  // Workers and servers refer to world_: the object stays where it was built.
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  const ps::Layout& layout() const { return layout_; }
  ps::Role role() const { return layout_.role(world_.rank()); }
  bool is_worker() const { return worker_ != nullptr; }
  bool is_server() const { return server_ != nullptr; }
  int worker_index() const { return world_.rank(); }  // valid on workers
  const Options& options() const { return options_; }
  // Whether the workers keep residuals (compressed pushes), which checkpoints hold.
  bool keeps_residuals() const { return compressed_pushes(options_); }
  // Whether they keep velocities too (momentum correction), which checkpoints hold as well.
  bool keeps_velocities() const { return options_.top_k_momentum != 0.0f; }
  const comm::Communicator& world() const { return world_; }
  // Whether this rank exchanges with some other rank through shared memory.
  bool uses_shared_memory() const { return node_peers_ > 0; }
  // Whether a colocated rank's own slice and shard skip MPI (Options::local_shortcut, where it applies).
  bool uses_local_shortcut() const { return local_shortcut_; }
  // Whether ranks a and b joined the same node's shared-memory window (every rank knows this for
  // all pairs). A worker and a server that did exchange through it; a pair that did not, by messages.
  bool share_memory(int a, int b) const {
    const int ga = shared_group_.at(static_cast<std::size_t>(a)), gb = shared_group_.at(static_cast<std::size_t>(b));
    return a != b && ga >= 0 && ga == gb;
  }
  // The ranks of each shared-memory window, in rank order: {{0, 2}, {1, 3}} for two nodes of two
  // ranks; empty when every exchange is a message.
  std::vector<std::vector<int>> shared_memory_groups() const {
    std::vector<std::vector<int>> groups;
    std::vector<int> leaders;
    for (int r = 0; r < world_.size(); ++r) {
      const int g = shared_group_[static_cast<std::size_t>(r)];
      if (g < 0) continue;
      const auto at = std::find(leaders.begin(), leaders.end(), g);
      if (at == leaders.end()) {
        leaders.push_back(g);
        groups.push_back({r});
      } else {
        groups[static_cast<std::size_t>(at - leaders.begin())].push_back(r);
      }
    }
    return groups;
  }

  worker_type& worker() {
    if (!worker_) throw Error(fmt::format("ParameterServer::worker() called on rank {}, a server", world_.rank()));
    return *worker_;
  }
  server_type& server() {
    if (!server_) throw Error(fmt::format("ParameterServer::server() called on rank {}, a worker", world_.rank()));
    return *server_;
  }

 private:
  static comm::Communicator agreed_world(const comm::Communicator& world, const Network& network,
                                         const Options& options, const Sync& sync) {
    comm::Communicator own = world.duplicate();
    try {
      composition(network, options, sync).agree(own);
    } catch (const CollectiveError&) {
      // Every rank of `world` raises this one alike, so the collective free is safe here, and a
      // program that catches the error and goes on keeps no communicator per attempt.
      own = comm::Communicator();
      throw;
    }
    try {
      refuse_options(network, options, own);
    } catch (const Error&) {
      own = comm::Communicator();  // the options are agreed: every rank refuses them alike
      throw;
    }
    return own;
  }
  // Refusals that depend only on the agreed composition and the world's size, made before any
  // member owns a communicator or a window, so that a program that catches them leaks nothing.
  static void refuse_options(const Network& network, const Options& options, const comm::Communicator& world) {
    const ps::Layout layout(world.size(), options.servers, network.parameter_count(), options.piece_floats);
    if (options.top_k != 0.0) ps::check_top_k(options.top_k, options.wire, "ParameterServer");
    if (options.top_k_momentum != 0.0f && !(compressed_pushes(options) && options.top_k_momentum > 0.0f &&
                                            options.top_k_momentum < 1.0f)) {
      throw Error(fmt::format("ParameterServer: momentum correction (Options::top_k_momentum = {}) must be in "
                              "(0, 1), with compressed pushes (Options::top_k > 0, it is {}, or Options::sign_push)",
                              options.top_k_momentum, options.top_k));
    }
    if (options.sign_push && options.top_k != 0.0) {
      throw Error(fmt::format("ParameterServer: a push is either top-k (Options::top_k = {}) or scaled-sign "
                              "(Options::sign_push), not both",
                              options.top_k));
    }
    if (options.sign_push && options.wire != ps::WireFormat::fp32) {
      throw Error(fmt::format("ParameterServer: scaled-sign pushes send bits and an fp32 scale; set the push wire "
                              "(Options::wire) to fp32, not {}",
                              ps::wire_name(options.wire)));
    }
    if (options.sign_pull && (options.sign_pull_passes < 1 || options.sign_pull_passes > 4)) {
      throw Error(fmt::format("ParameterServer: Options::sign_pull_passes = {}: a scaled-sign pull takes 1 to 4 "
                              "passes, a bit an element each (for more, a 16-bit Options::pull_wire)",
                              options.sign_pull_passes));
    }
    if (network_has_state && compressed_pushes(options)) {
      // The state slots carry each worker's batch statistics for the servers to average: held
      // back and added up like gradients they would be wrong, not merely late.
      throw Error("ParameterServer: compressed pushes (top-k, scaled sign) would compress the network's running "
                  "statistics (batch normalization); use uncompressed pushes (Options::top_k = 0, Options::sign_push "
                  "= false) for this network");
    }
    // Push pieces are told apart by tag: the largest must exist in this MPI (MPI_TAG_UB >= 32767).
    const int tag_ub = world.tag_upper_bound();
    if (layout.max_pieces() > static_cast<std::size_t>(tag_ub - ps::tags::push) + 1) {
      throw Error(fmt::format("ParameterServer: a shard of {} pieces of {} floats needs push tags up to {}, beyond "
                              "this MPI's MPI_TAG_UB {}; choose a larger Options::piece_floats",
                              layout.max_pieces(), options.piece_floats,
                              ps::tags::push + static_cast<long long>(layout.max_pieces()) - 1, tag_ub));
    }
    if (layout.colocated() && !Sync::aggregates) {
      throw Error(fmt::format("ParameterServer: the colocated layout (servers = 0) serves clock by clock and "
                              "supports the synchronous strategy only, not '{}'",
                              Sync::name));
    }
  }

  // The network's state slots within `shard`, for the rule that averages them.
  static server_rule_type server_rule(const Network& network, data::Range shard, const Optimizer& optimizer) {
    if constexpr (network_has_state) {
      std::vector<optim::StateRange> ranges;
      for (const nn::StateSlots& s : network.state_slots()) {
        const std::size_t lo = std::max(s.begin, shard.begin), hi = std::min(s.begin + s.size, shard.end);
        if (lo < hi) ranges.push_back({lo - shard.begin, hi - shard.begin, s.momentum});
      }
      return server_rule_type(optimizer, std::move(ranges));
    } else {
      (void)network, (void)shard;
      return optimizer;
    }
  }

  void restore_server_state() {
    if constexpr (optim::has_state_arrays_v<typename Optimizer::State>) {
      const auto arrays = optim::state_arrays(server_->optimizer_state());
      for (std::size_t a = 0; a < arrays.size(); ++a) *arrays[a].values = std::move(resumed_->state[a]);
    }
    server_->restore_updates(static_cast<std::size_t>(resumed_->manifest.server_updates));
    // Only the manifest is needed from here on.
    std::vector<float>().swap(resumed_->parameters);
    std::vector<std::vector<float>>().swap(resumed_->state);
  }

  // Collective. Every worker rank's segment of the node's window holds its gradient and its
  // parameters, a dedicated server's its shard; then each worker-server pair on this node is
  // connected in place (the rank's own pair, colocated, by the local shortcut below).
  void share_node_memory() {
    node_ = world_.split_shared(world_.rank());
    if (node_.size() == 1) return;  // nobody to share with: the buffers stay where they are
    const int me = world_.rank();
    std::vector<int> members(static_cast<std::size_t>(node_.size()));
    node_.allgather(&me, 1, members.data());
    std::vector<int> node_rank(static_cast<std::size_t>(world_.size()), -1);  // by world rank; -1: elsewhere
    for (int r = 0; r < node_.size(); ++r) node_rank[static_cast<std::size_t>(members[static_cast<std::size_t>(r)])] = r;
    const auto on_node = [&](int rank) { return rank != me && node_rank[static_cast<std::size_t>(rank)] >= 0; };
    const std::size_t n = layout_.parameters();
    std::size_t floats = 0;
    if (worker_) floats = 2 * n;
    else if (server_) floats = server_->range().size();
    // Every rank of the node decides alike whether the node's segments fit (a container's /dev/shm
    // is often 64 MiB); if not, this node keeps to point-to-point messages, and says why once.
    const auto needed = node_.allreduce_value(
        static_cast<std::uint64_t>(comm::SharedWindow::footprint(floats * sizeof(float))), MPI_SUM);
    if (node_.allreduce_value(comm::SharedWindow::fits(needed) ? 1 : 0, MPI_MIN) == 0) {
      if (node_.rank() == 0) {
        std::fprintf(stderr,
                     "hpcps: the shared-memory window of this node's %d ranks needs %.0f MiB and /dev/shm has less "
                     "free; they exchange through point-to-point messages instead (Options::shared_memory, "
                     "docs/architecture.md#shared-memory)\n",
                     node_.size(), static_cast<double>(needed) / (1 << 20));
      }
      return;
    }
    window_ = comm::SharedWindow(node_, floats * sizeof(float));
    shared_group_leader_ = *std::min_element(members.begin(), members.end());
    const auto segment = [&](int rank) {
      return static_cast<float*>(window_.segment(node_rank[static_cast<std::size_t>(rank)]));
    };
    if (worker_) {
      worker_->use_shared_buffers(segment(me), segment(me) + n);
      for (int s = 0; s < layout_.servers(); ++s) {
        const int rank = layout_.server_rank(s);
        if (!on_node(rank)) continue;
        // A colocated server keeps its shard inside its own worker's parameters.
        float* shard = layout_.colocated() ? segment(rank) + n + layout_.shard(s).begin : segment(rank);
        worker_->attach_node_server(s, shard, window_);
        ++node_peers_;
      }
    } else if (server_) {
      server_->place_parameters(segment(me));
    }
    if (server_) {
      for (int w = 0; w < layout_.workers(); ++w) {
        const int rank = layout_.worker_rank(w);
        if (!on_node(rank)) continue;
        server_->attach_node_worker(static_cast<std::size_t>(w), segment(rank), window_);
        ++node_peers_;
      }
    }
  }

  comm::Communicator world_;
  ps::Layout layout_;
  Options options_;
  ps::ResumeExpectation identity_;
  // Declared before the worker and the server, which point into the window: destroyed after them.
  comm::Communicator node_;
  comm::SharedWindow window_;
  int node_peers_ = 0;
  bool local_shortcut_ = false;
  int shared_group_leader_ = -1;    // lowest world rank of this rank's window; -1: no window
  std::vector<int> shared_group_;   // every rank's shared_group_leader_
  std::unique_ptr<ps::ResumedCheckpoint> resumed_;
  bool trained_ = false;
  std::unique_ptr<worker_type> worker_;
  std::unique_ptr<server_type> server_;
};

}  // namespace hpcps
