#pragma once
// A worker: computes the gradient of its batch, pushes one slice to each server, pulls the new
// parameters back. Where the network reports its progress (nn::reports_gradient_progress_v) the
// push overlaps backpropagation: each piece of the gradient leaves as soon as it is final. Every MPI call of a step happens on the calling thread; the backend's threads
// only compute. All buffers, requests and MPI datatypes are made in the constructor, so the
// steady-state step allocates nothing.
//
// In a 16-bit wire format (ps/wire_format.hpp) a push converts each piece of the fp32 gradient into
// a send buffer of its own just before the piece leaves, so converting piece k overlaps the
// transfer of piece k-1; a 16-bit pull is converted back piece by piece as the pieces arrive.
//
// With top-k pushes (a ratio in (0, 1]; ps/top_k.hpp) each piece of the gradient, plus what earlier
// pushes held back of it (the residual, kept here), leaves as its ceil(ratio * size) largest
// elements: [count,] values, then their indices; the rest stays in the residual for the next push.
// With scaled-sign pushes (ps/sign_push.hpp) each piece plus its residual leaves as [count,] an
// fp32 scale per block of ps::sign_block elements and a bit per element; what the bits do not carry stays in the residual.
// With scaled-sign pulls (ps/sign_pull.hpp) the first pull after start() brings the parameters in
// fp32, and each later one a piece's scales and signs, added to the parameters as it arrives.
//
// A server on the same node may share memory with this worker instead (attach_node_server; see
// ps/server.hpp): the gradient and parameter vectors then live in a comm::SharedWindow, the
// server reads the gradient where it is, and a pull copies each piece out of the server's shard
// when the server's (empty) message for it arrives.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/request.hpp"
#include "hpcps/comm/segments.hpp"
#include "hpcps/comm/shared_window.hpp"
#include "hpcps/error.hpp"
#include "hpcps/metrics/stopwatch.hpp"
#include "hpcps/nn/batch_stats.hpp"
#include "hpcps/nn/network_traits.hpp"
#include "hpcps/ps/detail/compressed_slots.hpp"
#include "hpcps/ps/layout.hpp"
#include "hpcps/ps/sign_pull.hpp"
#include "hpcps/ps/sign_push.hpp"
#include "hpcps/ps/top_k.hpp"
#include "hpcps/ps/wire_format.hpp"

namespace hpcps::ps {

// Seconds a worker spent in each phase of its steps.
struct WorkerTimes {
  double compute = 0.0;      // gradient of the batch
  double communicate = 0.0;  // posting the pushes and pulls, until every push has left
  double wait = 0.0;         // after that, until every parameter slice has arrived
};

namespace detail {
// Host memory for MPI: a device backend may name a page-locked allocator (host_allocator), so its
// copies run asynchronously and at full bus speed; host backends compute on std::vector directly.
template <class Backend, class = void>
struct host_vector {
  using type = std::vector<float>;
};
template <class Backend>
struct host_vector<Backend, std::void_t<typename Backend::template host_allocator<float>>> {
  using type = std::vector<float, typename Backend::template host_allocator<float>>;
};
// A device backend that can hand a batch's loss and accuracy over after the gradient's download
// (backend::Thrust's defer_stats/deferred_stats) instead of waiting for them on their own.
template <class Backend, class = void>
struct defers_stats : std::false_type {};
template <class Backend>
struct defers_stats<Backend, std::void_t<decltype(std::declval<const Backend&>().defer_stats(true)),
                                         decltype(std::declval<const Backend&>().deferred_stats(nn::BatchStats{}))>>
    : std::true_type {};
}  // namespace detail

template <class Network, class Backend>
class Worker {
  // Pushing during backpropagation needs the network's progress reports, and gradient pieces the
  // worker can send as they are (host memory: a device gradient is downloaded after the step).
  static constexpr bool overlaps_backpropagation =
      nn::reports_gradient_progress_v<Network, Backend> && Backend::host_accessible;
  static constexpr bool defers_stats = !Backend::host_accessible && detail::defers_stats<Backend>::value;

 public:
  using host_vector = typename detail::host_vector<Backend>::type;

