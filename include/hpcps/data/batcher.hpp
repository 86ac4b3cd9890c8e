#pragma once
// Serves shuffled mini-batches from a range of a Dataset (the whole training set in ps::train, where
// every worker holds the same Batcher and takes its part of each global batch). The order depends
// only on (seed, epoch), so a run can be reproduced, or resumed at any batch, on any number of
// workers, without saving any state. Rows are copied into buffers allocated once, so the training
// loop never allocates and the pointers handed out stay valid (and equal) from batch to batch; a
// Dataset of stored bytes is converted to floats in that copy (data/rows.hpp), and an augmentation,
// if set, transforms each row in place (data/augment.hpp).
#include <hpcps/data/augment.hpp>
#include <hpcps/data/dataset.hpp>
#include <hpcps/data/random.hpp>
#include <hpcps/data/rows.hpp>
#include <hpcps/data/shard.hpp>
#include <hpcps/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace hpcps::data {

// Valid until the next batch() or start_epoch() call on the Batcher that returned it.
struct BatchView {
  const float* inputs;          // count * features, row-major
  const std::int32_t* labels;   // count
  std::size_t count;
};

class Batcher {
 public:
  // `data` is referenced, not copied, and must outlive the Batcher. Starts at epoch 0.
  Batcher(const Dataset& data, Range shard, std::size_t batch_size, std::uint64_t seed, bool drop_last = false)
      : data_(&data), shard_(shard), batch_size_(batch_size), seed_(seed), drop_last_(drop_last) {
    if (batch_size == 0) throw hpcps::Error("Batcher: batch_size must be at least 1, got 0");
    if (shard.begin > shard.end || shard.end > data.count) {
      throw hpcps::Error(fmt::format("Batcher: shard [{}, {}) is not inside the dataset's {} samples", shard.begin,
                                     shard.end, data.count));
    }
    if (data.holds_bytes()) {
      const Range held = data.held();
      if (data.label_bytes == nullptr || held.begin > held.end || held.end > data.count) {
        throw hpcps::Error(fmt::format("Batcher: inconsistent Dataset: stored rows [{}, {}) of {} samples{}",
                                       held.begin, held.end, data.count,
                                       data.label_bytes == nullptr ? " without labels" : ""));
      }
      if (shard.size() > 0 && (shard.begin < held.begin || shard.end > held.end)) {
        throw hpcps::Error(fmt::format("Batcher: shard [{}, {}) is not inside the rows [{}, {}) this Dataset holds "
                                       "(a node that holds only the ranges its workers read)",
                                       shard.begin, shard.end, held.begin, held.end));
      }
    } else if (!data.holds_samples() && data.labels.empty() && shard.size() > 0) {
      throw hpcps::Error(fmt::format("Batcher: the Dataset describes {} samples but holds none (a rank that loaded "
                                     "no data, such as a server)",
                                     data.count));
    } else {
      // Checked by division so a corrupt count * features cannot overflow into a match.
      const bool images_match = data.features == 0 ? data.images.empty()
                                                   : data.images.size() % data.features == 0 &&
                                                         data.images.size() / data.features == data.count;
      if (!images_match || data.labels.size() != data.count) {
        throw hpcps::Error(fmt::format("Batcher: inconsistent Dataset: count {} and features {} but {} image floats "
                                       "and {} labels",
                                       data.count, data.features, data.images.size(), data.labels.size()));
      }
    }
    // A batch never holds more rows than the shard, so a huge batch_size does not over-allocate.
    const std::size_t rows = std::min(batch_size, shard.size());
    inputs_.resize(rows * data.features);
    labels_.resize(rows);
    order_.resize(shard.size());
    start_epoch(0);
  }
  // A temporary Dataset would be destroyed while the Batcher still points at it.
  Batcher(Dataset&&, Range, std::size_t, std::uint64_t, bool = false) = delete;

