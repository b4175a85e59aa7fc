// Variable-length batches (FlashAttention's varlen), the GLSL twin of DeviceVarlen (plan.hpp):
// sequence b's rows are rows [cu[b], cu[b + 1]) of a packed tensor. Needs a parameter block P with
// `AttentionShape shape` and `Varlen varlen` (common/params.glsl), and these bindings declared
// before inclusion: cu_q[] and cu_k[] (int, B + 1 each). Offsets and lengths written on the device
// are not checked on the host: they are clamped here, so a wrong one never reads or writes outside
// the packed tensor.
#ifndef VKATTN_VARLEN_GLSL
#define VKATTN_VARLEN_GLSL

uint packed_row(int cu, uint total) { return min(uint(max(cu, 0)), total); }

// The first packed row of sequence b's queries (0 when Q is not packed).
uint q_base(uint b) { return P.varlen.packed_q != 0u ? packed_row(cu_q[b], P.varlen.total_q) : 0u; }
// Sequence b's queries: at most Nq (max_seqlen_q), within the packed rows.
uint q_length(uint b) {
    if (P.varlen.packed_q == 0u) return P.shape.Nq;
    const uint first = q_base(b), end = max(packed_row(cu_q[b + 1u], P.varlen.total_q), first);
    return min(end - first, P.shape.Nq);
}
uint k_base(uint b) { return P.varlen.packed_k != 0u ? packed_row(cu_k[b], P.varlen.total_k) : 0u; }
uint k_packed_length(uint b) {
    const uint first = k_base(b), end = max(packed_row(cu_k[b + 1u], P.varlen.total_k), first);
    return min(end - first, P.shape.Nkv);
}

#endif