  Worker(const comm::Communicator& world, const Layout& layout, const Network& network, const Backend& backend,
         std::size_t max_batch, WireFormat push_wire = WireFormat::fp32, WireFormat pull_wire = WireFormat::fp32,
         bool overlap = true, double top_k = 0.0, bool sign = false, unsigned sign_pull = 0)
      : world_(world),
        layout_(layout),
        network_(network),
        backend_(backend),
        workspace_(network.make_workspace(backend, max_batch)),
        params_storage_(layout.parameters(), 0.0f),
        grad_storage_(layout.parameters(), 0.0f),
        params_(params_storage_.data()),
        grad_(grad_storage_.data()),
        push_wire_(push_wire),
        pull_wire_(pull_wire),
        grad_wire_(push_wire == WireFormat::fp32 ? 0 : layout.parameters(), 0),
        params_wire_(pull_wire == WireFormat::fp32 ? 0 : layout.parameters(), 0),
        overlap_(overlap && overlaps_backpropagation),
        top_k_(top_k),
        sign_(sign),
        sign_pull_(sign_pull) {
    if (max_batch > (std::size_t{1} << 24)) {
      // The sample count travels as the leading float of a push; floats count exactly to 2^24.
      throw Error(fmt::format("ps::Worker: batch of {} exceeds the largest supported ({})", max_batch, 1 << 24));
    }
    if constexpr (!Backend::host_accessible) {
      device_params_ = backend.make_buffer(layout.parameters());
      device_grad_ = backend.make_buffer(layout.parameters());
    }
    std::size_t pieces = 0;
    if (top_k_ > 0.0 && sign_) throw Error("ps::Worker: a push is either top-k or scaled-sign, not both");
    if (compressed()) prepare_compressed();
    describe_first_pushes();
    node_params_.assign(static_cast<std::size_t>(layout.servers()), nullptr);
    if (sign_pull_ && pull_wire != WireFormat::fp32) {
      throw Error(fmt::format("ps::Worker: a scaled-sign pull brings the first pull of a run in fp32, then signs; "
                              "the pull wire must be fp32, not {}", wire_name(pull_wire)));
    }
    std::size_t pull_words = 0;
    for (int s = 0; s < layout.servers(); ++s) {
      count_only_push_.emplace_back(comm::Segments{{&count_slot_, 1}});
      pull_first_piece_.push_back(pull_message_at_.size());
      for (std::size_t k = 0; k < layout.pieces(s); ++k) {
        pull_order_.push_back({s, k});
        push_order_.push_back({s, k});
        pull_message_at_.push_back(pull_words);
        pull_words += sign_pull_words(layout.piece(s, k).size(), sign_pull_);
      }
      pieces += layout.pieces(s);
    }
    if (sign_pull_) pull_messages_.assign(pull_words, 0);
    sends_.reserve(pieces + static_cast<std::size_t>(layout.servers()));  // pieces and push clocks
    receives_.reserve(pieces);
  }

  // Receives the initial parameters every server sends before its first clock.
  void start() {
    full_pull_ = true;  // every server's first reply of a run is the fp32 shard (ps::Server)
    start_local_server();
    post_pulls();
    complete_pulls();
  }

  // One clock: gradient of `count` samples (0 means this worker has no batch at this clock but
  // still takes part in it), push, pull.
  nn::BatchStats step(const float* inputs, const std::int32_t* labels, std::size_t count) {
    clock_.start();
    nn::BatchStats stats;
    count_slot_ = static_cast<float>(count);
    unsent_ = push_order_.size();
    send_push_clock();
    if (count > 0) {
      if constexpr (overlaps_backpropagation) {
        // A slowed worker (after_compute) must not have pushed before it is done being slow.
        if (overlap_ && !after_compute_) {
          stats = network_.gradient(backend_, workspace_, compute_params(), inputs, labels, count, compute_grad(),
                                    [this](std::size_t begin) { push_ready(begin); });
        } else {
          stats = network_.gradient(backend_, workspace_, compute_params(), inputs, labels, count, compute_grad());
        }
      } else if constexpr (defers_stats) {
        backend_.defer_stats(true);
        stats = network_.gradient(backend_, workspace_, compute_params(), inputs, labels, count, compute_grad());
        backend_.defer_stats(false);
      } else {
        stats = network_.gradient(backend_, workspace_, compute_params(), inputs, labels, count, compute_grad());
      }
      ++gradient_pushes_;
    }
    clock_.charge(times_.compute);
    if (after_compute_) {
      after_compute_(clock_count_, times_.compute - compute_before_);
      clock_.charge(times_.compute);  // a slowed worker is slow at computing
    }
    compute_before_ = times_.compute;
    // The pieces backpropagation did not already send, in order: [0, unsent_) of push_order_.
    for (std::size_t i = 0; i < unsent_; ++i) {
      const auto [s, k] = push_order_[i];
      if constexpr (!Backend::host_accessible) {
        // Slice by slice: server s can take slice s while the next one comes off the device.
        if (count > 0 && k == 0) {
          const data::Range r = layout_.shard(s);
          backend_.download(Backend::data(device_grad_) + r.begin, r.size(), grad_ + r.begin);
        }
      }
      push_piece(s, k, count > 0);
    }
    if constexpr (defers_stats) {
      // The downloads above waited for the device, so the batch's totals are in.
      if (count > 0) stats = backend_.deferred_stats(stats);
    }
    if constexpr (!Backend::host_accessible) {
      if (count > 0) uploads_pending_ = false;  // the downloads waited for them too
    }
    unsent_ = 0;
    post_pulls();
    if (serve_local_) serve_local_();  // colocated: this rank's server takes everyone's pushes now
    sends_.wait_all();
    sends_.clear();
    clock_.charge(times_.communicate);
    complete_pulls();
    clock_.charge(times_.wait);
    ++clock_count_;
    return stats;
  }

