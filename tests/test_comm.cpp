// Tests of the comm layer. Every rank runs every test case in the same order; collectives come after
// CHECKs only (a failed REQUIRE on one rank would skip the collective and hang the others).
// Messages use a distinct tag per test case so a leftover from one case cannot satisfy another.
#include <hpcps/comm/comm.hpp>
#include <hpcps/comm/segments.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

// Counts operator new calls, to show the steady-state request loop does not allocate.
#include "counting_new.hpp"

namespace {

using hpcps::comm::Communicator;
using hpcps::comm::Environment;
using hpcps::comm::MpiError;
using hpcps::comm::Request;
using hpcps::comm::RequestSet;

// tests/main.cpp owns MPI; this Environment only installs MPI_ERRORS_RETURN and must not finalize.
Environment& environment() {
  static int argc = 0;
  static char** argv = nullptr;
  static Environment env(argc, argv);
  return env;
}

Communicator world() {
  environment();
  return Communicator::world();
}

int next_of(const Communicator& c) { return (c.rank() + 1) % c.size(); }
int prev_of(const Communicator& c) { return (c.rank() + c.size() - 1) % c.size(); }

int error_class(int code) {
  int cls = 0;
  MPI_Error_class(code, &cls);
  return cls;
}

}  // namespace

TEST_CASE("comm: environment over an MPI someone else initialized", "[comm]") {
  Environment& env = environment();
  CHECK_FALSE(env.owns_mpi());
  CHECK(env.provided() >= hpcps::comm::ThreadLevel::funneled);
  CHECK(Environment::initialized());
  CHECK_FALSE(Environment::finalized());
  MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &handler);
  CHECK(handler == MPI_ERRORS_RETURN);
  MPI_Errhandler_free(&handler);

  // A second Environment is harmless, and its thread-level check still applies.
  int argc = 0;
  char** argv = nullptr;
  Environment again(argc, argv, hpcps::comm::ThreadLevel::single);
  CHECK_FALSE(again.owns_mpi());
  CHECK(std::string(hpcps::comm::to_string(hpcps::comm::ThreadLevel::serialized)) == "serialized");
}

TEST_CASE("comm: world rank and size", "[comm]") {
  Communicator w = world();
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(w.rank() == rank);
  CHECK(w.size() == size);
  CHECK(w.native() == MPI_COMM_WORLD);
  CHECK_FALSE(w.is_null());

  Communicator moved = std::move(w);
  CHECK(w.is_null());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  CHECK(moved.rank() == rank);
}

TEST_CASE("comm: split into even and odd groups and talk within them", "[comm]") {
  Communicator w = world();
  const int color = w.rank() % 2;
  Communicator group = w.split(color, w.rank());
  CHECK_FALSE(group.is_null());
  CHECK(group.native() != MPI_COMM_WORLD);
  CHECK(group.size() == (color == 0 ? (w.size() + 1) / 2 : w.size() / 2));
  CHECK(group.rank() == w.rank() / 2);

  MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(group.native(), &handler);
  CHECK(handler == MPI_ERRORS_RETURN);
  MPI_Errhandler_free(&handler);

  // A ring inside the group: everyone learns the world rank of its predecessor there.
  int mine = w.rank();
  int got = -1;
  Request r = group.irecv(&got, 1, prev_of(group), 10);
  Request s = group.isend(&mine, 1, next_of(group), 10);
  r.wait();
  s.wait();
  CHECK(got == color + 2 * prev_of(group));

  // Sum of the world ranks of one parity, computed inside the group.
  int expected = 0;
  for (int q = color; q < w.size(); q += 2) expected += q;
  CHECK(group.allreduce_value(w.rank(), MPI_SUM) == expected);

  // MPI_UNDEFINED as color leaves a rank out.
  Communicator evens = w.split(color == 0 ? 0 : MPI_UNDEFINED, 0);
  CHECK(evens.is_null() == (color == 1));

  Communicator dup = w.duplicate();
  CHECK(dup.rank() == w.rank());
  CHECK(dup.size() == w.size());
  CHECK(dup.native() != w.native());
}

