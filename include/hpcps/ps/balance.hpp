#pragma once
// Load balancing for the synchronous strategy (docs/synchronization.md#balancing-the-synchronous-strategy):
// each clock's global batch stays B samples (the same SGD update), but its split among the workers
// follows their measured speed, so a slow worker no longer sets the pace of every clock. The
// samples of a clock are a contiguous range of the epoch's one order (ps/training.hpp), so any
// split uses every sample of an epoch exactly once.
//
// Every worker, after each clock, contributes its part's seconds and samples to a nonblocking
// allreduce among the workers that it completes one clock later (bulk-synchronous workers are in
// lock step anyway): no round trip of its own, and every worker computes the same split from the
// same numbers. ps::train counts as a part's seconds the time server 0 saw it take, from the
// release of the clock before to the arrival of the push (ps::Server::time_responses): a worker's
// own compute time misses a pause that falls in its push, or while its reply waits for it.
//
// A worker's speed is the median of its per-clock speeds (samples over seconds) over its last
// `window` clocks, not a mean: a clock ends when its slowest part does, so a delay that does not
// scale with the part (a pause from outside, a preempting job) is worth balancing away only when
// it falls in most of a worker's clocks. Say one of 2 workers is stopped for longer than a clock
// in a fraction p of its clocks: a sample moved to the other worker lengthens the 1 - p unpaused
// clocks and shortens none of the paused ones, which end with the pause. The mean clock is
// shortest with the equal split while p < 1/2, and with the paused worker's part at the floor
// when p > 1/2; the median of its speeds lands on the unpaused speed in the first case and on a
// paused one in the second. A mean of speeds, or samples over summed seconds, moves samples away
// in both: against a worker stopped 150 ms of every 200, with 1 ms clocks, that measured 0.6-0.8x
// the static split's speed (docs/synchronization.md#a-worker-paused-from-outside). Against a
// steady slowdown they all agree.
//
// A new split is adopted only when it would shorten the predicted clock by more than `hysteresis`
// (10%: with 5% and an average over 6 clocks, equal speeds on a shared 2-core machine moved the
// split hundreds of times an epoch), so equal speeds keep the static split, and with it the bits
// of the unbalanced run.
//
// And it is kept only if the clocks got shorter: a new split is tried after `window` full clocks
// under the current one and is on trial for as many; if the median clock (its slowest part's
// seconds) under it is not shorter than under the split before, the split before comes back and
// no new one is tried for `window` clocks, twice as long after each further failed trial. The
// prediction assumes a part's time shrinks with the part; where the clock waits for something no
// split moves (a colocated rank stopped from outside also serves a shard, so every clock waits for
// it to run again), a moved split only lengthens the clocks in between: measured, 0.81x the
// static split's speed before this check (docs/synchronization.md#a-worker-paused-from-outside).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <mpi.h>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/comm/request.hpp"
#include "hpcps/data/shard.hpp"

