#pragma once
// A server owns one contiguous shard of the parameter vector and the optimizer state for it.
// Data flows worker -> server -> worker: a worker pushes [count, gradient slice], and the server
// answers with its parameter slice when the synchronization rule allows; nothing is requested.
//
// A push and a reply travel as the layout's pieces (ps/layout.hpp). Two loops, chosen by the
// strategy's `aggregates`:
// - aggregating (bulk-synchronous): per clock, one push from every active worker, summed in
//   worker-rank order (the result does not depend on arrival order), one update, then every
//   active worker gets the new shard. Piece by piece: once piece k has arrived from everyone it
//   is summed, updated and sent back while later pieces are still arriving, so the update and
//   both directions of transfer overlap;
// - individual (asynchronous, stale-bounded): each push is applied as it arrives, in arrival
//   order; the worker that sent it is answered once it is at most `staleness()` clocks ahead of the
//   slowest active worker, else it waits until the slowest catches up.
//
// Top-k pushes (ps/top_k.hpp) land as each piece's values and indices, and a piece's sum is built
// by adding each contributor's pairs into a zeroed piece, in worker-rank order: the sum of the
// dense vectors they stand for, without making them dense per worker. Scaled-sign pushes
// (ps/sign_push.hpp) land as each piece's scales and words of signs and are summed the same way.
// With scaled-sign pulls (ps/sign_pull.hpp) the first reply of a run sends a worker the shard in
// fp32 and later ones the scaled signs of what changed since, against the server's view of what
// that worker holds: one view for all workers in the aggregating loop (each active worker gets
// every clock's reply, so their views are the same), one per worker in the individual loop.
//
// Pushes in a 16-bit wire format (ps/wire_format.hpp) land in a 16-bit inbox, their counts in an
// fp32 array beside it, and are converted to fp32 inside the sum; a 16-bit pull sends a 16-bit
// copy of the shard, refreshed piece by piece after each update. The parameters and the
// optimizer state stay fp32 either way: the wire rounds what travels, never what is kept.
//
// A worker on the same node may instead share memory with the server (attach_node_worker, set up
// by the ParameterServer over a comm::SharedWindow): the server sums its gradient where the worker
// computed it, the worker copies the new parameters out of the server's shard, and only the
// messages that say so travel (the count with piece 0, empty ones for the other pieces), on the
// same tags and in the same order as the point-to-point protocol. Bulk-synchronous serving makes
// this safe without locks: a worker writes its next gradient only after its pull, which comes
// after the server has read the gradient, and it reads parameters only between the server's
// notification and its own next push, before which the server does not update them.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/request.hpp"
#include "hpcps/comm/segments.hpp"
#include "hpcps/comm/shared_window.hpp"
#include "hpcps/error.hpp"
#include "hpcps/metrics/stopwatch.hpp"
#include "hpcps/ps/detail/aggregate.hpp"
#include "hpcps/ps/detail/compressed_slots.hpp"
#include "hpcps/ps/layout.hpp"
#include "hpcps/ps/sign_pull.hpp"
#include "hpcps/ps/sign_push.hpp"
#include "hpcps/ps/top_k.hpp"
#include "hpcps/ps/wire_format.hpp"

namespace hpcps::ps {

struct ServerStats {
  std::size_t updates = 0;                     // times the update rule ran
  std::vector<std::size_t> pushes_per_worker;  // gradient slices applied, by worker (idle ones excluded)
  std::vector<std::size_t> clocks_per_worker;  // pushes received, idle ones included
  std::size_t max_staleness = 0;               // largest clock gap between an answered worker and the slowest
  std::vector<std::size_t> dropped_per_worker;  // with backup workers: gradient slices that came too late
  double wait = 0.0;                           // waiting for pushes
  double update = 0.0;                         // summing, applying, answering
};

template <class Sync, class Optimizer>
class Server {
 public:
  Server(const comm::Communicator& world, const Layout& layout, int index, const float* initial_parameters,
         Sync sync, Optimizer optimizer, WireFormat push_wire = WireFormat::fp32,
         WireFormat pull_wire = WireFormat::fp32, double top_k = 0.0, bool sign = false, unsigned sign_pull = 0)
      : world_(world),
        layout_(layout),
        index_(index),
        range_(layout.shard(index)),
        sync_(sync),
        optimizer_(optimizer),
        push_wire_(push_wire),
        pull_wire_(pull_wire),
        own_params_(initial_parameters + range_.begin, initial_parameters + range_.end),
        params_(own_params_.data()),
        // The aggregating loop sums slices in it; a 16-bit slice is converted in it in either loop.
        block_(Sync::aggregates || push_wire != WireFormat::fp32 ? detail::aggregate_block : 0, 0.0f),
        state_(optimizer_.make_state(range_.size())),
        top_k_(top_k),
        sign_(sign),
        sign_pull_(sign_pull) {
    const auto workers = static_cast<std::size_t>(layout.workers());
    for (std::size_t k = 0; k < layout.pieces(index); ++k) {
      const data::Range p = layout.piece(index, k);
      pieces_.push_back({p.begin - range_.begin, p.end - range_.begin});
    }
    counts_.assign(workers, 0.0f);
    if (top_k_ > 0.0 && sign_) throw Error("ps::Server: a push is either top-k or scaled-sign, not both");
    if (compressed()) prepare_compressed(workers);
    if (sign_pull_) prepare_sign_pulls(workers);
    in_place_.assign(workers, nullptr);
    inboxes_.resize(workers);  // fp32: allocated on first use, for the workers whose pushes arrive as messages
    if (push_wire != WireFormat::fp32) {
      inbox_wire_.assign(workers * range_.size(), 0);
      for (std::size_t w = 0; w < workers; ++w) {
        first_piece_.emplace_back(comm::Segments{{&counts_[w], 1}, {inbox_wire(w) + pieces_[0].begin, pieces_[0].size()}});
      }
    }
    if (pull_wire != WireFormat::fp32) {
      params_wire_.assign(range_.size(), 0);
      encode_parameters(0, range_.size());  // the initial parameters every worker receives first
    }
    stats_.pushes_per_worker.assign(workers, 0);
    stats_.clocks_per_worker.assign(workers, 0);
    stats_.dropped_per_worker.assign(workers, 0);
    active_.assign(workers, 1);
    sending_.assign(workers, 0);
    waiting_.assign(workers, 0);
    pieces_in_.assign(workers, 0);
    contributors_.reserve(workers);
    piece_slices_.reserve(workers);
    piece_wire_slices_.reserve(workers);
    if constexpr (Sync::aggregates) {
      piece_receives_.resize(pieces_.size());
      piece_replies_.resize(pieces_.size());
      for (auto& set : piece_receives_) set.reserve(workers);
      for (auto& set : piece_replies_) set.reserve(workers);
    } else {
      // Slot w * (pieces + 1) + k: worker w's piece k; slot w * (pieces + 1) + pieces: its push clock.
      receives_.reserve(workers * (pieces_.size() + 1));
      replies_.reserve(workers * (pieces_.size() + 1));  // the pieces, and server 0's tickets
      push_clocks_.assign(workers, 0);
      progress_.assign(workers, 0);
    }
  }