TEST_CASE("comm: a shared-memory window shows each rank's stores to the node", "[comm]") {
  Communicator w = world();
  // mpiexec on one machine: the node is everyone, in world order (key = world rank).
  Communicator node = w.split_shared(w.rank());
  CHECK(node.size() == w.size());
  CHECK(node.rank() == w.rank());
  // Uneven segments, one of them empty, and none a multiple of a page: each still starts aligned
  // (on one rank too, where MPICH's own segment is not page-aligned).
  const std::size_t floats = node.rank() == 1 ? 0 : 1000 + 37 * static_cast<std::size_t>(node.rank());
  hpcps::comm::SharedWindow window(node, floats * sizeof(float));
  CHECK_FALSE(window.is_null());
  auto* mine = static_cast<float*>(window.segment(node.rank()));
  for (std::size_t i = 0; i < floats; ++i) mine[i] = static_cast<float>(node.rank() * 100000 + static_cast<int>(i));
  // Stores, sync, a message (here a barrier), sync, loads: MPI-3's shared-memory model.
  window.sync();
  node.barrier();
  window.sync();
  for (int r = 0; r < node.size(); ++r) {
    const auto* theirs = static_cast<const float*>(window.segment(r));
    const std::size_t n = r == 1 ? 0 : 1000 + 37 * static_cast<std::size_t>(r);
    CHECK(reinterpret_cast<std::uintptr_t>(theirs) % hpcps::comm::SharedWindow::segment_alignment == 0);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += theirs[i] != static_cast<float>(r * 100000 + static_cast<int>(i));
    CHECK(wrong == 0);
  }
  node.barrier();  // nobody frees the window while another rank still reads it
  hpcps::comm::SharedWindow moved = std::move(window);
  // What a segment occupies, and whether a window would fit: a ParameterServer asks before
  // allocating, since an oversized window dies of SIGBUS instead of failing.
  using hpcps::comm::SharedWindow;
  CHECK(SharedWindow::footprint(0) == SharedWindow::segment_alignment);
  CHECK(SharedWindow::footprint(1) == 2 * SharedWindow::segment_alignment);
  CHECK(SharedWindow::footprint(SharedWindow::segment_alignment) == 2 * SharedWindow::segment_alignment);
  CHECK(SharedWindow::fits(1));
  CHECK_FALSE(SharedWindow::fits(std::size_t{1} << 62));  // 4 EiB
  CHECK(SharedWindow::fits(std::size_t{1} << 62, "/no/such/filesystem"));  // unknown: not in the way
  CHECK(window.is_null());
  CHECK_FALSE(moved.is_null());
}

TEMPLATE_TEST_CASE("comm: typed ring exchange", "[comm]", float, double, std::int64_t, std::uint8_t) {
  Communicator w = world();
  constexpr std::size_t n = 17;
  std::vector<TestType> out(n), in(n, TestType{});
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<TestType>(w.rank() * 3 + static_cast<int>(i));

  Request r = w.irecv(in.data(), n, prev_of(w), 11);
  Request s = w.isend(out.data(), n, next_of(w), 11);
  r.wait();
  s.wait();
  CHECK_FALSE(r.active());
  CHECK_FALSE(s.active());
  int wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += in[i] != static_cast<TestType>(prev_of(w) * 3 + static_cast<int>(i));
  CHECK(wrong == 0);

  // Blocking send/recv between pairs (0,1), (2,3), ...; an unpaired last rank talks to itself.
  const int partner = (w.rank() % 2 == 0) ? w.rank() + 1 : w.rank() - 1;
  std::fill(in.begin(), in.end(), TestType{});
  hpcps::comm::Status status;
  if (partner >= w.size()) {
    Request self = w.isend(out.data(), n, w.rank(), 12);
    status = w.recv(in.data(), n, w.rank(), 12);
    self.wait();
  } else if (w.rank() % 2 == 0) {
    w.send(out.data(), n, partner, 12);
    status = w.recv(in.data(), n, partner, 12);
  } else {
    status = w.recv(in.data(), n, partner, 12);
    w.send(out.data(), n, partner, 12);
  }
  const int from = partner >= w.size() ? w.rank() : partner;
  CHECK(status.source == from);
  CHECK(status.tag == 12);
  CHECK(status.count == n);
  CHECK(in[n - 1] == static_cast<TestType>(from * 3 + static_cast<int>(n - 1)));
}

