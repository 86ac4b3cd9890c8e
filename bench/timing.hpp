#pragma once
// Timing helpers shared by the C++ benchmarks: median and range over repeats, each repeat long
// enough (>= 50 ms) for the clock to be exact.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace hpcps_bench {

struct Summary {
  double median, low, high;
};

inline Summary summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// After one warm-up call: the number of calls of f (a power of two) that lasts more than 50 ms.
template <class F>
std::size_t calls_lasting_50ms(F& f) {
  f();
  std::size_t calls = 1;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < calls; ++i) f();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > 0.05) break;
    calls *= 2;
  }
  return calls;
}

// Seconds per call of f: the median over `repeats` timings of enough calls to last 50 ms.
template <class F>
Summary time_per_call(F&& f, int repeats) {
  const std::size_t calls = calls_lasting_50ms(f);
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < calls; ++i) f();
    samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                      static_cast<double>(calls));
  }
  return summarize(samples);
}

// Seconds per call of f as time_per_call measures them, and the process's CPU seconds per call
// over the same calls. On a machine shared with other jobs, a single-threaded f's CPU time
// excludes the time it waited for a core, so it estimates the wall time on a quiet machine.
struct WallAndCpu {
  Summary wall, cpu;
};
template <class F>
WallAndCpu time_per_call_with_cpu(F&& f, int repeats) {
  const auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  const std::size_t calls = calls_lasting_50ms(f);
  std::vector<double> wall, cpu;
  for (int r = 0; r < repeats; ++r) {
    const double c0 = cpu_now();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < calls; ++i) f();
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                   static_cast<double>(calls));
    cpu.push_back((cpu_now() - c0) / static_cast<double>(calls));
  }
  return {summarize(wall), summarize(cpu)};
}

// "a,b,c" -> {convert("a"), convert("b"), convert("c")}.
template <class T, class Convert>
std::vector<T> split_list(const std::string& s, Convert convert) {
  std::vector<T> out;
  std::size_t start = 0;
  while (start < s.size()) {
    const std::size_t end = s.find(',', start);
    out.push_back(convert(s.substr(start, end - start)));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

inline std::vector<std::size_t> parse_list(const std::string& s) {
  return split_list<std::size_t>(s, [](const std::string& item) { return std::stoul(item); });
}

inline std::vector<double> parse_doubles(const std::string& s) {
  return split_list<double>(s, [](const std::string& item) { return std::stod(item); });
}

// A command line of "--flag value" pairs: `set(flag, value)` stores the value and returns false
// for a flag it does not know. Returns false, having said why on stderr, for an unknown flag or a
// flag without its value.
template <class Set>
bool parse_flag_pairs(int argc, char** argv, Set&& set) {
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "option %s needs a value\n", argv[i]);
      return false;
    }
    if (!set(std::string(argv[i]), std::string(argv[i + 1]))) {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return false;
    }
  }
  return true;
}

// A benchmark's JSON: on stdout without a path, else into the file at `path`.
inline void print_or_write_json(const std::string& text, const std::string& path) {
  if (path.empty()) {
    std::printf("%s\n", text.c_str());
    return;
  }
  std::ofstream f(path);
  f << text << '\n';
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace hpcps_bench