  // Tells every server this worker is done; no reply comes.
  void finish() {
    start_local_server();
    count_slot_ = push_count::stop;
    send_push_clock();
    for (const auto& [s, k] : push_order_) push_piece(s, k, false);
    if (serve_local_) serve_local_();
    sends_.wait_all();
    sends_.clear();
  }

  // Top-k or scaled-sign pushes: what they have held back so far, element by element
  // (layout.parameters() floats; empty with uncompressed pushes).
  const std::vector<float>& residual() const { return residual_; }
  // Compressed pushes with momentum correction (ps/top_k.hpp): the worker keeps the velocity
  // u <- m u + g and pushes it through error feedback; m in (0, 1), 0 turns it off. Before start().
  void set_momentum_correction(float momentum) {
    if (!compressed() && momentum != 0.0f) {
      throw Error("ps::Worker: momentum correction is for compressed pushes (top-k or scaled sign)");
    }
    if (!(momentum >= 0.0f && momentum < 1.0f)) {
      throw Error(fmt::format("ps::Worker: the corrected momentum must be in [0, 1), got {}", momentum));
    }
    momentum_correction_ = momentum;
    velocity_.assign(momentum > 0.0f ? layout_.parameters() : 0, 0.0f);
  }
  const std::vector<float>& velocity() const { return velocity_; }
  // A resumed top-k or scaled-sign run's residual (ps/resume.hpp): what the checkpoint's workers
  // held back.
  void restore_residual(const std::vector<float>& residual) {
    if (!compressed() || residual.size() != residual_.size()) {
      throw Error(fmt::format("ps::Worker: a residual of {} values for {} parameters{}", residual.size(),
                              layout_.parameters(), compressed() ? "" : " and uncompressed pushes"));
    }
    std::copy(residual.begin(), residual.end(), residual_.begin());
  }
  // And with momentum correction its velocity, after set_momentum_correction.
  void restore_velocity(const std::vector<float>& velocity) {
    if (velocity_.empty() || velocity.size() != velocity_.size()) {
      throw Error(fmt::format("ps::Worker: a velocity of {} values for {} parameters{}", velocity.size(),
                              layout_.parameters(), velocity_.empty() ? " without momentum correction" : ""));
    }
    std::copy(velocity.begin(), velocity.end(), velocity_.begin());
  }

  // A copy of the newest parameters this worker received.
  std::vector<float> parameters() const { return {params_, params_ + layout_.parameters()}; }
  // Parameters where the backend computes (device memory for a device backend).
  const float* compute_params() const {
    if constexpr (Backend::host_accessible) return params_;
    else return Backend::data(device_params_);
  }
  const Network& network() const { return network_; }
  const Backend& backend() const { return backend_; }
  typename Network::template Workspace<Backend>& workspace() { return workspace_; }
  const WorkerTimes& times() const { return times_; }
  WireFormat push_wire() const { return push_wire_; }
  WireFormat pull_wire() const { return pull_wire_; }
  void reset_times() {
    times_ = {};
    compute_before_ = 0.0;
  }
  // Clocks taken part in (idle ones included) and gradient slices pushed to each server.
  std::size_t clocks() const { return clock_count_; }
  std::size_t gradient_pushes() const { return gradient_pushes_; }

