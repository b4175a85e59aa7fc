#include "attention/unfused.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "attention/dispatch.hpp"
#include "attention/io.hpp"
#include "attention/kernels.hpp"
#include "attention/path.hpp"
#include "attention/slicing.hpp"
#include "attention/transfers.hpp"
#include "runtime.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

std::uint32_t u32(std::int64_t v) { return static_cast<std::uint32_t>(v); }
std::uint32_t ceil_div(std::int64_t a, std::int64_t b) { return u32((a + b - 1) / b); }

// The slices one chunk binds, and the binding limits they must respect.
struct ChunkSlices {
    Slice q, k, v, o, scores, lse, bool_mask, float_mask;
};

class Planner {
public:
    Planner(const Runtime& runtime, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
            const UnfusedConfig& config, const TensorBytes& bytes)
        // Each binding may reach 32 bytes past its tensor's span, the allowance FusedPlanner uses too.
        : p_(p), in_(in), out_(out), config_(config), caps_(runtime.device().caps()),
          bytes_q_(bytes.q + 32), bytes_k_(bytes.k + 32), bytes_v_(bytes.v + 32), bytes_o_(bytes.o + 32) {
        limit_ = runtime.max_binding_bytes();
        align_ = binding_alignment(caps_);
    }

    ChunkSlices slices(const Chunk& c, std::uint64_t scratch_bytes) const {
        const std::uint64_t eb = size_of(p_.dtype);
        const Box qb = query_box(c, p_.Hq), kb = kv_box(c, p_.Hq, p_.group, p_.Nkv);
        ChunkSlices s;
        s.q = slice_of(in_.q.strides, p_.Dk, qb, eb, align_, bytes_q_);
        s.k = slice_of(in_.k.strides, p_.Dk, kb, eb, align_, bytes_k_);
        s.v = slice_of(in_.v.strides, p_.Dv, kb, eb, align_, bytes_v_);
        s.o = slice_of(out_.o.strides, p_.Dv, qb, eb, align_, bytes_o_);
        const std::array<std::int64_t, 4> lse_strides{p_.Hq * p_.Nq, p_.Nq, 1, 0};
        s.lse = slice_of(lse_strides, 1, qb, 4, align_, u64(p_.B * p_.Hq * p_.Nq * 4 + 32));
        if (p_.want_weights) {
            const std::array<std::int64_t, 4> w{p_.Hq * p_.Nq * p_.Nkv, p_.Nq * p_.Nkv, p_.Nkv, 1};
            s.scores = slice_of(w, p_.Nkv, qb, 4, align_, weights_bytes() + 32);
        } else {
            // The scratch holds only this chunk: [units][rows][Nkv], addressed from unit u0, row r0.
            s.scores.offset = 0;
            s.scores.range = u64(c.units * c.rows * p_.Nkv * 4 + 15) / 16 * 16;
            s.scores.range = std::min(s.scores.range, scratch_bytes);
            s.scores.desc.stride = {u32(p_.Hq * c.rows * p_.Nkv), u32(c.rows * p_.Nkv), u32(p_.Nkv), 1};
            s.scores.desc.origin = {u32(c.u0 / p_.Hq), u32(c.u0 % p_.Hq), u32(c.r0), 0};
        }
        const MaskSlices masks = mask_slices(p_, qb, align_);
        s.bool_mask = masks.bool_mask;
        s.float_mask = masks.float_mask;
        return s;
    }

    bool fits(const Chunk& c) const {
        if (c.units > caps_.max_workgroup_count[2] || c.units > caps_.max_workgroup_count[1]) return false;
        if (c.rows > caps_.max_workgroup_count[0]) return false;  // softmax: one workgroup per row
        if (u64(c.units * c.rows) * u64(p_.Nkv) * 4 > limit_) return false;
        const ChunkSlices s = slices(c, std::numeric_limits<std::uint64_t>::max());
        const std::uint64_t texel_limit = caps_.max_texel_buffer_elements * (p_.dtype == DType::f32 ? 16 : 8);
        auto ok = [&](const Slice& slice, bool texel) {
            return slice.range <= limit_ && (!texel || slice.range <= texel_limit);
        };
        return ok(s.q, config_.scores.texel) && ok(s.k, config_.scores.texel) && ok(s.v, config_.output.texel) &&
               ok(s.o, false) && ok(s.scores, config_.output.texel) && ok(s.lse, false) &&
               ok(s.bool_mask, false) && ok(s.float_mask, false);
    }

