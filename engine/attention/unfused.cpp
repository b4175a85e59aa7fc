#include "attention/unfused.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <optional>

#include "attention/ceil_div.hpp"
#include "attention/dispatch.hpp"
#include "attention/io.hpp"
#include "attention/kernels.hpp"
#include "attention/path.hpp"
#include "attention/slicing.hpp"
#include "plan/program.hpp"
#include "runtime.hpp"
#include "vkattn/errors.hpp"
#include "tensor/storage_rules.hpp"
#include "types/narrow.hpp"

namespace vkattn::detail {
namespace {

// How the keys are cut. Stages 1 and 3 run once per key slice (K and V bound a slice at a time,
// P·V accumulated over the slices); stage 2 works on whole score rows when a chunk's S fits one
// binding, else in two passes over the key slices (row statistics, then probabilities).
struct KeyCut {
    std::int64_t length = 0;  // keys per slice: all of them, or a multiple of 4 (texel rows of P)
    bool whole_rows = true;
    std::vector<Features> slices;
};

// The query side of a chunk: what every key slice shares.
struct ChunkSlices {
    Slice q, o, lse;
};
// One key slice of a chunk: K and V (rows from the slice's first key, as bmm numbers them), the
// scores as bmm's result and operand (keys from the slice's first) and as the softmax reads them
// (absolute keys), the logits output and the masks (absolute keys).
struct KeySliceBindings {
    Slice k, v, scores_bmm, scores_softmax, logits;
    MaskSlices masks;
};

std::uint32_t softmax_logits_stage(const Problem& p) {
    return p.want_logits ? 1 + static_cast<std::uint32_t>(p.logits_stage) : kNoLogits;
}

class Planner {
public:
    Planner(const Runtime& runtime, const Problem& p, const Operands& operands, const UnfusedConfig& config)
        : p_(p), ops_(operands), config_(config), caps_(runtime.device().caps()) {
        limit_ = runtime.max_binding_bytes();
        align_ = binding_alignment(caps_);
    }

    ChunkSlices slices(const Chunk& c) const {
        const Box qb = query_box(c, p_.Hq);
        ChunkSlices s;
        s.q = ops_.q.slice(p_.Dk, qb, unit_of(p_.dtype), align_);
        s.o = ops_.o.slice(p_.Dv, qb, unit_of(p_.dtype), align_);
        s.lse = ops_.lse.slice(1, qb, 4, align_);
        return s;
    }

    // The score matrix: the weights output [B, Hq, Nq, Nkv] when returned, else a chunk-local
    // scratch [units][rows][Nkv] that starts at the chunk's first (unit, row).
    Slice scores(const Chunk& c, Features keys, Indexing indexing, std::uint64_t scratch_bytes) const {
        const Box qb = query_box(c, p_.Hq);
        if (p_.want_weights) return ops_.weights.slice(keys, qb, 4, align_, indexing);
        const std::array<std::int64_t, 4> local{p_.Hq * c.rows * p_.Nkv, c.rows * p_.Nkv, p_.Nkv, 1};
        return slice_of(local, keys, qb, 4, align_, scratch_bytes, indexing, -(c.u0 * local[1] + c.r0 * local[2]));
    }

    KeySliceBindings key_slice(const Chunk& c, Features keys, std::uint64_t scratch_bytes, bool whole_rows) const {
        Box kb = kv_box(c, p_.Hq, p_.group, p_.Nkv);
        kb.n0 = keys.begin;
        kb.n1 = keys.begin + std::max<std::int64_t>(keys.length, 1) - 1;
        KeySliceBindings s;
        s.k = ops_.k.slice(Features{0, p_.Dk}, kb, unit_of(p_.k_dtype), align_, Indexing::relative_rows);
        s.v = ops_.v.slice(Features{0, p_.Dv}, kb, unit_of(p_.v_dtype), align_, Indexing::relative_rows);
        s.scores_bmm = scores(c, keys, Indexing::relative_features, scratch_bytes);
        const Features row_keys = whole_rows ? Features{0, p_.Nkv} : keys;
        s.scores_softmax = scores(c, row_keys, Indexing::absolute, scratch_bytes);
        if (p_.want_logits) s.logits = ops_.logits.slice(row_keys, query_box(c, p_.Hq), 4, align_, Indexing::absolute);
        s.masks = mask_slices(p_, ops_, query_box(c, p_.Hq), align_, row_keys);
        return s;
    }

