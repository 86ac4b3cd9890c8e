// Gradient throughput: backend::Cpu against backend::ThrustCuda, side by side in one run, on the
// demo's MLP and on a compute-heavy one (784-4096-4096-10), batches up to 1024. JSON on stdout.
// Part of bench/gpu/check.sh; exits 77 without a CUDA device.
#include <cstdlib>
#include <string>

#include "backend_throughput.hpp"
#include "hpcps/backend/cpu.hpp"
#include "hpcps/backend/thrust.hpp"

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
  hpcps::metrics::JsonWriter json;
  json.begin_object().field("benchmark", "backend_throughput_cuda").field("repeats", repeats);
  json.key("results").begin_array();
  const std::vector<std::vector<std::size_t>> shapes{{784, 256, 128, 10}, {784, 4096, 4096, 10}};
  for (const auto& sizes : shapes) {
    for (std::size_t batch : {128u, 1024u}) {
      hpcps_bench::measure_backend<hpcps::backend::Cpu>(json, "cpu", sizes, batch, cpu_threads, repeats);
      hpcps_bench::measure_backend<hpcps::backend::ThrustCuda>(json, "cuda", sizes, batch, 1, repeats);
    }
  }
  json.end_array().end_object();
  std::printf("%s\n", json.str().c_str());
  return 0;
}
