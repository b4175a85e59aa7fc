// What the ranks do together besides the ring's transfers: agreeing that every rank's arguments are
// good before any work (each rank then throws the first failing rank's error), and waits that give up
// after a timeout rather than hang on a rank that failed.
#pragma once

#include <mpi.h>

#include <functional>
#include <vector>

namespace vkattn::distributed::detail {

// Runs `check` on every rank; if it threw InvalidArgument on any, every rank throws the error of the
// lowest such rank, its message prefixed with the rank ("rank 2: ..."), its argument kept.
void agree(MPI_Comm comm, const std::function<void()>& check);

// Waits for `requests`, polling, at most `timeout_s` seconds; then throws vkattn::Error naming
// `what`. Returns the milliseconds waited.
double wait_all(std::vector<MPI_Request>& requests, double timeout_s, const char* what);

// A failed MPI call as vkattn::Error.
void check_mpi(int code, const char* what);

}  // namespace vkattn::distributed::detail