namespace hpcps::ps {

enum class Balance { none, speed };

inline const char* balance_name(Balance b) { return b == Balance::speed ? "speed" : "none"; }

// The working vectors of proportional_split, kept by a caller that splits every clock so that
// splitting allocates nothing once they have the size of the split.
struct SplitScratch {
  std::vector<char> fixed;
  std::vector<double> share;
  std::vector<std::size_t> extra, order;
  explicit SplitScratch(std::size_t parts = 0) : fixed(parts), share(parts), extra(parts), order(parts) {}
};

// `total` samples split in proportion to `weights`, in whole samples, into `out`: each part at
// least `low` (when total >= parts * low) and at most `high`; largest remainders first, ties to
// the lower index, so every rank computes the same split from the same numbers.
inline void proportional_split(std::size_t total, const std::vector<double>& weights, std::size_t low,
                               std::size_t high, std::vector<std::size_t>& out, SplitScratch& scratch) {
  const std::size_t parts = weights.size();
  out.assign(parts, 0);
  if (parts == 0) return;
  if (total < parts * low) low = 0;
  high = std::max(high, (total + parts - 1) / parts);  // a cap below the mean cannot be met
  auto& fixed = scratch.fixed;
  auto& share = scratch.share;
  auto& extra = scratch.extra;
  auto& order = scratch.order;
  fixed.assign(parts, 0);
  share.resize(parts);
  extra.resize(parts);
  order.resize(parts);
  std::size_t left = total;
  for (std::size_t p = 0; p < parts; ++p) out[p] = low;
  left -= parts * low;
  // Water-filling: parts that reach `high` are fixed there and the rest shared again.
  for (;;) {
    double weight = 0.0;
    for (std::size_t p = 0; p < parts; ++p) weight += fixed[p] ? 0.0 : std::max(weights[p], 0.0);
    std::fill(share.begin(), share.end(), 0.0);
    std::fill(extra.begin(), extra.end(), std::size_t{0});
    std::size_t given = 0, open = 0;
    for (std::size_t p = 0; p < parts; ++p) {
      if (fixed[p]) continue;
      ++open;
      share[p] = weight > 0.0 ? static_cast<double>(left) * std::max(weights[p], 0.0) / weight
                              : static_cast<double>(left) / static_cast<double>(parts);
      extra[p] = static_cast<std::size_t>(share[p]);
      given += extra[p];
    }
    if (open == 0) break;
    // The index breaks ties, as a stable sort of 0..parts-1 would, and std::sort needs no buffer
    // (std::stable_sort allocates one).
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const double ra = share[a] - static_cast<double>(extra[a]), rb = share[b] - static_cast<double>(extra[b]);
      return ra > rb || (ra == rb && a < b);
    });
    for (std::size_t i = 0; given < left && i < parts; ++i) {
      if (fixed[order[i]]) continue;
      ++extra[order[i]];
      ++given;
    }
    bool capped = false;
    for (std::size_t p = 0; p < parts; ++p) {
      if (!fixed[p] && out[p] + extra[p] > high) {
        left -= high - out[p];
        out[p] = high;
        fixed[p] = 1;
        capped = true;
      }
    }
    if (!capped) {
      for (std::size_t p = 0; p < parts; ++p) {
        if (!fixed[p]) out[p] += extra[p];
      }
      break;
    }
  }
}

inline std::vector<std::size_t> proportional_split(std::size_t total, const std::vector<double>& weights,
                                                   std::size_t low, std::size_t high) {
  std::vector<std::size_t> out;
  SplitScratch scratch;
  proportional_split(total, weights, low, high, out, scratch);
  return out;
}

// One change of the split: from clock `clock` on, worker w computes split[w] samples of a full
// global batch.
struct SplitChange {
  std::uint64_t clock = 0;
  std::vector<std::size_t> split;
};

class SpeedBalancer {
 public:
  // Collective over the workers (makes its own communicator). Starts from the static split,
  // shard_range(B, w, W); no part ever exceeds `max_part` samples.
  SpeedBalancer(const comm::Communicator& workers, std::size_t global_batch, std::size_t max_part,
                std::uint64_t first_clock, std::size_t window = 20, double hysteresis = 0.1)
      : comm_(workers.duplicate()), batch_(global_batch), max_part_(max_part), window_(std::max<std::size_t>(window, 1)),
        hysteresis_(hysteresis), speed_(static_cast<std::size_t>(workers.size()), 0.0),
        recent_(speed_.size() * window_, 0.0), filled_(speed_.size(), 0), next_(speed_.size(), 0), sorted_(window_),
        mine_(2 * speed_.size(), 0.0), all_(2 * speed_.size(), 0.0), split_(speed_.size()),
        candidate_(speed_.size()), short_split_(speed_.size()), weights_(speed_.size()), short_samples_(global_batch),
        scratch_(speed_.size()), clock_seconds_(window_, 0.0), before_trial_(speed_.size()) {
    const std::size_t w_count = speed_.size();
    for (std::size_t w = 0; w < w_count; ++w) split_[w] = data::shard_range(global_batch, w, w_count).size();
    history_.reserve(64);  // hysteresis keeps changes few; growing past this is the only other cost
    history_.push_back({first_clock, split_});
  }
  SpeedBalancer(const SpeedBalancer&) = delete;
  SpeedBalancer& operator=(const SpeedBalancer&) = delete;

