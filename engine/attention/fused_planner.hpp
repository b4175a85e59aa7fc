// The fused and split-KV paths' planner (attention/fused.cpp runs what it plans): which (batch, K/V
// head) units and query rows each chunk takes, how the keys are cut into splits and bindings, and
// the slices every binding covers, refusing what cannot fit before anything is allocated.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention/io.hpp"
#include "attention/path.hpp"
#include "attention/slicing.hpp"
#include "attention/tuning.hpp"
#include "runtime.hpp"
#include "tensor/storage_rules.hpp"
#include "types/narrow.hpp"  // u32, u64 for the descriptors: resolve() bounds the sizes first

namespace vkattn::detail {

// Chunks here count units as (b, key/value head) and rows as ρ = g·Nq + i over the group's query
// heads; slicing::Chunk holds the same four numbers.
inline Box fused_query_box(const Chunk& c, const Problem& p) {
    Box box;
    const std::int64_t last = c.u0 + c.units - 1;
    box.b0 = c.u0 / p.Hkv;
    box.b1 = last / p.Hkv;
    const std::int64_t hk0 = c.u0 % p.Hkv, hk1 = last % p.Hkv;
    const std::int64_t g0 = c.r0 / p.Nq, g1 = (c.r0 + c.rows - 1) / p.Nq;
    if (box.b0 != box.b1) {
        box.h0 = 0;
        box.h1 = p.Hq - 1;
    } else {
        box.h0 = hk0 * p.group + g0;
        box.h1 = hk1 * p.group + g1;
    }
    const bool one_head = c.units == 1 && g0 == g1;
    box.n0 = one_head ? c.r0 % p.Nq : 0;
    box.n1 = one_head ? (c.r0 + c.rows - 1) % p.Nq : p.Nq - 1;
    return box;
}

inline Box fused_kv_box(const Chunk& c, const Problem& p, Features keys) {
    Box box;
    const std::int64_t last = c.u0 + c.units - 1;
    box.b0 = c.u0 / p.Hkv;
    box.b1 = last / p.Hkv;
    box.h0 = box.b0 == box.b1 ? c.u0 % p.Hkv : 0;
    box.h1 = box.b0 == box.b1 ? last % p.Hkv : p.Hkv - 1;
    box.n0 = keys.begin;
    box.n1 = keys.begin + std::max<std::int64_t>(keys.length, 1) - 1;
    return box;
}

// How the keys are cut. The fused kernel (splits = 0) sees every key in one binding. Split-KV runs
// `splits` slices of `keys_per_split` keys each and merges them (combine.comp); when K or V of every
// key would exceed one binding, the slices are bound `per_binding` at a time, one dispatch each, so
// a head of any length runs (a fused request whose keys do not fit becomes such a split run).
struct KeyPlan {
    std::uint32_t splits = 0;
    std::int64_t keys_per_split = 0;
    std::uint32_t per_binding = 1;

    static KeyPlan fused(std::int64_t Nkv) { return {0, Nkv, 1}; }
    // `wanted` slices of whole key blocks; none of them empty.
    static KeyPlan split(std::int64_t Nkv, std::int64_t wanted, std::int64_t key_block, std::int64_t per_binding) {
        const std::int64_t keys = std::max<std::int64_t>(1, (Nkv + wanted - 1) / wanted);
        const std::int64_t per_split = (keys + key_block - 1) / key_block * key_block;
        const auto splits = static_cast<std::uint32_t>(std::max<std::int64_t>(1, (Nkv + per_split - 1) / per_split));
        return {splits, per_split, static_cast<std::uint32_t>(std::clamp<std::int64_t>(per_binding, 1, splits))};
    }
    bool split_mode() const { return splits > 0; }
    std::uint32_t bindings() const { return split_mode() ? (splits + per_binding - 1) / per_binding : 1; }
    std::uint32_t first_split(std::uint32_t binding) const { return binding * per_binding; }
    std::uint32_t splits_in(std::uint32_t binding) const {
        return split_mode() ? std::min(per_binding, splits - first_split(binding)) : 1;
    }
    // The keys one binding holds.
    Features keys(std::uint32_t binding, std::int64_t Nkv) const {
        if (!split_mode()) return {0, Nkv};
        const std::int64_t begin = first_split(binding) * keys_per_split;
        return {begin, std::min(Nkv, begin + splits_in(binding) * keys_per_split) - begin};
    }
};

struct KeySlices {
    Slice k, v;
    MaskSlices masks;
};
struct FusedSlices {
    Slice q, o, lse;
};

class FusedPlanner {
public:
    FusedPlanner(const Runtime& runtime, const Problem& p, const Operands& operands, const FusedConfig& config,
                 std::uint32_t splits)
        : p_(p), ops_(operands), config_(config), splits_(splits),
          caps_(runtime.device().caps()), limit_(runtime.max_binding_bytes()), align_(binding_alignment(caps_)),
          texel_elements_(caps_.max_texel_buffer_elements) {}

