#include "attention/path.hpp"

#include <optional>
#include <string>
#include <thread>

#include "attention/fused.hpp"
#include "runtime.hpp"
#include "tune/table.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/variants.hpp"

namespace vkattn::detail {

void check_score_rows_path(const Problem& problem, Impl impl) {
    if ((impl == Impl::fused || impl == Impl::split) && problem.wants_score_rows())
        throw InvalidArgument("impl", std::string(problem.want_weights ? "the attention weights" : "the logits") +
                                          " exist only in the three-stage path; use auto or unfused to get them.");
}

bool nothing_forced(const AttentionOptions& o) {
    const VariantOverrides& v = o.variant;
    return o.impl == Impl::automatic && o.splits == 0 && !v.texel_loads && !v.shared_tiles && !v.subgroup_ops &&
           !v.fused_kernel && !v.gemm_kernel && !v.tile_rows && !v.tile_keys && !v.decode_lanes_per_key &&
           !v.named_accumulators && !v.row_tiles && !v.q_in_shared && !v.kv_apart &&
           !v.workgroup_matrices && !v.gemm_shape;
}

PathChoice choose_path(const Runtime& runtime, const TuningTable* table, const Problem& problem,
                       const std::array<std::int64_t, 4>& q_strides, const std::array<std::int64_t, 4>& k_strides,
                       const std::array<std::int64_t, 4>& v_strides, const AttentionOptions& options, bool paged) {
    refuse_gemm_shape(options.variant);
    // The tuner's winner for this problem's bucket, where the caller forced nothing and the winner can
    // run it (a three-stage winner cannot read paged or packed K/V; the weights need three stages).
    if (table && nothing_forced(options))
        if (const std::string* name = table->winner(problem))
            if (const KernelVariant* variant = find_kernel_variant(*name);
                variant && !((paged || problem.packed_q) && variant->impl == Impl::unfused) &&
                !(problem.wants_score_rows() && variant->impl != Impl::unfused)) {
                AttentionOptions tuned = options;
                tuned.impl = variant->impl;
                tuned.variant = variant->overrides;
                try {
                    PathChoice choice = choose_path(runtime, nullptr, problem, q_strides, k_strides, v_strides, tuned, paged);
                    choice.chosen_by = "tuning";
                    return choice;
                } catch (const InvalidArgument&) {
                    // The winner cannot run this problem here (its bucket's other shapes could): the rules decide.
                }
            }
    const auto& caps = runtime.device().caps();
    if (problem.dtype != DType::f32) vk::require_fp16_storage(caps, "o", problem.dtype);  // O's 16-bit stores
    std::string why_not_fused;
    // A kernel parameter the device cannot take (VariantOverrides' tile_rows, tile_keys,
    // decode_lanes_per_key) is refused only where a fused kernel would run: the three-stage path
    // never reads them.
    std::optional<InvalidArgument> knob_refused;
    auto fused = [&]() -> std::optional<FusedConfig> {
        try {
            return choose_fused(caps, problem, q_strides, k_strides, v_strides, options.variant, &why_not_fused);
        } catch (const InvalidArgument& e) {
            if (!e.argument().starts_with("variant.")) throw;
            knob_refused = e;
            return std::nullopt;
        }
    }();
    auto needs_fused = [&] {
        if (knob_refused) throw *knob_refused;
    };
    const unsigned threads = std::thread::hardware_concurrency();
    PathChoice choice;
    choice.chosen_by = nothing_forced(options) ? "heuristics" : "caller";
    auto unfused = [&] {
        choice.impl = Impl::unfused;
        choice.unfused = choose_unfused(caps, problem, q_strides, k_strides, v_strides, options.variant);
        return choice;
    };
    auto flash = [&](std::uint32_t splits) {
        choice.impl = splits > 0 ? Impl::split : Impl::fused;
        choice.fused = *fused;
        choice.splits = splits;
        return choice;
    };
    // A paged K/V is read through its block table by the fused kernels only.
    if (paged) {
        if (options.impl == Impl::unfused)
            throw InvalidArgument("impl", "the three-stage path does not read a paged K/V; use auto, fused or split.");
        if (problem.wants_score_rows())
            throw InvalidArgument(problem.want_weights ? "weights" : "logits",
                                  std::string(problem.want_weights ? "the attention weights" : "the logits") +
                                      " exist only in the three-stage path, which does not read a paged K/V; use a "
                                      "contiguous cache to get them.");
        needs_fused();
        if (!fused)
            throw InvalidArgument("paged", "a paged K/V is read by the fused kernels only, which cannot run here: " +
                                               why_not_fused + ".");
    }
    // Packed sequences (varlen) are addressed through cu_seqlens by the fused kernels only, and bound
    // whole: past the texel-buffer limit they are read with scalar loads (unless texels are forced,
    // and then the planner says why it cannot).
    if (problem.packed_q && fused && fused->texel && !options.variant.texel_loads.has_value()) {
        auto over = [&](std::int64_t elements, DType t) {
            return storage_bytes(t, elements) > caps.max_texel_buffer_elements * view_bytes(fused->view(t));
        };
        if (over(problem.Hq * problem.total_q * problem.Dk, problem.dtype) ||
            over(problem.Hkv * problem.total_k * problem.Dk, problem.k_dtype) ||
            over(problem.Hkv * problem.total_k * problem.Dv, problem.v_dtype))
            fused->texel = fused->texel_words = false;
    }
    if (problem.packed_q) {
        if (options.impl == Impl::unfused)
            throw InvalidArgument("impl", "the three-stage path does not read packed sequences (varlen); use auto, fused "
                                          "or split.");
        needs_fused();
        if (!fused)
            throw InvalidArgument("varlen", "packed sequences are read by the fused kernels only, which cannot run "
                                            "here: " + why_not_fused + ".");
    }
    // The decode kernel writes split partials: a fused (unsplit) run takes flash.comp, unless the
    // decode kernel was asked for.
    if (options.impl == Impl::fused && fused && fused->decode) {
        if (options.variant.fused_kernel == FusedKernel::decode)
            throw InvalidArgument("impl", "the decode kernel runs split-KV only (its partials merge in a second "
                                          "kernel); use auto or split with it.");
        VariantOverrides flash_layout = options.variant;
        flash_layout.fused_kernel = FusedKernel::flash;
        fused = choose_fused(caps, problem, q_strides, k_strides, v_strides, flash_layout, &why_not_fused);
    }
    switch (options.impl) {
        case Impl::automatic:
            // The weights and logits exist only in the three-stage path; the fused kernels need
            // subgroups and head dimensions up to 512. Otherwise fused, or split-KV when the rows
            // alone cannot fill the device (decoding: few queries, long keys). The report says which ran.
            if (problem.wants_score_rows()) return unfused();
            needs_fused();
            if (!fused) return unfused();
            if (fused->decode) return flash(std::max(1u, choose_splits(caps, problem, *fused, threads)));
            if (const std::uint32_t splits = choose_splits(caps, problem, *fused, threads); splits >= 2)
                return flash(splits);
            return flash(0);
        case Impl::unfused:
            return unfused();
        case Impl::fused:
        case Impl::split:
            check_score_rows_path(problem, options.impl);
            needs_fused();
            if (!fused)
                throw InvalidArgument("impl", "the " + to_string(options.impl) + " path cannot run here: " +
                                                  why_not_fused + ".");
            if (options.impl == Impl::fused) return flash(0);
            return flash(options.splits ? options.splits : std::max(2u, choose_splits(caps, problem, *fused, threads)));
    }
    throw InvalidArgument("impl", "unknown implementation.");
}

std::unique_ptr<PathRun> make_path(Runtime& runtime, const Problem& problem, const PathChoice& choice,
                                   const Operands& operands) {
    std::unique_ptr<PathRun> run =
        choice.impl == Impl::unfused
            ? plan_unfused(runtime, problem, operands, choice.unfused, choice.stages)
            : plan_fused(runtime, problem, operands, choice.fused, choice.impl == Impl::split ? choice.splits : 0);
    run->report.chosen_by = choice.chosen_by;
    return run;
}

void check_device_memory(const Runtime& runtime, std::uint64_t needed, const std::string& what) {
    const std::uint64_t heap = runtime.device_memory_bytes();
    if (needed > heap)
        throw ResourceLimit("the request needs " + std::to_string(needed) + " bytes of device memory (" + what +
                            "), but the device's largest device-local heap holds " + std::to_string(heap) +
                            " bytes; nothing was allocated.");
}

}  // namespace vkattn::detail
