// bmm.comp's parameter block. Mirrored by BmmParams in engine/attention/params.hpp.
#ifndef VKATTN_BMM_PARAMS_GLSL
#define VKATTN_BMM_PARAMS_GLSL

#include "params.glsl"

layout(std140, set = 0, binding = 0) uniform BmmParams {
    ChunkRange chunk;        // units u = b·heads + h (grid z); rows of A and C
    uint M;                  // rows of C per unit
    uint N;                  // columns of C
    uint K;                  // the inner dimension
    float alpha;             // C = alpha·A·op(B) (+ the addend)
    uint heads;              // heads of A and C: unit u is (b, h) = (u / heads, u % heads)
    uint group;              // heads of A per head of B: B's head is h / group (GQA by indexing)
    uint b_scale_at;         // an fp8 B: head hb's scale is scales[b_scale_at + hb] (binding 5)
    TensorDesc a;
    TensorDesc b;            // [K][N], or [N][K] when B_TRANSPOSED
    TensorDesc c;
    TensorDesc residual;     // ADD = 2: R in binding 4, added to C; unused otherwise
} P;

#endif