    FusedSlices slices(const Chunk& c) const {
        const Box qb = fused_query_box(c, p_);
        FusedSlices s;
        s.q = ops_.q.slice(p_.Dk, qb, unit_of(p_.dtype), align_);
        s.o = ops_.o.slice(p_.Dv, qb, unit_of(p_.dtype), align_);
        s.lse = ops_.lse.slice(1, qb, 4, align_);
        return s;
    }

    // K, V and the masks' columns for one binding's keys; the kernel indexes all of them by absolute
    // key index.
    KeySlices key_slices(const Chunk& c, Features keys) const {
        const Box kb = fused_kv_box(c, p_, keys);
        KeySlices s;
        s.k = ops_.k.slice(p_.Dk, kb, unit_of(p_.k_dtype), align_);
        s.v = ops_.v.slice(p_.Dv, kb, unit_of(p_.v_dtype), align_);
        s.masks = mask_slices(p_, ops_, fused_query_box(c, p_), align_, keys);
        return s;
    }

    const std::optional<PagedOperands>& paged() const { return ops_.paged; }

    std::uint64_t partial_o_bytes(const Chunk& c, const KeyPlan& keys) const {
        return u64(std::max(1u, keys.splits)) * u64(c.units * c.rows * p_.Dv) * 4;
    }
    std::uint64_t partial_lse_bytes(const Chunk& c, const KeyPlan& keys) const {
        return u64(std::max(1u, keys.splits)) * u64(c.units * c.rows) * 4;
    }

    // The first binding or grid dimension the chunk exceeds, or nullptr when it fits.
    const char* overflow(const Chunk& c, const KeyPlan& keys) const {
        if (c.units > caps_.max_workgroup_count[1] || c.rows > caps_.max_workgroup_count[0]) return "the workgroup grid";
        if (keys.per_binding > caps_.max_workgroup_count[2]) return "the split count";
        if (keys.split_mode() && partial_o_bytes(c, keys) > limit_) return "the split partial outputs";
        auto over = [&](const Slice& slice, std::optional<TexelView> texel) {
            return slice.range > limit_ || (texel && slice.range > texel_limit(*texel));
        };
        const FusedSlices s = slices(c);
        if (over(s.q, q_texel())) return "q";
        if (over(s.o, {})) return "o";
        if (over(s.lse, {})) return "lse";
        if (ops_.paged) {  // each pool is bound whole
            if (over(whole(ops_.paged->k_pool_bytes), k_texel())) return "k_pools";
            if (over(whole(ops_.paged->v_pool_bytes), v_texel())) return "v_pools";
        }
        for (std::uint32_t binding = 0; binding < keys.bindings(); ++binding) {
            const KeySlices k = key_slices(c, keys.keys(binding, p_.Nkv));
            if (!ops_.paged && over(k.k, k_texel())) return "k";
            if (!ops_.paged && over(k.v, v_texel())) return "v";
            if (over(k.masks.bool_mask, {})) return "bool_mask";
            if (over(k.masks.float_mask, {})) return "float_mask";
        }
        return nullptr;
    }

    struct Plan {
        KeyPlan keys;
        std::vector<Chunk> chunks;
    };