TEST_CASE("comm: large nonblocking messages arrive intact", "[comm]") {
  Communicator w = world();
  constexpr std::size_t n = std::size_t{4} << 20;  // 4M floats, 16 MiB: far past any eager limit
  std::vector<float> out(n), in(n, -1.0f);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(w.rank()) * 0.5f + static_cast<float>(i);

  Request r = w.irecv(in.data(), n, prev_of(w), 13);
  Request s = w.isend(out.data(), n, next_of(w), 13);
  s.wait();
  r.wait();
  const float base = static_cast<float>(prev_of(w)) * 0.5f;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += in[i] != base + static_cast<float>(i);
  CHECK(wrong == 0);
}

// Segments sent as a struct or packed into one contiguous buffer (comm/segments.hpp says why):
// what arrives must be the segments in order, into a struct receive of the same segments or into
// one array of their type, a count alone must fill only a struct receive's first segment, and a
// second packed send must pack afresh without allocating.
TEST_CASE("comm: segments arrive in order, packed or not, into either kind of receive", "[comm]") {
  using hpcps::comm::Segments;
  Communicator w = world();
  constexpr std::size_t n = 70000;  // past the eager limit, as a gradient piece is
  float count = 0.0f;
  std::vector<float> slice(n);
  std::vector<std::uint16_t> half(n);
  Segments floats{{&count, 1}, {slice.data(), n}};
  Segments mixed{{&count, 1}, {half.data(), n}};
  Segments count_only{{&count, 1}};
  float got_count = -1.0f;
  std::vector<float> got_slice(n), flat(n + 1);
  std::vector<std::uint16_t> got_half(n);
  Segments floats_in{{&got_count, 1}, {got_slice.data(), n}};
  Segments mixed_in{{&got_count, 1}, {got_half.data(), n}};
  const float base = static_cast<float>(prev_of(w) * 1000);
  long allocations = 0;
  std::size_t wrong = 0;
  for (int round = 0; round < 3; ++round) {
    count = static_cast<float>(w.rank() * 1000 + round);
    for (std::size_t i = 0; i < n; ++i) {
      slice[i] = count + static_cast<float>(i % 977);
      half[i] = static_cast<std::uint16_t>((i + static_cast<std::size_t>(count)) % 65521);
    }
    const long before = hpcps_test::allocations.load();
    {
      // Into one array of floats.
      Request r = w.irecv(flat.data(), n + 1, prev_of(w), 40);
      Request s = floats.isend_packed(w, next_of(w), 40);
      s.wait();
      r.wait();
    }
    {
      // Into the same struct, in another type, packed and not.
      Request r = mixed_in.irecv(w, prev_of(w), 41);
      Request s = (round % 2 == 0 ? mixed.isend_packed(w, next_of(w), 41) : mixed.isend(w, next_of(w), 41));
      s.wait();
      r.wait();
    }
    if (round > 0) allocations += hpcps_test::allocations.load() - before;
    const float sent = base + static_cast<float>(round);
    wrong += flat[0] != sent || got_count != sent;
    for (std::size_t i = 0; i < n; ++i) {
      wrong += flat[i + 1] != sent + static_cast<float>(i % 977);
      wrong += got_half[i] != static_cast<std::uint16_t>((i + static_cast<std::size_t>(sent)) % 65521);
    }
  }
  CHECK(wrong == 0);
  CHECK(allocations == 0);
  // A count alone fills a struct receive's first segment and leaves the rest as it was.
  std::fill(got_slice.begin(), got_slice.end(), 7.0f);
  count = static_cast<float>(w.rank() + 1);
  Request r = floats_in.irecv(w, prev_of(w), 42);
  Request s = count_only.isend(w, next_of(w), 42);
  s.wait();
  r.wait();
  CHECK(got_count == static_cast<float>(prev_of(w) + 1));
  CHECK(std::all_of(got_slice.begin(), got_slice.end(), [](float v) { return v == 7.0f; }));
}

