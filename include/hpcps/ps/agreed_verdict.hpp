#pragma once
// Checks that one rank may fail and the others not (a bad option, an unreadable file) end in the
// same exception on every rank: the ranks agree on whether anyone found a problem, and the lowest
// rank that did reports its sentence for all, so nobody is left waiting in a later collective.
#include <string>

#include <mpi.h>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/error.hpp"

namespace hpcps::ps {

// Collective over `comm`. Returns if no rank has a problem; else every rank throws a
// CollectiveError: the lowest rank with a problem reports "<context>: <problem>", the others
// carry "<context>: <elsewhere>" silently.
inline void throw_if_any_rank(const comm::Communicator& comm, const std::string& problem, const std::string& context,
                              const std::string& elsewhere = "another rank found a problem") {
  const int reporter = comm.allreduce_value(problem.empty() ? comm.size() : comm.rank(), MPI_MIN);
  if (reporter == comm.size()) return;
  throw CollectiveError(context + ": " + (problem.empty() ? elsewhere : problem), comm.rank() == reporter);
}

}  // namespace hpcps::ps
