// The context: one Vulkan instance, one device, one compute queue, and the caches that make repeated
// calls cheap (pipelines, persisted on disk). Create one and pass it to vkattn::attention.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vkattn {

struct VulkanDevice;  // vkattn/vulkan.hpp

namespace detail {
struct ContextState;
struct ContextAccess;  // the engine's own way to a Context's Runtime (not API)
}

struct MemoryHeap {
    std::uint64_t bytes = 0;
    bool device_local = false;
};

// One product shape a device's matrix units take (VK_KHR_cooperative_matrix): A is m×k, B k×n, C and
// the result m×n; component types as "f16", "bf16", "f32", "i8", "u8", "i32", "e4m3", ...
// A flexible shape (VK_NV_cooperative_matrix2's flexible dimensions, listed where the device
// supports them) gives granularities: any multiples of m, n and k up to max_dimension.
struct CooperativeMatrixShape {
    std::uint32_t m = 0, n = 0, k = 0;
    std::string a, b, c, result;
    std::string scope;  // "subgroup" (the common one), "workgroup", ...
    bool saturating = false;
    bool flexible = false;
    std::uint32_t max_dimension = 0;  // a flexible shape's
    std::uint32_t workgroup_invocations = 0;  // a flexible workgroup-scope shape's: the workgroup size it is for
};

// What `vk-attn devices` shows and what device selection ranks.
struct DeviceInfo {
    std::uint32_t index = 0;
    std::string name;
    std::string type;  // "discrete", "integrated", "virtual", "cpu", "other"
    std::string driver;
    std::string api_version;
    std::uint32_t subgroup_size = 0;
    std::uint32_t shared_memory_bytes = 0;
    std::uint64_t max_storage_buffer_range = 0;
    bool fp16_storage = false;
    bool fp16_arithmetic = false;
    bool int8_arithmetic = false;
    // Shaders keep IEEE NaN and ±∞ (shaderSignedZeroInfNanPreserveFloat32): NaN and ±∞ inputs then
    // have the effects docs/SEMANTICS.md lists; without it only the masking rules are guaranteed.
    bool inf_nan_preserve = false;
    std::vector<MemoryHeap> heaps;
    bool default_choice = false;  // the one Context{} would pick
    std::string rejected;         // why it cannot be used (empty when usable)
    // A Context on the caller's device (vkattn/vulkan.hpp): the optional features the device
    // offers but was created without, each with what vkattn cannot do without it.
    std::vector<std::string> features_not_enabled;

    // What decides how work is cut for the device (vk/device_facts.hpp).
    std::uint32_t vendor_id = 0, device_id = 0;
    std::string uuid;  // deviceUUID in hex: the key of a measured tuning
    // Compute units (SMs, CUs, shader cores) where an extension tells them (0: unknown), and which.
    std::uint32_t compute_units = 0;
    std::string compute_units_source;
    // The subgroup sizes a compute pipeline may require (VK_EXT_subgroup_size_control, core in 1.3);
    // min = max = subgroup_size without it.
    std::uint32_t min_subgroup_size = 0, max_subgroup_size = 0;
    bool subgroup_size_control = false;
    std::uint32_t max_workgroup_invocations = 0;
    std::vector<CooperativeMatrixShape> cooperative_matrix;  // empty: no VK_KHR_cooperative_matrix
    // bf16 and fp8 as shader types (VK_KHR_shader_bfloat16, VK_EXT_shader_float8 offered), and as the
    // operands of one of the cooperative-matrix shapes.
    bool bf16_shader = false, bf16_cooperative_matrix = false;
    bool fp8_shader = false, fp8_cooperative_matrix = false;
    // Whether the cooperative-matrix kernels (FusedKernel::coopmat, GemmKernel::coopmat) run on the
    // matrix units: VK_KHR_cooperative_matrix enabled with the 16×16×16 f16 × f16 + f32 subgroup
    // shape they are built for (a shape of its own, or a flexible one it is a multiple of, with
    // VK_NV_cooperative_matrix2's flexible dimensions enabled), and this build has their shaders. Else they run their portable
    // implementation, and matrix_units_off says why (empty where the device has no matrix units).
    // A context's own device enables the units unless a validation layer older than the extension
    // is on; a context on the caller's device uses them where its create info enabled them.
    bool matrix_units = false;
    // On the units, their tile: "16x16x16", or the parts the kernels' 16 × 16 matrices are made of
    // where the device lists no such shape ("8x8x16": Intel's Arc; $VKATTN_MATRIX_TILE forces one).
    std::string matrix_tile;
    // Whether the kernels run with maximal reconvergence (VK_KHR_shader_maximal_reconvergence, where
    // offered and enabled; $VKATTN_MAXIMAL_RECONVERGENCE=0 turns it off): subgroup operations after a
    // per-lane branch then see the whole subgroup (docs/design/GPU_KERNELS.md, "Reconvergence").
    bool maximal_reconvergence = false;
    std::string matrix_units_off;
    // Whether bf16 storage multiplies on the matrix units too (bf16 operands: VK_KHR_shader_bfloat16
    // enabled with a 16×16×16 bf16 × bf16 + f32 shape, and this build has those shaders, which need
    // a glslang >= 15.3). Else, where matrix_units holds, the cooperative-matrix kernels refuse bf16
    // storage by name and bf16_matrix_units_off says why.
    bool bf16_matrix_units = false;
    std::string bf16_matrix_units_off;
    // Whether the workgroup-matrix kernels (VariantOverrides::workgroup_matrices, shaders/flash_cm2.comp)
    // run on the driver's workgroup-scope matrices rather than their portable twin: matrix_units, VK_NV_cooperative_matrix2's workgroup scope, flexible
    // dimensions, tensor addressing, reductions, conversions and element operations enabled, a
    // flexible f16 x f16 + f32 workgroup shape offered, Vulkan 1.3 (SPIR-V 1.6), and this build has
    // the kernel (a glslang >= 15). Else workgroup_matrices_off says why (empty without matrix units).
    bool workgroup_matrices = false;
    std::string workgroup_matrices_off;
    // Whether they multiply bf16 operands there too (bf16 storage): workgroup_matrices, bf16_matrix_units,
    // a flexible bf16 x bf16 + f32 workgroup shape offered, and this build has those shaders. Else
    // bf16 storage takes them portably on devices without them, and is refused by name where they run.
    bool workgroup_bf16_matrices = false;
    double timestamp_period_ns = 0;  // one timestamp tick
};

