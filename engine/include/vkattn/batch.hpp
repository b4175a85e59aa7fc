// Batched, asynchronous submission: a Batch records many operations (uploads, attention plans,
// cache appends, downloads) into one command buffer; submit() hands it to the device and returns a
// Submission to wait on or poll. Several submissions may be in flight on one Context.
//
// Ordering: operations run in the order they were added, across batches too (one queue, and a
// barrier before every operation that makes all earlier device writes visible to it). Batches
// recorded into the caller's command buffers (vkattn/vulkan.hpp) are ordered by where and when the
// caller submits them.
#pragma once

#include <chrono>
#include <memory>

#include "vkattn/device_tensor.hpp"
#include "vkattn/tensor.hpp"

namespace vkattn {

class Context;

namespace detail {
class Runtime;
struct InFlight;
struct BatchState;
struct SubmissionState;
struct BatchAccess;  // the engine's way to record into a batch (not API)
}  // namespace detail

class Submission {
public:
    Submission();
    // Waits for the work (a Submission is a promise that the host memory its downloads write
    // stays valid until then); errors are swallowed here, call wait() to see them.
    ~Submission();
    Submission(Submission&&) noexcept;
    Submission& operator=(Submission&&) noexcept;

    // Blocks until the device is done and the downloads have reached host memory. A wait longer
    // than ContextOptions::fence_timeout throws DeviceLost (the context then refuses further work).
    void wait();
    // Whether the work is done (completing it when it is); never blocks.
    bool done();
    // GPU time of the batch's operations (timestamps), once done; 0 where the queue family writes
    // no timestamps (a caller's queue, vkattn/vulkan.hpp).
    double gpu_ms() const;

private:
    friend struct detail::BatchAccess;
    std::shared_ptr<detail::SubmissionState> state_;
    detail::Runtime* runtime_ = nullptr;
};

// What a batch recorded into the caller's command buffer (vkattn/vulkan.hpp) holds on to: the
// memory its commands use (tensors, staging, scratch) and its downloads' copies into host memory.
// The caller keeps it until its submission of that command buffer has completed, then calls
// complete(). Destroying it frees the memory without the downloads' copies. Either while the device
// may still run the commands is the caller's error, like freeing a buffer in use; it must not
// outlive its Context.
class RecordedWork {
public:
    RecordedWork();
    ~RecordedWork();
    RecordedWork(RecordedWork&&) noexcept;
    RecordedWork& operator=(RecordedWork&&) noexcept;

    // Copies the downloads into host memory and frees the rest; once.
    void complete();

private:
    friend struct detail::BatchAccess;
    std::shared_ptr<void> work_;
};

class Batch {
public:
    explicit Batch(Context& context);
    // An unsubmitted batch of the context's is discarded: nothing it recorded runs. (One recording
    // into the caller's command buffer has recorded already: see record_into.)
    ~Batch();
    Batch(Batch&&) noexcept;
    Batch& operator=(Batch&&) noexcept;

    // Host data into a device tensor of the same shape and dtype. The host bytes are copied when
    // this is called; the caller's memory may be reused at once.
    void upload(const DeviceTensor& to, const TensorView& from);
    // A device tensor into host memory of the same shape and dtype, written when the submission
    // completes (wait() or done()); the memory must stay valid until then.
    void download(const DeviceTensor& from, const MutableTensorView& to);
    // The 4-byte word `word` repeated over a contiguous tensor's bytes (0 zeroes any dtype;
    // 0x7fc00000 is an f32 NaN, 0x7e007e00 two f16 NaNs). Its offset and size must be multiples of 4.
    void fill(const DeviceTensor& to, std::uint32_t word);

    // Submits everything recorded; the batch is empty afterwards and may record again. A batch
    // recording into the caller's command buffer is finished instead (InvalidArgument).
    Submission submit();
    // A batch recording into the caller's command buffer (record_into, vkattn/vulkan.hpp): ends
    // vkattn's part (nothing more is recorded for it; downloads get their barrier to the host) and
    // returns what its commands need until the caller's submission completes. The batch is empty
    // afterwards and may record again into the same command buffer. InvalidArgument for a batch of
    // the context's own.
    RecordedWork finish();

private:
    friend struct detail::BatchAccess;
    explicit Batch(detail::Runtime& runtime);
    std::unique_ptr<detail::BatchState> state_;
};

}  // namespace vkattn