  // Serves until every worker has sent its stop marker. An aggregating server calls
  // after_clock() after each clock it served (ps::train checkpoints and agrees on stopping there),
  // any other after each push it took (ps::train passes a signal on from there).
  void run() {
    run([] {});
  }
  template <class AfterClock>
  void run(AfterClock&& after_clock) {
    allocate_inboxes();
    if constexpr (Sync::aggregates) {
      if (backups_ > 0) {
        run_with_backups(after_clock);
        replies_.wait_all();
        replies_.clear();
        return;
      }
      start_aggregating();
      while (serve_clock()) after_clock();
      for (auto& set : piece_replies_) {
        set.wait_all();
        set.clear();
      }
    } else {
      run_individual(after_clock);
      replies_.wait_all();
      replies_.clear();
    }
  }

  // The fp32 master copy (a 16-bit pull sends it rounded).
  std::vector<float> parameters() const { return {params_, params_ + range_.size()}; }
  // With scaled-sign pulls: the shard as worker `worker` holds it after its latest pull, which
  // trails the master copy by what the pulls have not carried yet; null with other pulls.
  const float* pull_view(std::size_t worker) const {
    if (!sign_pull_) return nullptr;
    return views_.data() + (Sync::aggregates ? 0 : worker) * range_.size();
  }
  // What a checkpoint saves: the shard's parameters in place, the rule's state, and the update
  // count that schedules and bias corrections read.
  const float* parameter_data() const { return params_; }
  typename Optimizer::State& optimizer_state() { return state_; }
  const Optimizer& optimizer() const { return optimizer_; }
  // A resumed run continues counting updates where the checkpoint left off. Before serving.
  void restore_updates(std::size_t updates) { stats_.updates = updates; }

  // Asynchronous and stale-synchronous serving where the workers draw their work from the epoch's
  // one order as they become free (ps::train with Balance::speed). Server 0 hands out the work:
  // with every reply a ticket (tags::ticket), the next of first_clock * W, first_clock * W + 1,
  // ... in the order it answers, so the next part goes to whichever worker is free first, with
  // no message of its own. A fast worker pushes more often than a slow one, so the staleness
  // bound counts the global clocks the pushes complete (tags::push_clock, sent by
  // Worker::set_push_clock), not pushes. Every worker starts the next run() at `first_clock`.
  // Before each run().
  void serve_drawn_work(std::uint64_t first_clock) {
    static_assert(!Sync::aggregates, "ps::Server: drawn work is served push by push; aggregated pushes are in lock step");
    push_clocked_ = true;
    first_clock_ = first_clock;
    next_ticket_ = first_clock * static_cast<std::uint64_t>(layout_.workers());
    tickets_out_.assign(active_.size(), 0);
  }