    bool fits(const Chunk& c, const KeyCut& cut) const {
        if (c.units > caps_.max_workgroup_count[2] || c.units > caps_.max_workgroup_count[1]) return false;
        if (c.rows > caps_.max_workgroup_count[0]) return false;  // softmax: one workgroup per row
        // A texel operand's view holds maxTexelBufferElements vec4s of its dtype (texels: f32/f16).
        auto ok = [&](const Slice& slice, bool texel, DType dtype = DType::f32) {
            const std::uint64_t texel_limit = caps_.max_texel_buffer_elements * texel_bytes(dtype);
            return slice.range <= limit_ && (!texel || slice.range <= texel_limit);
        };
        const std::uint64_t any = std::numeric_limits<std::uint64_t>::max();
        const ChunkSlices s = slices(c);
        if (!ok(s.q, config_.scores.texel, p_.dtype) || !ok(s.o, false) || !ok(s.lse, false)) return false;
        if (cut.slices.size() > 1 && accumulator_bytes(c) > limit_) return false;
        if (!cut.whole_rows && stats_bytes(c, cut) > limit_) return false;
        for (std::size_t i = 0; i < cut.slices.size(); ++i) {
            const KeySliceBindings k = key_slice(c, cut.slices[i], any, cut.whole_rows);
            if (!ok(k.k, config_.scores.texel, p_.k_dtype) || !ok(k.v, config_.output.texel, p_.v_dtype) ||
                !ok(k.scores_bmm, config_.output.texel))
                return false;
            // With whole rows the softmax's scores and masks are the same for every slice: check once.
            if ((i == 0 || !cut.whole_rows) && (!ok(k.scores_softmax, false) || !ok(k.logits, false) ||
                                                !ok(k.masks.bool_mask, false) || !ok(k.masks.float_mask, false)))
                return false;
        }
        return true;
    }

    struct Plan {
        KeyCut cut;
        std::vector<Chunk> chunks;
    };

    // Whole heads, as many per chunk as fit; single heads cut into row blocks only when necessary;
    // the keys cut into slices only when K, V or one chunk's scores exceed a binding.
    Plan plan() const {
        // Devices with a loop budget cap the keys of one dispatch (stage 3's P·V, stage 2's rows).
        const std::int64_t most_keys = unfused_keys_per_dispatch(caps_, config_);
        const std::int64_t all_keys = std::max<std::int64_t>(p_.Nkv, 1);
        for (const bool whole_rows : {true, false}) {
            if (whole_rows && most_keys > 0 && p_.Nkv > most_keys) continue;
            for (std::int64_t length = most_keys > 0 ? std::min(all_keys, most_keys) : all_keys;;
                 length = smaller_key_slice(length)) {
                KeyCut cut{length, whole_rows, key_slices(p_.Nkv, length)};
                auto chunks = plan_chunks(p_.B * p_.Hq, p_.Nq, 1, [&](const Chunk& c) { return fits(c, cut); });
                if (!chunks.empty()) return {std::move(cut), std::move(chunks)};
                if (length <= 4) break;
            }
        }
        throw ResourceLimit("q: one query row and four keys of one head (Dk = " + std::to_string(p_.Dk) +
                            ", Dv = " + std::to_string(p_.Dv) + ") need a binding larger than the device's limit of " +
                            std::to_string(limit_) + " bytes.");
    }

    std::uint64_t scores_bytes(const Chunk& c) const { return u64(c.units * c.rows * p_.Nkv) * 4; }
    // O accumulated over key slices, fp32, chunk-local [units][rows][Dv].
    std::uint64_t accumulator_bytes(const Chunk& c) const { return u64(c.units * c.rows * p_.Dv) * 4; }
    // (m, l) per row and key slice, chunk-local.
    std::uint64_t stats_bytes(const Chunk& c, const KeyCut& cut) const {
        return u64(c.units * c.rows) * cut.slices.size() * 8;
    }

private:
    // Halves a key slice, keeping it a multiple of 64 keys (whole bmm tiles) while that large, and
    // of 4 keys (texel rows of P for stage 3) below.
    static std::int64_t smaller_key_slice(std::int64_t length) {
        const std::int64_t half = (length + 1) / 2;
        const std::int64_t unit = half >= 64 ? 64 : 4;
        return std::max<std::int64_t>(4, (half + unit - 1) / unit * unit);
    }