  std::size_t batches_per_epoch() const noexcept {
    const std::size_t n = shard_.size();
    return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  }

  // Same (seed, epoch) gives the same permutation of the shard, whatever epochs came before.
  void start_epoch(std::size_t epoch) {
    std::iota(order_.begin(), order_.end(), shard_.begin);
    Rng rng(epoch_seed(seed_, epoch));
    shuffle(order_.begin(), order_.end(), rng);
    epoch_ = epoch;
  }

  BatchView batch(std::size_t index) { return part(index, Range{0, batch_count(index)}); }

  // From the next batch on, each row is transformed by `a` with the draw of (seed, epoch, row), so
  // the rows are augmented alike however the batches are split among workers. Throws if `a` does
  // not fit the dataset's rows. An inactive Augmentation turns it off.
  void set_augmentation(const Augmentation& a, std::uint64_t seed) {
    if (const std::string problem = augmentation_problem(a, data_->features); !problem.empty()) {
      throw hpcps::Error("Batcher: " + problem);
    }
    augmentation_ = a;
    augmentation_seed_ = seed;
    scratch_.resize(a.active() ? data_->features : 0);
  }

  // Samples in batch `index`: batch_size(), or fewer in a last partial batch.
  std::size_t batch_count(std::size_t index) const {
    const std::size_t batches = batches_per_epoch();
    if (index >= batches) {
      throw hpcps::Error(fmt::format("Batcher: batch index {} out of range; this epoch has {} batches (shard of "
                                     "{} samples, batch size {}{})",
                                     index, batches, shard_.size(), batch_size_, drop_last_ ? ", drop_last" : ""));
    }
    return std::min(batch_size_, order_.size() - index * batch_size_);
  }

  // Samples [within.begin, within.end) of batch `index`: one worker's part of a global batch.
  BatchView part(std::size_t index, Range within) {
    const std::size_t in_batch = batch_count(index);
    if (within.begin > within.end || within.end > in_batch) {
      throw hpcps::Error(fmt::format("Batcher: part [{}, {}) is not inside batch {} of {} samples", within.begin,
                                     within.end, index, in_batch));
    }
    const std::size_t first = index * batch_size_ + within.begin;
    const std::size_t count = within.size();
    stage_rows(*data_, order_.data() + first, count, inputs_.data(), labels_.data());
    if (augmentation_.active()) {
      const std::size_t features = data_->features;
      for (std::size_t i = 0; i < count; ++i) {
        float* row = inputs_.data() + i * features;
        std::copy(row, row + features, scratch_.begin());
        augment_image(augmentation_, augment_draw(augmentation_, augmentation_seed_, epoch_, order_[first + i]),
                      scratch_.data(), row);
      }
    }
    return BatchView{inputs_.data(), labels_.data(), count};
  }

  std::size_t batch_size() const noexcept { return batch_size_; }
  Range shard() const noexcept { return shard_; }
  std::size_t epoch() const noexcept { return epoch_; }

 private:
  // Hashing the seed before mixing in the epoch keeps (seed, epoch) and (seed + 1, epoch - 1)
  // from landing on the same stream, which a plain sum would do.
  static std::uint64_t epoch_seed(std::uint64_t seed, std::size_t epoch) noexcept {
    std::uint64_t s = seed;
    std::uint64_t h = splitmix64(s);
    h ^= static_cast<std::uint64_t>(epoch);
    return splitmix64(h);
  }

  const Dataset* data_;
  Range shard_;
  std::size_t batch_size_;
  std::uint64_t seed_;
  bool drop_last_;
  std::size_t epoch_ = 0;
  std::vector<std::size_t> order_;  // absolute row indices of the shard, in this epoch's order
  std::vector<float> inputs_;
  std::vector<std::int32_t> labels_;
  Augmentation augmentation_;
  std::uint64_t augmentation_seed_ = 0;
  std::vector<float> scratch_;  // one row: the augmentation's source
};

}  // namespace hpcps::data
