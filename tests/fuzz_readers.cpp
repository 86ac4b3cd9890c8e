// Seeded mutation fuzzing of the readers that take files from outside: the IDX reader (plain and
// gzip), the checkpoint manifest parser and the .npz model reader. Each target starts from valid
// inputs and feeds N mutants (bytes flipped, inserted, deleted, lines repeated, the end cut off);
// every input must either be read or be refused with an hpcps::Error, never crash, hang or raise
// anything else (the sanitizer build runs it too). No MPI.
//   fuzz_readers [inputs per target] [seed]
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hpcps/checkpoint/manifest.hpp"
#include "hpcps/data/idx.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/error.hpp"
#include "hpcps/io/npz.hpp"

namespace {

using Bytes = std::string;

Bytes mutate(const Bytes& seed, hpcps::data::Rng& rng) {
  Bytes b = seed;
  const auto below = [&rng](std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(hpcps::data::uniform_below(rng, n)); };
  const std::size_t edits = 1 + below(4);
  for (std::size_t e = 0; e < edits; ++e) {
    switch (below(7)) {
      case 0:  // flip a bit
        if (!b.empty()) b[below(b.size())] ^= static_cast<char>(1 << below(8));
        break;
      case 1:  // a random byte
        if (!b.empty()) b[below(b.size())] = static_cast<char>(below(256));
        break;
      case 2:  // insert bytes
        b.insert(below(b.size() + 1), below(8) + 1, static_cast<char>(below(256)));
        break;
      case 3:  // delete a run
        if (!b.empty()) {
          const std::size_t at = below(b.size());
          b.erase(at, below(b.size() - at) + 1);
        }
        break;
      case 4:  // cut the end off
        b.resize(below(b.size() + 1));
        break;
      case 5: {  // repeat a slice (a duplicated line, a longer array)
        if (b.empty()) break;
        const std::size_t at = below(b.size()), n = below(std::min<std::size_t>(64, b.size() - at)) + 1;
        b.insert(below(b.size() + 1), b.substr(at, n));
        break;
      }
      default: {  // an interesting number over 4 bytes (sizes, dimensions, counts)
        static const std::uint32_t values[] = {0, 1, 0x7f, 0xff, 0xffff, 0x7fffffff, 0x80000000u, 0xffffffffu, 60000, 28};
        if (b.size() < 4) break;
        const std::uint32_t v = values[below(10)];
        const std::size_t at = below(b.size() - 3);
        for (int i = 0; i < 4; ++i) b[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * (3 - i))) & 0xff);
        break;
      }
    }
  }
  return b;
}

void write(const std::string& path, const Bytes& b) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(b.data(), static_cast<std::streamsize>(b.size()));
}

Bytes gzip(const Bytes& in) {
  uLongf size = compressBound(static_cast<uLong>(in.size())) + 32;
  Bytes out(size, '\0');
  z_stream s{};
  deflateInit2(&s, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  s.avail_in = static_cast<uInt>(in.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  deflate(&s, Z_FINISH);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

// Runs `read` on `inputs` mutants of the seeds; returns the number accepted, or exits on a finding.
template <class Read>
std::size_t fuzz(const char* target, const std::vector<Bytes>& seeds, std::size_t inputs, std::uint64_t seed, Read read) {
  hpcps::data::Rng rng(seed);
  std::size_t accepted = 0;
  for (std::size_t i = 0; i < inputs; ++i) {
    const Bytes input = mutate(seeds[i % seeds.size()], rng);
    try {
      read(input);
      ++accepted;
    } catch (const hpcps::Error&) {
      // refused with a message: what a bad input must get
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz %s: input %zu (seed %llu) raised a non-hpcps exception: %s\n", target, i,
                   static_cast<unsigned long long>(seed), e.what());
      std::exit(1);
    }
  }
  std::printf("fuzz %s: %zu inputs, %zu accepted, the others refused, 0 crashes\n", target, inputs, accepted);
  std::fflush(stdout);
  return accepted;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t inputs = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100000;
  const std::uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  const auto dir = std::filesystem::temp_directory_path() / ("hpcps-fuzz-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "input").string();

  // IDX: a 3 x 2 x 2 image file and a label file, plain and gzip-compressed.
  const Bytes images("\x00\x00\x08\x03\x00\x00\x00\x03\x00\x00\x00\x02\x00\x00\x00\x02" "abcdefghijkl", 28);
  const Bytes labels("\x00\x00\x08\x01\x00\x00\x00\x04\x01\x02\x03\x04", 12);
  fuzz("idx", {images, labels, gzip(images), gzip(labels)}, inputs, seed, [&](const Bytes& b) {
    write(file, b);
    hpcps::data::read_idx(file);
  });

  // Manifests: one of a 2-server momentum checkpoint with top-k residuals and corrected-momentum
  // velocities, one of Adam on the colocated layout.
  hpcps::checkpoint::Manifest m;
  m.network = "mlp[784-256-10]-relu";
  m.parameters = 203530;
  m.backend = "openblas";
  m.sync = "bsp (staleness 0)";
  m.optimizer = "momentum 0.9, cosine lr 0.02 to 0 over 9380 steps, weight decay 0";
  m.push_wire = m.pull_wire = "fp32";
  m.state_arrays = {"velocity"};
  m.clock = 1234;
  m.epoch = 1;
  m.batch = 296;
  m.clocks_per_epoch = 938;
  m.global_batch = 64;
  m.train_samples = 60000;
  m.server_updates = 1234;
  m.workers = 3;
  m.servers = 2;
  m.shards = {{0, 101765}, {101765, 203530}};
  m.files = {{hpcps::checkpoint::shard_file(0), 101765 * 8, 0x12345678}, {hpcps::checkpoint::shard_file(1), 101765 * 8, 0x9abcdef0}};
  for (std::size_t w = 0; w < 3; ++w) {
    m.residuals.push_back({hpcps::checkpoint::residual_file(w), 203530 * 4, 0x1000u + static_cast<std::uint32_t>(w)});
    m.velocities.push_back({hpcps::checkpoint::velocity_file(w), 203530 * 4, 0x2000u + static_cast<std::uint32_t>(w)});
  }
  hpcps::checkpoint::Manifest adam = m;
  adam.residuals.clear();
  adam.velocities.clear();
  adam.state_arrays = {"adam_m", "adam_v"};
  adam.servers = 0;
  adam.shards = {{0, 203530}};
  adam.files = {{hpcps::checkpoint::shard_file(0), 203530 * 12, 1}};
  // The parser must accept the seeds themselves, or the fuzzing tests nothing but the first check.
  hpcps::checkpoint::parse(hpcps::checkpoint::to_text(m), "seed");
  hpcps::checkpoint::parse(hpcps::checkpoint::to_text(adam), "seed");
  fuzz("manifest", {hpcps::checkpoint::to_text(m), hpcps::checkpoint::to_text(adam)}, inputs, seed,
       [](const Bytes& b) { hpcps::checkpoint::parse(b, "MANIFEST"); });

  // .npz model files.
  const std::string npz = (dir / "model.npz").string();
  hpcps::io::write_npz(npz, {{"dense0.weight", {3, 2}, {1, 2, 3, 4, 5, 6}}, {"dense0.bias", {3}, {7, 8, 9}}}, "mlp[2-3]-relu");
  std::ifstream in(npz, std::ios::binary);
  const Bytes model((std::istreambuf_iterator<char>(in)), {});
  fuzz("npz", {model}, inputs, seed, [&](const Bytes& b) {
    write(file, b);
    hpcps::io::read_npz(file);
  });
  std::filesystem::remove_all(dir);
  return 0;
}
