#include "attention/params.hpp"

#include <bit>

#include "attention/problem.hpp"

namespace vkattn::detail {

void set_features(Params& params, const Problem& p) {
    std::uint32_t flags = 0;
    if (p.causal != Causal::none) flags |= kMaskCausal;
    if (p.causal == Causal::bottom_right) flags |= kMaskBottomRight;
    if (p.has_kv_lengths) flags |= kMaskLengths;
    if (p.bool_mask.present()) flags |= kMaskBool;
    if (p.float_mask.present()) flags |= kMaskFloat;
    if (!p.alibi.empty()) flags |= kMaskAlibi;
    if (!p.sinks.empty()) flags |= kMaskSinks;
    // Signed values travel as their two's-complement bits; resolve() bounded them to 2^30.
    params.masking = {flags, static_cast<std::uint32_t>(p.offset), static_cast<std::uint32_t>(p.window.left),
                      static_cast<std::uint32_t>(p.window.right)};
    params.terms = {static_cast<float>(p.softcap), p.softcap > 0.0 ? static_cast<float>(1.0 / p.softcap) : 0.0f,
                    static_cast<float>(p.keep_scale()), 0.0f};
    params.dropout = {p.drop_threshold, static_cast<std::uint32_t>(p.seed), static_cast<std::uint32_t>(p.seed >> 32), 0};
}

}  // namespace vkattn::detail
