// Gradient throughput: backend::Cpu against backend::ThrustOmp (and ThrustCpp), side by side in
// one run, on the demo's MLP and on a compute-heavy one. JSON on stdout.
//
//   backend_throughput [--repeats 5] [--threads 1,2]
#include <cstdlib>
#include <string>

#include "backend_throughput.hpp"
#include "hpcps/backend/cpu.hpp"
#include "hpcps/backend/thrust.hpp"

int main(int argc, char** argv) {
  int repeats = 5;
  std::vector<std::size_t> threads{1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (flag == "--threads") threads = hpcps_bench::parse_list(argv[i + 1]);
  }
  const std::vector<std::vector<std::size_t>> shapes{{784, 256, 128, 10}, {784, 4096, 4096, 10}};
  hpcps::metrics::JsonWriter json;
  json.begin_object().field("benchmark", "backend_throughput").field("repeats", repeats);
  json.key("results").begin_array();
  for (const auto& sizes : shapes) {
    const std::size_t batch = sizes[1] > 1024 ? 256 : 128;
    for (std::size_t t : threads) {
      hpcps_bench::measure_backend<hpcps::backend::Cpu>(json, "cpu", sizes, batch, static_cast<int>(t), repeats);
      hpcps_bench::measure_backend<hpcps::backend::ThrustOmp>(json, "thrust-omp", sizes, batch, static_cast<int>(t), repeats);
      if (t == 1) hpcps_bench::measure_backend<hpcps::backend::ThrustCpp>(json, "thrust-cpp", sizes, batch, 1, repeats);
    }
  }
  json.end_array().end_object();
  std::printf("%s\n", json.str().c_str());
  return 0;
}
