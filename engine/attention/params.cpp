#include "attention/params.hpp"

#include <algorithm>
#include <bit>

#include "attention/problem.hpp"

namespace vkattn::detail {

AttentionShape attention_shape(const Problem& p) {
    auto u32 = [](std::int64_t v) { return static_cast<std::uint32_t>(v); };
    return {.B = u32(p.B), .Hq = u32(p.Hq), .Hkv = u32(p.Hkv), .group = u32(p.group),
            .Nq = u32(p.Nq), .Nkv = u32(p.Nkv), .Dk = u32(p.Dk), .Dv = u32(p.Dv)};
}

MaskParams mask_params(const Problem& p) {
    std::uint32_t flags = 0;
    if (p.causal != Causal::none) flags |= kMaskCausal;
    if (p.bottom_right) flags |= kMaskBottomRight;
    if (p.has_kv_lengths) flags |= kMaskLengths;
    if (p.bool_mask.present()) flags |= kMaskBool;
    if (p.float_mask.present()) flags |= kMaskFloat;
    if (!p.alibi.empty()) flags |= kMaskAlibi;
    if (!p.sinks.empty()) flags |= kMaskSinks;
    // resolve() bounded the offset and the window to 2^30.
    return {.flags = flags,
            .offset = static_cast<std::int32_t>(p.offset),
            .window_left = static_cast<std::int32_t>(p.window.left),
            .window_right = static_cast<std::int32_t>(p.window.right),
            .softcap = static_cast<float>(p.softcap),
            .inv_softcap = p.softcap > 0.0 ? static_cast<float>(1.0 / p.softcap) : 0.0f,
            .keep_scale = static_cast<float>(p.keep_scale()),
            .drop_threshold = p.drop_threshold,
            .seed = {static_cast<std::uint32_t>(p.seed), static_cast<std::uint32_t>(p.seed >> 32)},
            .key_total = static_cast<std::uint32_t>(p.key_total),
            .origin = {static_cast<std::uint32_t>(p.origin[0]), static_cast<std::uint32_t>(p.origin[1]),
                       static_cast<std::uint32_t>(p.origin[2]), static_cast<std::uint32_t>(p.origin[3])}};
}

std::vector<float> head_terms_of(const Problem& p) {
    if (p.alibi.empty() && p.sinks.empty() && p.k_scale.empty() && p.v_scale.empty()) return {};
    const auto hq = static_cast<std::size_t>(p.Hq);
    std::vector<float> terms(2 * hq, 0.0f);
    std::copy(p.alibi.begin(), p.alibi.end(), terms.begin());
    std::copy(p.sinks.begin(), p.sinks.end(), terms.begin() + static_cast<std::ptrdiff_t>(hq));
    const std::vector<float> scales = fp8_scale_terms(p.k_scale, p.v_scale, p.Hkv);
    terms.insert(terms.end(), scales.begin(), scales.end());
    return terms;
}

}  // namespace vkattn::detail