TEST_CASE("comm: RequestSet is reused across rounds without allocating", "[comm]") {
  Communicator w = world();
  constexpr int k = 8;
  constexpr std::size_t len = 1000;
  std::vector<std::vector<double>> out(k, std::vector<double>(len)), in(k, std::vector<double>(len));
  RequestSet set(2 * k);
  const std::size_t capacity = set.capacity();
  CHECK(capacity >= 2 * k);

  int wrong = 0;
  long allocations = 0;
  for (int round = 0; round < 5; ++round) {
    for (int t = 0; t < k; ++t) {
      for (std::size_t i = 0; i < len; ++i) out[t][i] = round * 1e6 + w.rank() * 1e4 + t * 1e3 + static_cast<double>(i);
    }
    const long before = hpcps_test::allocations.load();
    for (int t = 0; t < k; ++t) set.add(w.irecv(in[t].data(), len, prev_of(w), 100 + t));
    for (int t = 0; t < k; ++t) set.add(w.isend(out[t].data(), len, next_of(w), 100 + t));
    set.wait_all();
    const std::size_t size = set.size();
    set.clear();
    allocations += hpcps_test::allocations.load() - before;

    wrong += size != 2 * k;
    for (int t = 0; t < k; ++t) {
      for (std::size_t i = 0; i < len; ++i) {
        wrong += in[t][i] != round * 1e6 + prev_of(w) * 1e4 + t * 1e3 + static_cast<double>(i);
      }
    }
  }
  CHECK(wrong == 0);
  CHECK(allocations == 0);
  CHECK(set.capacity() == capacity);
  CHECK(set.empty());

  // wait_any hands out every index exactly once, then -1.
  for (int t = 0; t < k; ++t) set.add(w.irecv(in[t].data(), len, prev_of(w), 200 + t));
  for (int t = 0; t < k; ++t) set.add(w.isend(out[t].data(), len, next_of(w), 200 + t));
  std::vector<int> seen(2 * k, 0);
  const long before = hpcps_test::allocations.load();
  for (int index = set.wait_any(); index != -1; index = set.wait_any()) {
    if (index >= 0 && index < 2 * k) ++seen[static_cast<std::size_t>(index)];
  }
  CHECK(hpcps_test::allocations.load() - before == 0);
  CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  CHECK_FALSE(set.active(0));
  CHECK(set.size() == 2 * k);
  set.wait_all();  // nothing left: returns at once
  set.clear();
  CHECK(set.capacity() == capacity);
}

TEST_CASE("comm: HPCPS_WAIT names one of three wait modes, anything else is an error", "[comm]") {
  using hpcps::comm::WaitMode;
  using hpcps::comm::parse_wait_mode;
  CHECK(parse_wait_mode("") == WaitMode::adaptive);
  CHECK(parse_wait_mode("adaptive") == WaitMode::adaptive);
  CHECK(parse_wait_mode("spin") == WaitMode::spin);
  CHECK(parse_wait_mode("sleep") == WaitMode::sleep);
  CHECK_THROWS_WITH(parse_wait_mode("nap"), Catch::Contains("HPCPS_WAIT='nap'") && Catch::Contains("'sleep'"));
}

TEST_CASE("comm: poll_until returns at the first true, in every mode and past the nap threshold", "[comm]") {
  using clock = std::chrono::steady_clock;
  using hpcps::comm::WaitMode;
  for (const WaitMode mode : {WaitMode::adaptive, WaitMode::spin, WaitMode::sleep}) {
    CAPTURE(static_cast<int>(mode));
    // Already true: done() is asked once.
    int calls = 0;
    hpcps::comm::detail::poll_until([&] { return ++calls > 0; }, mode);
    CHECK(calls == 1);
    // True only after 3 ms of the monotonic clock, past the 1 ms after which `sleep` naps:
    // asked until then and not once after.
    const auto ready = clock::now() + std::chrono::milliseconds(3);
    calls = 0;
    bool last = false;
    hpcps::comm::detail::poll_until([&] {
      ++calls;
      last = clock::now() >= ready;
      return last;
    }, mode);
    CHECK(last);
    CHECK(calls >= 2);
  }
}