  // Synchronous serving with `backups` backup workers (Chen et al., "Revisiting distributed
  // synchronous SGD", 2016): each clock's update sums the first W - backups pushes of that clock
  // to arrive, and a push that comes after its clock's update is dropped (its samples are not
  // used) and answered at once with the current parameters. A slow worker then delays no clock,
  // at the cost of its part of the batch. Server 0 tells every worker, with each reply, which
  // clock to compute next (a ticket: clock * W + worker, as for drawn work), so a late worker
  // catches up with the others instead of falling further behind; the pushes carry their clocks
  // (tags::push_clock). Point-to-point pushes only (no local worker, no shared memory): ps::train
  // refuses the other compositions. The workers start the next run() at `first_clock`; before
  // each run().
  void serve_with_backups(std::size_t backups, std::uint64_t first_clock) {
    static_assert(Sync::aggregates, "ps::Server: backup workers are a rule of the synchronous strategy");
    if (backups >= active_.size() || local_ != std::numeric_limits<std::size_t>::max() || shared_window_) {
      throw Error(fmt::format("ps::Server: {} backup worker(s) among {} workers{}", backups, active_.size(),
                              backups >= active_.size() ? " leave no worker to wait for" : " need point-to-point pushes"));
    }
    if (sign_pull_) {
      // A dropped push is answered out of turn, while other replies may still read the view's message.
      throw Error("ps::Server: backup workers need dense pulls, not scaled-sign ones");
    }
    backups_ = backups;
    push_clocked_ = true;
    first_clock_ = first_clock;
    const std::size_t workers = active_.size();
    receives_.reserve(workers * (pieces_.size() + 1));
    replies_.reserve(workers * (pieces_.size() + 1));
    push_clocks_.assign(workers, 0);
    tickets_out_.assign(workers, 0);
    fresh_.assign(workers, 0);
  }

  // Server 0 of a balanced synchronous run (ps::train with Balance::speed): with every clock's
  // reply it tells each worker how long that worker's push took to come in, in seconds of this
  // server's clock, from the release of the previous clock's replies to the arrival of the push's
  // count (tags::response, one double; 0 with the initial parameters). A worker's own compute time
  // misses a pause that falls in its push or while its reply waits for it (a process stopped from
  // outside, a preempting job); this time holds it wherever it falls, as the clock sees it.
  // Before start_aggregating(); `false` stops it for the next run.
  void time_responses(bool on = true) {
    static_assert(Sync::aggregates, "ps::Server: response times are of a clock's pushes; serve clock by clock");
    if (on && index_ != 0) throw Error(fmt::format("ps::Server: server {} cannot time the responses; server 0 does", index_));
    times_responses_ = on;
    arrivals_.assign(active_.size(), 0.0);
    responses_out_.assign(active_.size(), 0.0);
    arrival_order_.reserve(active_.size());
    response_sends_.reserve(active_.size());
  }

  // A colocated rank's own worker, whose messages to this server would only be copies within the
  // process: the server reads its sample count and gradient where the worker wrote them, and
  // keeps the shard's parameters inside the worker's parameter vector, so the worker computes
  // on them with no pull. Bulk-synchronous serving only (updates happen between the worker's
  // computations) and fp32 wires; called once, before start_aggregating().
  void attach_local_worker(std::size_t worker, const float* count, const float* gradient, float* parameters) {
    static_assert(Sync::aggregates, "ps::Server: a local worker is served clock by clock only");
    if (push_wire_ != WireFormat::fp32 || pull_wire_ != WireFormat::fp32 || compressed() || sign_pull_ ||
        worker >= active_.size()) {
      throw Error(fmt::format("ps::Server: cannot attach local worker {} (of {}) with {} pushes and {} pulls", worker,
                              active_.size(), wire_name(push_wire_), pull_name()));
    }
    local_ = worker;
    local_count_ = count;
    in_place_[worker] = gradient + range_.begin;
    place_parameters(parameters + range_.begin);
  }

  // Worker `worker` shares memory with this server (comm::SharedWindow): its gradient is read at
  // `gradient` (the whole vector's first element) and it copies the shard's parameters from
  // wherever this server keeps them, which must be inside `window` too (place_parameters, or a
  // local worker's vector in the window). Bulk-synchronous serving, fp32 wires; before serving.
  void attach_node_worker(std::size_t worker, const float* gradient, const comm::SharedWindow& window) {
    static_assert(Sync::aggregates, "ps::Server: workers share memory with a server that serves clock by clock only");
    if (push_wire_ != WireFormat::fp32 || pull_wire_ != WireFormat::fp32 || compressed() || sign_pull_ ||
        worker >= active_.size() || worker == local_) {
      throw Error(fmt::format("ps::Server: cannot share memory with worker {} (of {}) with {} pushes and {} pulls",
                              worker, active_.size(), wire_name(push_wire_), pull_name()));
    }
    in_place_[worker] = gradient + range_.begin;
    shared_window_ = &window;
  }

  // Keeps the shard's parameters at `where` from now on (a shared segment other ranks read).
  void place_parameters(float* where) {
    std::copy(params_, params_ + range_.size(), where);
    params_ = where;
    std::vector<float>().swap(own_params_);  // `= {}` would keep the capacity
  }
  data::Range range() const { return range_; }
  const ServerStats& stats() const { return stats_; }
  const Sync& sync() const { return sync_; }

  // The aggregating loop one clock at a time, for a colocated rank whose worker drives it:
  // start_aggregating() once (initial parameters out, receives posted), then serve_clock() after
  // the rank's own push of each clock; it returns false once every worker has stopped.
  void start_aggregating() {
    static_assert(Sync::aggregates, "ps::Server: only the aggregating strategy is served clock by clock");
    allocate_inboxes();
    remaining_ = active_.size();
    std::fill(full_pull_.begin(), full_pull_.end(), 1);
    if (shared_window_) shared_window_->sync();  // the initial parameters, before the messages that announce them
    for (std::size_t k = 0; k < pieces_.size(); ++k) {
      for (std::size_t w = 0; w < active_.size(); ++w) {
        if (w == local_) continue;
        piece_replies_[k].add(reply(w, k));
        if (k < window()) piece_receives_[k].add(listen(w, k));
      }
    }
    if (times_responses_) {
      std::fill(arrivals_.begin(), arrivals_.end(), 0.0);
      const double now = seconds_now();
      released_ = 0.0;
      send_responses();  // nothing timed yet: 0
      released_ = now;
    }
  }

