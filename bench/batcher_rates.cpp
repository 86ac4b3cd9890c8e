// The Batcher alone, samples/s: the row copy from a set of floats (every rank's private fp32 copy,
// as before one copy per node) against the copy with the conversion fused in, from the stored bytes
// (the node's window). Fashion-MNIST's training set, its shuffled order, one worker's part of each
// global batch: the whole batch (1 worker) and worker 0's part with 3 and with 8 workers. Each
// figure is the median of --repeats timings of whole epochs (>= 50 ms each), with the range; wall
// and CPU time, the CPU time being the better estimate on a machine shared with other jobs.
//
//   build/bench/batcher_rates [--repeats 7] [--batch 64] [--out bench/results/batcher_rates.json]
#include <hpcps/data/data.hpp>
#include <hpcps/metrics/json.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "timing.hpp"

int main(int argc, char** argv) {
  int repeats = 7;
  std::size_t global_batch = 64;
  std::string out, dir = hpcps::data::default_fashion_mnist_dir();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--repeats") repeats = std::stoi(value);
    else if (flag == "--batch") global_batch = std::stoul(value);
    else if (flag == "--out") out = value;
    else if (flag == "--data") dir = value;
    else {
      std::fprintf(stderr, "batcher_rates: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const auto files = hpcps::data::fashion_mnist_files(dir);
  const hpcps::data::Dataset floats = hpcps::data::load_idx_pair(files.train.images, files.train.labels, 10);
  const hpcps::data::Dataset bytes = hpcps::data::load_stored(files.train);
  const hpcps::data::Range all{0, floats.count};

  hpcps::metrics::JsonWriter json;
  json.begin_object().field("benchmark", "batcher_rates").field("samples", floats.count);
  json.field("features", floats.features).field("global_batch", global_batch).field("repeats", repeats);
  json.key("results").begin_array();
  std::printf("| part of a global batch of %zu | floats (row copy), samples/s | bytes (converted), samples/s | "
              "bytes / floats |\n| --- | --- | --- | --- |\n", global_batch);
  for (std::size_t workers : {1, 3, 8}) {
    double median[2] = {0, 0};
    hpcps_bench::Summary cpu_rates[2]{}, wall_rates[2]{};
    for (int form = 0; form < 2; ++form) {
      hpcps::data::Batcher batcher(form == 0 ? floats : bytes, all, global_batch, 1);
      std::size_t epoch = 0, samples = 0;
      float sink = 0.0f;
      auto one_epoch = [&] {
        batcher.start_epoch(epoch++);
        samples = 0;
        for (std::size_t b = 0; b < batcher.batches_per_epoch(); ++b) {
          const std::size_t n = batcher.batch_count(b);
          const auto view = batcher.part(b, hpcps::data::shard_range(n, 0, workers));
          sink += view.inputs[0];
          samples += view.count;
        }
      };
      one_epoch();
      const std::size_t per_epoch = samples;
      const auto t = hpcps_bench::time_per_call_with_cpu(one_epoch, repeats);
      const auto rate = [&](const hpcps_bench::Summary& s) {
        return hpcps_bench::Summary{per_epoch / s.median, per_epoch / s.high, per_epoch / s.low};
      };
      wall_rates[form] = rate(t.wall);
      cpu_rates[form] = rate(t.cpu);
      median[form] = cpu_rates[form].median;
      if (sink < -1.0f) std::printf("%f\n", sink);  // keeps the copies
    }
    std::printf("| worker 0 of %zu | %.3g (%.3g-%.3g) | %.3g (%.3g-%.3g) | %.2f |\n", workers, cpu_rates[0].median,
                cpu_rates[0].low, cpu_rates[0].high, cpu_rates[1].median, cpu_rates[1].low, cpu_rates[1].high,
                median[1] / median[0]);
    json.begin_object().field("workers", workers);
    const char* names[2] = {"floats", "bytes"};
    for (int form = 0; form < 2; ++form) {
      json.key(names[form]).begin_object();
      json.field("cpu_samples_per_second_median", cpu_rates[form].median)
          .field("cpu_samples_per_second_min", cpu_rates[form].low)
          .field("cpu_samples_per_second_max", cpu_rates[form].high);
      json.field("wall_samples_per_second_median", wall_rates[form].median)
          .field("wall_samples_per_second_min", wall_rates[form].low)
          .field("wall_samples_per_second_max", wall_rates[form].high);
      json.end_object();
    }
    json.field("bytes_over_floats", median[1] / median[0]).end_object();
  }
  json.end_array().end_object();
  if (!out.empty()) {
    std::FILE* f = std::fopen(out.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "batcher_rates: cannot write %s\n", out.c_str());
      return 1;
    }
    std::fputs(json.str().c_str(), f);
    std::fclose(f);
  } else {
    std::puts(json.str().c_str());
  }
  return 0;
}
