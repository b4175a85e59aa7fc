#include "collective.hpp"

#include <atomic>
#include <exception>
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

void bounded_collective(const std::function<int(MPI_Request*)>& start, std::shared_ptr<void> buffers, double timeout_s,
                        const char* what) {
    std::vector<MPI_Request> request(1);
    check_mpi(start(request.data()), what);
    try {
        wait_all(request, timeout_s, what);
    } catch (...) {
        // A collective can be neither cancelled nor freed: should the missing rank come after all,
        // it writes into these buffers, which therefore stay (leak).
        new std::shared_ptr<void>(std::move(buffers));
        throw;
    }
}

std::shared_ptr<OwnedComm> duplicate(MPI_Comm comm, double timeout_s) {
    auto made = std::make_shared<OwnedComm>();
    bounded_collective([&](MPI_Request* q) { return MPI_Comm_idup(comm, &made->comm, q); }, made, timeout_s,
                       "duplicating the communicator");
    return made;
}

std::exception_ptr agreement(MPI_Comm comm, const std::function<void()>& check, double timeout_s) {
    try {
        agree(comm, check, timeout_s);
    } catch (const InvalidArgument&) {
        return std::current_exception();
    } catch (const RankTimeout&) {
        throw;  // a collective still pending: not an agreement
    } catch (const Error&) {
        return std::current_exception();
    }
    return nullptr;
}

void agree(MPI_Comm comm, const std::function<void()>& check, double timeout_s) {
    int rank = 0, ranks = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    std::string argument, message;  // argument empty: an error that is not an InvalidArgument
    struct Shared {
        int failed = 0, first = 0, length = 0;
        std::string text;
    };
    const auto shared = std::make_shared<Shared>();
    shared->failed = ranks;  // this rank's index when its check threw, else "none" (ranks)
    try {
        check();
    } catch (const InvalidArgument& e) {
        argument = e.argument();
        message = std::string(e.what()).substr(argument.size() + 2);
        shared->failed = rank;
    } catch (const std::exception& e) {  // every rank must reach the agreement below, whatever was thrown
        message = e.what();
        shared->failed = rank;
    } catch (...) {
        message = "an exception that is not a std::exception";
        shared->failed = rank;
    }
    Shared& s = *shared;
    bounded_collective([&](MPI_Request* r) { return MPI_Iallreduce(&s.failed, &s.first, 1, MPI_INT, MPI_MIN, comm, r); },
                       shared, timeout_s, "agreeing on the arguments");
    if (s.first == ranks) return;
    // The failing rank's argument and message, to everyone.
    s.text = argument + '\n' + message;
    s.length = static_cast<int>(s.text.size());
    bounded_collective([&](MPI_Request* r) { return MPI_Ibcast(&s.length, 1, MPI_INT, s.first, comm, r); }, shared, timeout_s,
                       "sharing an argument error");
    s.text.resize(static_cast<std::size_t>(s.length));
    bounded_collective([&](MPI_Request* r) { return MPI_Ibcast(s.text.data(), s.length, MPI_CHAR, s.first, comm, r); },
                       shared, timeout_s, "sharing an argument error");
    const std::size_t cut = s.text.find('\n');
    const std::string what = "rank " + std::to_string(s.first) + ": " + s.text.substr(cut + 1);
    if (cut == 0) throw Error(what);
    throw InvalidArgument(s.text.substr(0, cut), what);
}

double wait_all(std::vector<MPI_Request>& requests, double timeout_s, const char* what) {
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(timeout_s);
    for (int spins = 0;; ++spins) {
        int done = 0;
        check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), what);
        if (done) break;
        if (Clock::now() > deadline)
            throw RankTimeout(std::string(what) + ": no answer from another rank within " + std::to_string(timeout_s) +
                        " s (did it fail?).");
        if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));  // spin briefly, then yield
    }
    return ms_since(start);
}

struct TransferProgress::State {
    std::vector<MPI_Request>* requests = nullptr;
    std::vector<std::shared_ptr<void>> buffers;
    double timeout_s = 0.0;
    std::chrono::steady_clock::time_point posted, completed;
    std::atomic<bool> done{false}, timed_out{false}, stop{false};
    // The timeout counts from the compute's end (finish()): a long step is no failure.
    std::atomic<std::int64_t> computed_ns{-1};
    std::string error;
    std::thread thread;
};

TransferProgress::TransferProgress(std::vector<MPI_Request>& requests, double timeout_s,
                                   std::vector<std::shared_ptr<void>> buffers)
    : state_(std::make_unique<State>()) {
    State& s = *state_;
    s.requests = &requests;
    s.buffers = std::move(buffers);
    s.timeout_s = timeout_s;
    s.posted = std::chrono::steady_clock::now();
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (requests.empty() || level < MPI_THREAD_SERIALIZED) return;
    s.thread = std::thread([&s] {
        while (!s.stop) {
            int flag = 0;
            const int code = MPI_Testall(static_cast<int>(s.requests->size()), s.requests->data(), &flag, MPI_STATUSES_IGNORE);
            if (code != MPI_SUCCESS) {
                s.error = "MPI_Testall failed";
                return;
            }
            if (flag) {
                s.completed = std::chrono::steady_clock::now();
                s.done = true;
                return;
            }
            if (const std::int64_t computed = s.computed_ns; computed >= 0) {
                const auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(computed)) +
                                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                          std::chrono::duration<double>(s.timeout_s));
                if (std::chrono::steady_clock::now() > deadline) {
                    s.timed_out = true;
                    return;
                }
            }
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    });
}

TransferProgress::~TransferProgress() {
    if (!state_) return;
    if (state_->thread.joinable()) {
        state_->stop = true;
        state_->thread.join();
    }
    // Completed requests are MPI_REQUEST_NULL; any other is still pending (an error ended the step).
    bool pending = false;
    for (MPI_Request& r : *state_->requests)
        if (r != MPI_REQUEST_NULL) {
            pending = true;
            MPI_Cancel(&r);
            MPI_Request_free(&r);
        }
    if (pending) new std::vector<std::shared_ptr<void>>(std::move(state_->buffers));  // kept for good: see the class
}

TransferProgress::Outcome TransferProgress::finish() {
    auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
    State& s = *state_;
    const auto computed = Clock::now();
    Outcome o;
    if (s.requests->empty()) return o;
    if (s.thread.joinable()) {
        s.computed_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(computed.time_since_epoch()).count();
        s.thread.join();  // it ends by itself: done, failed or timed out
        if (!s.error.empty()) throw Error("ring attention: " + s.error + ".");
        if (s.timed_out)
            throw RankTimeout("ring attention: no answer from the neighbouring rank within " + std::to_string(s.timeout_s) +
                        " s (did it fail?).");
        o.transfer_ms = ms(s.completed - s.posted);
        o.hidden_ms = ms(std::min(s.completed, computed) - s.posted);
        o.wait_ms = std::max(0.0, ms(s.completed - computed));
        return o;
    }
    // No progress thread: what the compute did not hide is what is left to wait for now.
    o.wait_ms = wait_all(*s.requests, s.timeout_s, "ring attention");
    o.transfer_ms = ms(Clock::now() - s.posted);
    o.hidden_ms = o.transfer_ms - o.wait_ms;
    return o;
}

}  // namespace vkattn::distributed::detail