  // From now on every push (and the stop marker) tells each server the global clock it completes
  // (tags::push_clock): `clock` for the next step. Where workers draw their work from a shared
  // order, a push's clock is not the number of pushes before it (ps::Server::expect_push_clocks).
  void set_push_clock(std::uint64_t clock) {
    push_clock_ = clock;
    sends_push_clock_ = true;
  }

  // From now on every pull also brings this worker's next ticket from server 0 (ps::Server::
  // serve_drawn_work): the part of a clock to compute next. Before start().
  void receive_tickets() { receives_tickets_ = true; }
  std::uint64_t ticket() const { return ticket_; }

  // From now on every pull also brings, from server 0 (ps::Server::time_responses), the seconds
  // this worker's latest push took to come in there after the clock before it was released: its
  // part of the clock as the clock sees it, pauses included. Before start(); `false` stops it.
  void receive_response_times(bool on = true) { receives_responses_ = on; }
  double response_seconds() const { return response_seconds_; }

  // Called after each clock's gradient with (clock, seconds it took), before the push: the hook a
  // straggler study or a test uses to slow this worker down. Its time counts as compute.
  void set_after_compute(std::function<void(std::size_t, double)> hook) { after_compute_ = std::move(hook); }

  // Colocated layout: the rank's own server clock, run by step() between this worker's push and
  // its pull (every rank does the same, so every server gets all pushes of the clock).
  // `start` sends the local server's initial parameters and posts its receives: called from
  // start() (or finish()), not before, so that a ParameterServer destroyed untrained leaves no
  // message in flight to match a later communicator's receives.
  void set_local_server(std::function<void()> start, std::function<void()> serve_clock) {
    start_local_ = std::move(start);
    serve_local_ = std::move(serve_clock);
  }

  // Where a local server (ps::Server::attach_local_worker) reads this worker's push and keeps its
  // shard of the parameters.
  struct LocalEndpoint {
    const float* count;
    const float* gradient;
    float* parameters;
  };
  // Server s lives in this process and takes this worker's push in place: its pieces are neither
  // sent nor pulled any more (host memory only: the server reads and writes these arrays).
  LocalEndpoint attach_local_server(int s) {
    static_assert(Backend::host_accessible, "ps::Worker: a local server reads the gradient in host memory");
    if (compressed()) throw Error(fmt::format("ps::Worker: a local server {} cannot read compressed pushes in place", s));
    if (sign_pull_) throw Error(fmt::format("ps::Worker: a local server {} shares its parameters; no scaled-sign pull", s));
    const auto elsewhere = [s](const PieceId& id) { return id.server != s; };
    push_order_.erase(std::stable_partition(push_order_.begin(), push_order_.end(), elsewhere), push_order_.end());
    pull_order_.erase(std::stable_partition(pull_order_.begin(), pull_order_.end(), elsewhere), pull_order_.end());
    return {&count_slot_, grad_, params_};
  }

  // Keeps the gradient and the parameters in `gradient` and `parameters` (layout.parameters()
  // floats each, in a shared window) from now on, so that servers on this node can read them.
  // Before start() and before attach_local_server().
  void use_shared_buffers(float* gradient, float* parameters) {
    static_assert(Backend::host_accessible, "ps::Worker: shared buffers are host memory the backend computes on");
    const std::size_t n = layout_.parameters();
    std::copy(grad_, grad_ + n, gradient);
    std::copy(params_, params_ + n, parameters);
    grad_ = gradient;
    params_ = parameters;
    host_vector().swap(grad_storage_);  // `= {}` would keep the capacity
    host_vector().swap(params_storage_);
    describe_first_pushes();  // their datatypes hold the gradient's address
  }
  // Server s shares memory with this worker: it reads this worker's gradient in place (the
  // buffers of use_shared_buffers()), and keeps its shard's parameters at `shard_parameters`
  // inside `window`. Host memory, fp32 wires; before start().
  void attach_node_server(int s, const float* shard_parameters, const comm::SharedWindow& window) {
    static_assert(Backend::host_accessible, "ps::Worker: a server on the node reads the gradient in host memory");
    if (push_wire_ != WireFormat::fp32 || pull_wire_ != WireFormat::fp32 || compressed() || sign_pull_) {
      throw Error(fmt::format("ps::Worker: cannot share memory with server {} with {} pushes{} and {} pulls", s,
                              wire_name(push_wire_), top_k_ > 0.0 ? " (top-k)" : sign_ ? " (scaled sign)" : "",
                              sign_pull_ ? "scaled-sign" : wire_name(pull_wire_)));
    }
    node_params_[static_cast<std::size_t>(s)] = shard_parameters;
    shared_window_ = &window;
  }

