// Gradient throughput: backend::Cpu against backend::ThrustCuda, side by side in one run, on the
// demo's MLP, on a compute-heavy one (784-4096-4096-10) and on the CNN example's network (width
// 32), and what one worker step asks of the CUDA runtime: its calls per step, counted by CUPTI
// (every call, Thrust's, CUB's and cuBLAS's included), the host waits and allocations among them.
// JSON on stdout. Part of bench/gpu/check.sh; exits 77 without a CUDA device.
//
//   backend_throughput_cuda [--repeats 5] [--cpu-threads 16]
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "backend_throughput.hpp"
#include "hpcps/backend/cpu.hpp"
#include "hpcps/backend/thrust.hpp"

#if defined(HPCPS_BENCH_CUPTI)
#include <cupti.h>
#endif

namespace {

// Calls of the CUDA runtime and driver APIs, by name, while `on`.
struct CallCounts {
  bool on = false;
  std::map<std::string, std::size_t> runtime, driver;
};

#if defined(HPCPS_BENCH_CUPTI)
void CUPTIAPI count_call(void* user, CUpti_CallbackDomain domain, CUpti_CallbackId, const void* data) {
  auto& counts = *static_cast<CallCounts*>(user);
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (!counts.on || info->callbackSite != CUPTI_API_ENTER) return;
  ++(domain == CUPTI_CB_DOMAIN_RUNTIME_API ? counts.runtime : counts.driver)[info->functionName];
}
#endif

bool is_wait(const std::string& name) { return name.find("Synchronize") != std::string::npos; }
bool is_allocation(const std::string& name) {
  for (const char* word : {"Malloc", "Free", "MemAlloc", "MemFree", "HostAlloc", "MemHostAlloc", "HostRegister"}) {
    if (name.find(word) != std::string::npos) return true;
  }
  return false;
}

struct PerStep {
  double total = 0, waits = 0, allocations = 0;
};

PerStep per_step(const std::map<std::string, std::size_t>& calls, double steps) {
  PerStep p;
  for (const auto& [name, n] : calls) {
    p.total += static_cast<double>(n) / steps;
    if (is_wait(name)) p.waits += static_cast<double>(n) / steps;
    if (is_allocation(name)) p.allocations += static_cast<double>(n) / steps;
  }
  return p;
}

void write_counts(hpcps::metrics::JsonWriter& json, const std::map<std::string, std::size_t>& calls, double steps) {
  const PerStep p = per_step(calls, steps);
  json.field("total", p.total).field("host_waits", p.waits).field("allocations", p.allocations);
  json.key("by_name").begin_object();
  for (const auto& [name, n] : calls) json.field(name.c_str(), static_cast<double>(n) / steps);
  json.end_object();
}

// What one worker step does on the device (ps::Worker with a device backend): stage the batch,
// the gradient with its statistics deferred, the gradient's download, then the next parameters'
// upload. Counted over `steps` steps after two to warm up.
template <class Network>
PerStep count_step_calls(hpcps::metrics::JsonWriter& json, const char* name, const Network& net, std::size_t batch) {
  using Backend = hpcps::backend::ThrustCuda;
  const Backend backend(1);
  std::vector<float, Backend::host_allocator<float>> params, grad(net.parameter_count());
  std::vector<float> x;
  std::vector<std::int32_t> y;
  hpcps_bench::draw_problem(net, batch, 5, params, x, y);
  auto ws = net.make_workspace(backend, batch);
  auto device_params = backend.make_buffer(params.size());
  auto device_grad = backend.make_buffer(params.size());
  const auto step = [&] {
    backend.defer_stats(true);
    auto stats = net.gradient(backend, ws, Backend::data(device_params), x.data(), y.data(), batch,
                              Backend::data(device_grad));
    backend.defer_stats(false);
    backend.download(Backend::data(device_grad), grad.size(), grad.data());
    stats = backend.deferred_stats(stats);
    backend.upload(params.data(), params.size(), Backend::data(device_params));
    return stats;
  };
  step();
  step();
  CallCounts counts;
  constexpr int steps = 20;
#if defined(HPCPS_BENCH_CUPTI)
  CUpti_SubscriberHandle subscriber;
  const bool cupti = cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(count_call), &counts) ==
                         CUPTI_SUCCESS &&
                     cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API) == CUPTI_SUCCESS &&
                     cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API) == CUPTI_SUCCESS;