  bool serve_clock() {
    const std::size_t workers = active_.size();
    metrics::PhaseClock clock;
    clock.start();
    std::copy(active_.begin(), active_.end(), sending_.begin());  // every one of them sends every piece
    // Piece 0 carries every worker's sample count or stop marker: it decides the clock.
    if (times_responses_) note_arrivals();
    piece_receives_[0].wait_all();
    clock.charge(stats_.wait);
    double total = 0.0;
    contributors_.clear();
    for (std::size_t w = 0; w < workers; ++w) {
      if (!active_[w]) continue;
      const float count = push_count(w);
      if (count == push_count::stop) {
        active_[w] = 0;
        --remaining_;
        continue;
      }
      ++stats_.clocks_per_worker[w];
      if (count <= 0.0f) continue;  // idle at this clock
      ++stats_.pushes_per_worker[w];
      total += count;
      contributors_.push_back(w);
    }
    if (remaining_ > 0) {
      const std::size_t slowest = slowest_active_clock();
      for (std::size_t w = 0; w < workers; ++w) {
        if (active_[w]) note_staleness(stats_.clocks_per_worker[w] - slowest);
      }
    }
    const auto scale = total > 0.0 ? static_cast<float>(1.0 / total) : 0.0f;
    clock.charge(stats_.update);
    for (std::size_t k = 0; k < pieces_.size(); ++k) {
      const data::Range p = pieces_[k];
      // Every sender of this clock, the stopping ones too, sends every piece (empty if it has no
      // gradient): all of piece k must be in before its receives are posted again.
      piece_receives_[k].wait_all();
      piece_receives_[k].clear();
      post_ahead(k + window());
      // The previous clock's replies of this piece read params_: out before it changes.
      piece_replies_[k].wait_all();
      piece_replies_[k].clear();
      clock.charge(stats_.wait);
      if (shared_window_) shared_window_->sync();  // the node's workers' stores of piece k, announced by its messages
      if (!contributors_.empty()) {
        aggregate(p, scale);
        encode_parameters(p.begin, p.end);
      }
      if (shared_window_) shared_window_->sync();  // the updated piece, before the messages that announce it
      if (remaining_ > 0) {
        if (sign_pull_) {
          compress_sign_pull(params_ + p.begin, view(0) + p.begin, p.size(), pull_message(0, k), sign_pull_);
        }
        for (std::size_t w = 0; w < workers; ++w) {
          if (active_[w] && w != local_) piece_replies_[k].add(reply(w, k));
        }
      }
      clock.charge(stats_.update);
    }
    if (!contributors_.empty()) ++stats_.updates;
    if (times_responses_) {
      response_sends_.wait_all();  // the previous clock's, long delivered
      response_sends_.clear();
      if (remaining_ > 0) {
        const double now = seconds_now();  // before the sends: no worker can have its reply earlier
        send_responses();
        released_ = now;
      }
    }
    return remaining_ > 0;
  }

 private:
  // Receives posted ahead of the piece being summed. Not all of them: MPI moves a large message
  // once its receive is posted, and on one node the receiver's core makes the copy, inside
  // whatever MPI call it is in; with every piece's receive posted, the wait for piece 0 would
  // copy in the whole push before the first update, and push, update and pull would run one
  // after the other. Two pieces ahead keep the link busy and the pipeline moving.
  static constexpr std::size_t receive_window = 2;
  std::size_t window() const { return std::min(receive_window, pieces_.size()); }

  // Posts the receives of piece j counted from this clock's first: this clock's piece j for every
  // worker sending in it, or, past the last piece, the next clock's piece j - K for every worker
  // still active. Per tag, this clock's receive is always posted before the next clock's.
  void post_ahead(std::size_t j) {
    const std::size_t pieces = pieces_.size();
    const bool next_clock = j >= pieces;
    if (next_clock && remaining_ == 0) return;
    const std::size_t k = next_clock ? j - pieces : j;
    for (std::size_t w = 0; w < active_.size(); ++w) {
      if (w != local_ && (next_clock ? active_[w] : sending_[w])) piece_receives_[k].add(listen(w, k));
    }
  }

  static double seconds_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  // Times each worker's push count as it lands: the local worker pushed before this clock began,
  // the others' piece-0 receives were posted in worker order for the workers active then.
  void note_arrivals() {
    const double now = seconds_now();
    arrival_order_.clear();
    for (std::size_t w = 0; w < active_.size(); ++w) {
      if (!active_[w]) continue;
      if (w == local_) arrivals_[w] = now;
      else arrival_order_.push_back(w);
    }
    for (int i = piece_receives_[0].wait_any(); i >= 0; i = piece_receives_[0].wait_any()) {
      arrivals_[arrival_order_[static_cast<std::size_t>(i)]] = seconds_now();
    }
  }
  void send_responses() {
    for (std::size_t w = 0; w < active_.size(); ++w) {
      if (!active_[w]) continue;
      responses_out_[w] = released_ > 0.0 ? arrivals_[w] - released_ : 0.0;
      response_sends_.add(world_.isend(&responses_out_[w], 1, layout_.worker_rank(static_cast<int>(w)), tags::response));
    }
  }

