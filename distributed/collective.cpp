#include "collective.hpp"

#include <chrono>
#include <string>
#include <thread>

#include "vkattn/errors.hpp"

namespace vkattn::distributed::detail {

void check_mpi(int code, const char* what) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw Error(std::string("MPI: ") + what + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

void agree(MPI_Comm comm, const std::function<void()>& check) {
    int rank = 0, ranks = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    std::string argument, message;
    int failed = ranks;  // this rank's index when its check threw, else "none" (ranks)
    try {
        check();
    } catch (const InvalidArgument& e) {
        argument = e.argument();
        message = std::string(e.what()).substr(argument.size() + 2);
        failed = rank;
    }
    int first = ranks;
    check_mpi(MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, comm), "agreeing on the arguments");
    if (first == ranks) return;
    // The failing rank's argument and message, to everyone.
    std::string text = argument + '\n' + message;
    int length = static_cast<int>(text.size());
    check_mpi(MPI_Bcast(&length, 1, MPI_INT, first, comm), "sharing an argument error");
    text.resize(static_cast<std::size_t>(length));
    check_mpi(MPI_Bcast(text.data(), length, MPI_CHAR, first, comm), "sharing an argument error");
    const std::size_t cut = text.find('\n');
    throw InvalidArgument(text.substr(0, cut), "rank " + std::to_string(first) + ": " + text.substr(cut + 1));
}

double wait_all(std::vector<MPI_Request>& requests, double timeout_s, const char* what) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(timeout_s);
    for (int spins = 0;; ++spins) {
        int done = 0;
        check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), what);
        if (done) break;
        if (Clock::now() > deadline)
            throw Error(std::string(what) + ": no answer from the neighbouring rank within " + std::to_string(timeout_s) +
                        " s (did it fail?).");
        if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));  // spin briefly, then yield
    }
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace vkattn::distributed::detail