#else
  const bool cupti = false;
#endif
  counts.on = true;
  double loss = 0.0;
  for (int i = 0; i < steps; ++i) loss += step().loss_sum;
  counts.on = false;
#if defined(HPCPS_BENCH_CUPTI)
  cuptiUnsubscribe(subscriber);
#endif
  json.begin_object().field("network", name).field("batch", batch).field("steps", steps);
  json.field("counted", cupti).field("mean_loss", loss / steps / static_cast<double>(batch));
  json.key("runtime").begin_object();
  write_counts(json, counts.runtime, steps);
  json.end_object().key("driver").begin_object();
  write_counts(json, counts.driver, steps);
  json.end_object().end_object();
  const PerStep p = per_step(counts.runtime, steps);
  std::fprintf(stderr, "calls per step, %s batch %zu: %.1f runtime calls, %.1f host waits, %.1f allocations%s\n", name,
               batch, p.total, p.waits, p.allocations, cupti ? "" : " (CUPTI unavailable: not counted)");
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  if (!hpcps::backend::detail::cuda_device_available()) {
    std::fprintf(stderr, "no usable CUDA device\n");
    return 77;
  }
  int repeats = 5;
  int cpu_threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (flag == "--cpu-threads") cpu_threads = std::atoi(argv[i + 1]);
  }
  using hpcps::backend::Cpu;
  using hpcps::backend::ThrustCuda;
  hpcps::metrics::JsonWriter json;
  json.begin_object().field("benchmark", "backend_throughput_cuda").field("repeats", repeats);
  json.field("cpu_threads", cpu_threads);
  struct Case {
    std::string name;
    double cpu, cuda;
  };
  std::vector<Case> cases;
  json.key("results").begin_array();
  const std::vector<std::vector<std::size_t>> shapes{{784, 256, 128, 10}, {784, 4096, 4096, 10}};
  for (const auto& sizes : shapes) {
    for (std::size_t batch : {128u, 1024u}) {
      const hpcps::nn::Mlp<hpcps::nn::Relu> net(sizes);
      const double cpu = hpcps_bench::measure_backend<Cpu>(json, "cpu", sizes, batch, cpu_threads, repeats);
      const double cuda = hpcps_bench::measure_backend<ThrustCuda>(json, "cuda", sizes, batch, 1, repeats);
      cases.push_back({"mlp " + net.describe() + " batch " + std::to_string(batch), cpu, cuda});
    }
  }
  constexpr std::size_t width = 32;
  const hpcps_test::ExampleCnn cnn(hpcps::nn::Shape{1, 28, 28},
                                   {{width, 5, 2}, {}, {2}, {2 * width, 5, 2}, {}, {2}, {}, {128}, {}, {0.25f}, {10}});
  for (std::size_t batch : {128u, 1024u}) {
    const double flops = hpcps_bench::cnn_flops_per_sample(width) * static_cast<double>(batch);
    const double cpu = hpcps_bench::measure_network<Cpu>(json, "cpu", cnn, batch, cpu_threads, repeats, flops);
    const double cuda = hpcps_bench::measure_network<ThrustCuda>(json, "cuda", cnn, batch, 1, repeats, flops);
    cases.push_back({"cnn width 32 batch " + std::to_string(batch), cpu, cuda});
  }
  json.end_array();
  json.key("cases").begin_array();
  for (const auto& c : cases) {
    json.begin_object().field("name", c.name).field("cpu_samples_per_s", c.cpu).field("cuda_samples_per_s", c.cuda);
    json.field("cuda_over_cpu", c.cuda / c.cpu).end_object();
  }
  json.end_array();
  json.key("step_calls").begin_array();
  count_step_calls(json, "mlp 784-256-128-10", hpcps::nn::Mlp<hpcps::nn::Relu>({784, 256, 128, 10}), 128);
  // The CNN example's step holds every layer kernel: its counts are the summary's.
  const PerStep cnn_calls = count_step_calls(json, "cnn width 32", cnn, 128);
  json.end_array();
  json.key("cuda_calls_per_step").begin_object().field("network", "cnn width 32, batch 128");
  json.field("total", cnn_calls.total).field("host_waits", cnn_calls.waits).field("allocations", cnn_calls.allocations);
  json.end_object().end_object();
  std::printf("%s\n", json.str().c_str());
  return 0;
}
