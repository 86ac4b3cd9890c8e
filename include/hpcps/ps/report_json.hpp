#pragma once
// Training reports as JSON, for --report files and the benchmark scripts that read them.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "hpcps/error.hpp"
#include "hpcps/metrics/json.hpp"
#include "hpcps/ps/training.hpp"

namespace hpcps::ps {

inline void write_times(metrics::JsonWriter& json, const WorkerTimes& t) {
  json.key("time_split").begin_object();
  json.field("compute_seconds", t.compute).field("communicate_seconds", t.communicate).field("wait_seconds", t.wait);
  json.end_object();
}

// Writes the report's fields into an object the caller has opened, so callers add their own
// configuration beside them.
inline void write_report_fields(metrics::JsonWriter& json, const TrainingReport& r) {
  json.field("workers", r.workers).field("servers", r.servers);
  json.field("test_accuracy", r.test_accuracy).field("samples_per_second", r.samples_per_second);
  json.field("train_seconds", r.train_seconds).field("wall_seconds", r.wall_seconds);
  json.key("server").begin_object();
  json.field("updates", r.server_updates).field("wait_seconds", r.server_wait).field("update_seconds", r.server_update);
  json.field("dropped_pushes", r.dropped_pushes);  // backup workers: too late for their clock
  json.field("max_staleness", r.server_max_staleness);
  json.end_object();
  json.key("checkpoints").begin_object();
  json.field("written", r.checkpoints).field("seconds", r.checkpoint_seconds).field("bytes", r.checkpoint_bytes);
  json.field("last", r.last_checkpoint).field("resumed_from", r.resumed_from).field("clocks", r.clocks);
  json.field("stop_signal", r.stop_signal);
  json.end_object();
  json.key("epochs").begin_array();
  for (const EpochReport& e : r.epochs) {
    json.begin_object();
    json.field("epoch", e.epoch).field("train_loss", e.train_loss).field("train_accuracy", e.train_accuracy);
    json.field("test_loss", e.test_loss).field("test_accuracy", e.test_accuracy);
    json.field("samples", e.samples).field("seconds", e.seconds).field("samples_per_second", e.samples_per_second);
    json.field("eval_seconds", e.eval_seconds).field("elapsed_seconds", e.elapsed_seconds);
    json.field("checkpoint_seconds", e.checkpoint_seconds);
    write_times(json, e.times);
    json.end_object();
  }
  json.end_array();
  json.key("splits").begin_array();  // with TrainOptions::balance: the split from each change on
  for (const SplitChange& change : r.splits) {
    json.begin_object().field("clock", change.clock).key("split").begin_array();
    for (std::size_t samples : change.split) json.value(samples);
    json.end_array().end_object();
  }
  json.end_array();
  json.key("evaluations").begin_array();
  for (const Evaluation& v : r.evaluations) {
    json.begin_object();
    json.field("epoch", v.epoch).field("elapsed_seconds", v.elapsed_seconds).field("test_loss", v.test_loss);
    json.field("test_accuracy", v.test_accuracy).field("train_seconds", v.train_seconds);
    json.end_object();
  }
  json.end_array();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) throw Error(fmt::format("cannot create report file '{}': {}", path, std::strerror(errno)));
  out << text << '\n';
  out.flush();
  if (!out) throw Error(fmt::format("cannot write report file '{}': {}", path, std::strerror(errno)));
}

}  // namespace hpcps::ps
