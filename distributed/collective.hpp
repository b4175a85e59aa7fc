// What the ranks do together besides the ring's transfers: agreeing that every rank's arguments are
// good before any work (each rank then throws the first failing rank's error), and waits that give up
// after a timeout rather than hang on a rank that failed.
#pragma once

#include <mpi.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "vkattn/errors.hpp"

namespace vkattn::distributed::detail {

// The distributed target's stopwatch: milliseconds since `t`.
using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Runs `check` on every rank; if it threw on any, every rank throws the error of the lowest such
// rank, its message prefixed with the rank ("rank 2: ..."): an InvalidArgument as one (its argument
// kept), anything else as vkattn::Error. Its
// collectives wait at most `timeout_s` each (a rank that never calls): then vkattn::Error.
void agree(MPI_Comm comm, const std::function<void()>& check, double timeout_s);

// A non-blocking collective that `start` posts, waited for at most `timeout_s` (then vkattn::Error
// naming `what`); `buffers` owns the memory it reads and writes, kept alive for good if it times out.
void bounded_collective(const std::function<int(MPI_Request*)>& start, std::shared_ptr<void> buffers, double timeout_s,
                        const char* what);

// A call's own communicator, freed with its last owner when nothing can be in flight on it. A call
// that ends by an exception with messages or a collective pending leaves them there, and a freed
// communicator's context can be reused by the next duplicate, where a stray message would then
// match: such a communicator is never freed. Its users say when traffic starts and ends.
struct OwnedComm {
    MPI_Comm comm = MPI_COMM_NULL;
    bool quiet = false;  // nothing pending: safe to free
    OwnedComm() = default;
    OwnedComm(const OwnedComm&) = delete;
    OwnedComm& operator=(const OwnedComm&) = delete;
    ~OwnedComm() {
        if (quiet && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    }
};

// A duplicate of `comm` (MPI_Comm_idup, waited for at most `timeout_s`), not yet quiet.
std::shared_ptr<OwnedComm> duplicate(MPI_Comm comm, double timeout_s);

// agree() without the throw: the agreed error, if any (every collective of it completed).
std::exception_ptr agreement(MPI_Comm comm, const std::function<void()>& check, double timeout_s);

// A wait on another rank that gave up (its operations are still pending).
class RankTimeout : public Error {
public:
    using Error::Error;
};

// Waits for `requests`, polling, at most `timeout_s` seconds; then throws RankTimeout naming
// `what`. Returns the milliseconds waited.
double wait_all(std::vector<MPI_Request>& requests, double timeout_s, const char* what);

// Drives one ring step's transfers while the step's compute runs. MPI moves a large message only
// inside MPI calls (rendezvous), so left alone a transfer would wait for the step's end: a thread
// tests the requests meanwhile (allowed from MPI_THREAD_SERIALIZED on, since the computing thread
// makes no MPI call until finish()), noting when they completed. Below that level, finish() waits as
// wait_all does.
//
// The buffers the requests read and write are kept alive by `buffers`: if the step ends by an
// exception with requests still pending (this rank's compute failed, or a neighbour timed out), the
// destructor cancels what it can and frees the requests, and keeps the buffers (leaks them) rather
// than let MPI write into freed memory. The job should end then (vkattn/distributed.hpp).
class TransferProgress {
public:
    TransferProgress(std::vector<MPI_Request>& requests, double timeout_s, std::vector<std::shared_ptr<void>> buffers);
    ~TransferProgress();
    struct Outcome {
        double wait_ms = 0.0;      // after the compute, until the transfer completed
        double transfer_ms = 0.0;  // posting to completion
        double hidden_ms = 0.0;    // of which during the compute
    };
    // Call when the compute is done: waits for the transfer (at most the timeout: vkattn::Error).
    Outcome finish();

private:
    struct State;
    std::unique_ptr<State> state_;
};

// A failed MPI call as vkattn::Error.
void check_mpi(int code, const char* what);

}  // namespace vkattn::distributed::detail
