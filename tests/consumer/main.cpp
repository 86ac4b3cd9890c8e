// Compiles the public headers through nothing but hpcps::hpcps's usage requirements, and touches
// each dependency the target promises (MPI, fmt, Eigen, CBLAS, zlib, OpenMP) so that a missing
// include directory or link library fails to build here rather than in a user's project.
// It makes no MPI call that needs MPI_Init, so it runs without mpiexec.
#include <hpcps/hpcps.hpp>

#include <Eigen/Core>
#include <cblas.h>
#include <fmt/core.h>
#include <mpi.h>
#include <omp.h>
#include <zlib.h>

#include <cstdio>
#include <string>

int main() {
  // MPI_Get_library_version may be called before MPI_Init.
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int mpi_version_len = 0;
  MPI_Get_library_version(mpi_version, &mpi_version_len);
  std::string mpi(mpi_version, static_cast<std::size_t>(mpi_version_len));
  if (auto eol = mpi.find('\n'); eol != std::string::npos) mpi.resize(eol);

  Eigen::VectorXd x = Eigen::VectorXd::LinSpaced(4, 1.0, 4.0);
  const double dot = cblas_ddot(4, x.data(), 1, x.data(), 1);  // 1 + 4 + 9 + 16

  try {
    throw hpcps::Error("consumer check");
  } catch (const hpcps::Error& e) {
    fmt::print("hpcps consumer: caught hpcps::Error(\"{}\")\n", e.what());
  }
  fmt::print("hpcps consumer: {}\n", HPCPS_CONSUMER_HOW);
  // A composition through the installed headers: the concepts check out and the type is complete.
  using Server = hpcps::SyncServer<hpcps::nn::Mlp<hpcps::nn::Relu>>;
  static_assert(sizeof(Server) > 0);
  static_assert(hpcps::backend::is_backend_v<Server::backend_type>);
  fmt::print("hpcps consumer: hpcps {} composes {} + {} + {}\n", hpcps::version_string, Server::backend_type::name,
             Server::sync_type::name, Server::optimizer_type::name);
  fmt::print("hpcps consumer: MPI \"{}\", zlib {}, OpenMP max threads {}, cblas_ddot {}\n", mpi,
             zlibVersion(), omp_get_max_threads(), dot);
  if (dot != 30.0) {
    std::fprintf(stderr, "hpcps consumer: cblas_ddot gave %g, expected 30\n", dot);
    return 1;
  }
  fmt::print("hpcps consumer OK\n");
  return 0;
}