  // Worker w's part of a global batch of `samples` (the epoch's last one may be short). Not const:
  // a short batch's split is kept until the split or the short size changes (once an epoch).
  data::Range part(std::size_t samples, int worker) {
    const auto w = static_cast<std::size_t>(worker);
    if (samples == batch_) return range_of(split_, w);
    if (samples != short_samples_) {
      std::copy(split_.begin(), split_.end(), weights_.begin());
      proportional_split(samples, weights_, 1, max_part_, short_split_, scratch_);
      short_samples_ = samples;
    }
    return range_of(short_split_, w);
  }

  // Every worker after each clock, `done` clocks completed since training began: the seconds its
  // part took and its samples for that clock. Completes the previous clock's exchange and may
  // change the split from clock `done` (counted from 0) on.
  void after_clock(std::uint64_t done, double seconds, std::size_t samples) {
    if (active_) {
      comm::detail::poll_until([this] { return request_.test(); });
      learn(done);
    }
    std::fill(mine_.begin(), mine_.end(), 0.0);
    const auto w = static_cast<std::size_t>(comm_.rank());
    mine_[2 * w] = seconds;
    mine_[2 * w + 1] = static_cast<double>(samples);
    request_ = comm_.iallreduce(mine_.data(), all_.data(), mine_.size(), MPI_SUM);
    active_ = true;
  }
  // Every worker after its last clock: completes the exchange in flight.
  void finish() {
    if (active_) comm::detail::poll_until([this] { return request_.test(); });
    active_ = false;
  }

  const std::vector<std::size_t>& split() const { return split_; }
  const std::vector<SplitChange>& history() const { return history_; }
  const std::vector<double>& speeds() const { return speed_; }  // samples per second, the medians

