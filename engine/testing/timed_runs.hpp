// How the benchmarks time what they record (benchmark.cpp, clock_probe.cpp, attention_timing.cpp):
// runs one after another, each one batch with its own submission, waited on; GPU time from the
// batch's timestamps around `record`. Private to vkattn_testing.
#pragma once

#include <chrono>
#include <vector>

#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/testing/benchmark.hpp"

namespace vkattn::testing::timing {

// Warm-up (warm_up.runs at least, and until warm_up.ms of wall time have passed after the first),
// then `repeat` timed runs: `record(state, commands)` between the timestamps (after the batch's
// first barrier, so that no upload before it is timed), `upload(state)` before it on
// the first run, `download(state)` after it on the last. The timed runs' GPU times; `warmed`, the
// warm-up runs made.
template <class Upload, class Record, class Download>
std::vector<double> timed_runs(detail::Runtime& runtime, const WarmUp& warm_up, int repeat, Upload&& upload, Record&& record,
                               Download&& download, int* warmed = nullptr) {
    std::vector<double> samples;
    std::chrono::steady_clock::time_point since;  // the end of the first run, which uploads and builds the pipelines
    int warm = 0;
    for (; warm_up.wants_more(warm, since); ++warm) {
        Batch batch = detail::BatchAccess::make(runtime);
        detail::BatchState& state = detail::BatchAccess::state(batch);
        if (warm == 0) upload(state);
        const VkCommandBuffer commands = state.begin_op();
        state.time_begin();
        record(state, commands);
        state.time_end();
        batch.submit().wait();
        if (warm == 0) since = std::chrono::steady_clock::now();
    }
    if (warmed) *warmed = warm;
    for (int r = 0; r < repeat; ++r) {
        Batch batch = detail::BatchAccess::make(runtime);
        detail::BatchState& state = detail::BatchAccess::state(batch);
        if (warm == 0 && r == 0) upload(state);
        const VkCommandBuffer commands = state.begin_op();
        state.time_begin();
        record(state, commands);
        state.time_end();
        if (r == repeat - 1) download(state);
        Submission submission = batch.submit();
        submission.wait();
        samples.push_back(submission.gpu_ms());
    }
    return samples;
}

}  // namespace vkattn::testing::timing