    const Problem& p_;
    Operands ops_;
    const UnfusedConfig& config_;
    const vk::DeviceCaps& caps_;
    std::uint64_t limit_ = 0, align_ = 16;
};

ChunkRange chunk_range(const Chunk& c) {
    return {.first_unit = u32(c.u0), .first_row = u32(c.r0), .rows = u32(c.rows)};
}

// A bmm product per unit (b, query head) of the chunk; K/V's head by the GQA group.
BmmParams bmm_params(const Problem& p, const Chunk& c, std::int64_t M, std::int64_t N, std::int64_t K) {
    return {.chunk = chunk_range(c), .M = u32(M), .N = u32(N), .K = u32(K), .alpha = 1.0f, .heads = u32(p.Hq),
            .group = u32(p.group)};
}

class UnfusedRun final : public PathRun {
public:
    UnfusedRun(Runtime& runtime, const Problem& p, const Operands& operands, const UnfusedConfig& config,
               UnfusedStages stages)
        : runtime_(runtime), p_(p), config_(config), stages_(stages), planner_(runtime, p, operands, config_),
          plan_(planner_.plan()) {  // before any allocation: refuse early
        if (stages == UnfusedStages::scores_only && !p.want_weights)
            throw Error("internal: stopping after the scores needs the weights output to hold them.");
        report.path = Impl::unfused;
        report.variant = config.describe();
        const std::size_t key_slices = plan_.cut.slices.size();
        if (key_slices > 1)
            report.variant += " key-slices=" + std::to_string(key_slices) + (plan_.cut.whole_rows ? "" : " two-pass");
        report.slices = static_cast<std::uint32_t>(plan_.chunks.size() * key_slices);
        report.flops = p.flops();
    }

    // The score matrix (the weights output when returned, else one chunk's: chunks run in order
    // and reuse it), two P·V accumulators and the row statistics when the keys are sliced.
    std::uint64_t scratch_bytes() const override {
        const Sizes z = sizes();
        return (p_.want_weights ? 0 : z.scores) + 2 * z.accumulator + z.stats;
    }

