// Variable-length batches as plans see them (DeviceVarlen in plan.hpp): the packed tensors'
// checks, and the virtual [B, H, max_seqlen, D] layouts with batch stride 0 the problem is resolved
// over. The device adds cu_seqlens[b] rows to a packed tensor's row index (common/varlen.glsl).
#pragma once

#include <array>
#include <cstdint>

#include "attention/io.hpp"
#include "attention/problem.hpp"
#include "vkattn/plan.hpp"

namespace vkattn::detail {

// Checks the varlen inputs (InvalidArgument naming varlen.*, q, k, v, o or kv_lengths) and sets
// spec.varlen and the virtual layouts of spec.q and spec.o (and spec.k and spec.v when the keys are
// packed). The spec's q, k, v and o must hold the tensors' own layouts.
void apply_varlen(AttentionSpec& spec, const DeviceAttentionInputs& inputs);

// The operands of packed tensors each alone in a buffer of their own (the plan's planning, before any
// run): q, o, lse (and k, v when the keys are packed) bound whole.
void own_packed_operands(Operands& ops, const VarlenSpec& spec, const Problem& problem);

// The strides of the lse, packed ([1, Hq, total_q, 1]) or not ([B, Hq, Nq, 1]), over the problem's
// (virtual) rows.
std::array<std::int64_t, 4> lse_strides(const Problem& problem);
// Bytes of the lse the kernels write.
std::uint64_t lse_bytes(const Problem& problem);


}  // namespace vkattn::detail
