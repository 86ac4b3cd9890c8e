// Catch2 main for tests that run under mpiexec. Each rank runs the same test cases; a rank writes
// its report into a per-rank buffer, and rank 0 prints them in rank order so output does not
// interleave. The job fails if any rank failed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <mpi.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  std::ostringstream report;
  auto* old_cout = std::cout.rdbuf(report.rdbuf());
  int failed = 0;
  {
    Catch::Session session;
    int rc = session.applyCommandLine(argc, argv);
    if (rc == 0) {
      failed = session.run();
    } else {
      failed = rc;
    }
  }
  std::cout.rdbuf(old_cout);

  // Gather every rank's report on rank 0 in rank order.
  std::string text = report.str();
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(size);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> offsets(size, 0);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::vector<char> all(rank == 0 ? total + 1 : 1);
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  int any_failed = 0;
  int mine = failed != 0 ? 1 : 0;
  MPI_Allreduce(&mine, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < size; ++r) {
      std::printf("---- rank %d of %d ----\n", r, size);
      std::fwrite(all.data() + offsets[r], 1, static_cast<std::size_t>(lengths[r]), stdout);
    }
    std::printf("==== %s on %d rank(s)\n", any_failed ? "FAILED" : "passed", size);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return any_failed;
}