 private:
  // Compressed pushes: every piece's share of the buffers (top-k: ceil(top_k * size) values and
  // indices; scaled sign: its scales and words of signs) and its message, [count,] floats, words;
  // the residual; top-k's selector.
  void prepare_compressed() {
    std::vector<detail::CompressedPiece> sizes;
    std::size_t largest = 0;
    for (int s = 0; s < layout_.servers(); ++s) {
      first_slot_.push_back(sizes.size());
      for (std::size_t k = 0; k < layout_.pieces(s); ++k) {
        const std::size_t n = layout_.piece(s, k).size();
        sizes.push_back(detail::compressed_piece(top_k_, push_wire_, n, k == 0, "ps::Worker"));
        largest = std::max(largest, n);
      }
    }
    residual_.assign(layout_.parameters(), 0.0f);
    if (top_k_ > 0.0) selector_ = TopKSelector(largest);
    slots_ = detail::CompressedSlots(sizes, {&count_slot_});
  }
  bool compressed() const { return top_k_ > 0.0 || sign_; }
  // This pull brings scaled signs: every one but a run's first with scaled-sign pulls.
  bool signs_pulled() const { return sign_pull_ && !full_pull_; }
  // Piece k of server s's part of a scaled-sign pull.
  std::uint32_t* pull_message(int s, std::size_t k) {
    return pull_messages_.data() + pull_message_at_[pull_first_piece_[static_cast<std::size_t>(s)] + k];
  }
  void start_local_server() {
    if (start_local_) std::exchange(start_local_, nullptr)();
  }
  // Piece 0 of each server's push: [count, piece 0 in the wire format].
  void describe_first_pushes() {
    first_push_.clear();
    for (int s = 0; s < layout_.servers(); ++s) {
      const data::Range first = layout_.piece(s, 0);
      if (push_wire_ == WireFormat::fp32) {
        first_push_.emplace_back(comm::Segments{{&count_slot_, 1}, {grad_ + first.begin, first.size()}});
      } else {
        // The count stays an fp32 beside the 16-bit slice: exact, and the server's receive is typed.
        first_push_.emplace_back(comm::Segments{{&count_slot_, 1}, {grad_wire_.data() + first.begin, first.size()}});
      }
    }
  }
  float* compute_grad() {
    if constexpr (Backend::host_accessible) return grad_;
    else return Backend::data(device_grad_);
  }
  // Piece 0 carries the sample count (or a marker); an idle or stopping worker still sends every
  // piece, empty, so each server always receives the same number of messages per clock and its
  // receives, posted in advance, match them (by tag: push_piece(k)). A count alone is the same
  // fp32 message in every wire format: the server's piece-0 receive starts with it.
  void push_piece(int s, std::size_t k, bool with_gradient) {
    const int rank = layout_.server_rank(s);
    const int tag = tags::push_piece(k);
    const data::Range p = layout_.piece(s, k);
    const bool fp32 = push_wire_ == WireFormat::fp32;
    if (node_params_[static_cast<std::size_t>(s)]) {
      // The server reads the gradient here: the piece leaves as an empty one, which only says
      // that piece k is final.
      shared_window_->sync();
      with_gradient = false;
    }
    if (compressed()) {
      push_compressed(s, k, with_gradient, rank, tag);
      return;
    }
    if (with_gradient && !fp32) wire::encode(push_wire_, grad_ + p.begin, p.size(), grad_wire_.data() + p.begin);
    const std::size_t n = with_gradient ? p.size() : 0;
    if (k == 0) {
      const auto server = static_cast<std::size_t>(s);
      if (!with_gradient) {
        sends_.add(count_only_push_[server].isend(world_, rank, tag));
      } else if (fp32) {
        sends_.add(first_push_[server].isend_packed(world_, rank, tag));  // the server's inbox is [count, slice]
      } else {
        // A 16-bit piece 0 sent and received as one array of halves (the count as two of them)
        // moved faster alone (push+pull of 235k parameters across 1 Gbit/s: 4.0 against 5.4-5.9
        // ms) but trained slower (20-23k against 24-26k samples/s), and as fast without overlap
        // (21-23k both): what it lost is what the struct gets across during backpropagation.
        sends_.add(first_push_[server].isend(world_, rank, tag));
      }
    } else if (fp32) {
      sends_.add(world_.isend(grad_ + p.begin, n, rank, tag));
    } else {
      sends_.add(world_.isend(grad_wire_.data() + p.begin, n, rank, tag));
    }
  }
  // Piece k of server s as its top elements or its scaled signs (the rest joins the residual), or,
  // with no gradient, the count alone (piece 0) or an empty message: a prefix of what the server's
  // receive takes.
  void push_compressed(int s, std::size_t k, bool with_gradient, int rank, int tag) {
    const auto server = static_cast<std::size_t>(s);
    if (with_gradient) {
      const data::Range p = layout_.piece(s, k);
      const float* gradient = grad_ + p.begin;
      if (!velocity_.empty()) {
        accumulate_velocity(gradient, velocity_.data() + p.begin, p.size(), momentum_correction_);
        gradient = velocity_.data() + p.begin;
      }
      const std::size_t slot = first_slot_[server] + k;
      if (sign_) {
        compress_sign(gradient, residual_.data() + p.begin, p.size(), slots_.floats(0, slot), slots_.words(0, slot));
      } else {
        selector_.compress(gradient, residual_.data() + p.begin, p.size(), slots_.piece(slot).floats,
                           static_cast<std::uint32_t>(p.begin), slots_.words(0, slot), slots_.floats(0, slot));
      }
      sends_.add(slots_.message(0, slot).isend(world_, rank, tag));
    } else if (k == 0) {
      sends_.add(count_only_push_[server].isend(world_, rank, tag));
    } else {
      sends_.add(world_.isend(&count_slot_, 0, rank, tag));
    }
  }
  void send_push_clock() {
    if (!sends_push_clock_) return;
    for (int s = 0; s < layout_.servers(); ++s) {
      sends_.add(world_.isend(&push_clock_, 1, layout_.server_rank(s), tags::push_clock));
    }
  }
  // Backpropagation says grad[begin, P) is final: every piece inside it leaves now, from the top,
  // while the layers below are still being computed (this thread makes the MPI calls between
  // the backend's kernels).
  void push_ready(std::size_t begin) {
    while (unsent_ > 0) {
      const auto [s, k] = push_order_[unsent_ - 1];
      if (layout_.piece(s, k).begin < begin) break;
      push_piece(s, k, true);
      --unsent_;
    }
  }
  void post_pulls() {
    if constexpr (!Backend::host_accessible) {
      // The last pull's uploads read params_ and may still be queued: on a clock without a
      // gradient nothing has waited for them since, and the receives below write params_.
      if (uploads_pending_) {
        backend_.synchronize();
        uploads_pending_ = false;
      }
    }
    if (receives_tickets_) ticket_request_ = world_.irecv(&ticket_, 1, layout_.server_rank(0), tags::ticket);
    if (receives_responses_) {
      response_request_ = world_.irecv(&response_seconds_, 1, layout_.server_rank(0), tags::response);
    }
    for (const auto& [s, k] : pull_order_) {
      const data::Range p = layout_.piece(s, k);
      const int rank = layout_.server_rank(s);
      if (node_params_[static_cast<std::size_t>(s)]) {
        receives_.add(world_.irecv(params_ + p.begin, 0, rank, tags::params));  // "piece k is ready"
      } else if (signs_pulled()) {
        receives_.add(world_.irecv(pull_message(s, k), sign_pull_words(p.size(), sign_pull_), rank, tags::params));
      } else if (pull_wire_ == WireFormat::fp32) {
        receives_.add(world_.irecv(params_ + p.begin, p.size(), rank, tags::params));
      } else {
        receives_.add(world_.irecv(params_wire_.data() + p.begin, p.size(), rank, tags::params));
      }
    }
  }
  // Waits for every piece of every server's slice; a 16-bit piece is converted and a device
  // backend uploads each piece as it arrives, so that work overlaps the wait for the others.
  void complete_pulls() {
    const bool convert = pull_wire_ != WireFormat::fp32 || signs_pulled();
    if (Backend::host_accessible && !convert && !shared_window_) {
      receives_.wait_all();
    } else {
      for (std::size_t done = 0; done < pull_order_.size(); ++done) {
        const auto [s, k] = pull_order_[static_cast<std::size_t>(receives_.wait_any())];
        const data::Range p = layout_.piece(s, k);
        if (const float* shard = node_params_[static_cast<std::size_t>(s)]) {
          shared_window_->sync();
          std::copy(shard + (p.begin - layout_.shard(s).begin), shard + (p.end - layout_.shard(s).begin),
                    params_ + p.begin);
          continue;
        }
        if (signs_pulled()) {
          add_sign_pull(pull_message(s, k), p.size(), params_ + p.begin, sign_pull_);
        } else if (convert) {
          wire::decode(pull_wire_, params_wire_.data() + p.begin, p.size(), params_ + p.begin);
        }
        if constexpr (!Backend::host_accessible) {
          backend_.upload(params_ + p.begin, p.size(), Backend::data(device_params_) + p.begin);
          uploads_pending_ = true;
        }
      }
    }
    receives_.clear();
    full_pull_ = false;
    if (receives_tickets_) ticket_request_.wait();
    if (receives_responses_) response_request_.wait();
  }

