// Sharding, the deterministic RNG and the Batcher. The RNG and shuffle are pinned to known
// answers (computed independently from the reference algorithms) because reproducibility across
// builds is the reason they exist.
#include <hpcps/data/data.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

using hpcps::data::Batcher;
using hpcps::data::BatchView;
using hpcps::data::Dataset;
using hpcps::data::Range;
using hpcps::data::Rng;
using hpcps::data::shard_range;

// shard_range must stay usable at compile time (e.g. for fixed-size layouts).
static_assert(shard_range(10, 2, 3).begin == 7 && shard_range(10, 2, 3).end == 10);
static_assert(shard_range(0, 0, 1).size() == 0);

namespace {

void check_partition(std::size_t total, std::size_t parts) {
  INFO("total " << total << ", parts " << parts);
  std::size_t expected_begin = 0;
  std::size_t min_size = std::numeric_limits<std::size_t>::max(), max_size = 0;
  const std::size_t base = total / parts, extra = total % parts;
  for (std::size_t p = 0; p < parts; ++p) {
    INFO("part " << p);
    Range r = shard_range(total, p, parts);
    CHECK(r.begin == expected_begin);  // contiguous, no gap or overlap
    CHECK(r.end >= r.begin);
    CHECK(r.size() == base + (p < extra ? 1 : 0));  // the first total % parts get the extra one
    min_size = std::min(min_size, r.size());
    max_size = std::max(max_size, r.size());
    expected_begin = r.end;
  }
  CHECK(expected_begin == total);  // covers [0, total)
  CHECK(max_size - min_size <= 1);
}

// A dataset whose row i has pixels i, i + 0.25, i + 0.5 and label i % 7, so each copied row
// can be checked against its origin.
Dataset make_dataset(std::size_t count) {
  Dataset d;
  d.count = count;
  d.features = 3;
  d.classes = 7;
  for (std::size_t i = 0; i < count; ++i) {
    for (int k = 0; k < 3; ++k) d.images.push_back(static_cast<float>(i) + 0.25f * static_cast<float>(k));
    d.labels.push_back(static_cast<std::int32_t>(i % 7));
  }
  return d;
}

// Row indices served in one epoch, in order, after checking each row was copied whole.
std::vector<std::size_t> epoch_rows(Batcher& b, std::size_t epoch, std::vector<std::size_t>* counts = nullptr) {
  b.start_epoch(epoch);
  std::vector<std::size_t> rows;
  for (std::size_t i = 0; i < b.batches_per_epoch(); ++i) {
    BatchView v = b.batch(i);
    if (counts) counts->push_back(v.count);
    for (std::size_t j = 0; j < v.count; ++j) {
      const float* x = v.inputs + j * 3;
      auto row = static_cast<std::size_t>(x[0]);
      REQUIRE(x[0] == static_cast<float>(row));
      CHECK(x[1] == x[0] + 0.25f);
      CHECK(x[2] == x[0] + 0.5f);
      CHECK(v.labels[j] == static_cast<std::int32_t>(row % 7));
      rows.push_back(row);
    }
  }
  return rows;
}

std::vector<std::size_t> sorted(std::vector<std::size_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<std::size_t> iota_vec(std::size_t begin, std::size_t end) {
  std::vector<std::size_t> v(end - begin);
  std::iota(v.begin(), v.end(), begin);
  return v;
}

}  // namespace

TEST_CASE("shard_range splits into balanced contiguous ranges", "[shard]") {
  for (std::size_t parts : {1u, 2u, 3u}) {
    for (std::size_t total : {0u, 1u, 2u, 3u, 10u, 11u, 1000u, 60000u}) check_partition(total, parts);
  }
  check_partition(10, 7);
  check_partition(2, 3);
  check_partition(0, 5);
  check_partition(5, 5);
  check_partition(101, 8);

  CHECK(shard_range(10, 0, 3) == Range{0, 4});
  CHECK(shard_range(10, 1, 3) == Range{4, 7});
  CHECK(shard_range(10, 2, 3) == Range{7, 10});
  CHECK(shard_range(10, 6, 7) == Range{9, 10});
  CHECK(shard_range(2, 0, 3) == Range{0, 1});
  CHECK(shard_range(2, 1, 3) == Range{1, 2});
  CHECK(shard_range(2, 2, 3) == Range{2, 2});
  CHECK(shard_range(0, 0, 1) == Range{0, 0});

  // No overflow near the top of size_t (the parameter vector is split with the same function).
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  CHECK(shard_range(max, 2, 3).end == max);
  CHECK(shard_range(max, 0, 1) == Range{0, max});
}

TEST_CASE("shard_range rejects bad arguments with a generic hpcps::Error", "[shard][errors]") {
  CHECK_THROWS_WITH(shard_range(10, 0, 0), Catch::Contains("part 0 of 0 parts is invalid (total 10)"));
  CHECK_THROWS_WITH(shard_range(10, 3, 3), Catch::Contains("part 3 of 3 parts"));
  CHECK_THROWS_WITH(shard_range(10, 7, 3), Catch::Contains("part 7 of 3 parts"));
  CHECK_THROWS_AS(shard_range(10, 3, 3), hpcps::Error);
  bool is_data_error = false;
  try {
    (void)shard_range(1, 1, 1);
  } catch (const hpcps::data::DataError&) {
    is_data_error = true;
  } catch (const hpcps::Error&) {
  }
  CHECK_FALSE(is_data_error);
}

TEST_CASE("Rng matches the reference SplitMix64 and xoshiro256** sequences", "[random]") {
  std::uint64_t state = 0;
  CHECK(hpcps::data::splitmix64(state) == 0xe220a8397b1dcdafULL);  // published first output for seed 0

  Rng zero(0);
  CHECK(zero.next() == 0x99ec5f36cb75f2b4ULL);
  CHECK(zero.next() == 0xbf6e1f784956452aULL);
  CHECK(zero.next() == 0x1a5f849d4933e6e0ULL);
  Rng r42(42);
  CHECK(r42.next() == 0x15780b2e0c2ec716ULL);
  CHECK(r42.next() == 0x6104d9866d113a7eULL);
  CHECK(r42.next() == 0xae17533239e499a1ULL);

  Rng r7(7);
  std::vector<std::uint64_t> below;
  for (int i = 0; i < 5; ++i) below.push_back(hpcps::data::uniform_below(r7, 1000));
  CHECK(below == std::vector<std::uint64_t>{700, 278, 839, 981, 990});

  Rng r1(1);
  std::vector<int> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  hpcps::data::shuffle(v.begin(), v.end(), r1);
  CHECK(v == std::vector<int>{3, 6, 1, 5, 0, 9, 2, 8, 4, 7});
}

TEST_CASE("Rng is deterministic per seed and differs between seeds", "[random]") {
  Rng a(12345), b(12345), c(12346);
  std::vector<std::uint64_t> va, vb, vc;
  for (int i = 0; i < 1000; ++i) {
    va.push_back(a.next());
    vb.push_back(b());
    vc.push_back(c.next());
  }
  CHECK(va == vb);
  CHECK(va != vc);
  std::size_t same = 0;
  for (std::size_t i = 0; i < va.size(); ++i) same += va[i] == vc[i];
  CHECK(same == 0);
  CHECK(std::set<std::uint64_t>(va.begin(), va.end()).size() == va.size());
  CHECK(Rng::min() == 0);
  CHECK(Rng::max() == std::numeric_limits<std::uint64_t>::max());
}

TEST_CASE("uniform_below, uniform_float and normal_float have the right ranges and moments", "[random]") {
  Rng rng(2024);
  SECTION("uniform_below") {
    for (int i = 0; i < 100; ++i) CHECK(hpcps::data::uniform_below(rng, 1) == 0);
    const std::uint64_t big = (std::uint64_t{1} << 63) + 12345;
    for (int i = 0; i < 1000; ++i) REQUIRE(hpcps::data::uniform_below(rng, big) < big);
    // 60000 draws over 6 values: each count is 10000 +- ~91 (sd); 500 is > 5 sd.
    std::vector<int> counts(6, 0);
    for (int i = 0; i < 60000; ++i) {
      std::uint64_t x = hpcps::data::uniform_below(rng, 6);
      REQUIRE(x < 6);
      ++counts[x];
    }
    for (int c : counts) CHECK(std::abs(c - 10000) < 500);
    CHECK_THROWS_AS(hpcps::data::uniform_below(rng, 0), hpcps::Error);
  }
  SECTION("uniform_float in [0, 1)") {
    double sum = 0;
    float lo = 1, hi = 0;
    const int n = 100000;
    for (int i = 0; i < n; ++i) {
      float x = hpcps::data::uniform_float(rng);
      REQUIRE(x >= 0.0f);
      REQUIRE(x < 1.0f);
      sum += x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    CHECK(sum / n == Approx(0.5).margin(0.01));
    CHECK(lo < 0.001f);
    CHECK(hi > 0.999f);
  }
  SECTION("normal_float is standard normal") {
    double sum = 0, sum2 = 0;
    int beyond_2sd = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      float x = hpcps::data::normal_float(rng);
      REQUIRE(std::isfinite(x));
      sum += x;
      sum2 += double{x} * x;
      beyond_2sd += std::abs(x) > 2.0f;
    }
    const double mean = sum / n;
    CHECK(mean == Approx(0.0).margin(0.01));
    CHECK(sum2 / n - mean * mean == Approx(1.0).margin(0.02));
    CHECK(static_cast<double>(beyond_2sd) / n == Approx(0.0455).margin(0.003));
    Rng x(9), y(9);
    CHECK(hpcps::data::normal_float(x) == hpcps::data::normal_float(y));
  }
}

TEST_CASE("shuffle produces uniform permutations", "[random]") {
  Rng rng(77);
  std::vector<int> v(1000);
  std::iota(v.begin(), v.end(), 0);
  std::vector<int> original = v;
  hpcps::data::shuffle(v.begin(), v.end(), rng);
  CHECK(v != original);
  std::vector<int> s = v;
  std::sort(s.begin(), s.end());
  CHECK(s == original);

  std::vector<int> w = original;
  Rng again(77);
  hpcps::data::shuffle(w.begin(), w.end(), again);
  CHECK(w == v);

  std::vector<int> empty, one{42};
  hpcps::data::shuffle(empty.begin(), empty.end(), rng);
  hpcps::data::shuffle(one.begin(), one.end(), rng);
  CHECK(one == std::vector<int>{42});

  // All 6 orders of 3 elements, each about 1/6 of 60000 (sd ~ 91).
  std::map<std::vector<int>, int> seen;
  for (int i = 0; i < 60000; ++i) {
    std::vector<int> t = {0, 1, 2};
    hpcps::data::shuffle(t.begin(), t.end(), rng);
    ++seen[t];
  }
  REQUIRE(seen.size() == 6);
  for (const auto& entry : seen) CHECK(std::abs(entry.second - 10000) < 500);
}

TEST_CASE("Batcher serves each shard sample exactly once per epoch", "[batcher]") {
  const Dataset data = make_dataset(23);
  const Range shard = shard_range(23, 1, 3);  // [8, 16)
  REQUIRE(shard == Range{8, 16});
  Batcher b(data, shard, 3, 99);
  CHECK(b.batch_size() == 3);
  CHECK(b.shard() == shard);
  CHECK(b.batches_per_epoch() == 3);

  std::vector<std::size_t> counts;
  std::vector<std::size_t> e0 = epoch_rows(b, 0, &counts);
  CHECK(counts == std::vector<std::size_t>{3, 3, 2});  // last batch is partial
  CHECK(sorted(e0) == iota_vec(8, 16));
  CHECK(b.epoch() == 0);

  std::vector<std::size_t> e1 = epoch_rows(b, 1);
  CHECK(sorted(e1) == iota_vec(8, 16));
  CHECK(e1 != e0);
  CHECK(e0 != iota_vec(8, 16));  // actually shuffled

  SECTION("same (seed, epoch) gives the same order, whatever came before") {
    epoch_rows(b, 5);
    CHECK(epoch_rows(b, 0) == e0);
    Batcher other(data, shard, 3, 99);
    CHECK(epoch_rows(other, 1) == e1);
    Batcher unstarted(data, shard, 3, 99);  // the constructor starts epoch 0
    std::vector<std::size_t> first;
    for (std::size_t i = 0; i < unstarted.batches_per_epoch(); ++i) {
      BatchView v = unstarted.batch(i);
      for (std::size_t j = 0; j < v.count; ++j) first.push_back(static_cast<std::size_t>(v.inputs[j * 3]));
    }
    CHECK(first == e0);
  }
  SECTION("different seeds give different orders") {
    Batcher other(data, shard, 3, 100);
    CHECK(epoch_rows(other, 0) != e0);
  }
  SECTION("many epochs are all distinct permutations") {
    const Dataset many = make_dataset(200);
    Batcher big(many, Range{0, 200}, 32, 5);
    std::set<std::vector<std::size_t>> orders;
    for (std::size_t e = 0; e < 20; ++e) {
      std::vector<std::size_t> rows = epoch_rows(big, e);
      CHECK(sorted(rows) == iota_vec(0, 200));
      orders.insert(rows);
    }
    CHECK(orders.size() == 20);
  }
}

TEST_CASE("Batcher over all shards covers the dataset once", "[batcher]") {
  const Dataset data = make_dataset(50);
  for (std::size_t parts : {1u, 2u, 3u, 7u}) {
    std::vector<std::size_t> all;
    for (std::size_t p = 0; p < parts; ++p) {
      Batcher b(data, shard_range(50, p, parts), 4, 1234 + p);
      std::vector<std::size_t> rows = epoch_rows(b, 3);
      all.insert(all.end(), rows.begin(), rows.end());
    }
    INFO("parts " << parts);
    CHECK(sorted(all) == iota_vec(0, 50));
  }
}

// ps::train's data order: every worker holds the same Batcher over the whole set and takes its
// part (shard_range of the batch) of each global batch, so the samples of a clock, and their
// order within it, do not depend on the number of workers.
TEST_CASE("Batcher parts of global batches give one order on any number of workers", "[batcher]") {
  const Dataset data = make_dataset(50);
  Batcher whole(data, Range{0, 50}, 8, 77);
  const std::vector<std::size_t> reference = epoch_rows(whole, 2);
  CHECK(whole.batch_count(0) == 8);
  CHECK(whole.batch_count(6) == 2);  // 50 = 6 x 8 + 2
  for (std::size_t workers : {1u, 2u, 3u, 7u}) {
    INFO(workers << " workers");
    std::vector<Batcher> batchers(workers, Batcher(data, Range{0, 50}, 8, 77));
    std::vector<std::size_t> rows;
    std::size_t empty_parts = 0;
    for (std::size_t c = 0; c < whole.batches_per_epoch(); ++c) {
      for (std::size_t w = 0; w < workers; ++w) {
        Batcher& b = batchers[w];
        if (c == 0) b.start_epoch(2);
        const Range mine = shard_range(b.batch_count(c), w, workers);
        if (mine.size() == 0) ++empty_parts;
        const BatchView v = b.part(c, mine);
        CHECK(v.count == mine.size());
        for (std::size_t j = 0; j < v.count; ++j) rows.push_back(static_cast<std::size_t>(v.inputs[j * 3]));
      }
    }
    CHECK(rows == reference);
    CHECK(empty_parts == (workers > 2 ? workers - 2 : 0u));  // the last batch has 2 samples
  }
  CHECK_THROWS_WITH(whole.part(6, Range{1, 3}), Catch::Contains("part [1, 3) is not inside batch 6 of 2 samples"));
  CHECK_THROWS_WITH(whole.part(7, Range{0, 0}), Catch::Contains("batch index 7 out of range"));
}

TEST_CASE("Batcher drop_last, empty shard and oversized batch", "[batcher]") {
  const Dataset data = make_dataset(23);
  SECTION("drop_last skips the partial batch") {
    Batcher b(data, Range{8, 16}, 3, 99, true);
    CHECK(b.batches_per_epoch() == 2);
    std::vector<std::size_t> counts;
    std::vector<std::size_t> rows = epoch_rows(b, 0, &counts);
    CHECK(counts == std::vector<std::size_t>{3, 3});
    CHECK(std::set<std::size_t>(rows.begin(), rows.end()).size() == 6);
    for (std::size_t r : rows) CHECK((r >= 8 && r < 16));
    // Same order as without drop_last, just cut short.
    Batcher keep(data, Range{8, 16}, 3, 99, false);
    std::vector<std::size_t> full = epoch_rows(keep, 0);
    CHECK(std::vector<std::size_t>(full.begin(), full.begin() + 6) == rows);
    CHECK_THROWS_AS(b.batch(2), hpcps::Error);
  }
  SECTION("drop_last with an exact multiple keeps every batch") {
    Batcher b(data, Range{0, 9}, 3, 1, true);
    CHECK(b.batches_per_epoch() == 3);
    CHECK(sorted(epoch_rows(b, 0)) == iota_vec(0, 9));
  }
  SECTION("empty shard has no batches") {
    Batcher b(data, Range{5, 5}, 4, 1);
    CHECK(b.batches_per_epoch() == 0);
    b.start_epoch(3);
    CHECK_THROWS_WITH(b.batch(0), Catch::Contains("batch index 0 out of range; this epoch has 0 batches"));
    Batcher end(data, Range{23, 23}, 4, 1, true);
    CHECK(end.batches_per_epoch() == 0);
  }
  SECTION("batch larger than the shard gives one partial batch (or none with drop_last)") {
    Batcher b(data, Range{0, 5}, 100, 1);
    CHECK(b.batches_per_epoch() == 1);
    CHECK(b.batch(0).count == 5);
    Batcher d(data, Range{0, 5}, 100, 1, true);
    CHECK(d.batches_per_epoch() == 0);
  }
}

TEST_CASE("Batcher reuses its buffers", "[batcher]") {
  const Dataset data = make_dataset(40);
  Batcher b(data, Range{0, 40}, 8, 3);
  const BatchView first = b.batch(0);
  for (std::size_t e = 0; e < 3; ++e) {
    b.start_epoch(e);
    for (std::size_t i = 0; i < b.batches_per_epoch(); ++i) {
      BatchView v = b.batch(i);
      CHECK(v.inputs == first.inputs);
      CHECK(v.labels == first.labels);
      // The buffer holds copies: the dataset itself is never handed out.
      CHECK((v.inputs < data.images.data() || v.inputs >= data.images.data() + data.images.size()));
    }
  }
}

TEST_CASE("Batcher rejects bad arguments", "[batcher][errors]") {
  const Dataset data = make_dataset(23);
  CHECK_THROWS_WITH(Batcher(data, Range{0, 23}, 0, 1), Catch::Contains("batch_size must be at least 1, got 0"));
  CHECK_THROWS_WITH(Batcher(data, Range{5, 30}, 4, 1),
                    Catch::Contains("shard [5, 30) is not inside the dataset's 23 samples"));
  CHECK_THROWS_WITH(Batcher(data, Range{10, 5}, 4, 1), Catch::Contains("shard [10, 5)"));
  CHECK_THROWS_AS(Batcher(data, Range{0, 24}, 4, 1), hpcps::Error);
  CHECK_NOTHROW(Batcher(data, Range{0, 23}, 4, 1));

  Batcher b(data, Range{0, 10}, 4, 1);
  CHECK_NOTHROW(b.batch(2));
  CHECK_THROWS_WITH(b.batch(3), Catch::Contains("batch index 3 out of range; this epoch has 3 batches"));

  Dataset broken = make_dataset(10);
  broken.labels.pop_back();
  CHECK_THROWS_WITH(Batcher(broken, Range{0, 10}, 4, 1), Catch::Contains("inconsistent Dataset"));
  Dataset broken2 = make_dataset(10);
  broken2.images.push_back(0.0f);
  CHECK_THROWS_WITH(Batcher(broken2, Range{0, 10}, 4, 1), Catch::Contains("31 image floats"));
}

TEST_CASE("stored bytes convert to exactly the floats load_idx_pair makes, all 256 of them", "[batcher][stored]") {
  std::vector<std::uint8_t> bytes(256 + 1);
  for (std::size_t v = 0; v < 256; ++v) bytes[v] = static_cast<std::uint8_t>(v);
  Dataset d;
  d.count = 1, d.features = 256, d.classes = 1;
  bytes[256] = 0;  // the label
  d.pixel_bytes = bytes.data();
  d.label_bytes = bytes.data() + 256;
  std::vector<float> out(256);
  std::int32_t label = -1;
  hpcps::data::stage_range(d, 0, 1, out.data(), &label);
  for (std::size_t v = 0; v < 256; ++v) {
    INFO("byte " << v);
    const float want = static_cast<float>(v) / 255.0f;
    CHECK(std::memcmp(&out[v], &want, sizeof want) == 0);
  }
  CHECK(out[255] == 1.0f);
  CHECK(label == 0);
}

TEST_CASE("Batcher serves the same batches from stored bytes as from floats", "[batcher][stored]") {
  const std::size_t count = 53, features = 11;
  std::vector<std::uint8_t> memory(count * (features + 1));
  Rng rng(4);
  for (auto& b : memory) b = static_cast<std::uint8_t>(hpcps::data::uniform_below(rng, 256));
  for (std::size_t i = 0; i < count; ++i) memory[count * features + i] %= 6;
  Dataset floats;
  floats.count = count, floats.features = features, floats.classes = 6;
  for (std::size_t i = 0; i < count * features; ++i) floats.images.push_back(static_cast<float>(memory[i]) / 255.0f);
  for (std::size_t i = 0; i < count; ++i) floats.labels.push_back(memory[count * features + i]);
  Dataset stored = floats.description();
  stored.pixel_bytes = memory.data();
  stored.label_bytes = memory.data() + count * features;

  Batcher a(floats, Range{0, count}, 8, 17), b(stored, Range{0, count}, 8, 17);
  for (std::size_t epoch = 0; epoch < 2; ++epoch) {
    a.start_epoch(epoch), b.start_epoch(epoch);
    for (std::size_t i = 0; i < a.batches_per_epoch(); ++i) {
      const BatchView x = a.part(i, Range{1, a.batch_count(i)}), y = b.part(i, Range{1, b.batch_count(i)});
      REQUIRE(x.count == y.count);
      CHECK(std::memcmp(x.inputs, y.inputs, x.count * features * sizeof(float)) == 0);
      CHECK(std::equal(x.labels, x.labels + x.count, y.labels));
    }
  }

  // A view of rows [20, 40) only: a shard inside is served, one outside refused.
  Dataset part = floats.description();
  part.pixel_bytes = memory.data() + 20 * features;
  part.label_bytes = memory.data() + count * features + 20;  // labels of rows 20.. (any memory will do here)
  part.rows = Range{20, 40};
  CHECK_NOTHROW(Batcher(part, Range{25, 40}, 4, 1));
  CHECK_THROWS_WITH(Batcher(part, Range{10, 30}, 4, 1),
                    Catch::Contains("shard [10, 30) is not inside the rows [20, 40) this Dataset holds"));
  // A description without samples (a server's) cannot be batched.
  const Dataset described = floats.description();
  CHECK_THROWS_WITH(Batcher(described, Range{0, count}, 4, 1), Catch::Contains("holds none"));
}
