#include "runtime.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "vk/device_facts.hpp"
#include "vk/newer_extensions.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/vulkan.hpp"

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

// Whether $name turns something off (set to 0, false or off).
bool env_off(const char* name) {
    const std::string v = env(name);
    return v == "0" || v == "false" || v == "off";
}

// The directory of the pipeline cache and the tuning table (empty: none).
std::filesystem::path cache_dir(const std::string& dir_option) {
    std::string dir = dir_option.empty() ? env("VKATTN_PIPELINE_CACHE") : dir_option;
    if (dir == "none") return {};
    if (dir.empty()) {
        if (!env("XDG_CACHE_HOME").empty()) dir = env("XDG_CACHE_HOME") + "/vkattn";
        else if (!env("HOME").empty()) dir = env("HOME") + "/.cache/vkattn";
        else return {};
    }
    return dir;
}

std::filesystem::path cache_file(const std::string& dir_option, const vk::Device& device) {
    const std::filesystem::path dir = cache_dir(dir_option);
    if (dir.empty()) return {};
    std::ostringstream name;
    name << "pipelines-" << std::hex << device.vendor_id() << '-' << device.device_id() << '-'
         << device.driver_version() << '-';
    for (auto byte : device.pipeline_cache_uuid()) name << static_cast<int>(byte);
    name << ".bin";
    return dir / name.str();
}

// Why the device's own creation left VK_KHR_cooperative_matrix (`extension`) off where the device
// offers it.
std::string layer_predates(const vk::Instance& instance, const char* extension) {
    const std::uint32_t v = instance.validation_layer_version();
    return "the validation layer (" + std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) +
           "." + std::to_string(VK_API_VERSION_PATCH(v)) + ") predates " + extension + " and would reject its feature structure";
}
// Why it left VK_KHR_shader_bfloat16's features off.
std::string bf16_matrices_not_enabled(const vk::Instance& instance) {
    if (!instance.layer_knows(kBfloat16HeaderVersion)) return layer_predates(instance, VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME);
    return vk::kNoBf16MatrixFeatures;
}

}  // namespace

void Runtime::read_environment() {
    options_.force_staging = options_.force_staging || env_flag("VKATTN_FORCE_STAGING");
    options_.kernel_statistics = options_.kernel_statistics || env_flag("VKATTN_KERNEL_STATISTICS");
    poison_ = options_.poison_outputs || env_flag("VKATTN_POISON");
}

Runtime::Runtime(const ContextOptions& options) : options_(options) {
    read_environment();
    options_.validation = options.validation || env_flag("VKATTN_VALIDATION");
    if (options_.device.empty()) options_.device = env("VKATTN_DEVICE");

    instance_ = std::make_unique<vk::Instance>(options_.validation);
    const vk::NewerQueries queries = vk::newer_queries(*instance_);
    auto devices = vk::describe_devices(*instance_, queries);
    const std::uint32_t index = vk::select_device(devices, options_.device);
    info_ = devices[index];
    const bool layer_knows = instance_->layer_knows(kCooperativeMatrixHeaderVersion);
    const bool layer_knows_reconvergence = instance_->layer_knows(kMaximalReconvergenceHeaderVersion);
    const vk::MatrixTile tile = vk::f16_matrix_tile(info_.cooperative_matrix, true, vk::forced_matrix_tile());
    device_ = std::make_unique<vk::Device>(
        instance_->physical_devices()[index],
        vk::DeviceOptions{.newer_structures = layer_knows,
                          .f16_matrix_tile = tile,
                          .bf16_structures = queries.bf16,
                          .bf16_matrix_shape = vk::takes_bf16_matrices(info_.cooperative_matrix),
                          .flexible_matrix_shapes = vk::matrices_need_flexible_dimensions(info_.cooperative_matrix, tile),
                          .workgroup_matrix_granularity = vk::workgroup_matrix_granularities(info_.cooperative_matrix),
                          .workgroup_matrix_bf16_granularity = vk::workgroup_matrix_granularities(info_.cooperative_matrix, "bf16"),
                          .workgroup_matrices = queries.matrix2 && queries.spirv_1_6,
                          .maximal_reconvergence = layer_knows_reconvergence && !env_off("VKATTN_MAXIMAL_RECONVERGENCE"),
                          .kernel_statistics = options_.kernel_statistics});
    vk::describe_matrix_units(info_, device_->available(), device_->features(),
                              layer_predates(*instance_, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME), bf16_matrices_not_enabled(*instance_),
                              "the instance is not of Vulkan 1.3, or a validation layer older than VK_NV_cooperative_matrix2 is on");
    start();
}

