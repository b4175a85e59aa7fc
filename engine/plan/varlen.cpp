#include "plan/varlen.hpp"

#include <string>

#include "tensor/storage.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

// cu_seqlens: i32, contiguous, B + 1 elements (B >= 1); returns B.
std::int64_t sequences(const DeviceTensor& cu, const char* name) {
    if (!cu.defined()) throw InvalidArgument(name, "the tensor is empty (a default-constructed DeviceTensor).");
    if (cu.dtype() != DType::i32) throw InvalidArgument(name, "its dtype is " + to_string(cu.dtype()) + " but must be i32.");
    if (!cu.contiguous()) throw InvalidArgument(name, "it must be contiguous.");
    if (cu.elements() < 2)
        throw InvalidArgument(name, "it holds " + std::to_string(cu.elements()) +
                                        " offsets; B sequences need B + 1 (0 first, then each sequence's end).");
    return cu.elements() - 1;
}

// The virtual [B, H, max_seqlen, D] tensor a packed [1, H, total, D] one stands for: batch stride 0.
TensorLayout virtual_layout(const TensorLayout& packed, std::int64_t B, std::int64_t max_seqlen) {
    return {packed.dtype, {B, packed.shape[1], max_seqlen, packed.shape[3]}, {0, packed.strides[1], packed.strides[2], packed.strides[3]}};
}

void check_max(std::int64_t max, const char* name) {
    if (max < 1 || max > 0x7fffffff)
        throw InvalidArgument(name, "it is " + std::to_string(max) + "; the longest sequence's length is at least 1.");
}

// A packed tensor: [1, H, total, D].
void check_packed(const TensorLayout& t, const char* name, const char* form) {
    if (t.shape[0] != 1)
        throw InvalidArgument(name, "its shape is " + shape_text(t.shape) + " but a packed (varlen) tensor is " + form +
                                        " (FlashAttention's [total, H, D] is that shape in Layout::bnhd).");
}

}  // namespace

void apply_varlen(AttentionSpec& spec, const DeviceAttentionInputs& in) {
    const DeviceVarlen& v = in.varlen;
    const std::int64_t B = sequences(v.cu_seqlens_q, "varlen.cu_seqlens_q");
    check_max(v.max_seqlen_q, "varlen.max_seqlen_q");
    check_packed(spec.q, "q", "[1, Hq, total_q, Dk]");
    check_packed(spec.o, "o", "[1, Hq, total_q, Dv]");
    const std::int64_t total_q = spec.q.shape[2];
    if (spec.o.shape[2] != total_q)
        throw InvalidArgument("o", "it has " + std::to_string(spec.o.shape[2]) + " rows but q has " +
                                       std::to_string(total_q) + "; packed outputs match the packed queries.");
    VarlenSpec packed{.q = spec.q, .o = spec.o};
    spec.q = virtual_layout(spec.q, B, v.max_seqlen_q);
    spec.o = virtual_layout(spec.o, B, v.max_seqlen_q);
    if (v.cu_seqlens_k.defined()) {
        if (sequences(v.cu_seqlens_k, "varlen.cu_seqlens_k") != B)
            throw InvalidArgument("varlen.cu_seqlens_k", "it holds " + std::to_string(v.cu_seqlens_k.elements()) +
                                                             " offsets but cu_seqlens_q holds " + std::to_string(B + 1) + ".");
        check_max(v.max_seqlen_k, "varlen.max_seqlen_k");
        if (in.paged.defined())
            throw InvalidArgument("varlen.cu_seqlens_k", "a paged K/V is per sequence already; leave cu_seqlens_k empty.");
        if (in.kv_lengths.defined())
            throw InvalidArgument("kv_lengths", "packed keys take their lengths from cu_seqlens_k; leave kv_lengths empty.");
        check_packed(spec.k, "k", "[1, Hkv, total_k, Dk]");
        check_packed(spec.v, "v", "[1, Hkv, total_k, Dv]");
        if (spec.v.shape[2] != spec.k.shape[2])
            throw InvalidArgument("v", "it has " + std::to_string(spec.v.shape[2]) + " rows but k has " +
                                           std::to_string(spec.k.shape[2]) + ".");
        packed.k = spec.k;
        packed.v = spec.v;
        spec.k = virtual_layout(spec.k, B, v.max_seqlen_k);
        spec.v = virtual_layout(spec.v, B, v.max_seqlen_k);
    } else if (v.max_seqlen_k != 0) {
        throw InvalidArgument("varlen.max_seqlen_k", "it goes with cu_seqlens_k; keys per sequence take their length "
                                                     "from k's shape and kv_lengths.");
    }
    spec.varlen = packed;
}

void own_packed_operands(Operands& ops, const VarlenSpec& spec, const Problem& p) {
    auto packed = [&](const TensorLayout& t) {
        return Operand{t.strides, 0, allocated_bytes(span_bytes(t.dtype, t.shape, t.strides))}.packed(t.shape[2]);
    };
    ops.q = packed(spec.q);
    ops.o = packed(spec.o);
    ops.lse = Operand{lse_strides(p), 0, allocated_bytes(lse_bytes(p))}.packed(p.total_q);
    if (spec.k) ops.k = packed(*spec.k);
    if (spec.v) ops.v = packed(*spec.v);
}

std::array<std::int64_t, 4> lse_strides(const Problem& p) {
    return p.packed_q ? std::array<std::int64_t, 4>{0, p.total_q, 1, 0} : std::array<std::int64_t, 4>{p.Hq * p.Nq, p.Nq, 1, 0};
}

std::uint64_t lse_bytes(const Problem& p) {
    return static_cast<std::uint64_t>(p.packed_q ? p.Hq * p.total_q : p.B * p.Hq * p.Nq) * 4;
}

}  // namespace vkattn::detail