    // As many whole (b, kv head) units per chunk as fit, one unit cut into row blocks if needed; and
    // when even one row's K/V (or mask row) exceeds a binding, the keys bound in slices, as many
    // splits per binding as fit (bit-identical to the unsliced split run with the same splits).
    Plan plan() const {
        // Packed (varlen) tensors are bound whole: only the device knows where a sequence's rows lie.
        if (p_.packed_q) {
            const FusedSlices s = slices({0, 1, 0, 1});
            const KeySlices k = key_slices({0, 1, 0, 1}, {0, p_.Nkv});
            auto check = [&](const Slice& slice, std::optional<TexelView> texel, const char* name) {
                const std::uint64_t most = texel ? std::min(limit_, texel_limit(*texel)) : limit_;
                if (slice.range > most)
                    throw ResourceLimit(std::string(name) + ": a packed (varlen) tensor is bound whole, and its " +
                                        std::to_string(slice.range) + " bytes pass the device's binding limit of " +
                                        std::to_string(most) + " bytes; run the sequences in several calls.");
            };
            check(s.q, q_texel(), "q");
            check(s.o, {}, "o");
            check(s.lse, {}, "lse");
            if (p_.packed_k) {
                check(k.k, k_texel(), "k");
                check(k.v, v_texel(), "v");
            }
        }
        const std::int64_t key_block = config_.key_block();
        auto chunks_for = [&](const KeyPlan& keys) {
            return plan_chunks(p_.B * p_.Hkv, p_.group * p_.Nq, config_.rows_per_workgroup(),
                               [&](const Chunk& c) { return overflow(c, keys) == nullptr; });
        };
        // Devices with a loop budget cap the keys one workgroup visits.
        const std::int64_t most_keys = fused_keys_per_dispatch(caps_, config_, p_);
        std::int64_t wanted = std::max(1u, splits_);
        if (most_keys > 0) wanted = std::max(wanted, (p_.Nkv + most_keys - 1) / most_keys);
        for (;;) {
            const KeyPlan all = splits_ == 0 && wanted == 1 ? KeyPlan::fused(p_.Nkv)
                                                            : KeyPlan::split(p_.Nkv, wanted, key_block, wanted);
            for (std::int64_t per_binding = all.split_mode() ? all.splits : 1;; per_binding = (per_binding + 1) / 2) {
                const KeyPlan keys = all.split_mode() ? KeyPlan::split(p_.Nkv, wanted, key_block, per_binding) : all;
                auto chunks = chunks_for(keys);
                if (!chunks.empty()) return {keys, std::move(chunks)};
                if (per_binding == 1) break;
            }
            if (all.keys_per_split <= key_block) break;  // the keys cannot be cut finer
            wanted = std::max<std::int64_t>(wanted * 2, 2);
        }
        const KeyPlan finest = KeyPlan::split(p_.Nkv, (p_.Nkv + key_block - 1) / key_block, key_block, 1);
        const char* culprit = overflow({0, 1, 0, 1}, finest);
        throw ResourceLimit(std::string(culprit ? culprit : "a binding") +
                            ": even one query row with one block of " + std::to_string(key_block) +
                            " keys needs a binding larger than the device's limit of " + std::to_string(limit_) +
                            " bytes (Dk = " + std::to_string(p_.Dk) + ", Dv = " + std::to_string(p_.Dv) + ").");
    }

private:
    // The view of an operand the config reads through texels (none when it reads words).
    std::optional<TexelView> texel(DType t) const { return config_.texel ? std::optional(config_.view(t)) : std::nullopt; }
    std::optional<TexelView> q_texel() const { return texel(p_.dtype); }
    std::optional<TexelView> k_texel() const { return texel(p_.k_dtype); }
    std::optional<TexelView> v_texel() const { return texel(p_.v_dtype); }
    // Bytes of the largest texel view of a format: maxTexelBufferElements texels.
    std::uint64_t texel_limit(TexelView v) const { return texel_elements_ * view_bytes(v); }

    const Problem& p_;
    Operands ops_;
    const FusedConfig& config_;
    std::uint32_t splits_;
    const vk::DeviceCaps& caps_;
    std::uint64_t limit_, align_;
    std::uint64_t texel_elements_;
};

}  // namespace vkattn::detail