TEST_CASE("comm: RequestSet completes every round in every wait mode, late senders too", "[comm]") {
  using hpcps::comm::WaitMode;
  Communicator w = world();
  constexpr int k = 4;
  constexpr std::size_t len = 70000;  // several of UCX's pieces per message
  std::vector<std::vector<float>> out(k, std::vector<float>(len)), in(k, std::vector<float>(len));
  RequestSet set(2 * k);
  int wrong = 0;
  int tag = 1000;
  for (const WaitMode mode : {WaitMode::adaptive, WaitMode::spin, WaitMode::sleep}) {
    for (int late = 0; late < 2; ++late, tag += 2 * k) {
      for (int t = 0; t < k; ++t) {
        for (std::size_t i = 0; i < len; ++i) out[t][i] = static_cast<float>(w.rank() * 100 + t + i % 7);
        std::fill(in[t].begin(), in[t].end(), -1.0f);
      }
      for (int t = 0; t < k; ++t) set.add(w.irecv(in[t].data(), len, prev_of(w), tag + t));
      // A late sender keeps its successor waiting past the 1 ms after which `sleep` naps.
      if (late) {
        const auto ready = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
        hpcps::comm::detail::poll_until([&] { return std::chrono::steady_clock::now() >= ready; }, mode);
      }
      for (int t = 0; t < k; ++t) set.add(w.isend(out[t].data(), len, next_of(w), tag + t));
      if (late) {
        int completed = 0;
        for (int index = set.wait_any(mode); index != -1; index = set.wait_any(mode)) ++completed;
        wrong += completed != 2 * k;
      } else {
        set.wait_all(mode);
      }
      for (std::size_t i = 0; i < set.size(); ++i) wrong += set.active(i);
      set.clear();
      for (int t = 0; t < k; ++t) {
        for (std::size_t i = 0; i < len; ++i) {
          wrong += in[t][i] != static_cast<float>(prev_of(w) * 100 + t + i % 7);
        }
      }
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("comm: wait_all over more requests than its stack buffer", "[comm]") {
  Communicator w = world();
  constexpr int k = 150;  // > the 64-handle chunk
  std::vector<int> out(k), in(k, -1);
  std::vector<Request> requests;
  requests.reserve(2 * k);
  for (int t = 0; t < k; ++t) {
    out[static_cast<std::size_t>(t)] = w.rank() * 1000 + t;
    requests.push_back(w.irecv(&in[static_cast<std::size_t>(t)], 1, prev_of(w), 300 + t));
  }
  for (int t = 0; t < k; ++t) requests.push_back(w.isend(&out[static_cast<std::size_t>(t)], 1, next_of(w), 300 + t));
  hpcps::comm::wait_all(requests);
  CHECK(std::none_of(requests.begin(), requests.end(), [](const Request& r) { return r.active(); }));
  int wrong = 0;
  for (int t = 0; t < k; ++t) wrong += in[static_cast<std::size_t>(t)] != prev_of(w) * 1000 + t;
  CHECK(wrong == 0);
}

TEST_CASE("comm: Request states, test(), and cancel on destruction", "[comm]") {
  Communicator w = world();
  Request none;
  CHECK_FALSE(none.active());
  CHECK(none.test());
  none.wait();  // no-op

  // An abandoned receive must not take the message sent afterwards.
  int abandoned = -1;
  {
    Request r = w.irecv(&abandoned, 1, w.rank(), 400);
    CHECK(r.active());
    Request moved = std::move(r);
    CHECK_FALSE(r.active());  // NOLINT(bugprone-use-after-move)
    CHECK(moved.active());
  }
  int value = 5, got = -1;
  Request s = w.isend(&value, 1, w.rank(), 400);
  Request r = w.irecv(&got, 1, w.rank(), 400);
  while (!r.test()) {
  }
  s.wait();
  CHECK(got == 5);
  CHECK(abandoned == -1);
}

TEST_CASE("comm: probe and iprobe report source, tag and size", "[comm]") {
  Communicator w = world();
  CHECK_FALSE(w.iprobe(Communicator::any_source, 499).has_value());

  const std::size_t mine = static_cast<std::size_t>(w.rank() + 1) * 3;
  std::vector<double> out(mine, 1.5);
  Request s = w.isend(out.data(), mine, next_of(w), 500);
  const hpcps::comm::Status st = w.probe(Communicator::any_source, Communicator::any_tag);
  const std::size_t theirs = static_cast<std::size_t>(prev_of(w) + 1) * 3;
  CHECK(st.source == prev_of(w));
  CHECK(st.tag == 500);
  CHECK(st.count == theirs * sizeof(double));
  CHECK(st.count_of<double>() == theirs);
  CHECK(st.count_of<float>() == 2 * theirs);
  std::vector<double> in(st.count_of<double>());
  const hpcps::comm::Status got = w.recv(in.data(), in.size(), st.source, st.tag);
  CHECK(got.count == theirs);
  CHECK(in.back() == 1.5);
  s.wait();

  // iprobe: spin until the message shows up; 3 bytes are not a whole number of floats.
  const std::uint8_t bytes[3] = {1, 2, 3};
  Request s2 = w.isend(bytes, 3, next_of(w), 501);
  std::optional<hpcps::comm::Status> found;
  while (!(found = w.iprobe(prev_of(w), 501))) {
  }
  CHECK(found->count == 3);
  CHECK(found->count_of<std::uint8_t>() == 3);
  CHECK_THROWS_AS(found->count_of<float>(), MpiError);
  std::uint8_t in_bytes[3] = {};
  w.recv(in_bytes, 3, prev_of(w), 501);
  s2.wait();
  CHECK(in_bytes[2] == 3);
}

TEST_CASE("comm: collectives", "[comm]") {
  Communicator w = world();
  const int n = w.size();
  CHECK(w.allreduce_value(w.rank(), MPI_SUM) == n * (n - 1) / 2);
  CHECK(w.allreduce_value(static_cast<std::int64_t>(w.rank()), MPI_MAX) == n - 1);
  CHECK(w.allreduce_value(static_cast<double>(w.rank()) + 1.0, MPI_PROD) > 0.0);

  std::vector<float> in(1000), out(1000, 0.0f);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) + static_cast<float>(w.rank());
  w.allreduce(in.data(), out.data(), in.size(), MPI_SUM);
  CHECK(out[7] == static_cast<float>(7 * n + n * (n - 1) / 2));
  w.allreduce_in_place(in.data(), in.size(), MPI_MAX);
  CHECK(in[7] == static_cast<float>(7 + n - 1));

  std::vector<std::uint32_t> b(5, 0);
  if (w.rank() == n - 1) std::fill(b.begin(), b.end(), 42u);
  w.broadcast(b.data(), b.size(), n - 1);
  CHECK(std::all_of(b.begin(), b.end(), [](std::uint32_t v) { return v == 42u; }));

  const std::int16_t two[2] = {static_cast<std::int16_t>(w.rank()), static_cast<std::int16_t>(-w.rank())};
  std::vector<std::int16_t> gathered(w.rank() == 0 ? 2 * static_cast<std::size_t>(n) : 0);
  w.gather(two, 2, gathered.data(), 0);
  std::vector<std::int16_t> everywhere(2 * static_cast<std::size_t>(n));
  w.allgather(two, 2, everywhere.data());
  int wrong = 0;
  for (int q = 0; q < n; ++q) {
    wrong += everywhere[2 * static_cast<std::size_t>(q) + 1] != -q;
    if (w.rank() == 0) wrong += gathered[2 * static_cast<std::size_t>(q)] != q;
  }
  CHECK(wrong == 0);
  w.barrier();
}

TEST_CASE("comm: MPI errors become MpiError with context", "[comm]") {
  Communicator w = world();
  const float x = 1.0f;
  const int bad = w.size() + 5;

  try {
    w.send(&x, 1, bad, 600);
    FAIL("send to a nonexistent rank did not throw");
  } catch (const MpiError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.rfind("MPI_Send(dest=" + std::to_string(bad) + ", tag=600, count=1 x float) failed on rank " +
                         std::to_string(w.rank()) + ": ",
                     0) == 0);
    CHECK(error_class(e.code()) == MPI_ERR_RANK);
  }

  try {
    Request r = w.isend(&x, 1, w.rank(), -3);
    FAIL("isend with a negative tag did not throw");
  } catch (const MpiError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("MPI_Isend(") == 0);
    CHECK(what.find("tag=-3") != std::string::npos);
    CHECK(error_class(e.code()) == MPI_ERR_TAG);
  }

  float buffer = 0.0f;
  CHECK_THROWS_AS(w.recv(&buffer, 1, bad, 601), MpiError);
  CHECK_THROWS_AS(w.broadcast(&buffer, 1, bad), MpiError);  // invalid root: rejected locally everywhere

  // A count MPI cannot represent is refused before MPI sees it (the buffer is never read).
  const std::size_t too_many = static_cast<std::size_t>(INT_MAX) + 1;
  try {
    w.send(&x, too_many, w.rank(), 602);
    FAIL("a count above INT_MAX did not throw");
  } catch (const MpiError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("MPI_Send(count=2147483648 x float) failed") == 0);
    CHECK(e.code() == MPI_ERR_COUNT);
  }

  // MpiError is an hpcps::Error, so one catch covers the library.
  CHECK_THROWS_AS(w.send(&x, 1, bad, 600), hpcps::Error);

  // The checked wrapper itself: silent on success, formatted on failure.
  CHECK_NOTHROW(hpcps::comm::check(MPI_SUCCESS, "MPI_Fake", "a={}", 1));
  CHECK_THROWS_WITH(hpcps::comm::check(MPI_ERR_TAG, "MPI_Fake", "a={}, b={}", 1, "two"),
                    Catch::StartsWith("MPI_Fake(a=1, b=two) failed on rank"));
  CHECK_THROWS_WITH(hpcps::comm::check(MPI_ERR_OTHER, "MPI_Barrier"), Catch::StartsWith("MPI_Barrier() failed"));

  w.barrier();  // every rank still communicates after the errors
}

