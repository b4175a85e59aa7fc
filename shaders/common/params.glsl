// The parameter block every attention shader reads (binding 0). Mirrored, field for field, by
// engine/attention/params.hpp, whose static_asserts check the std140 offsets.
#ifndef VKATTN_PARAMS_GLSL
#define VKATTN_PARAMS_GLSL

// A tensor bound as one slice of a buffer. Element (b, h, n, d) of the full tensor lives at
//   (b - origin.x)·stride.x + (h - origin.y)·stride.y + (n - origin.z)·stride.z + d·stride.w + origin.w
// within the binding: origin.xyz is the first (b, h, n) the slice holds and origin.w the element
// offset of that corner from the (aligned) start of the binding. Unsigned wrap-around is intended:
// the terms may underflow individually, the sum is exact.
struct TensorDesc {
    uvec4 stride;
    uvec4 origin;
};

layout(std140, set = 0, binding = 0) uniform Params {
    uvec4 shape0;    // x = B, y = Hq, z = Hkv, w = group (Hq / Hkv)
    uvec4 attn;      // x = Nq, y = Nkv, z = Dk, w = Dv: the attention problem (masks, softmax, flash)
    uvec4 gemm;      // x = M, y = N, z = K: one bmm dispatch's product
    uvec4 chunk;     // x = first unit (b·Hq + h), y = first row, z = rows, w = units
    vec4 scalars;    // x = alpha (the softmax scale in stage 1, 1 elsewhere)
    uvec4 masking;   // x = MASK_* flags (mask.glsl), y = the alignment's offset (int),
                     // z = window left, w = window right (int; -1 = unbounded)
    uvec4 split;     // x = splits, y = keys per split, z = elements of O per split, w = of lse
    uvec4 part;      // flash: x = the first output column of this dispatch (column passes),
                     // y = the first split of this dispatch (key slices bound one at a time)
                     // bmm: x = 1 when C = A·B + R adds a residual R (binding 5, addressed by `to`)
    vec4 terms;      // x = softcap c (0 = none), y = 1 / c, z = dropout's keep scale 1 / (1 - p)
    uvec4 dropout;   // x = drop threshold (0 = no dropout), y, z = seed (low, high word)
    TensorDesc ta;   // bmm: A    softmax: S (read, then P written in place)    flash: Q
    TensorDesc tb;   // bmm: B                                                   flash: K
    TensorDesc tc;   // bmm: C                                                   flash: V
    TensorDesc to;   // flash, combine: O (or the split partials)
    TensorDesc tlse; // softmax, flash, combine: the row log-sum-exp
    TensorDesc tbool;   // bool mask, bytes, broadcast strides (0 on broadcast dimensions)
    TensorDesc tfloat;  // float mask, broadcast strides
} P;

uint tensor_index(TensorDesc t, uint b, uint h, uint n) {
    return (b - t.origin.x) * t.stride.x + (h - t.origin.y) * t.stride.y +
           (n - t.origin.z) * t.stride.z + t.origin.w;
}

#endif