  // Runs again after every worker stopped (ps::train's meeting points in a checkpointed run): the
  // workers start over, each receiving the current parameters first.
  template <class AfterPush>
  void run_individual(AfterPush& after_push) {
    const std::size_t workers = active_.size();
    const std::size_t pieces = pieces_.size();
    const std::size_t messages = pieces + (push_clocked_ ? 1 : 0);  // per push; also slots per worker
    const std::size_t slots = pieces + 1;
    std::size_t remaining = workers;
    receives_.clear();  // every one completed: a stopped worker's are not posted again
    std::fill(active_.begin(), active_.end(), 1);
    std::fill(waiting_.begin(), waiting_.end(), 0);
    std::fill(pieces_in_.begin(), pieces_in_.end(), 0);
    std::fill(progress_.begin(), progress_.end(), first_clock_);
    std::fill(full_pull_.begin(), full_pull_.end(), 1);
    for (std::size_t w = 0; w < workers; ++w) {
      add_reply(w);
      for (std::size_t k = 0; k < pieces; ++k) receives_.add(listen(w, k));
      receives_.add(push_clocked_ ? listen_clock(w) : comm::Request());
    }
    metrics::PhaseClock clock;
    while (remaining > 0) {
      clock.start();
      const auto slot = static_cast<std::size_t>(receives_.wait_any());
      clock.charge(stats_.wait);
      const std::size_t w = slot / slots;
      if (++pieces_in_[w] < messages) continue;  // the rest of worker w's push is still arriving
      pieces_in_[w] = 0;
      const float count = push_count(w);
      // Answers in flight read params_, and the reply set stays within its capacity.
      replies_.wait_all();
      replies_.clear();
      if (count == push_count::stop) {
        active_[w] = 0;
        waiting_[w] = 0;
        --remaining;
      } else {
        ++stats_.clocks_per_worker[w];
        if (count > 0.0f) {
          ++stats_.pushes_per_worker[w];
          // A lone slice over the whole shard: an fp32 one goes to the rule where it arrived.
          contributors_.clear();
          contributors_.push_back(w);
          aggregate({0, range_.size()}, 1.0f / count);
          encode_parameters(0, range_.size());
          ++stats_.updates;
        }
        if (push_clocked_) progress_[w] = push_clocks_[w];
        waiting_[w] = 1;
        for (std::size_t k = 0; k < pieces; ++k) receives_.replace(w * slots + k, listen(w, k));
        if (push_clocked_) receives_.replace(w * slots + pieces, listen_clock(w));
      }
      answer_waiting_workers();
      clock.charge(stats_.update);
      after_push();
    }
  }

  // The loop of serve_with_backups. Whole pushes, not pieces: a push is judged by its clock once
  // all of it is in. Per worker: receiving a push; holding a fresh one until its clock's update
  // (fresh_: its inbox is read then); or, at a server that has not finished the push's previous
  // clock yet (server 0 may have answered it already), holding an early one (fresh_ = 2).
  template <class AfterPush>
  void run_with_backups(AfterPush& after_push) {
    const std::size_t workers = active_.size();
    const std::size_t pieces = pieces_.size();
    const std::size_t slots = pieces + 1;
    std::size_t remaining = workers, fresh = 0;
    std::uint64_t clock = first_clock_;  // being collected: its pushes carry clock + 1
    receives_.clear();
    std::fill(active_.begin(), active_.end(), 1);
    std::fill(pieces_in_.begin(), pieces_in_.end(), 0);
    std::fill(fresh_.begin(), fresh_.end(), 0);
    contributors_.clear();
    const auto listen_all = [&](std::size_t w) {
      for (std::size_t k = 0; k < pieces; ++k) receives_.replace(w * slots + k, listen(w, k));
      receives_.replace(w * slots + pieces, listen_clock(w));
    };
    const auto answer = [&](std::size_t w) {
      add_reply(w, clock * static_cast<std::uint64_t>(workers) + w);
      listen_all(w);
    };
    for (std::size_t w = 0; w < workers; ++w) {
      for (std::size_t k = 0; k < slots; ++k) receives_.add(comm::Request());
      answer(w);
    }
    // A complete push from worker w: counted for this clock, dropped, or held for the next.
    const auto judge = [&](std::size_t w) {
      const std::uint64_t completes = push_clocks_[w];
      if (completes == clock + 1) {
        fresh_[w] = 1;
        ++fresh;
        if (push_count(w) > 0.0f) contributors_.push_back(w);
      } else if (completes <= clock) {
        ++stats_.dropped_per_worker[w];
        answer(w);  // it computes the clock being collected, with the newest parameters
      } else {
        fresh_[w] = 2;
      }
    };
    metrics::PhaseClock phase;
    while (remaining > 0) {
      phase.start();
      const auto slot = static_cast<std::size_t>(receives_.wait_any());
      phase.charge(stats_.wait);
      const std::size_t w = slot / slots;
      if (++pieces_in_[w] < slots) continue;
      pieces_in_[w] = 0;
      if (push_count(w) == push_count::stop) {
        active_[w] = 0;
        --remaining;
      } else {
        ++stats_.clocks_per_worker[w];
        judge(w);
      }
      // The clock is complete with the first W - backups of its pushes (idle ones included), or
      // with every push still to come once fewer workers remain.
      while (fresh > 0 && fresh >= std::min(active_.size() - backups_, remaining)) {
        replies_.wait_all();  // answers in flight read params_
        replies_.clear();
        std::sort(contributors_.begin(), contributors_.end());  // worker-rank order, whatever the arrival order
        double total = 0.0;
        for (std::size_t c : contributors_) total += push_count(c);
        if (!contributors_.empty()) {
          for (std::size_t c : contributors_) ++stats_.pushes_per_worker[c];
          aggregate({0, range_.size()}, static_cast<float>(1.0 / total));
          encode_parameters(0, range_.size());
          ++stats_.updates;
        }
        contributors_.clear();
        fresh = 0;
        ++clock;
        for (std::size_t v = 0; v < workers; ++v) {
          if (fresh_[v] == 1) {
            fresh_[v] = 0;
            answer(v);
          }
        }
        for (std::size_t v = 0; v < workers; ++v) {
          if (fresh_[v] == 2) {
            fresh_[v] = 0;
            judge(v);
          }
        }
      }
      phase.charge(stats_.update);
      after_push();
    }
  }