TEST_CASE("comm: datatype_of maps to fixed-size MPI types", "[comm]") {
  using hpcps::comm::datatype_of;
  using hpcps::comm::is_mpi_type_v;
  using hpcps::comm::type_name;
  CHECK(datatype_of<float>() == MPI_FLOAT);
  CHECK(datatype_of<double>() == MPI_DOUBLE);
  CHECK(datatype_of<const double>() == MPI_DOUBLE);
  CHECK(datatype_of<char>() == MPI_CHAR);
  CHECK(datatype_of<std::int8_t>() == MPI_INT8_T);
  CHECK(datatype_of<std::uint8_t>() == MPI_UINT8_T);
  CHECK(datatype_of<std::int16_t>() == MPI_INT16_T);
  CHECK(datatype_of<std::uint16_t>() == MPI_UINT16_T);
  CHECK(datatype_of<std::int32_t>() == MPI_INT32_T);
  CHECK(datatype_of<std::uint32_t>() == MPI_UINT32_T);
  CHECK(datatype_of<std::int64_t>() == MPI_INT64_T);
  CHECK(datatype_of<std::uint64_t>() == MPI_UINT64_T);
  CHECK(datatype_of<long long>() == MPI_INT64_T);
  CHECK(datatype_of<std::size_t>() == (sizeof(std::size_t) == 8 ? MPI_UINT64_T : MPI_UINT32_T));

  STATIC_REQUIRE(is_mpi_type_v<float>);
  STATIC_REQUIRE(is_mpi_type_v<const std::uint16_t>);
  STATIC_REQUIRE_FALSE(is_mpi_type_v<bool>);
  STATIC_REQUIRE_FALSE(is_mpi_type_v<long double>);
  STATIC_REQUIRE_FALSE(is_mpi_type_v<float*>);
  STATIC_REQUIRE_FALSE(is_mpi_type_v<std::string>);
  STATIC_REQUIRE_FALSE(is_mpi_type_v<wchar_t>);

  CHECK(std::string(type_name<std::uint8_t>()) == "uint8");
  CHECK(std::string(type_name<long>()) == (sizeof(long) == 8 ? "int64" : "int32"));
  CHECK(std::string(type_name<float>()) == "float");
}