    void record(Program& r, const DeviceBuffers& d) override {
        const Sizes z = sizes();
        const vk::Buffer& scores = p_.want_weights ? *d.weights : r.scratch(z.scores, "the score matrix");
        const vk::Buffer* no_addend = &r.scratch(16, "an unused bias binding");
        std::array<const vk::Buffer*, 2> accumulators{};
        for (auto& a : accumulators) a = &r.scratch(z.accumulator, "the P·V accumulator over key slices");
        const vk::Buffer* stats = &r.scratch(z.stats, "the softmax row statistics over key slices");
        const Problem& p = p_;
        const KeyCut& cut = plan_.cut;
        const vk::Kernel& scores_kernel = bmm_kernel(runtime_, config_.scores, BmmForm::a_bt, p.dtype, p.k_dtype, DType::f32);
        const vk::Kernel& softmax = softmax_kernel(runtime_, config_.softmax);
        const std::size_t n_slices = cut.slices.size();
        for (const Chunk& c : plan_.chunks) {
            const ChunkSlices s = planner_.slices(c);
            std::vector<KeySliceBindings> keys;
            for (const Features& k : cut.slices) keys.push_back(planner_.key_slice(c, k, scores.size(), cut.whole_rows));

            for (std::size_t i = 0; i < n_slices; ++i) {
                BmmParams params = bmm_params(p, c, p.Nq, cut.slices[i].length, p.Dk);
                params.alpha = static_cast<float>(p.scale);
                params.a = s.q.desc;
                params.b = keys[i].k.desc;
                params.b_scale_at = u32(2 * p.Hq);  // head_terms_of: K's scales
                params.c = keys[i].scores_bmm.desc;
                Dispatch stage1{.kernel = &scores_kernel, .params = params};
                stage1.bindings = {bind(1, *d.q, s.q, float_view(p.dtype)), bind(2, *d.k, keys[i].k, float_view(p.k_dtype)),
                                   bind(3, scores, keys[i].scores_bmm), bind(4, *no_addend, whole(16)),
                                   bind(5, *d.head_terms, whole(d.head_terms_bytes))};
                stage1.groups = {u32(ceil_div(cut.slices[i].length, config_.scores.block_cols())),
                                 u32(ceil_div(c.rows, config_.scores.block_rows())), u32(c.units)};
                r.dispatch(stage1);
            }
            r.barrier();
            if (stages_ == UnfusedStages::scores_only) continue;

            auto softmax_dispatch = [&](std::uint32_t mode, std::size_t i) {
                const KeySliceBindings& k = keys[i];
                const Features range = mode == kWholeRows ? Features{0, p.Nkv} : cut.slices[i];
                SoftmaxParams params{.shape = attention_shape(p),
                                     .chunk = chunk_range(c),
                                     .mask = mask_params(p),
                                     .mode = mode,
                                     .key_begin = u32(range.begin),
                                     .key_end = u32(range.begin + range.length),
                                     .slices = u32(n_slices),
                                     .slice = u32(i),
                                     .logits_stage = softmax_logits_stage(p),
                                     .scores = k.scores_softmax.desc,
                                     .lse = s.lse.desc,
                                     .logits = k.logits.desc};
                params.mask.bool_mask = k.masks.bool_mask.desc;
                params.mask.float_mask = k.masks.float_mask.desc;
                Dispatch stage2{.kernel = &softmax, .params = params};
                stage2.bindings = {bind(1, scores, k.scores_softmax), bind(2, *d.lse, s.lse),
                                   bind(3, *d.lengths, d.lengths_slice), bind(4, *d.bool_mask, k.masks.bool_mask),
                                   bind(5, *d.float_mask, k.masks.float_mask),
                                   bind(6, *d.head_terms, whole(d.head_terms_bytes)),
                                   bind(7, *stats, whole(cut.whole_rows ? 16 : planner_.stats_bytes(c, cut))),
                                   p.want_logits ? bind(8, *d.logits, k.logits) : bind(8, *no_addend, whole(16))};
                stage2.groups = {u32(c.rows), u32(c.units), 1};
                r.dispatch(stage2);
            };
            if (cut.whole_rows) {
                softmax_dispatch(kWholeRows, 0);
            } else {
                for (std::size_t i = 0; i < n_slices; ++i) softmax_dispatch(kRowStats, i);
                r.barrier();
                for (std::size_t i = 0; i < n_slices; ++i) softmax_dispatch(kApply, i);
            }
            r.barrier();

            // O = Σ_s P_s·V_s: each slice adds the previous slice's sum (two fp32 accumulators in
            // turn, so no dispatch reads the binding it writes); the last one writes O.
            for (std::size_t i = 0; i < n_slices; ++i) {
                const bool first = i == 0, last = i + 1 == n_slices;
                const vk::Buffer& into = *accumulators[i % 2];
                const vk::Buffer& from = *accumulators[(i + 1) % 2];
                const DType out = last ? p.dtype : DType::f32;
                const vk::Kernel& kernel = bmm_kernel(runtime_, config_.output, BmmForm::a_b, DType::f32, p.v_dtype, out,
                                                      first ? BmmAdd::none : BmmAdd::residual);
                const Slice acc = whole(planner_.accumulator_bytes(c));
                const TensorDesc acc_desc = accumulator_desc(c);
                BmmParams params = bmm_params(p, c, p.Nq, p.Dv, cut.slices[i].length);
                params.a = keys[i].scores_bmm.desc;
                params.b = keys[i].v.desc;
                params.b_scale_at = u32(2 * p.Hq + p.Hkv);  // head_terms_of: V's scales
                params.c = last ? s.o.desc : acc_desc;
                params.residual = acc_desc;
                Dispatch stage3{.kernel = &kernel, .params = params};
                stage3.bindings = {bind(1, scores, keys[i].scores_bmm), bind(2, *d.v, keys[i].v, float_view(p.v_dtype)),
                                   last ? bind(3, *d.o, s.o) : bind(3, into, acc),
                                   first ? bind(4, *no_addend, whole(16)) : bind(4, from, acc),
                                   bind(5, *d.head_terms, whole(d.head_terms_bytes))};
                stage3.groups = {u32(ceil_div(p.Dv, config_.output.block_cols())),
                                 u32(ceil_div(c.rows, config_.output.block_rows())), u32(c.units)};
                r.dispatch(stage3);
                r.barrier();  // the next slice reads this one's sum; the next chunk reuses the scratch
            }
        }
    }

private:
    struct Sizes {
        std::uint64_t scores = 16, accumulator = 16, stats = 16;
    };
    Sizes sizes() const {
        Sizes z;
        for (const auto& c : plan_.chunks) {
            z.scores = std::max(z.scores, planner_.scores_bytes(c));
            if (plan_.cut.slices.size() > 1) z.accumulator = std::max(z.accumulator, planner_.accumulator_bytes(c));
            if (!plan_.cut.whole_rows) z.stats = std::max(z.stats, planner_.stats_bytes(c, plan_.cut));
        }
        return z;
    }

    // The chunk-local [units][rows][Dv] accumulator, addressed like O from the chunk's first (b, h, i).
    TensorDesc accumulator_desc(const Chunk& c) const {
        TensorDesc t;
        t.stride = {u32(p_.Hq * c.rows * p_.Dv), u32(c.rows * p_.Dv), u32(p_.Dv), 1};
        t.origin = {u32(c.u0 / p_.Hq), u32(c.u0 % p_.Hq), u32(c.r0), 0};
        return t;
    }

    Runtime& runtime_;
    const Problem& p_;
    UnfusedConfig config_;
    UnfusedStages stages_;
    Planner planner_;
    Planner::Plan plan_;
};

}  // namespace

std::unique_ptr<PathRun> plan_unfused(Runtime& runtime, const Problem& p, const Operands& operands,
                                      const UnfusedConfig& config, UnfusedStages stages) {
    return std::make_unique<UnfusedRun>(runtime, p, operands, config, stages);
}

}  // namespace vkattn::detail