  const comm::Communicator& world_;
  Layout layout_;
  Network network_;
  Backend backend_;
  typename Network::template Workspace<Backend> workspace_;
  host_vector params_storage_, grad_storage_;  // unless the buffers live in a shared window
  float* params_;
  float* grad_;
  typename Backend::buffer_type device_params_{}, device_grad_{};
  WireFormat push_wire_, pull_wire_;
  std::vector<std::uint16_t> grad_wire_, params_wire_;  // the 16-bit wire's send and receive buffers
  float count_slot_ = 0.0f;
  std::uint64_t push_clock_ = 0, ticket_ = 0;
  bool sends_push_clock_ = false, receives_tickets_ = false;
  comm::Request ticket_request_;
  bool receives_responses_ = false;
  double response_seconds_ = 0.0;
  comm::Request response_request_;
  // Piece 0 of each server's push: [count, piece 0 in the wire format], or the count alone.
  std::vector<comm::Segments> first_push_, count_only_push_;
  struct PieceId {
    int server;
    std::size_t piece;
  };
  std::vector<PieceId> push_order_;  // every piece of a push, in parameter order
  std::vector<PieceId> pull_order_;  // every piece of a pull, in the order post_pulls() posts them
  std::size_t unsent_ = 0;           // push_order_[0, unsent_) has not left in this step yet
  bool uploads_pending_ = false;     // a device backend may still be reading params_ (post_pulls)
  bool overlap_ = false;
  double top_k_ = 0.0;  // 0: dense pushes
  // Compressed pushes (prepare_compressed): the residual, top-k's selector, the momentum
  // correction's velocity, and the buffers and messages, piece first_slot_[s] + k for piece k of
  // server s.
  std::vector<float> residual_;
  TopKSelector selector_;
  float momentum_correction_ = 0.0f;
  std::vector<float> velocity_;  // with momentum correction, else empty
  bool sign_ = false;  // scaled-sign pushes
  unsigned sign_pull_ = 0;  // scaled-sign pulls: their passes, 0 without
  bool full_pull_ = true;   // the pull being posted or completed is a run's first: fp32
  std::vector<std::uint32_t> pull_messages_;  // scaled-sign pulls: each piece's message, by server, then piece
  std::vector<std::size_t> pull_message_at_;  // where each starts, in the same order
  std::vector<std::size_t> pull_first_piece_;  // by server: its piece 0's index in pull_message_at_
  detail::CompressedSlots slots_;
  std::vector<std::size_t> first_slot_;
  std::vector<const float*> node_params_;  // by server: its shard's parameters, where it shares memory with this worker
  const comm::SharedWindow* shared_window_ = nullptr;
  comm::RequestSet sends_, receives_;
  metrics::PhaseClock clock_;
  WorkerTimes times_;
  double compute_before_ = 0.0;
  std::size_t clock_count_ = 0, gradient_pushes_ = 0;
  std::function<void(std::size_t, double)> after_compute_;
  std::function<void()> start_local_, serve_local_;
};

}  // namespace hpcps::ps