    // Whole heads, as many per chunk as fit; single heads cut into row blocks only when necessary.
    std::vector<Chunk> plan() const {
        auto chunks = plan_chunks(p_.B * p_.Hq, p_.Nq, 1, [this](const Chunk& c) { return fits(c); });
        if (!chunks.empty()) return chunks;
        throw ResourceLimit("k: one head's keys and values (Nkv = " + std::to_string(p_.Nkv) +
                            ") need a binding larger than the device's limit of " + std::to_string(limit_) +
                            " bytes, even for a single query row; the three-stage path cannot slice the "
                            "key axis.");
    }

    std::uint64_t weights_bytes() const { return u64(p_.B * p_.Hq * p_.Nq * p_.Nkv * 4); }

private:
    static std::uint64_t u64(std::int64_t v) { return static_cast<std::uint64_t>(v); }
    const Problem& p_;
    const AttentionInputs& in_;
    const AttentionOutputs& out_;
    const UnfusedConfig& config_;
    const vk::DeviceCaps& caps_;
    std::uint64_t bytes_q_, bytes_k_, bytes_v_, bytes_o_;
    std::uint64_t limit_ = 0, align_ = 16;
};

Params base_params(const Problem& p, const Chunk& c) {
    Params params;
    params.shape0 = {u32(p.B), u32(p.Hq), u32(p.Hkv), u32(p.group)};
    params.attn = {u32(p.Nq), u32(p.Nkv), u32(p.Dk), u32(p.Dv)};
    params.chunk = {u32(c.u0), u32(c.r0), u32(c.rows), u32(c.units)};
    params.scalars = {1.0f, 0.0f, 0.0f, 0.0f};
    return params;
}

class UnfusedRun final : public PathRun {
public:
    UnfusedRun(Runtime& runtime, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
               const UnfusedConfig& config, UnfusedStages stages)
        : runtime_(runtime), p_(p), config_(config), stages_(stages),
          planner_(runtime, p, in, out, config_, tensor_bytes(p, in, out)),
          chunks_(planner_.plan()) {  // before any allocation: refuse early
        if (stages == UnfusedStages::scores_only && !p.want_weights)
            throw Error("internal: stopping after the scores needs the weights output to hold them.");
        report.path = Impl::unfused;
        report.variant = config.describe();
        report.slices = static_cast<std::uint32_t>(chunks_.size());
        report.flops = p.flops();
    }

    // The score matrix: all of it when the weights are returned, else one chunk's (chunks run in
    // order and reuse it).
    std::uint64_t scratch_bytes() const override {
        if (p_.want_weights) return planner_.weights_bytes();
        std::uint64_t bytes = 16;
        for (const auto& c : chunks_)
            bytes = std::max<std::uint64_t>(bytes, static_cast<std::uint64_t>(c.units * c.rows * p_.Nkv) * 4);
        return bytes;
    }

    void allocate(Transfers& t) override {
        scores_ = p_.want_weights ? &t.output(planner_.weights_bytes(), kNanF32, "weights")
                                  : &t.scratch(scratch_bytes(), "the score matrix");
        no_bias_ = &t.scratch(16, "an unused bias binding");
    }