  // Answers every waiting worker that is within the staleness bound of the slowest active one.
  void answer_waiting_workers() {
    const std::size_t slowest = slowest_active_clock();
    for (std::size_t w = 0; w < active_.size(); ++w) {
      if (!waiting_[w]) continue;
      const std::size_t ahead = progress(w) - slowest;
      if (ahead > sync_.staleness()) continue;
      note_staleness(ahead);
      waiting_[w] = 0;
      add_reply(w);
    }
  }

  // Clocks completed by the slowest worker still training (a waiting worker is at least there).
  std::size_t slowest_active_clock() const {
    std::size_t slowest = std::numeric_limits<std::size_t>::max();
    for (std::size_t w = 0; w < active_.size(); ++w) {
      if (active_[w]) slowest = std::min(slowest, progress(w));
    }
    return slowest;
  }
  // Where worker w stands for the staleness bound: its pushes so far, or, with push clocks, the
  // global clock its latest push completed. The clock a slow worker is computing in is at least
  // that, so the bound errs towards waiting, never towards more staleness.
  std::size_t progress(std::size_t w) const {
    if constexpr (Sync::aggregates) {
      return stats_.clocks_per_worker[w];
    } else {
      return push_clocked_ ? static_cast<std::size_t>(progress_[w]) : stats_.clocks_per_worker[w];
    }
  }

  // How far ahead of the slowest active worker a worker is when it gets parameters.
  void note_staleness(std::size_t ahead) { stats_.max_staleness = std::max(stats_.max_staleness, ahead); }

  // Worker w's latest push in fp32: [count, slice], piece k of the slice at
  // inbox(w) + 1 + pieces_[k].begin. In a 16-bit format: the count in counts_[w], the slice at
  // inbox_wire(w). A worker sharing memory: the count in counts_[w], the slice at in_place_[w].
  float* inbox(std::size_t worker) { return inboxes_[worker].data(); }
  std::uint16_t* inbox_wire(std::size_t worker) { return inbox_wire_.data() + worker * range_.size(); }
  float push_count(std::size_t worker) {
    if (worker == local_) return *local_count_;
    if (compressed()) return counts_[worker];
    return push_wire_ == WireFormat::fp32 && !in_place_[worker] ? inbox(worker)[0] : counts_[worker];
  }
  // A worker of this node other than the local one: its push is read in place, and only empty
  // messages (the count with piece 0) travel between it and this server.
  bool shares_memory_with(std::size_t worker) const { return in_place_[worker] && worker != local_; }
  // Once the workers that share memory are known: the others' pushes need an inbox here.
  void allocate_inboxes() {
    if (push_wire_ != WireFormat::fp32 || compressed()) return;
    for (std::size_t w = 0; w < inboxes_.size(); ++w) {
      if (!in_place_[w] && inboxes_[w].empty()) inboxes_[w].assign(range_.size() + 1, 0.0f);
    }
  }

