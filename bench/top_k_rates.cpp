// What top-k pushes (ps/top_k.hpp) cost the worker and the server, one thread, one process: per
// piece of N floats and ratio r (k = ceil(r N) pairs),
//   worker: TopKSelector::compress (residual += gradient, select the k largest, send them) against
//           the bf16 encoding a 16-bit push does and against a plain copy of the piece, and against
//           the same selection done by comparisons (std::nth_element over indices, then a sort of
//           the k: what TopKSelector did before its radix selection);
//   server: the sum of W workers' pushes as the server builds it (a zeroed piece plus each
//           worker's pairs, scatter_add), against densifying each worker's pairs into a slice of
//           its own and summing the W slices, and against the sum of W dense fp32 slices that dense
//           pushes need.
// And what scaled-sign pushes (ps/sign_push.hpp) cost: compress_sign on the worker against the
// bf16 encoding, and the server's sum of W workers' signs (add_signs into a zeroed piece) against
// the dense fp32 sum. And scaled-sign pulls (ps/sign_pull.hpp): the server's compress_sign_pull
// of a piece against its view, and the worker's add_sign_pull of the message.
// Kernels interleaved within every repeat, the order rotated; median and range over --repeats,
// and per repeat the ratios the claims are about. Table on stderr, JSON on stdout or --out.
//
//   bench/top_k_rates [--floats 1048576] [--workers 4] [--ratios 0.001,0.01,0.1] [--repeats 7] [--out FILE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <hpcps/metrics/json.hpp>
#include <hpcps/ps/sign_pull.hpp>
#include <hpcps/ps/sign_push.hpp>
#include <hpcps/ps/top_k.hpp>
#include <hpcps/ps/wire_format.hpp>

#include "timing.hpp"

namespace {

inline void clobber(const void* p) { asm volatile("" : : "g"(p) : "memory"); }

std::string format_ratio(const hpcps_bench::Summary& s) {
  char text[64];
  std::snprintf(text, sizeof text, "%.3f (%.3f-%.3f)x", s.median, s.low, s.high);
  return text;
}

// The comparison selection TopKSelector::compress replaced, with the same result: the k largest
// magnitudes (ties to the lower index), sent in index order, zeroed in the residual.
void select_by_comparison(const float* gradient, float* residual, std::size_t n, std::size_t k,
                          std::vector<std::uint32_t>& order, std::uint32_t* indices, float* values) {
  for (std::size_t i = 0; i < n; ++i) residual[i] += gradient[i];
  std::iota(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), std::uint32_t{0});
  const auto magnitude = [](float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u & 0x7FFFFFFFu;
  };
  const auto larger = [&](std::uint32_t a, std::uint32_t b) {
    const std::uint32_t ma = magnitude(residual[a]), mb = magnitude(residual[b]);
    return ma > mb || (ma == mb && a < b);
  };
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k - 1),
                   order.begin() + static_cast<std::ptrdiff_t>(n), larger);
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  for (std::size_t j = 0; j < k; ++j) {
    indices[j] = order[j];
    values[j] = residual[order[j]];
    residual[order[j]] = 0.0f;
  }
}

struct Options {
  std::size_t floats = std::size_t{1} << 20;  // Layout::default_piece_floats: one push piece
  std::size_t workers = 4;
  std::vector<double> ratios = {0.001, 0.01, 0.1};
  int repeats = 7;
  std::string out;
};

struct Kernel {
  std::string name, side;
  double ratio = 0.0;
  std::function<void()> call;
  std::size_t calls = 1;
  std::vector<double> seconds;
};

double time_calls(Kernel& k) {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < k.calls; ++i) k.call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(k.calls);
}

