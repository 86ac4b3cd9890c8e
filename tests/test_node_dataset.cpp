// One copy of a data set per node (ps::NodeDataset) under mpiexec, on one node and, with
// MPIR_CVAR_ODD_EVEN_CLIQUES=1, on two pretend nodes: who holds the copy and how large it is, seen
// from every rank; the samples every rank reads; the fallback to private copies; ranks that ask for
// nothing; the ranges a node holds; and training on the node's copy against training on private
// floats, bit for bit.
#include <catch2/catch.hpp>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hpcps/hpcps.hpp"
#include "hpcps/ps/node_dataset.hpp"

namespace {

namespace fs = std::filesystem;
using hpcps::data::Range;
using hpcps::ps::NodeDataset;

constexpr std::size_t samples = 300, side = 6, classes = 5;

std::vector<std::uint8_t> idx(const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& values) {
  std::vector<std::uint8_t> b{0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<std::uint8_t>(d >> shift));
  }
  b.insert(b.end(), values.begin(), values.end());
  return b;
}

void write(const std::string& path, const std::vector<std::uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
    gzclose(f);
    return;
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// A small image set (300 samples of 6 x 6 pixels, 5 classes) written by rank 0 into a folder every
// rank knows; the images gzip-compressed as Debian ships Fashion-MNIST, the labels plain.
struct Files {
  std::string dir;
  hpcps::data::IdxPairFiles pair;
};

Files make_files(const hpcps::comm::Communicator& world) {
  char path[256] = {};
  if (world.rank() == 0) {
    std::string pattern = (fs::temp_directory_path() / "hpcps-node-data-XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    REQUIRE(mkdtemp(buffer.data()) != nullptr);
    std::strncpy(path, buffer.data(), sizeof path - 1);
    std::vector<std::uint8_t> pixels(samples * side * side), labels(samples);
    hpcps::data::Rng rng(11);
    for (auto& p : pixels) p = static_cast<std::uint8_t>(hpcps::data::uniform_below(rng, 256));
    pixels[0] = 255, pixels[1] = 0, pixels[2] = 51;  // the ends of the scale and a value /255 rounds
    for (auto& l : labels) l = static_cast<std::uint8_t>(hpcps::data::uniform_below(rng, classes));
    write(std::string(path) + "/images.gz", idx({samples, side, side}, pixels), true);
    write(std::string(path) + "/labels", idx({samples}, labels), false);
  }
  world.broadcast(path, sizeof path, 0);
  Files f;
  f.dir = path;
  f.pair = {f.dir + "/images.gz", f.dir + "/labels", classes};
  return f;
}

void remove_files(const hpcps::comm::Communicator& world, const Files& f) {
  world.barrier();
  if (world.rank() == 0) fs::remove_all(f.dir);
}

// Rows `rows` of `set` as the network sees them.
std::vector<float> floats(const hpcps::data::Dataset& set, Range rows, std::vector<std::int32_t>& labels) {
  std::vector<float> out(rows.size() * set.features);
  labels.resize(rows.size());
  hpcps::data::stage_range(set, rows.begin, rows.size(), out.data(), labels.data());
  return out;
}

bool same_floats(const hpcps::data::Dataset& stored, const hpcps::data::Dataset& reference, Range rows) {
  std::vector<std::int32_t> labels;
  const std::vector<float> got = floats(stored, rows, labels);
  const float* want = reference.images.data() + rows.begin * reference.features;
  return std::memcmp(got.data(), want, got.size() * sizeof(float)) == 0 &&
         std::equal(labels.begin(), labels.end(), reference.labels.begin() + static_cast<std::ptrdiff_t>(rows.begin));
}

// The world ranks of this rank's node that pass `asks`, in rank order (a collective over the world).
std::vector<int> node_members(const hpcps::comm::Communicator& world, bool asks) {
  const auto node = world.split_shared(world.rank());
  std::vector<int> all(static_cast<std::size_t>(node.size()));
  const int me = asks ? world.rank() : -1;
  node.allgather(&me, 1, all.data());
  all.erase(std::remove(all.begin(), all.end(), -1), all.end());
  return all;
}

}  // namespace

TEST_CASE("one copy per node: the lowest asking rank of each node holds it, the others read it there", "[node][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  const Files files = make_files(world);
  const auto description = hpcps::data::describe_idx_pair(files.pair);
  const auto reference = hpcps::data::load_idx_pair(files.pair.images, files.pair.labels, classes);
  // The last rank of 3 or more asks for nothing, as a server would.
  const bool asks = world.size() < 3 || world.rank() < world.size() - 1;
  const std::vector<int> members = node_members(world, asks);
  {
    const NodeDataset node(world, files.pair, description, asks ? std::optional<Range>(Range{0, samples}) : std::nullopt);
    const std::size_t bytes = samples * (side * side + 1);
    if (!asks) {
      CHECK_FALSE(node.set().holds_samples());
      CHECK(node.set().count == samples);
      CHECK(node.set().features == side * side);
      CHECK(node.users().is_null());
      CHECK(node.window().is_null());
      CHECK(node.owner() == -1);
    } else if (members.size() == 1) {
      // Alone on its node: its private copy is the node's one copy, and no window is made.
      CHECK_FALSE(node.shared());
      CHECK(same_floats(node.set(), reference, Range{0, samples}));
    } else {
      CHECK(node.shared());
      CHECK(node.owner() == members.front());
      CHECK(node.node_bytes() == bytes);
      // Seen from every rank: the owner's segment holds the whole set, every other one a page.
      const auto& window = node.window();
      CHECK(window.segment_size(0) == hpcps::comm::SharedWindow::footprint(bytes));
      for (int r = 1; r < node.users().size(); ++r) {
        CHECK(window.segment_size(r) == hpcps::comm::SharedWindow::footprint(0));
      }
      // This rank's view lies in the owner's segment, not in memory of its own.
      const auto* base = static_cast<const std::uint8_t*>(window.segment(0));
      CHECK(node.set().pixel_bytes >= base);
      CHECK(node.set().pixel_bytes + bytes <= base + window.segment_size(0));
      CHECK(node.set().storage == nullptr);
      CHECK(same_floats(node.set(), reference, Range{0, samples}));
    }
    // One owner per node that has asking ranks: one copy on one node, two under the odd-even cliques.
    std::vector<int> owners(static_cast<std::size_t>(world.size()));
    const int owner = node.owner();
    world.allgather(&owner, 1, owners.data());
    std::sort(owners.begin(), owners.end());
    owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
    owners.erase(std::remove(owners.begin(), owners.end(), -1), owners.end());
    const int nodes = [&] {
      const auto node_comm = world.split_shared(world.rank());
      const int leader = node_comm.rank() == 0 ? 1 : 0;
      return world.allreduce_value(leader, MPI_SUM);
    }();
    if (world.size() >= 3) {
      // Each node with two asking ranks or more has exactly one owner.
      int shared_nodes = members.size() > 1 && world.rank() == members.front() ? 1 : 0;
      shared_nodes = world.allreduce_value(shared_nodes, MPI_SUM);
      CHECK(static_cast<int>(owners.size()) == shared_nodes);
      CHECK(shared_nodes <= nodes);
    }
  }
  remove_files(world, files);
}

TEST_CASE("a node whose /dev/shm cannot hold the set reads private copies", "[node][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  const Files files = make_files(world);
  const auto description = hpcps::data::describe_idx_pair(files.pair);
  const auto reference = hpcps::data::load_idx_pair(files.pair.images, files.pair.labels, classes);
  const std::vector<int> members = node_members(world, true);
  for (int variant = 0; variant < 2; ++variant) {
    NodeDataset::Options options;
    if (variant == 0) options.shm_free_bytes = 1000;  // less than the set's 11 KB
    else options.share = false;                       // asked for: no window, no message
    const NodeDataset node(world, files.pair, description, Range{0, samples}, options);
    CHECK_FALSE(node.shared());
    CHECK(node.window().is_null());
    CHECK(node.fell_back() == (variant == 0 && members.size() > 1));
    CHECK(node.set().storage != nullptr);  // its own bytes
    CHECK(same_floats(node.set(), reference, Range{0, samples}));
  }
  remove_files(world, files);
}

TEST_CASE("a node holds only the ranges its ranks ask for, merged", "[node][mpi]") {
  const auto world = hpcps::comm::Communicator::world();
  const Files files = make_files(world);
  const auto description = hpcps::data::describe_idx_pair(files.pair);
  const auto reference = hpcps::data::load_idx_pair(files.pair.images, files.pair.labels, classes);
  // Rank r asks for its share of the first 200 rows; rows 200-299 nobody reads.
  const Range mine = hpcps::data::shard_range(200, static_cast<std::size_t>(world.rank()),
                                              static_cast<std::size_t>(world.size()));
  const std::vector<int> members = node_members(world, true);
  const NodeDataset node(world, files.pair, description, mine);
  CHECK(same_floats(node.set(), reference, mine));
  std::vector<Range> expected;  // the node's members' shares, merged where they touch
  for (int r : members) {
    const Range share = hpcps::data::shard_range(200, static_cast<std::size_t>(r), static_cast<std::size_t>(world.size()));
    if (!expected.empty() && expected.back().end == share.begin) expected.back().end = share.end;
    else expected.push_back(share);
  }
  CHECK(node.node_rows() == expected);
  std::size_t rows = 0;
  for (const Range& r : expected) rows += r.size();
  CHECK(node.node_bytes() == rows * (side * side + 1));
  if (node.shared()) CHECK(node.window().segment_size(0) == hpcps::comm::SharedWindow::footprint(node.node_bytes()));
  // A Batcher over this rank's share reads only rows the node holds.
  hpcps::data::Batcher batcher(node.set(), mine, 7, 3);
  CHECK(batcher.batch(0).count == std::min<std::size_t>(7, mine.size()));
  remove_files(world, files);
}

TEST_CASE("training on the node's copy of the bytes gives the bits of training on private floats", "[node][mpi]") {
  using Net = hpcps::nn::Mlp<hpcps::nn::Relu>;
  using Ps = hpcps::ParameterServer<Net, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::MomentumSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const Files files = make_files(world);
  const auto description = hpcps::data::describe_idx_pair(files.pair);
  const Net net({side * side, 12, classes});
  const int servers = world.size() >= 3 ? 1 : 0;
  hpcps::ps::TrainOptions options;
  options.epochs = 2;
  options.batch = 32;  // 300 samples: 10 clocks an epoch, the last one short
  options.seed = 5;
  std::vector<float> params[2];
  double accuracy[2] = {0, 0};
  for (int run = 0; run < 2; ++run) {
    Ps::Options ps_options;
    ps_options.servers = servers;
    ps_options.max_batch = 32;
    ps_options.piece_floats = 50;
    Ps ps(world, net, hpcps::backend::Cpu(1), ps_options, {}, hpcps::optim::MomentumSgd(0.05f));
    hpcps::ps::TrainingReport report;
    if (run == 0) {
      // Every rank reads both sets as floats, as the examples did.
      const auto train = hpcps::data::load_idx_pair(files.pair.images, files.pair.labels, classes);
      report = hpcps::ps::train(ps, train, &train, options);
    } else {
      // Servers read nothing, worker 0 alone the test set (here the training set again).
      const bool evaluates = ps.is_worker() && ps.worker_index() == 0;
      const NodeDataset train(world, files.pair, description,
                              ps.is_worker() ? std::optional<Range>(Range{0, samples}) : std::nullopt);
      const NodeDataset test(world, files.pair, description,
                             evaluates ? std::optional<Range>(Range{0, samples}) : std::nullopt);
      CHECK(train.set().holds_samples() == ps.is_worker());
      CHECK(test.set().holds_samples() == evaluates);
      report = hpcps::ps::train(ps, train.set(), &test.set(), options);
    }
    if (ps.is_worker()) params[run] = ps.worker().parameters();
    accuracy[run] = report.test_accuracy;
  }
  if (!params[0].empty()) {
    REQUIRE(params[0].size() == params[1].size());
    CHECK(std::memcmp(params[0].data(), params[1].data(), params[0].size() * sizeof(float)) == 0);
    CHECK(accuracy[0] == accuracy[1]);
  }
  remove_files(world, files);
}

TEST_CASE("sharded_rows gives each worker exactly the samples its parts of an epoch take", "[node]") {
  for (std::size_t n : {1u, 7u, 61u, 300u, 60000u}) {
    for (std::size_t batch : {1u, 4u, 5u, 32u, 64u}) {
      for (int workers = 1; workers <= 5; ++workers) {
        if (batch < static_cast<std::size_t>(workers) || batch > n) continue;
        INFO("samples " << n << ", batch " << batch << ", workers " << workers);
        const std::size_t clocks = hpcps::ps::clocks_per_epoch(n, batch);
        std::size_t begin = 0;
        for (int w = 0; w < workers; ++w) {
          const Range r = hpcps::ps::sharded_rows(n, batch, w, workers);
          CHECK(r.begin == begin);
          std::size_t taken = 0;
          for (std::size_t c = 0; c < clocks; ++c) {
            const std::size_t in_clock = c + 1 < clocks ? batch : n - c * batch;
            taken += hpcps::ps::worker_part(in_clock, w, workers).size();
          }
          CHECK(r.size() == taken);
          begin = r.end;
        }
        CHECK(begin == n);
      }
    }
  }
}

TEST_CASE("sharded order on a node that holds only its workers' shards trains as on private floats", "[node][mpi]") {
  using Net = hpcps::nn::Mlp<hpcps::nn::Relu>;
  using Ps = hpcps::ParameterServer<Net, hpcps::backend::Cpu, hpcps::sync::Synchronous, hpcps::optim::MomentumSgd>;
  const auto world = hpcps::comm::Communicator::world();
  const Files files = make_files(world);
  const auto description = hpcps::data::describe_idx_pair(files.pair);
  const Net net({side * side, 12, classes});
  const int servers = world.size() >= 3 ? 1 : 0;
  const int workers = world.size() - servers;
  hpcps::ps::TrainOptions options;
  options.epochs = 2;
  options.batch = 30;
  options.seed = 8;
  options.evaluate = false;
  options.data_order = hpcps::ps::DataOrder::sharded;
  std::vector<float> params[2];
  for (int run = 0; run < 2; ++run) {
    Ps::Options ps_options;
    ps_options.servers = servers;
    ps_options.max_batch = 30;
    Ps ps(world, net, hpcps::backend::Cpu(1), ps_options, {}, hpcps::optim::MomentumSgd(0.05f));
    std::optional<Range> rows;
    if (ps.is_worker()) rows = hpcps::ps::sharded_rows(samples, options.batch, ps.worker_index(), workers);
    if (run == 0) {
      const auto train = hpcps::data::load_idx_pair(files.pair.images, files.pair.labels, classes);
      hpcps::ps::train(ps, train, nullptr, options);
    } else {
      const std::vector<int> members = node_members(world, rows.has_value());  // workers: ranks [0, W)
      const NodeDataset train(world, files.pair, description, rows);
      if (rows) {
        // The node holds its workers' shards (merged where they touch), nothing else.
        std::vector<Range> expected;
        for (int r : members) {
          const Range shard = hpcps::ps::sharded_rows(samples, options.batch, r, workers);
          if (!expected.empty() && expected.back().end == shard.begin) expected.back().end = shard.end;
          else expected.push_back(shard);
        }
        CHECK(train.node_rows() == expected);
        CHECK(train.set().held().begin <= rows->begin);
        CHECK(train.set().held().end >= rows->end);
      }
      hpcps::ps::train(ps, train.set(), nullptr, options);
    }
    if (ps.is_worker()) params[run] = ps.worker().parameters();
  }
  if (!params[0].empty()) {
    REQUIRE(params[0].size() == params[1].size());
    CHECK(std::memcmp(params[0].data(), params[1].data(), params[0].size() * sizeof(float)) == 0);
  }
  remove_files(world, files);
}
