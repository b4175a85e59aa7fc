#include "vkattn/batch.hpp"

#include <cstring>
#include <vector>

#include "context_state.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "submit/host_copy.hpp"
#include "tensor/storage.hpp"
#include "tensor/storage_rules.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {
namespace detail {

BatchState::~BatchState() {
    if (slot) runtime->ring().release(*slot);
    if ((runtime->lost() || external) && !work.keep.empty())
        runtime->keep_until_idle(std::make_shared<InFlight>(std::move(work)));
}

VkCommandBuffer BatchState::begin_op() {
    runtime->ensure_usable();
    if (!external && !slot) slot = runtime->acquire_slot();
    const VkCommandBuffer commands = external ? external : runtime->ring().commands(*slot);
    VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                            VK_ACCESS_TRANSFER_WRITE_BIT;
    constexpr VkPipelineStageFlags kStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(commands, kStages | VK_PIPELINE_STAGE_HOST_BIT, kStages, 0, 1, &barrier, 0, nullptr, 0,
                         nullptr);
    if (!explicit_timing && !timing_begun) write_start_stamp();
    return commands;
}

void BatchState::time_begin() {
    explicit_timing = true;
    write_start_stamp();
}

void BatchState::write_start_stamp() {
    // The caller's command buffer has no queries of ours; some queue families write no timestamps.
    if (external || !runtime->device().caps().timestamps) return;
    if (!slot) slot = runtime->acquire_slot();
    // Timing restarts (the first operation began it before the engine narrowed it): a query is
    // written once per reset.
    if (timing_begun) vkCmdResetQueryPool(runtime->ring().commands(*slot), runtime->ring().queries(*slot), 0, 2);
    timing_ended = false;
    vkCmdWriteTimestamp(runtime->ring().commands(*slot), VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT,
                        runtime->ring().queries(*slot), 0);
    timing_begun = true;
}

void BatchState::time_end() {
    if (!timing_begun || timing_ended || external) return;
    vkCmdWriteTimestamp(runtime->ring().commands(*slot), VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                        runtime->ring().queries(*slot), 1);
    timing_ended = true;
}

const vk::Buffer& BatchState::host_buffer(std::uint64_t bytes, vk::MemoryIntent intent, const std::string& what) {
    // The slot's own buffers first: a steady loop of small transfers allocates nothing.
    if (!external) {
        if (!slot) slot = runtime->acquire_slot();
        if (std::shared_ptr<vk::Buffer> pooled = runtime->ring().host_buffer(*slot, bytes, intent, what)) return *pooled;
    }
    const VkBufferUsageFlags usage =
        intent == vk::MemoryIntent::upload ? VK_BUFFER_USAGE_TRANSFER_SRC_BIT : VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    auto buffer = std::make_shared<vk::Buffer>(runtime->device(), bytes, usage, intent, true, what);
    keep(buffer);
    return *buffer;
}

}  // namespace detail

namespace {

void check_transfer(const DeviceTensor& device, DType host_dtype, const std::array<std::int64_t, 4>& host_shape,
                    const std::array<std::int64_t, 4>& host_strides, const void* data, const char* host_name) {
    if (data == nullptr) throw InvalidArgument(host_name, "the host view has no data pointer.");
    if (host_dtype != device.dtype())
        throw InvalidArgument(host_name, "the host view is " + to_string(host_dtype) + " but the device tensor is " +
                                             to_string(device.dtype()) + "; transfers do not convert.");
    if (host_shape != device.shape())
        throw InvalidArgument(host_name, "the host view's shape differs from the device tensor's; they must match.");
    if (host_strides[3] != 1)
        throw InvalidArgument(host_name, "the host view's feature dimension must be contiguous (stride 1).");
    for (int i = 0; i < 4; ++i)
        if (host_strides[i] < 0) throw InvalidArgument(host_name, "the host view's strides must not be negative.");
    detail::check_block_rows(host_name, host_dtype, host_shape, host_strides);
}

}  // namespace

