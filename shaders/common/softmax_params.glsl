// softmax.comp's parameter block. Mirrored by SoftmaxParams in engine/attention/params.hpp.
#ifndef VKATTN_SOFTMAX_PARAMS_GLSL
#define VKATTN_SOFTMAX_PARAMS_GLSL

#include "params.glsl"

const uint MODE_WHOLE = 0u, MODE_STATS = 1u, MODE_APPLY = 2u;  // SoftmaxParams.mode (SoftmaxMode)
// SoftmaxParams.logits_stage: none, or 1 + vkattn::LogitsStage (softmax_logits_stage).
const uint LOGITS_NONE = 0u, LOGITS_SCALED = 1u, LOGITS_SOFTCAPPED = 2u, LOGITS_MASKED = 3u;

layout(std140, set = 0, binding = 0) uniform SoftmaxParams {
    AttentionShape shape;
    ChunkRange chunk;        // units u = b·Hq + h (grid y); rows are queries i (grid x)
    MaskParams mask;
    uint mode;               // MODE_WHOLE: whole rows; MODE_STATS: a key slice's (m, l) to `stats`;
                             // MODE_APPLY: every slice's (m, l) merged, the slice's P written
    uint key_begin;          // this dispatch's keys [key_begin, key_end) (MODE_WHOLE: [0, Nkv))
    uint key_end;
    uint slices;             // key slices per row: (m, l) pairs per row in `stats`
    uint slice;              // this dispatch's key slice, in [0, slices)
    uint logits_stage;       // LOGITS_*: what `logits` receives, where P is written
    TensorDesc scores;       // S, read, then P written in place
    TensorDesc lse;          // the row log-sum-exp
    TensorDesc logits;       // the logits output (with logits_stage)
} P;

#endif