    void record(Recording& r, const DeviceTensors& d) override {
        const Problem& p = p_;
        const vk::Buffer& scores = *scores_;
        const vk::Kernel& scores_kernel = bmm_kernel(runtime_, config_.scores, true, p.dtype, p.dtype, DType::f32);
        const vk::Kernel& softmax = softmax_kernel(runtime_, config_.softmax);
        const vk::Kernel& output_kernel = bmm_kernel(runtime_, config_.output, false, DType::f32, p.dtype, p.dtype);
        for (const Chunk& c : chunks_) {
            const ChunkSlices s = planner_.slices(c, scores.size());

            Dispatch stage1{.kernel = &scores_kernel, .params = base_params(p, c)};
            stage1.params.gemm = {u32(p.Nq), u32(p.Nkv), u32(p.Dk), 0};
            stage1.params.scalars[0] = static_cast<float>(p.scale);
            stage1.params.ta = s.q.desc;
            stage1.params.tb = s.k.desc;
            stage1.params.tc = s.scores.desc;
            stage1.bindings = {bind(1, *d.q, s.q, p.dtype), bind(2, *d.k, s.k, p.dtype), bind(3, scores, s.scores),
                               bind(4, *no_bias_, whole(16))};
            stage1.groups = {ceil_div(p.Nkv, config_.scores.block_cols()), ceil_div(c.rows, config_.scores.block_rows()),
                             u32(c.units)};
            r.dispatch(stage1);
            r.barrier();
            if (stages_ == UnfusedStages::scores_only) continue;

            Dispatch stage2{.kernel = &softmax, .params = base_params(p, c)};
            set_features(stage2.params, p);
            stage2.params.ta = s.scores.desc;
            stage2.params.tlse = s.lse.desc;
            stage2.params.tbool = s.bool_mask.desc;
            stage2.params.tfloat = s.float_mask.desc;
            stage2.bindings = {bind(1, scores, s.scores), bind(2, *d.lse, s.lse),
                               bind(3, *d.lengths, whole(p.kv_len.size() * 4)), bind(4, *d.bool_mask, s.bool_mask),
                               bind(5, *d.float_mask, s.float_mask), bind(6, *d.head_terms, whole(d.head_terms_bytes))};
            stage2.groups = {u32(c.rows), u32(c.units), 1};
            r.dispatch(stage2);
            r.barrier();

            Dispatch stage3{.kernel = &output_kernel, .params = base_params(p, c)};
            stage3.params.gemm = {u32(p.Nq), u32(p.Dv), u32(p.Nkv), 0};
            stage3.params.ta = s.scores.desc;
            stage3.params.tb = s.v.desc;
            stage3.params.tc = s.o.desc;
            stage3.bindings = {bind(1, scores, s.scores, DType::f32), bind(2, *d.v, s.v, p.dtype), bind(3, *d.o, s.o),
                               bind(4, *no_bias_, whole(16))};
            stage3.groups = {ceil_div(p.Dv, config_.output.block_cols()), ceil_div(c.rows, config_.output.block_rows()),
                             u32(c.units)};
            r.dispatch(stage3);
            r.barrier();  // the next chunk reuses the score scratch
        }
    }

    void copy_extra_results(const Transfers& t, const AttentionOutputs& out) const override {
        if (p_.want_weights) std::memcpy(out.weights, t.result(*scores_), planner_.weights_bytes());
    }

private:
    Runtime& runtime_;
    const Problem& p_;
    UnfusedConfig config_;
    UnfusedStages stages_;
    Planner planner_;
    std::vector<Chunk> chunks_;
    const vk::Buffer* scores_ = nullptr;
    const vk::Buffer* no_bias_ = nullptr;
};

}  // namespace

std::unique_ptr<PathRun> plan_unfused(Runtime& runtime, const Problem& p, const AttentionInputs& in,
                                      const AttentionOutputs& out, const UnfusedConfig& config, UnfusedStages stages) {
    return std::make_unique<UnfusedRun>(runtime, p, in, out, config, stages);
}

AttentionReport run_unfused(Runtime& runtime, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out,
                            const UnfusedConfig& config, UnfusedStages stages) {
    UnfusedRun path(runtime, p, in, out, config, stages);
    return run_on_host(runtime, p, in, out, path);
}

}  // namespace vkattn::detail