Batch::Batch(Context& context) : Batch(detail::ContextAccess::runtime(context)) {
    state_->tuning = &detail::ContextAccess::state(context).tuning;
}
Batch::Batch(detail::Runtime& runtime) : state_(std::make_unique<detail::BatchState>(runtime)) {}
Batch::~Batch() = default;
Batch::Batch(Batch&&) noexcept = default;
Batch& Batch::operator=(Batch&&) noexcept = default;

void Batch::upload(const DeviceTensor& to, const TensorView& from) { state_->upload(to, from); }
void Batch::download(const DeviceTensor& from, const MutableTensorView& to) { state_->download(from, to); }
void Batch::fill(const DeviceTensor& to, std::uint32_t word) { state_->fill(to, word); }

namespace detail {

void BatchState::upload(const DeviceTensor& to, const TensorView& from) {
    BatchState& s = *this;
    const detail::Storage& storage = detail::storage_of(to, *s.runtime, "to");
    detail::require_usage(storage, VK_BUFFER_USAGE_TRANSFER_DST_BIT, "to", "an upload");
    check_transfer(to, from.dtype, from.shape, from.strides, from.data, "from");
    const auto runs = detail::row_runs(to, from.strides);
    const std::uint64_t bytes = detail::packed_bytes(to);
    s.keep(detail::TensorAccess::storage(to));  // alive until the submission completes
    std::vector<std::byte> packed;
    const auto* host = static_cast<const std::byte*>(from.data);
    const VkCommandBuffer commands = s.begin_op();
    // Small single runs travel inside the command buffer (vkCmdUpdateBuffer: at most 64 KiB, in
    // words); the rest through a staging buffer filled now.
    if (runs.size() == 1 && bytes <= 65536 && bytes % 4 == 0 && runs[0].device % 4 == 0) {
        vkCmdUpdateBuffer(commands, storage.buffer.get(), runs[0].device, bytes, host + runs[0].host);
        return;
    }
    const vk::Buffer& staging = s.host_buffer(bytes, vk::MemoryIntent::upload, "the staging buffer of an upload");
    auto* out = static_cast<std::byte*>(staging.mapped());
    std::vector<VkBufferCopy> regions;
    regions.reserve(runs.size());
    for (const auto& run : runs) {
        std::memcpy(out + run.packed, host + run.host, run.bytes);
        regions.push_back({run.packed, run.device, run.bytes});
    }
    vkCmdCopyBuffer(commands, staging.get(), storage.buffer.get(), static_cast<std::uint32_t>(regions.size()),
                    regions.data());
}

void BatchState::download(const DeviceTensor& from, const MutableTensorView& to) {
    BatchState& s = *this;
    const detail::Storage& storage = detail::storage_of(from, *s.runtime, "from");
    detail::require_usage(storage, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, "from", "a download");
    check_transfer(from, to.dtype, to.shape, to.strides, to.data, "to");
    auto runs = detail::row_runs(from, to.strides);
    s.keep(detail::TensorAccess::storage(from));
    const vk::Buffer& readback = s.host_buffer(detail::packed_bytes(from), vk::MemoryIntent::readback,
                                               "the readback buffer of a download");
    const VkCommandBuffer commands = s.begin_op();
    std::vector<VkBufferCopy> regions;
    regions.reserve(runs.size());
    for (const auto& run : runs) regions.push_back({run.device, run.packed, run.bytes});
    vkCmdCopyBuffer(commands, storage.buffer.get(), readback.get(), static_cast<std::uint32_t>(regions.size()),
                    regions.data());
    s.on_complete([runs = std::move(runs), source = static_cast<const std::byte*>(readback.mapped()),
                   host = static_cast<std::byte*>(to.data)] {
        for (const auto& run : runs) std::memcpy(host + run.host, source + run.packed, run.bytes);
    });
}

void BatchState::fill(const DeviceTensor& to, std::uint32_t word) {
    BatchState& s = *this;
    const detail::Storage& storage = detail::storage_of(to, *s.runtime, "to");
    detail::require_usage(storage, VK_BUFFER_USAGE_TRANSFER_DST_BIT, "to", "a fill");
    const std::uint64_t bytes = detail::span_bytes(to);
    if (bytes != detail::packed_bytes(to) || to.offset_bytes() % 4 != 0 || bytes % 4 != 0)
        throw InvalidArgument("to", "fill needs a tensor without gaps whose byte offset and size are multiples of 4.");
    s.keep(detail::TensorAccess::storage(to));
    vkCmdFillBuffer(s.begin_op(), storage.buffer.get(), to.offset_bytes(), bytes, word);
}

}  // namespace detail

