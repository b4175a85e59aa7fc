// The resolved attention problem: every shape, stride, mask and option checked and reduced to plain
// numbers. resolve() is the single place where arguments are validated; the GPU drivers and the CPU
// reference both consume a Problem, so they cannot disagree about what a request means.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "vkattn/attention.hpp"

namespace vkattn::detail {

// A mask broadcast to [B, Hq, Nq, Nkv]: element (b, h, i, j) lives at b*s0 + h*s1 + i*s2 + j*s3,
// with stride 0 on every broadcast dimension.
struct BroadcastMask {
    const void* data = nullptr;
    std::array<std::int64_t, 4> strides{};
    std::int64_t elements = 0;  // how many elements the mask really holds

    bool present() const { return data != nullptr; }
    std::int64_t offset(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
        return b * strides[0] + h * strides[1] + i * strides[2] + j * strides[3];
    }
};

struct Problem {
    std::int64_t B = 0, Hq = 0, Hkv = 0, Nq = 0, Nkv = 0, Dk = 0, Dv = 0;
    std::int64_t group = 1;  // Hq / Hkv: query head h reads key/value head h / group
    double scale = 1.0;
    DType dtype = DType::f32;
    Causal causal = Causal::none;
    std::vector<std::int32_t> kv_len;  // [B], Nkv where not given
    bool has_kv_lengths = false;
    BroadcastMask bool_mask, float_mask;
    bool want_weights = false, want_lse = false;

    // The diagonal's offset for batch b: causal keeps key j for query i when j <= i + alignment(b).
    std::int64_t alignment(std::int64_t b) const {
        return causal == Causal::bottom_right ? std::int64_t{kv_len[b]} - Nq : 0;
    }

    // The boolean part of the mask model (key lengths, causal, bool mask): false = masked.
    bool key_visible(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
        if (j >= kv_len[b]) return false;
        if (causal != Causal::none && j > i + alignment(b)) return false;
        if (bool_mask.present() &&
            static_cast<const std::uint8_t*>(bool_mask.data)[bool_mask.offset(b, h, i, j)] == 0)
            return false;
        return true;
    }

    // The additive part: the float mask's value (0 where there is none).
    double additive(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
        if (!float_mask.present()) return 0.0;
        return static_cast<const float*>(float_mask.data)[float_mask.offset(b, h, i, j)];
    }

    std::int64_t kv_head(std::int64_t h) const { return h / group; }
    // 4·B·Hq·Nq·Nkv·(Dk+Dv)/2 flops, the usual 4·…·D when Dk = Dv; halved for causal.
    double flops() const;
};

// Validates everything and resolves defaults. Throws InvalidArgument naming the argument.
Problem resolve(const AttentionInputs& inputs, const AttentionOutputs& outputs,
                const AttentionOptions& options);

// Checked 64-bit arithmetic for sizes: throws ResourceLimit on overflow, naming what was computed.
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what);

}  // namespace vkattn::detail
