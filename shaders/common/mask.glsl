// The mask model, the GLSL twin of Problem::key_range / key_visible / additive / logit / sink
// (engine/attention/problem.hpp). Needs a parameter block P with `AttentionShape shape` and
// `MaskParams mask` (common/params.glsl) and these bindings declared before inclusion:
//   kv_lengths[] (int), bool_words[] (uint, 4 mask bytes per word), float_mask[] (float),
//   head_terms[] (float: [Hq] ALiBi slopes, then [Hq] sink logits, then [Hkv] fp8 K scales and
//   [Hkv] fp8 V scales that the loaders read, vkattn::detail::head_terms_of); with VARLEN defined, also
//   cu_q[] and cu_k[] and P.varlen (common/varlen.glsl).
// Every uniform is read once per row into a RowMask: on lavapipe each uniform-block read is a
// scalar memory access, far too dear to repeat per score.
#ifndef VKATTN_MASK_GLSL
#define VKATTN_MASK_GLSL

#include "float_bits.glsl"
#ifdef VARLEN
#include "varlen.glsl"
#endif

// P.mask.flags, as engine/attention/params.hpp names them (MaskFlag).
const uint MASK_CAUSAL = 1u, MASK_LENGTHS = 2u, MASK_BOOL = 4u, MASK_FLOAT = 8u, MASK_BOTTOM_RIGHT = 16u,
           MASK_ALIBI = 32u, MASK_SINKS = 64u;

bool has_flag(uint flag) { return (P.mask.flags & flag) != 0u; }

struct RowMask {
    uint first, limit;  // keys outside [first, limit) are masked: key length, causal, window
    bool has_bool;
    uint bool_base;     // byte index of (b, h, i, 0) in the bool mask
    uint bool_stride;   // bytes between keys (0 when broadcast over keys)
    bool has_float;
    uint float_base;
    uint float_stride;
    float alibi_slope;  // 0 without ALiBi
    int position;       // i + a: the diagonal key; ALiBi measures |position - j|
};

// Batch b's key length in the whole attention's keys (a block's whole: P.mask.key_total keys, Nkv
// for a whole call), clamped to them: lengths written on the device (a KV cache's, the caller's) are
// not checked on the host. Packed keys (varlen) have the length cu_seqlens_k gives them.
int whole_kv_length(uint b) {
#ifdef VARLEN
    if (P.varlen.packed_k != 0u) return int(k_packed_length(b));
#endif
    const int total = int(P.mask.key_total);
    return has_flag(MASK_LENGTHS) ? clamp(kv_lengths[b], 0, total) : total;
}

// This call's keys of batch b: the whole's from origin.w on, at most Nkv (never read past them).
int kv_length(uint b) {
#ifdef VARLEN
    if (P.varlen.packed_k != 0u) return int(k_packed_length(b));
#endif
    return clamp(whole_kv_length(b) - int(P.mask.origin.w), 0, int(P.shape.Nkv));
}

// The queries of batch b: Nq, or a packed sequence's own (varlen).
int query_length(uint b) {
#ifdef VARLEN
    return int(q_length(b));
#else
    return int(P.shape.Nq);
#endif
}

// The diagonal's offset: causal keeps key j for query i when j <= i + alignment(b). Bottom-right
// aligns the batch's last query with its last key (the whole's: a block's offset holds its origin
// and the whole's query count, Problem::offset).
int alignment(uint b) {
    return P.mask.offset + (has_flag(MASK_BOTTOM_RIGHT) ? whole_kv_length(b) - query_length(b) : 0);
}

RowMask row_mask(uint b, uint h, uint i) {
    RowMask m;
    const int at = int(i) + alignment(b);
    const int left = P.mask.window_left, right = P.mask.window_right;
    int limit = kv_length(b);
    if (has_flag(MASK_CAUSAL)) limit = min(limit, at + 1);  // j <= i + a
    if (right >= 0) limit = min(limit, at + right + 1);     // j <= i + a + right
    m.first = left >= 0 ? uint(max(at - left, 0)) : 0u;     // j >= i + a - left
    m.limit = uint(max(limit, 0));
    m.has_bool = has_flag(MASK_BOOL);
    m.bool_base = tensor_index(P.mask.bool_mask, b, h, i);
    m.bool_stride = P.mask.bool_mask.stride.w;
    m.has_float = has_flag(MASK_FLOAT);
    m.float_base = tensor_index(P.mask.float_mask, b, h, i);
    m.float_stride = P.mask.float_mask.stride.w;
    m.alibi_slope = has_flag(MASK_ALIBI) ? head_terms[h] : 0.0;
    m.position = at;
    return m;
}

// The queries [first, limit) of batch b that may see some key of [key_lo, key_hi) under the
// structural mask (key length, causal, window): row_mask's ranges turned around, for the backward's
// key-side kernels. Rows outside it see none of these keys; rows inside may still mask some.
uvec2 query_range(uint b, uint key_lo, uint key_hi) {
    if (int(key_lo) >= kv_length(b)) return uvec2(0u);
    const int a = alignment(b), left = P.mask.window_left, right = P.mask.window_right;
    int first = 0, limit = query_length(b);
    if (has_flag(MASK_CAUSAL)) first = max(first, int(key_lo) - a);          // j <= i + a
    if (right >= 0) first = max(first, int(key_lo) - a - right);             // j <= i + a + right
    if (left >= 0) limit = min(limit, int(key_hi) - 1 - a + left + 1);       // j >= i + a - left
    return first < limit ? uvec2(uint(first), uint(limit)) : uvec2(0u);
}

// Whether key j is visible to the row (key range, bool mask, and a float mask of −∞, recognised by
// its bits) and, when it is, the additive terms: the float mask plus the ALiBi bias
// -slope·|i + a - j|.
bool key_terms(RowMask m, uint j, out float terms) {
    terms = 0.0;
    if (j < m.first || j >= m.limit) return false;
    if (m.has_bool) {
        const uint byte_index = m.bool_base + j * m.bool_stride;
        if (((bool_words[byte_index >> 2] >> ((byte_index & 3u) * 8u)) & 0xffu) == 0u) return false;
    }
    if (m.has_float) {
        terms = float_mask[m.float_base + j * m.float_stride];
        if (is_negative_infinity(terms)) return false;
    }
    terms -= m.alibi_slope * abs(float(m.position - int(j)));
    return true;
}

// The logit cap c·tanh(s / c) (P.mask.softcap = c, P.mask.inv_softcap = 1 / c); identity without
// one. tanh is written as 1 - 2 / (e^2x + 1), its exponent capped at 80 (e^80 is finite; tanh is 1
// to fp32 long before), so that it saturates to ±1 without an infinity. The cap is a comparison,
// not min(): GLSL leaves min(NaN, 80) undefined and lavapipe returns 80, which turned a NaN score
// into the finite logit c; a NaN must stay NaN (docs/SEMANTICS.md).
float softcap(float s) {
    if (P.mask.softcap <= 0.0) return s;
    const float x = 2.0 * s * P.mask.inv_softcap;
    return P.mask.softcap * (1.0 - 2.0 / (exp(x > 80.0 ? 80.0 : x) + 1.0));
}

// Whether query head h has a sink, and its logit (a sink of −∞ is none).
bool sink_logit(uint h, out float sink) {
    sink = has_flag(MASK_SINKS) ? head_terms[P.shape.Hq + h] : 0.0;
    return has_flag(MASK_SINKS) && !is_negative_infinity(sink);
}

#endif