Submission Batch::submit() {
    detail::BatchState& s = *state_;
    if (s.external)
        throw InvalidArgument("batch", "it records into the caller's command buffer (record_into): finish() it, then "
                                       "submit the command buffer yourself.");
    s.runtime->ensure_usable();
    // Device writes made visible to the host, which reads downloads and mapped results after the wait.
    VkMemoryBarrier to_host{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    to_host.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(s.begin_op(), VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0, nullptr, 0, nullptr);
    s.time_end();
    const std::uint32_t slot = *s.slot;
    s.slot.reset();  // the ring owns it from here, submitted or not
    auto state = s.runtime->submit(slot, std::move(s.work), s.timing_begun);
    detail::Runtime& runtime = *s.runtime;
    const auto* tuning = s.tuning;
    state_ = std::make_unique<detail::BatchState>(runtime);
    state_->tuning = tuning;
    return detail::BatchAccess::submission(std::move(state), runtime);
}

RecordedWork Batch::finish() {
    detail::BatchState& s = *state_;
    if (!s.external)
        throw InvalidArgument("batch", "it records into one of the context's own command buffers: submit() it.");
    if (!s.work.on_complete.empty()) {
        // Downloads land in vkattn's readback buffers, which complete() reads: made visible to the
        // host here, whatever barrier the caller places after.
        VkMemoryBarrier to_host{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        to_host.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
        to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
        vkCmdPipelineBarrier(s.external, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0,
                             nullptr, 0, nullptr);
    }
    auto work = std::make_shared<detail::InFlight>(std::move(s.work));
    const VkCommandBuffer commands = s.external;
    detail::Runtime& runtime = *s.runtime;
    const auto* tuning = s.tuning;
    s.work = {};
    state_ = std::make_unique<detail::BatchState>(runtime);
    state_->external = commands;
    state_->tuning = tuning;
    return detail::BatchAccess::recorded(std::move(work));
}

RecordedWork::RecordedWork() = default;
RecordedWork::RecordedWork(RecordedWork&&) noexcept = default;
RecordedWork& RecordedWork::operator=(RecordedWork&&) noexcept = default;
RecordedWork::~RecordedWork() = default;

void RecordedWork::complete() {
    if (!work_) return;
    auto* work = static_cast<detail::InFlight*>(work_.get());
    for (auto& host_work : work->on_complete) host_work();
    work_.reset();
}

Submission::Submission() = default;
Submission::Submission(Submission&&) noexcept = default;
Submission& Submission::operator=(Submission&& other) noexcept {
    if (this != &other) {
        try {
            if (state_) runtime_->wait(state_);
        } catch (...) {
        }
        state_ = std::move(other.state_);
        runtime_ = other.runtime_;
    }
    return *this;
}

Submission::~Submission() {
    try {
        if (state_) runtime_->wait(state_);
    } catch (...) {
        // A lost device: the runtime keeps the submission's resources; wait() would have said so.
    }
}

void Submission::wait() {
    if (!state_) throw InvalidArgument("submission", "this Submission holds no work (default-constructed or moved from).");
    runtime_->wait(state_);
}

bool Submission::done() {
    if (!state_) return true;
    return runtime_->ring().poll(*state_);
}

double Submission::gpu_ms() const {
    if (!state_ || !state_->completed) throw InvalidArgument("submission", "the GPU time is known once the work is done.");
    return state_->gpu_ms;
}

}  // namespace vkattn