  // params_[p] <- the rule applied to the sum of the contributors' piece p (shard-relative), in
  // contributors_' order.
  void aggregate(data::Range p, float scale) {
    if (compressed()) {
      aggregate_compressed(p, scale);
    } else if (push_wire_ == WireFormat::fp32) {
      piece_slices_.clear();
      for (std::size_t w : contributors_) {
        piece_slices_.push_back((in_place_[w] ? in_place_[w] : inbox(w) + 1) + p.begin);
      }
      detail::aggregate_and_step(optimizer_, state_, p.begin, params_ + p.begin, piece_slices_.data(),
                                 piece_slices_.size(), scale, p.size(), stats_.updates, block_.data());
    } else {
      piece_wire_slices_.clear();
      for (std::size_t w : contributors_) piece_wire_slices_.push_back(inbox_wire(w) + p.begin);
      detail::aggregate_and_step(push_wire_, optimizer_, state_, p.begin, params_ + p.begin,
                                 piece_wire_slices_.data(), piece_wire_slices_.size(), scale, p.size(), stats_.updates,
                                 block_.data());
    }
  }
  // Each piece inside p (whole pieces: one, or the shard): the contributors' pushes added into a
  // zeroed piece in contributors_' order (top-k: their pairs; scaled sign: their +-scales), then
  // the rule.
  void aggregate_compressed(data::Range p, float scale) {
    for (std::size_t k = 0; k < pieces_.size(); ++k) {
      const data::Range piece = pieces_[k];
      if (piece.begin < p.begin || piece.end > p.end) continue;
      float* sum = piece_sum_.data();
      std::fill(sum, sum + piece.size(), 0.0f);
      const auto base = static_cast<std::uint32_t>(range_.begin + piece.begin);
      for (std::size_t w : contributors_) {
        if (sign_) {
          add_signs(slots_.floats(w, k), slots_.words(w, k), piece.size(), sum);
        } else {
          scatter_add(slots_.words(w, k), slots_.floats(w, k), slots_.piece(k).floats, base, sum);
        }
      }
      optimizer_.step(state_, piece.begin, params_ + piece.begin, sum, scale, piece.size(), stats_.updates);
    }
  }
  bool compressed() const { return top_k_ > 0.0 || sign_; }
  // Compressed pushes: per piece, top-k's ceil(top_k * size) values and indices, or scaled sign's
  // scales and words of signs; a copy for each worker, and every (worker, piece) receive over it,
  // [count,] floats, words.
  void prepare_compressed(std::size_t workers) {
    std::vector<detail::CompressedPiece> sizes;
    std::size_t largest = 0;
    for (std::size_t k = 0; k < pieces_.size(); ++k) {
      sizes.push_back(detail::compressed_piece(top_k_, push_wire_, pieces_[k].size(), k == 0, "ps::Server"));
      largest = std::max(largest, pieces_[k].size());
    }
    std::vector<float*> counts;
    for (std::size_t w = 0; w < workers; ++w) counts.push_back(&counts_[w]);
    slots_ = detail::CompressedSlots(sizes, counts);
    piece_sum_.assign(largest, 0.0f);
  }
  // Scaled-sign pulls: the views (one, or one per worker) and each piece's message for each view.
  void prepare_sign_pulls(std::size_t workers) {
    if (pull_wire_ != WireFormat::fp32) {
      throw Error(fmt::format("ps::Server: a scaled-sign pull sends the first pull of a run in fp32, then signs; "
                              "the pull wire must be fp32, not {}", wire_name(pull_wire_)));
    }
    const std::size_t views = Sync::aggregates ? 1 : workers;
    for (const data::Range& p : pieces_) {
      pull_message_at_.push_back(pull_message_words_);
      pull_message_words_ += sign_pull_words(p.size(), sign_pull_);
    }
    views_.assign(views * range_.size(), 0.0f);
    pull_messages_.assign(views * pull_message_words_, 0);
    full_pull_.assign(workers, 1);
  }
  float* view(std::size_t c) { return views_.data() + c * range_.size(); }
  std::uint32_t* pull_message(std::size_t c, std::size_t k) {
    return pull_messages_.data() + c * pull_message_words_ + pull_message_at_[k];
  }
  std::string pull_name() const { return sign_pull_ ? std::string("scaled-sign") : std::string(wire_name(pull_wire_)); }

  // The 16-bit copy a 16-bit pull sends, of the shard's [begin, end) (no-op for fp32 pulls).
  void encode_parameters(std::size_t begin, std::size_t end) {
    if (pull_wire_ != WireFormat::fp32) wire::encode(pull_wire_, params_ + begin, end - begin, params_wire_.data() + begin);
  }

  // Server 0 hands out tickets with its replies where the workers draw their work or have backups.
  void add_reply(std::size_t worker) {
    add_reply(worker, next_ticket_);
    if (push_clocked_ && index_ == 0) ++next_ticket_;
  }
  void add_reply(std::size_t worker, std::uint64_t ticket) {
    for (std::size_t k = 0; k < pieces_.size(); ++k) replies_.add(reply(worker, k));
    if (push_clocked_ && index_ == 0) {
      tickets_out_[worker] = ticket;
      replies_.add(world_.isend(&tickets_out_[worker], 1, layout_.worker_rank(static_cast<int>(worker)), tags::ticket));
    }
  }
  comm::Request reply(std::size_t worker, std::size_t k) {
    const data::Range p = pieces_[k];
    const int rank = layout_.worker_rank(static_cast<int>(worker));
    if (shares_memory_with(worker)) return world_.isend(params_ + p.begin, 0, rank, tags::params);  // "piece k is ready"
    if (sign_pull_) {
      const std::size_t c = Sync::aggregates ? 0 : worker;  // the view of that worker
      if (full_pull_[worker]) {
        std::copy(params_ + p.begin, params_ + p.end, view(c) + p.begin);
        if (k + 1 == pieces_.size()) full_pull_[worker] = 0;
        return world_.isend(params_ + p.begin, p.size(), rank, tags::params);
      }
      // The aggregating loop encoded the piece once for everyone (serve_clock); this worker's
      // previous reply is complete (run_individual waits for all replies before answering).
      if constexpr (!Sync::aggregates) {
        compress_sign_pull(params_ + p.begin, view(c) + p.begin, p.size(), pull_message(c, k), sign_pull_);
      }
      return world_.isend(pull_message(c, k), sign_pull_words(p.size(), sign_pull_), rank, tags::params);
    }
    if (pull_wire_ == WireFormat::fp32) return world_.isend(params_ + p.begin, p.size(), rank, tags::params);
    return world_.isend(params_wire_.data() + p.begin, p.size(), rank, tags::params);
  }
  comm::Request listen_clock(std::size_t worker) {
    return world_.irecv(&push_clocks_[worker], 1, layout_.worker_rank(static_cast<int>(worker)), tags::push_clock);
  }
  // Piece 0's receive takes the leading count too.
  comm::Request listen(std::size_t worker, std::size_t k) {
    const data::Range p = pieces_[k];
    const int rank = layout_.worker_rank(static_cast<int>(worker));
    if (shares_memory_with(worker)) return world_.irecv(&counts_[worker], k == 0 ? 1 : 0, rank, tags::push_piece(k));
    if (compressed()) return slots_.message(worker, k).irecv(world_, rank, tags::push_piece(k));
    if (push_wire_ != WireFormat::fp32) {
      if (k == 0) return first_piece_[worker].irecv(world_, rank, tags::push_piece(0));
      return world_.irecv(inbox_wire(worker) + p.begin, p.size(), rank, tags::push_piece(k));
    }
    const std::size_t lead = k == 0 ? 0 : 1;
    return world_.irecv(inbox(worker) + lead + p.begin, p.size() + 1 - lead, rank, tags::push_piece(k));
  }