struct ContextOptions {
    // Which device: an index, or a substring of its name. Empty: $VKATTN_DEVICE, else the best one
    // (discrete > integrated > virtual > CPU).
    std::string device;
    // The Khronos validation layer; also on when $VKATTN_VALIDATION=1. Messages are collected.
    bool validation = false;
    // Where compiled pipelines persist between runs. Empty: $VKATTN_PIPELINE_CACHE, else
    // $XDG_CACHE_HOME/vkattn (or ~/.cache/vkattn). "none" keeps the cache in memory only.
    std::string pipeline_cache_dir;
    // Move data through staging buffers even where device memory is host-visible (also
    // $VKATTN_FORCE_STAGING=1), so the discrete-GPU path is exercised on integrated devices.
    bool force_staging = false;
    // Lower the largest binding the engine will make (0: the device's maxStorageBufferRange).
    // A test hook: it forces the slicing that huge tensors need on real devices.
    std::uint64_t max_binding_bytes = 0;
    // Make the engine cut its work as if shader loops ended after this many iterations (0: the
    // device's own limit, which GPUs do not have; lavapipe's is 65,535): a test hook, so that the
    // dispatches cut for such a limit, and the refusals past it, are reached on every device.
    std::uint32_t max_loop_iterations = 0;
    // Lower one request's device-memory budget (0: the largest device-local heap). A test hook: it
    // makes the refusal of requests too large for the device testable on any device.
    std::uint64_t max_device_bytes = 0;
    // Fill every output with NaN on the device before each run (also $VKATTN_POISON=1), so an element
    // a kernel fails to write cannot pass a test.
    bool poison_outputs = false;
    // Keep what the driver's compiler reports about each kernel (registers, spills, shared memory:
    // vkattn/kernel_statistics.hpp), where the device offers VK_KHR_pipeline_executable_properties;
    // also on when $VKATTN_KERNEL_STATISTICS=1. Off by default: a driver may compile more slowly.
    bool kernel_statistics = false;
    // How long one submission may run before it is reported as a hang (DeviceLost; the context then
    // refuses further work). Generous by default: a CPU device (lavapipe) takes minutes on long
    // sequences, and a real hang on a GPU is usually ended sooner by the driver's own watchdog.
    std::chrono::milliseconds fence_timeout{std::chrono::minutes(10)};
    // Make this context's n-th submission (1: the first; 0: none) report a fence timeout at once,
    // without waiting, while it is still in flight. A test hook: a short fence_timeout races the work
    // and does not fire on a fast device; this fires on any device, and what follows (DeviceLost, the
    // lost context keeping the submission's resources until the device is idle) is the same.
    std::uint64_t simulate_timeout_on_submission = 0;
};

// End a Context before main returns rather than at static destruction (a `static Context` is ended
// there): by then a Vulkan layer may have destroyed statics of its own that the Context's destruction
// calls into (Debian 13's validation layer 1.4.309 crashes so at exit).
class Context {
public:
    explicit Context(const ContextOptions& options = {});
    // A context on the caller's instance, device and queue (vkattn/vulkan.hpp), which it never
    // destroys. Throws InvalidArgument naming what is missing or wrong (Vulkan below 1.2, a queue
    // without compute, no create info). `options.device` and `options.validation` must be left
    // empty (the caller chose the device and its layers; $VKATTN_DEVICE and $VKATTN_VALIDATION are
    // ignored); the validation messages are the caller's, so validation_messages() stays empty.
    explicit Context(const VulkanDevice& device, const ContextOptions& options = {});
    ~Context();
    Context(Context&&) noexcept;
    Context& operator=(Context&&) noexcept;

    const DeviceInfo& device() const;
    // Validation-layer messages (errors and warnings) seen since creation or the last clear.
    std::vector<std::string> validation_messages() const;
    void clear_validation_messages();

private:
    friend struct detail::ContextAccess;
    std::unique_ptr<detail::ContextState> state_;
};

// Every Vulkan device on this machine, usable or not, with the default choice marked.
std::vector<DeviceInfo> list_devices();

}  // namespace vkattn