namespace {

bool at_least_1_2(std::uint32_t version) {
    return VK_API_VERSION_MAJOR(version) > 1 || (VK_API_VERSION_MAJOR(version) == 1 && VK_API_VERSION_MINOR(version) >= 2);
}

std::string version_text(std::uint32_t v) {
    return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v));
}

// Everything about the caller's objects that can be checked before vkattn uses them.
void check_caller_device(const VulkanDevice& caller, const ContextOptions& options) {
    if (!options.device.empty())
        throw InvalidArgument("device", "a context on the caller's VkDevice uses its physical device; leave "
                                        "ContextOptions::device empty.");
    if (options.validation)
        throw InvalidArgument("validation", "a context on the caller's VkDevice cannot enable layers: the caller's "
                                            "instance decides them (and receives their messages).");
    if (caller.instance == VK_NULL_HANDLE) throw InvalidArgument("instance", "it is VK_NULL_HANDLE.");
    if (caller.physical_device == VK_NULL_HANDLE) throw InvalidArgument("physical_device", "it is VK_NULL_HANDLE.");
    if (caller.device == VK_NULL_HANDLE) throw InvalidArgument("device", "it is VK_NULL_HANDLE.");
    if (caller.create_info == nullptr)
        throw InvalidArgument("create_info", "vkattn needs the VkDeviceCreateInfo the device was created with: Vulkan "
                                             "cannot be asked afterwards which features were enabled.");
    if (!at_least_1_2(caller.api_version))
        throw InvalidArgument("api_version", "the instance was created for Vulkan " + version_text(caller.api_version) +
                                                 ", and vkattn needs 1.2 or later (VkApplicationInfo::apiVersion).");
    std::uint32_t count = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(caller.physical_device, &count, nullptr);
    std::vector<VkQueueFamilyProperties> families(count);
    vkGetPhysicalDeviceQueueFamilyProperties(caller.physical_device, &count, families.data());
    if (caller.queue_family >= count)
        throw InvalidArgument("queue_family", "the device has " + std::to_string(count) + " queue families; " +
                                                  std::to_string(caller.queue_family) + " is not one of them.");
    if (!(families[caller.queue_family].queueFlags & VK_QUEUE_COMPUTE_BIT))
        throw InvalidArgument("queue_family", "family " + std::to_string(caller.queue_family) +
                                                  " has no VK_QUEUE_COMPUTE_BIT; vkattn runs compute shaders.");
    std::uint32_t created = 0;
    const VkDeviceCreateInfo& info = *caller.create_info;
    for (std::uint32_t i = 0; i < info.queueCreateInfoCount; ++i)
        // vkGetDeviceQueue reaches only queues created without flags (protected ones need vkGetDeviceQueue2).
        if (info.pQueueCreateInfos[i].queueFamilyIndex == caller.queue_family && info.pQueueCreateInfos[i].flags == 0)
            created += info.pQueueCreateInfos[i].queueCount;
    if (caller.queue_index >= created)
        throw InvalidArgument("queue_index", "the create info made " + std::to_string(created) + " unprotected queue(s) of family " +
                                                 std::to_string(caller.queue_family) + "; index " +
                                                 std::to_string(caller.queue_index) + " is not one of them.");
}

}  // namespace

