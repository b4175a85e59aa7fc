#include "attention/io.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "vk/device_caps.hpp"

namespace vkattn::detail {

TensorBytes tensor_bytes(const Problem& p, const AttentionInputs& in, const AttentionOutputs& out) {
    const auto eb = static_cast<std::int64_t>(size_of(p.dtype));
    auto bytes = [&](std::int64_t span) { return static_cast<std::uint64_t>(checked_mul(span, eb, "tensor size")); };
    return {bytes(in.q.span()), bytes(in.k.span()), bytes(in.v.span()), bytes(out.o.span()),
            static_cast<std::uint64_t>(p.B * p.Hq * p.Nq) * 4};
}

DeviceTensors upload_tensors(Transfers& t, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out) {
    DeviceTensors d{};
    d.bytes = tensor_bytes(p, in, out);
    d.q = &t.input(in.q.data, d.bytes.q, "q");
    d.k = &t.input(in.k.data, d.bytes.k, "k");
    d.v = &t.input(in.v.data, d.bytes.v, "v");
    d.o = &t.output(d.bytes.o, p.dtype == DType::f32 ? kNanF32 : kNanF16Pair, "o");
    upload_mask_terms(t, p, d);
    return d;
}

void upload_mask_terms(Transfers& t, const Problem& p, DeviceTensors& d) {
    d.lse = p.want_lse ? &t.output(d.bytes.lse, kNanF32, "lse") : &t.scratch(d.bytes.lse, "lse");
    d.lengths = &t.input(p.kv_len.data(), p.kv_len.size() * 4, "kv_lengths");
    d.bool_mask = p.bool_mask.present()
        ? &t.input(p.bool_mask.data, static_cast<std::uint64_t>(p.bool_mask.elements), "bool_mask")
        : &t.scratch(16, "an unused mask binding");
    d.float_mask = p.float_mask.present()
        ? &t.input(p.float_mask.data, static_cast<std::uint64_t>(p.float_mask.elements) * 4, "float_mask")
        : &t.scratch(16, "an unused mask binding");
    // One per-head buffer for ALiBi slopes and sinks, each [Hq] (zeros for the one not given).
    if (!p.alibi.empty() || !p.sinks.empty()) {
        std::vector<float> terms(static_cast<std::size_t>(2 * p.Hq), 0.0f);
        std::copy(p.alibi.begin(), p.alibi.end(), terms.begin());
        std::copy(p.sinks.begin(), p.sinks.end(), terms.begin() + p.Hq);
        d.head_terms_bytes = terms.size() * 4;
        d.head_terms = &t.input(terms.data(), d.head_terms_bytes, "the ALiBi slopes and sinks");
    } else {
        d.head_terms_bytes = 16;
        d.head_terms = &t.scratch(16, "an unused per-head binding");
    }
}

void copy_results(const Transfers& t, const DeviceTensors& d, const Problem& p, const AttentionOutputs& out) {
    const std::size_t eb = size_of(p.dtype);
    const char* o_bytes = static_cast<const char*>(t.result(*d.o));
    char* o_host = static_cast<char*>(out.o.data);
    for (std::int64_t b = 0; b < p.B; ++b)
        for (std::int64_t h = 0; h < p.Hq; ++h)
            for (std::int64_t n = 0; n < p.Nq; ++n) {
                const auto off = static_cast<std::size_t>(out.o.offset(b, h, n, 0)) * eb;
                std::memcpy(o_host + off, o_bytes + off, static_cast<std::size_t>(p.Dv) * eb);
            }
    if (p.want_lse) std::memcpy(out.lse, t.result(*d.lse), d.bytes.lse);
}

MaskSlices mask_slices(const Problem& p, const Box& qb, std::uint64_t alignment, Features keys) {
    if (keys.length == 0) keys = {0, p.Nkv};
    MaskSlices m;
    // Buffers are allocated with 16 bytes of slack beyond the data (Transfers), so ranges may round up.
    m.bool_mask = p.bool_mask.present()
        ? slice_of(p.bool_mask.strides, keys, qb, 1, alignment, static_cast<std::uint64_t>(p.bool_mask.elements) + 32)
        : whole(16);
    m.float_mask = p.float_mask.present()
        ? slice_of(p.float_mask.strides, keys, qb, 4, alignment, static_cast<std::uint64_t>(p.float_mask.elements) * 4 + 32)
        : whole(16);
    return m;
}

std::uint64_t binding_alignment(const vk::DeviceCaps& caps) {
    return std::max<std::uint64_t>({caps.min_storage_offset_alignment, caps.min_texel_offset_alignment, 16});
}

Slice whole(std::uint64_t bytes) { return Slice{0, (bytes + 15) / 16 * 16, {}}; }

}  // namespace vkattn::detail
