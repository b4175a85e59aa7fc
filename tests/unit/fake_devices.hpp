// Made-up devices and problems for the pure tuning functions' unit tests (test_tuning.cpp,
// test_decode_tuning.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attention/tuning.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail::fake {

// Made-up devices shaped like lavapipe and the main GPU families: between them, subgroups of 8 to 128
// lanes with and without subgroup size control, 32 to 99 KiB of shared memory, CPU, discrete and
// integrated. Every property test runs on all of them.
inline vk::DeviceCaps lavapipe_like() {
    vk::DeviceCaps c;
    c.name = "lavapipe-like";
    c.kind = vk::DeviceKind::cpu;
    c.subgroup_size = 8;
    c.subgroup_arithmetic = c.subgroup_shuffle = true;
    c.max_shared_bytes = 32768;
    c.max_workgroup_invocations = 1024;
    c.texel_rgba32f = c.texel_rgba16f = c.texel_r32ui = true;
    c.fp16_storage = true;
    c.host_visible_device_memory = true;
    return c;
}

inline vk::DeviceCaps gpu(const std::string& name, vk::DeviceKind kind, std::uint32_t subgroup, std::uint32_t shared_bytes) {
    vk::DeviceCaps c;
    c.name = name;
    c.kind = kind;
    c.subgroup_size = c.min_subgroup_size = c.max_subgroup_size = subgroup;
    c.subgroup_arithmetic = c.subgroup_shuffle = true;
    c.max_shared_bytes = shared_bytes;
    c.max_workgroup_invocations = 1024;
    c.texel_rgba32f = c.texel_rgba16f = c.texel_r32ui = true;  // R32_UINT texel buffers are required of every device
    c.fp16_storage = c.fp16_arithmetic = true;
    c.host_visible_device_memory = kind == vk::DeviceKind::integrated;
    return c;
}

inline vk::DeviceCaps with_size_control(vk::DeviceCaps c, std::uint32_t min, std::uint32_t max) {
    c.subgroup_size_control = true;
    c.min_subgroup_size = min;
    c.max_subgroup_size = max;
    return c;
}

inline vk::DeviceCaps nvidia_like(std::uint32_t shared_bytes = 49152) {
    return with_size_control(gpu("nvidia-like", vk::DeviceKind::discrete, 32, shared_bytes), 32, 32);
}
inline vk::DeviceCaps amd_like() {  // wave64 reported, wave32 on request
    return with_size_control(gpu("amd-like", vk::DeviceKind::discrete, 64, 65536), 32, 64);
}
inline vk::DeviceCaps intel_like() {  // SIMD8/16/32 on request
    return with_size_control(gpu("intel-like", vk::DeviceKind::integrated, 32, 65536), 8, 32);
}
inline vk::DeviceCaps mali_like() {  // fixed 16 lanes, no size control, fewer invocations
    vk::DeviceCaps c = gpu("mali-like", vk::DeviceKind::integrated, 16, 32768);
    c.max_workgroup_invocations = 512;
    c.fp16_arithmetic = false;
    c.texel_rgba16f = false;  // so that one device makes fp16 fall back to texels of words (scalar loads in bmm)
    return c;
}
inline vk::DeviceCaps adreno_like(bool size_control) {  // wave64 or wave128
    return size_control ? with_size_control(gpu("adreno-like", vk::DeviceKind::integrated, 64, 32768), 64, 128)
                        : gpu("adreno-like fixed 128", vk::DeviceKind::integrated, 128, 32768);
}

inline std::vector<vk::DeviceCaps> all_devices() {
    return {lavapipe_like(), nvidia_like(), nvidia_like(101376), amd_like(), intel_like(),
            mali_like(),     adreno_like(true), adreno_like(false)};
}

inline Problem problem(std::int64_t B, std::int64_t Hq, std::int64_t Hkv, std::int64_t Nq, std::int64_t Nkv, std::int64_t Dk,
                std::int64_t Dv, DType dtype = DType::f32) {
    Problem p;
    p.B = B;
    p.Hq = Hq;
    p.Hkv = Hkv;
    p.group = Hq / Hkv;
    p.Nq = Nq;
    p.Nkv = Nkv;
    p.Dk = Dk;
    p.Dv = Dv;
    p.dtype = dtype;
    return p;
}

inline Problem shape(std::int64_t nkv, std::int64_t d) { return problem(1, 8, 8, 128, nkv, d, d); }

// Dense [B, H, N, D] strides.
inline std::array<std::int64_t, 4> bhnd(std::int64_t H, std::int64_t N, std::int64_t D) { return {H * N * D, N * D, D, 1}; }

inline std::optional<FusedConfig> fused_for(const vk::DeviceCaps& caps, const Problem& p, const VariantOverrides& overrides = {},
                                     std::string* why = nullptr) {
    return choose_fused(caps, p, bhnd(p.Hq, p.Nq, p.Dk), bhnd(p.Hkv, p.Nkv, p.Dk), bhnd(p.Hkv, p.Nkv, p.Dv), overrides,
                        why);
}

// fused_for's refusal as "argument: message" (InvalidArgument's), or "taken".
inline std::string fused_refusal(const vk::DeviceCaps& caps, const Problem& p, const VariantOverrides& overrides) {
    try {
        (void)fused_for(caps, p, overrides);
    } catch (const InvalidArgument& e) {
        return e.argument() + ": " + e.what();
    }
    return "taken";
}

}  // namespace vkattn::detail::fake