int run(const Options& o) {
  const std::size_t n = o.floats, w = o.workers;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> gradient(n), residual(n, 0.0f), copy(n);
  for (float& g : gradient) g = normal(rng) * 1e-3f;
  std::vector<std::uint16_t> encoded(n);
  std::vector<std::uint32_t> sent_indices(n);  // what compress sends, at any ratio
  std::vector<float> sent_values(n);
  std::vector<std::uint32_t> order(n);
  std::vector<float> dense(w * n), sum(n), slices(w * n);
  for (float& d : dense) d = normal(rng);

  // Each worker's pairs at each ratio, drawn from its own gradient as a worker would send them.
  const std::size_t rs = o.ratios.size();
  std::vector<std::vector<std::uint32_t>> indices(rs);
  std::vector<std::vector<float>> values(rs);
  std::vector<std::size_t> counts(rs);
  hpcps::ps::TopKSelector selector(n);
  for (std::size_t j = 0; j < rs; ++j) {
    counts[j] = hpcps::ps::top_k_count(o.ratios[j], n);
    indices[j].resize(w * counts[j]);
    values[j].resize(w * counts[j]);
    for (std::size_t v = 0; v < w; ++v) {
      std::vector<float> held(n, 0.0f);
      selector.compress(dense.data() + v * n, held.data(), n, counts[j], 0, indices[j].data() + v * counts[j],
                        values[j].data() + v * counts[j]);
    }
  }

  // Each worker's scaled signs, drawn from its own gradient.
  const std::size_t scales_n = hpcps::ps::sign_scales(n), words_n = hpcps::ps::sign_words(n);
  std::vector<float> sign_scales(w * scales_n), sent_scales(scales_n);
  std::vector<std::uint32_t> sign_words(w * words_n), sent_words(words_n);
  for (std::size_t v = 0; v < w; ++v) {
    std::vector<float> held(n, 0.0f);
    hpcps::ps::compress_sign(dense.data() + v * n, held.data(), n, sign_scales.data() + v * scales_n,
                             sign_words.data() + v * words_n);
  }

  // A pull's view of the parameters (here: the gradient as the parameters), and its message.
  std::vector<float> view(n, 0.0f), pulled(n, 0.0f);
  std::vector<std::uint32_t> pull_message(hpcps::ps::sign_pull_words(n));
  hpcps::ps::compress_sign_pull(gradient.data(), view.data(), n, pull_message.data());

  std::vector<Kernel> kernels;
  const auto add = [&kernels](std::string name, std::string side, double ratio, std::function<void()> call) {
    Kernel k;
    k.name = std::move(name);
    k.side = std::move(side);
    k.ratio = ratio;
    k.call = std::move(call);
    kernels.push_back(std::move(k));
  };
  add("copy piece", "worker", 0.0, [&] {
                       std::copy(gradient.begin(), gradient.end(), copy.begin());
                       clobber(copy.data());
                     });
  add("bf16 encode", "worker", 0.0, [&] {
                       hpcps::ps::wire::encode(hpcps::ps::WireFormat::bf16, gradient.data(), n, encoded.data());
                       clobber(encoded.data());
                     });
  add("dense sum", "server", 0.0, [&] {
                       std::copy(dense.begin(), dense.begin() + static_cast<std::ptrdiff_t>(n), sum.begin());
                       for (std::size_t v = 1; v < w; ++v) {
                         const float* s = dense.data() + v * n;
                         for (std::size_t i = 0; i < n; ++i) sum[i] += s[i];
                       }
                       clobber(sum.data());
                     });
  add("sign compress", "worker", 0.0, [&] {
                       hpcps::ps::compress_sign(gradient.data(), residual.data(), n, sent_scales.data(), sent_words.data());
                       clobber(residual.data());
                       clobber(sent_words.data());
                     });
  add("sign sum", "server", 0.0, [&] {
                       std::fill(sum.begin(), sum.end(), 0.0f);
                       for (std::size_t v = 0; v < w; ++v) {
                         hpcps::ps::add_signs(sign_scales.data() + v * scales_n, sign_words.data() + v * words_n, n,
                                              sum.data());
                       }
                       clobber(sum.data());
                     });
  add("sign pull encode", "server", 0.0, [&] {
                       hpcps::ps::compress_sign_pull(gradient.data(), view.data(), n, pull_message.data());
                       clobber(view.data());
                       clobber(pull_message.data());
                     });
  add("sign pull add", "worker", 0.0, [&] {
                       hpcps::ps::add_sign_pull(pull_message.data(), n, pulled.data());
                       clobber(pulled.data());
                     });
  for (std::size_t j = 0; j < rs; ++j) {
    const std::size_t k = counts[j];
    add("top-k compress", "worker", o.ratios[j], [&, k] {
                         selector.compress(gradient.data(), residual.data(), n, k, 0, sent_indices.data(), sent_values.data());
                         clobber(residual.data());
                         clobber(sent_values.data());
                       });
    add("comparison select", "worker", o.ratios[j], [&, k] {
                         select_by_comparison(gradient.data(), residual.data(), n, k, order, sent_indices.data(),
                                              sent_values.data());
                         clobber(residual.data());
                         clobber(sent_values.data());
                       });
    add("sparse sum", "server", o.ratios[j], [&, j, k] {
                         std::fill(sum.begin(), sum.end(), 0.0f);
                         for (std::size_t v = 0; v < w; ++v) {
                           hpcps::ps::scatter_add(indices[j].data() + v * k, values[j].data() + v * k, k, 0, sum.data());
                         }
                         clobber(sum.data());
                       });
    add("densify then sum", "server", o.ratios[j], [&, j, k] {
                         std::fill(slices.begin(), slices.end(), 0.0f);
                         for (std::size_t v = 0; v < w; ++v) {
                           hpcps::ps::scatter_add(indices[j].data() + v * k, values[j].data() + v * k, k, 0,
                                                  slices.data() + v * n);
                         }
                         std::copy(slices.begin(), slices.begin() + static_cast<std::ptrdiff_t>(n), sum.begin());
                         for (std::size_t v = 1; v < w; ++v) {
                           const float* s = slices.data() + v * n;
                           for (std::size_t i = 0; i < n; ++i) sum[i] += s[i];
                         }
                         clobber(sum.data());
                       });
  }
  for (auto& k : kernels) {
    k.call();
    while (time_calls(k) * static_cast<double>(k.calls) < 0.05) k.calls *= 2;
  }
  const auto started = std::chrono::steady_clock::now();
  for (int r = 0; r < o.repeats; ++r) {
    for (std::size_t i = 0; i < kernels.size(); ++i) {
      auto& k = kernels[(i + static_cast<std::size_t>(r) * 3) % kernels.size()];
      k.seconds.push_back(time_calls(k));
    }
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  double checksum = 0.0;
  for (std::size_t i = 0; i < n; i += 1024) checksum += static_cast<double>(sum[i]) + residual[i] + encoded[i];
  if (!std::isfinite(checksum)) throw std::runtime_error("non-finite values: the kernels misbehaved");

  const auto find = [&](const std::string& name, double ratio) -> const Kernel& {
    for (const auto& k : kernels) {
      if (k.name == name && k.ratio == ratio) return k;
    }
    throw std::runtime_error("no kernel " + name);
  };
  // Per repeat: a's seconds over b's of the same repeat.
  const auto paired = [](const Kernel& a, const Kernel& b) {
    std::vector<double> v;
    for (std::size_t r = 0; r < a.seconds.size(); ++r) v.push_back(a.seconds[r] / b.seconds[r]);
    return hpcps_bench::summarize(v);
  };
  const Kernel& dense_sum = find("dense sum", 0.0);
  const Kernel& bf16 = find("bf16 encode", 0.0);

  hpcps::metrics::JsonWriter json;
  json.begin_object().field("benchmark", "top_k_rates").field("floats", n).field("workers", w);
  json.field("repeats", o.repeats).field("threads", 1).field("elapsed_seconds", elapsed).field("checksum", checksum);
  json.key("kernels").begin_array();
  std::fprintf(stderr, "piece of %zu floats, %zu workers, 1 thread, %d repeats\n", n, w, o.repeats);
  std::fprintf(stderr, "%-18s %-7s %7s %10s %22s %8s %26s\n", "kernel", "side", "ratio", "pairs", "ms/call (min-max)",
               "wire B", "/ reference paired");
  for (const auto& k : kernels) {
    const auto t = hpcps_bench::summarize(k.seconds);
    const std::size_t pairs = k.ratio > 0.0 ? hpcps::ps::top_k_count(k.ratio, n) : n;
    // Bytes a push of this piece puts on the wire (the leading count aside).
    const bool sign = k.name.rfind("sign", 0) == 0;
    const std::size_t wire_bytes = k.name == "bf16 encode" ? 2 * n
                                   : sign                  ? 4 * (scales_n + words_n)
                                   : k.ratio > 0.0         ? 8 * pairs
                                                           : 4 * n;
    json.begin_object().field("name", k.name).field("side", k.side).field("ratio", k.ratio).field("pairs", pairs);
    json.field("wire_bytes_per_push", wire_bytes).field("calls_per_sample", k.calls);
    json.field("seconds_median", t.median).field("seconds_min", t.low).field("seconds_max", t.high);
    json.key("seconds").begin_array();
    for (double s : k.seconds) json.value(s);
    json.end_array();
    std::string against;
    if (k.name == "top-k compress" || k.name == "sparse sum" || k.name == "densify then sum" || sign) {
      const Kernel& ref = k.side == "worker" ? bf16 : dense_sum;
      const auto p = paired(k, ref);
      json.field("reference", ref.name).field("over_reference_median", p.median).field("over_reference_min", p.low)
          .field("over_reference_max", p.high);
      against = format_ratio(p) + " " + ref.name;
      if (k.name == "top-k compress") {
        const auto q = paired(k, find("comparison select", k.ratio));
        json.field("over_comparison_median", q.median).field("over_comparison_min", q.low)
            .field("over_comparison_max", q.high);
        against += "; " + format_ratio(q) + " comparison";
      }
      if (k.name == "sparse sum") {
        const auto q = paired(k, find("densify then sum", k.ratio));
        json.field("over_densify_median", q.median).field("over_densify_min", q.low).field("over_densify_max", q.high);
        against += "; " + format_ratio(q) + " densify";
      }
    }
    json.end_object();
    std::fprintf(stderr, "%-18s %-7s %7g %10zu %8.3f (%5.3f-%5.3f) %8zu  %s\n", k.name.c_str(), k.side.c_str(),
                 k.ratio, pairs, t.median * 1e3, t.low * 1e3, t.high * 1e3, wire_bytes, against.c_str());
  }
  json.end_array().end_object();
  hpcps_bench::print_or_write_json(json.str(), o.out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    const bool ok = hpcps_bench::parse_flag_pairs(argc, argv, [&](const std::string& flag, const std::string& value) {
      if (flag == "--floats") {
        o.floats = std::stoul(value);
      } else if (flag == "--workers") {
        o.workers = std::stoul(value);
      } else if (flag == "--ratios") {
        o.ratios = hpcps_bench::parse_doubles(value);
      } else if (flag == "--repeats") {
        o.repeats = std::stoi(value);
      } else if (flag == "--out") {
        o.out = value;
      } else {
        return false;
      }
      return true;
    });
    if (!ok) return 2;
    if (o.floats == 0 || o.workers == 0 || o.repeats < 1) throw std::runtime_error("--floats, --workers, --repeats >= 1");
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "top_k_rates: error: %s\n", e.what());
    return 1;
  }
}