  const comm::Communicator& world_;
  Layout layout_;
  int index_;
  data::Range range_;
  Sync sync_;
  Optimizer optimizer_;
  WireFormat push_wire_, pull_wire_;
  std::vector<float> own_params_;
  float* params_;  // the shard's parameters: own_params_, or inside a local worker's vector
  std::vector<float> block_;
  std::vector<std::vector<float>> inboxes_;  // fp32 pushes received, by worker: [count, slice]
  typename Optimizer::State state_;
  double top_k_ = 0.0;  // 0: dense pushes
  bool sign_ = false;  // scaled-sign pushes
  unsigned sign_pull_ = 0;  // scaled-sign pulls: their passes, 0 without (prepare_sign_pulls)
  std::vector<float> views_;  // by view: the shard as its worker(s) hold it
  std::vector<std::uint32_t> pull_messages_;  // by view, then piece: the latest pull's scales and signs
  std::vector<std::size_t> pull_message_at_;  // where piece k's message starts in a view's
  std::size_t pull_message_words_ = 0;        // one view's messages
  std::vector<char> full_pull_;               // by worker: its next reply sends the shard in fp32
  // Compressed pushes (prepare_compressed): each worker's, with the receives; a piece's sum.
  detail::CompressedSlots slots_;
  std::vector<float> piece_sum_;
  std::vector<std::uint16_t> inbox_wire_, params_wire_;  // 16-bit pushes received, 16-bit copy for pulls
  std::vector<float> counts_;  // each worker's sample count: 16-bit pushes, and workers sharing memory
  std::vector<comm::Segments> first_piece_;              // 16-bit pushes: [count, piece 0] receive, by worker
  std::vector<data::Range> pieces_;  // relative to the shard
  std::size_t local_ = std::numeric_limits<std::size_t>::max();  // the attached local worker, if any
  const float* local_count_ = nullptr;
  std::vector<const float*> in_place_;  // by worker: its gradient at the shard's first element, where it is read in place
  const comm::SharedWindow* shared_window_ = nullptr;
  std::vector<char> active_, sending_, waiting_;  // sending_: active when the clock began
  std::vector<std::size_t> pieces_in_;        // individual loop: pieces of the current push received, by worker
  std::vector<std::size_t> contributors_;     // workers whose slices this update sums, in worker-rank order
  std::vector<const float*> piece_slices_;    // their slices, advanced to the piece being summed
  std::vector<const std::uint16_t*> piece_wire_slices_;  // the same for a 16-bit push
  std::size_t remaining_ = 0;
  std::vector<comm::RequestSet> piece_receives_, piece_replies_;  // aggregating loop: one set per piece
  comm::RequestSet receives_, replies_;                           // individual loop
  bool push_clocked_ = false;                  // individual loop: pushes carry their global clock
  std::uint64_t first_clock_ = 0;              // where every worker starts a run, with push clocks
  std::vector<std::uint64_t> push_clocks_, progress_;  // by worker: received with the latest push, and applied
  std::uint64_t next_ticket_ = 0;              // server 0, drawn work: the next ticket to hand out
  std::vector<std::uint64_t> tickets_out_;     // by worker: the ticket in flight to it
  std::size_t backups_ = 0;                    // synchronous serving with backup workers
  std::vector<char> fresh_;                    // with backups, by worker: 1 counted for this clock, 2 early
  // Server 0 timing the responses (time_responses): by worker, its push count's arrival this clock
  // and the seconds in flight to it; the workers whose piece-0 receives are posted, in order; the
  // previous clock's release, in seconds of steady_clock (0: none yet).
  bool times_responses_ = false;
  std::vector<double> arrivals_, responses_out_;
  std::vector<std::size_t> arrival_order_;
  comm::RequestSet response_sends_;
  double released_ = 0.0;
  ServerStats stats_;
};

}  // namespace hpcps::ps
