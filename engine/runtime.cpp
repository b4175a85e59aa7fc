#include "runtime.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "plan/plan_cache.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {
namespace detail {
namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

bool env_flag(const char* name) {
    const std::string v = env(name);
    return !v.empty() && v != "0" && v != "false" && v != "off";
}

std::filesystem::path cache_file(const std::string& dir_option, const vk::Device& device) {
    std::string dir = dir_option.empty() ? env("VKATTN_PIPELINE_CACHE") : dir_option;
    if (dir == "none") return {};
    if (dir.empty()) {
        if (!env("XDG_CACHE_HOME").empty()) dir = env("XDG_CACHE_HOME") + "/vkattn";
        else if (!env("HOME").empty()) dir = env("HOME") + "/.cache/vkattn";
        else return {};
    }
    std::ostringstream name;
    name << "pipelines-" << std::hex << device.vendor_id() << '-' << device.device_id() << '-'
         << device.driver_version() << '-';
    for (auto byte : device.pipeline_cache_uuid()) name << static_cast<int>(byte);
    name << ".bin";
    return std::filesystem::path(dir) / name.str();
}

}  // namespace

Runtime::Runtime(const ContextOptions& options) : options_(options) {
    options_.validation = options.validation || env_flag("VKATTN_VALIDATION");
    options_.force_staging = options.force_staging || env_flag("VKATTN_FORCE_STAGING");
    poison_ = options.poison_outputs || env_flag("VKATTN_POISON");
    if (options_.device.empty()) options_.device = env("VKATTN_DEVICE");

    instance_ = std::make_unique<vk::Instance>(options_.validation);
    auto devices = vk::describe_devices(*instance_);
    const std::uint32_t index = vk::select_device(devices, options_.device);
    info_ = devices[index];
    device_ = std::make_unique<vk::Device>(*instance_, instance_->physical_devices()[index]);
    kernels_ = std::make_unique<vk::KernelCache>(*device_, cache_file(options_.pipeline_cache_dir, *device_));
    ring_ = std::make_unique<CommandRing>(*device_);
    plans_ = std::make_unique<PlanCache>();
}

Runtime::~Runtime() {
    // A lost submission may still be running (a timeout on a slow device): wait for it before its
    // resources, the command stream and the device go. A hung device reports VK_ERROR_DEVICE_LOST.
    if (lost_ && device_) vkDeviceWaitIdle(device_->get());
    // The plans and the ring first: what they hold may still be in use and joins the graveyard.
    plans_.reset();
    ring_.reset();
    // In the order they were kept; freeing one may keep more (a lost submission's program hands its
    // own resources over as it goes), so until none are left.
    for (;;) {
        std::vector<std::shared_ptr<void>> kept;
        {
            std::lock_guard lock(graveyard_mutex_);
            kept.swap(graveyard_);
        }
        if (kept.empty()) break;
        for (auto& resources : kept) resources.reset();
    }
    // Members go in reverse order; kernels must die before the device.
    kernels_.reset();
    device_.reset();
    instance_.reset();
}

std::uint32_t Runtime::acquire_slot() {
    ensure_usable();
    try {
        return ring_->acquire(options_.fence_timeout);
    } catch (const DeviceLost& e) {
        mark_lost(e.what());
        throw;
    }
}

std::shared_ptr<SubmissionState> Runtime::submit(std::uint32_t slot, InFlight work, bool timed) {
    ensure_usable();
    const std::uint64_t n = ++submissions_;
    try {
        return ring_->submit(slot, std::move(work), timed, n == options_.simulate_timeout_on_submission, queue_mutex_);
    } catch (const DeviceLost& e) {
        mark_lost(e.what());
        throw;
    }
}

void Runtime::mark_lost(const std::string& reason) {
    std::lock_guard lock(graveyard_mutex_);
    if (!lost_) lost_reason_ = reason;
    lost_ = true;
}

void Runtime::wait(const std::shared_ptr<SubmissionState>& submission) {
    if (submission->completed) return;
    ensure_usable();
    bool finished = false;
    std::string reason;
    try {
        finished = ring_->wait(*submission, options_.fence_timeout);
        if (!finished)
            reason = submission->simulated_timeout
                         ? "a fence timeout was simulated (ContextOptions::simulate_timeout_on_submission); the "
                           "device is treated as hung."
                         : "the dispatch chain did not finish within " + std::to_string(options_.fence_timeout.count()) +
                               " ms (vkWaitForFences returned VK_TIMEOUT); the device is treated as hung.";
    } catch (const DeviceLost& e) {
        reason = e.what();
    }
    if (finished) return;
    {
        std::lock_guard lock(graveyard_mutex_);
        // The submission (its fence, its resources) may still be in use by the device.
        graveyard_.push_back(submission);
    }
    mark_lost(reason);
    throw DeviceLost(reason);
}

void Runtime::ensure_usable() const {
    if (lost_)
        throw DeviceLost("this context's device was lost earlier (" + lost_reason_ +
                         "); it refuses further work: create a new Context.");
}

void Runtime::keep_until_idle(std::shared_ptr<void> resources) {
    std::lock_guard lock(graveyard_mutex_);
    graveyard_.push_back(std::move(resources));
}

std::uint64_t Runtime::device_memory_bytes() const {
    std::uint64_t limit = device_->caps().device_memory_bytes;
    if (options_.max_device_bytes != 0) limit = std::min(limit, options_.max_device_bytes);
    return limit;
}

std::uint64_t Runtime::max_binding_bytes() const {
    std::uint64_t limit = device_->caps().max_storage_buffer_range;
    if (options_.max_binding_bytes != 0) limit = std::min(limit, options_.max_binding_bytes);
    return limit;
}

}  // namespace detail

Context::Context(const ContextOptions& options) : runtime_(std::make_unique<detail::Runtime>(options)) {}
Context::~Context() = default;
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;

const DeviceInfo& Context::device() const { return runtime_->info(); }
std::vector<std::string> Context::validation_messages() const { return runtime_->instance().messages(); }
void Context::clear_validation_messages() { runtime_->instance().clear_messages(); }

std::vector<DeviceInfo> list_devices() {
    vk::Instance instance(false);
    return vk::describe_devices(instance);
}

}  // namespace vkattn