 private:
  static data::Range range_of(const std::vector<std::size_t>& split, std::size_t w) {
    const std::size_t begin = std::accumulate(split.begin(), split.begin() + static_cast<std::ptrdiff_t>(w), std::size_t{0});
    return {begin, begin + split[w]};
  }
  // The median of values[0, n), n >= 1: the middle one, or the mean of the two middle ones.
  double median(const double* values, std::size_t n) {
    std::copy(values, values + n, sorted_.begin());
    const auto begin = sorted_.begin(), middle = begin + static_cast<std::ptrdiff_t>(n / 2);
    std::nth_element(begin, middle, begin + static_cast<std::ptrdiff_t>(n));
    if (n % 2 == 1) return *middle;
    return 0.5 * (*middle + *std::max_element(begin, middle));
  }
  // The predicted clock: the slowest worker's time for its part.
  double predicted(const std::vector<std::size_t>& split) const {
    double slowest = 0.0;
    for (std::size_t w = 0; w < split.size(); ++w) {
      if (split[w] > 0) slowest = std::max(slowest, static_cast<double>(split[w]) / speed_[w]);
    }
    return slowest;
  }
  void learn(std::uint64_t next_clock) {
    double slowest = 0.0;  // the clock: its slowest part
    for (std::size_t w = 0; w < speed_.size(); ++w) {
      const double seconds = all_[2 * w], samples = all_[2 * w + 1];
      if (samples <= 0.0 || seconds <= 0.0) continue;  // idle this clock: nothing learnt
      slowest = std::max(slowest, seconds);
      double* recent = recent_.data() + w * window_;
      recent[next_[w]] = samples / seconds;
      next_[w] = (next_[w] + 1) % window_;
      filled_[w] = std::min(filled_[w] + 1, window_);
      speed_[w] = median(recent, filled_[w]);
    }
    // Only full clocks compare: an epoch's short last batch is cut to its own size.
    if (slowest > 0.0 && all_parts_full()) {
      clock_seconds_[clocks_next_] = slowest;
      clocks_next_ = (clocks_next_ + 1) % window_;
      clocks_filled_ = std::min(clocks_filled_ + 1, window_);
    }
    if (on_trial_) {
      if (clocks_filled_ < window_) return;
      on_trial_ = false;
      if (median(clock_seconds_.data(), clocks_filled_) < clock_before_trial_) {
        failed_trials_ = 0;
      } else {
        split_.swap(before_trial_);
        short_samples_ = batch_;
        history_.push_back({next_clock, split_});
        failed_trials_ = std::min<std::size_t>(failed_trials_ + 1, 10);
        hold_until_ = next_clock + (static_cast<std::uint64_t>(window_) << (failed_trials_ - 1));
      }
      clocks_filled_ = clocks_next_ = 0;  // the next trial compares with this split's clocks
      return;
    }
    // A split is tried only against a whole window of clocks under the current one.
    if (next_clock < hold_until_ || clocks_filled_ < window_) return;
    if (std::any_of(speed_.begin(), speed_.end(), [](double s) { return s <= 0.0; })) return;
    proportional_split(batch_, speed_, 1, max_part_, candidate_, scratch_);
    if (candidate_ != split_ && predicted(candidate_) < (1.0 - hysteresis_) * predicted(split_)) {
      clock_before_trial_ = median(clock_seconds_.data(), clocks_filled_);
      before_trial_ = split_;  // same size: no allocation
      on_trial_ = true;
      clocks_filled_ = clocks_next_ = 0;
      split_.swap(candidate_);
      short_samples_ = batch_;  // the cached short split followed the old split
      history_.push_back({next_clock, split_});
    }
  }
  // Whether the clock just learnt was a full global batch split as split_ says (the exchange
  // carries the samples of each part).
  bool all_parts_full() const {
    for (std::size_t w = 0; w < split_.size(); ++w) {
      if (static_cast<std::size_t>(all_[2 * w + 1]) != split_[w]) return false;
    }
    return true;
  }

  comm::Communicator comm_;
  std::size_t batch_, max_part_, window_;
  double hysteresis_;
  std::vector<double> speed_;
  // Per worker, its last `window_` per-clock speeds (a ring from next_[w]; filled_[w] of them yet).
  std::vector<double> recent_;
  std::vector<std::size_t> filled_, next_;
  std::vector<double> sorted_;  // median()'s copy
  std::vector<double> mine_, all_;
  std::vector<std::size_t> split_;
  // Sized once, in the constructor: splitting every clock then allocates nothing.
  std::vector<std::size_t> candidate_, short_split_;
  std::vector<double> weights_;  // split_ as the short batch's weights
  std::size_t short_samples_;    // short_split_ is of this many samples; batch_ when none is
  SplitScratch scratch_;
  // The last clocks' seconds (a ring from clocks_next_, clocks_filled_ of them) under the current
  // split; a split on trial, the split before it and that split's median clock; the clock before
  // which no new split is tried, after failed_trials_ failed trials in a row.
  std::vector<double> clock_seconds_;
  std::size_t clocks_next_ = 0, clocks_filled_ = 0;
  bool on_trial_ = false;
  std::vector<std::size_t> before_trial_;
  double clock_before_trial_ = 0.0;
  std::uint64_t hold_until_ = 0;
  std::size_t failed_trials_ = 0;
  std::vector<SplitChange> history_;
  comm::Request request_;
  bool active_ = false;
};

}  // namespace hpcps::ps