Runtime::Runtime(const VulkanDevice& caller, const ContextOptions& options) : options_(options) {
    check_caller_device(caller, options);
    read_environment();
    instance_ = vk::Instance::adopt(caller.instance);
    const auto physicals = instance_->physical_devices();
    const auto found = std::find(physicals.begin(), physicals.end(), caller.physical_device);
    if (found == physicals.end())
        throw InvalidArgument("physical_device", "it is not one of the instance's physical devices.");
    info_ = vk::describe_devices(*instance_, {})[static_cast<std::size_t>(found - physicals.begin())];
    if (!info_.rejected.empty()) throw InvalidArgument("physical_device", info_.name + " cannot be used: " + info_.rejected + ".");
    const vk::DeviceFeatures enabled = vk::enabled_features(caller.physical_device, *caller.create_info, caller.api_version);
    // Flexible shapes count where the caller enabled their feature (which the device then supports).
    if (enabled.flexible_matrices || enabled.workgroup_matrices)
        for (CooperativeMatrixShape& shape : vk::flexible_matrix_shapes(caller.instance, caller.physical_device))
            info_.cooperative_matrix.push_back(std::move(shape));
    info_.fp16_storage = enabled.storage_16bit;
    info_.fp16_arithmetic = enabled.float16;
    info_.int8_arithmetic = enabled.int8;
    device_ = std::make_unique<vk::Device>(caller.physical_device, caller.device, caller.queue_family,
                                           caller.queue_index, enabled,
                                           vk::DeviceOptions{.f16_matrix_tile = vk::f16_matrix_tile(info_.cooperative_matrix, enabled.flexible_matrices,
                                                                                                    vk::forced_matrix_tile()),
                                                             .bf16_matrix_shape = vk::takes_bf16_matrices(info_.cooperative_matrix,
                                                                                                          enabled.flexible_matrices),
                                                             .flexible_matrix_shapes = enabled.flexible_matrices,
                                                             .workgroup_matrix_granularity = vk::workgroup_matrix_granularities(info_.cooperative_matrix),
                                                             .workgroup_matrix_bf16_granularity =
                                                                 vk::workgroup_matrix_granularities(info_.cooperative_matrix, "bf16"),
                                                             .workgroup_matrices = enabled.workgroup_matrices,
                                                             .maximal_reconvergence = !env_off("VKATTN_MAXIMAL_RECONVERGENCE"),
                                                             .kernel_statistics = options_.kernel_statistics});
    info_.features_not_enabled = vk::features_not_enabled(device_->available(), enabled);
    vk::describe_matrix_units(info_, device_->available(), enabled,
                              "the caller's device was created without VK_KHR_cooperative_matrix's cooperativeMatrix, vulkanMemoryModel and shaderFloat16",
                              "the caller's device was created without VK_KHR_shader_bfloat16's shaderBFloat16Type and "
                              "shaderBFloat16CooperativeMatrix",
                              "the caller's device was created without VK_NV_cooperative_matrix2's workgroup scope, flexible "
                              "dimensions, tensor addressing, reductions, conversions and element operations, or maintenance4, "
                              "or its instance for Vulkan below 1.3");
    if (caller.queue_mutex) queue_mutex_ = caller.queue_mutex;
    start();
}

void Runtime::start() {
    info_.maximal_reconvergence = device_->features().maximal_reconvergence;
    device_->lower_loop_limit(options_.max_loop_iterations);
    kernels_ = std::make_unique<vk::KernelCache>(*device_, cache_file(options_.pipeline_cache_dir, *device_));
    ring_ = std::make_unique<CommandRing>(*device_);
}

std::filesystem::path Runtime::cache_directory() const { return cache_dir(options_.pipeline_cache_dir); }

Runtime::~Runtime() {
    // A lost submission may still be running (a timeout on a slow device): wait for it before its
    // resources, the command stream and the device go. A hung device reports VK_ERROR_DEVICE_LOST.
    if (lost_ && device_) {
        if (device_->adopted()) {
            // The caller's device may run the caller's own work: wait for our queue only, holding
            // the lock its submissions take.
            std::lock_guard lock(*queue_mutex_);
            vkQueueWaitIdle(device_->queue());
        } else {
            vkDeviceWaitIdle(device_->get());
        }
    }
    // The ring first: what it holds may still be in use and joins the graveyard (the plans, one
    // floor up, went before the runtime and left theirs there).
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
        return ring_->submit(slot, std::move(work), timed, n == options_.simulate_timeout_on_submission, *queue_mutex_);
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

std::vector<DeviceInfo> list_devices() {
    vk::Instance instance(false);
    return vk::describe_devices(instance, vk::newer_queries(instance));
}

}  // namespace vkattn
