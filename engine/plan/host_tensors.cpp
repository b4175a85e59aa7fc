#include "plan/host_tensors.hpp"

#include <cstring>

#include "attention/io.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "submit/host_copy.hpp"
#include "tensor/storage.hpp"
#include "types/narrow.hpp"

namespace vkattn::detail {
namespace {

std::array<std::int64_t, 4> flat(std::int64_t n) { return {1, 1, 1, n}; }

}  // namespace

DeviceTensor own_tensor(Runtime& runtime, DType dtype, const std::array<std::int64_t, 4>& shape,
                        const std::array<std::int64_t, 4>& strides, const std::string& what) {
    return TensorAccess::make(allocate_storage(runtime, span_bytes(dtype, shape, strides), what), 0, dtype, shape, strides);
}

DeviceTensor own_dense(Runtime& runtime, DType dtype, const std::array<std::int64_t, 4>& shape, const std::string& what) {
    return own_tensor(runtime, dtype, shape, dense_strides(Layout::bhnd, shape), what);
}

DeviceTensor own_mask(Runtime& runtime, BatchState& batch, const MaskView& mask, DType dtype, const std::string& what) {
    DeviceTensor t = own_dense(runtime, dtype, rank4(mask.shape), what);
    write_fresh(batch, t, mask.data);
    return t;
}

void write_fresh(BatchState& batch, const DeviceTensor& tensor, const void* host) {
    const Storage& storage = *TensorAccess::storage(tensor);
    if (storage.buffer.mapped() != nullptr) {
        std::memcpy(static_cast<char*>(storage.buffer.mapped()) + tensor.offset_bytes(), host, span_bytes(tensor));
        return;
    }
    batch.upload(tensor, TensorView{host, tensor.dtype(), tensor.shape(), tensor.strides()});
}

void read_back(BatchState& batch, const DeviceTensor& tensor, const MutableTensorView& host) {
    const Storage& storage = *TensorAccess::storage(tensor);
    if (storage.buffer.mapped() == nullptr) {
        batch.download(tensor, host);
        return;
    }
    batch.keep(TensorAccess::storage(tensor));
    batch.on_complete([runs = row_runs(tensor, host.strides), source = static_cast<const char*>(storage.buffer.mapped()),
                       target = static_cast<char*>(host.data)] {
        for (const auto& run : runs) std::memcpy(target + run.host, source + run.device, run.bytes);
    });
}

HostTensors::HostTensors(Runtime& runtime, const Problem& p, const AttentionInputs& in, const AttentionOutputs& out)
    : runtime_(&runtime), p_(&p), in_(&in), out_(&out) {
    q_ = allocated_bytes(span_bytes(p.dtype, in.q.shape, in.q.strides));
    k_ = allocated_bytes(span_bytes(p.k_dtype, in.k.shape, in.k.strides));
    v_ = allocated_bytes(span_bytes(p.v_dtype, in.v.shape, in.v.strides));
    o_ = allocated_bytes(span_bytes(p.dtype, out.o.shape, out.o.strides));
    masks_ = (p.bool_mask.present() ? allocated_bytes(u64(p.bool_mask.elements)) : 0) +
             (p.float_mask.present() ? allocated_bytes(u64(4 * p.float_mask.elements)) : 0) +
             (p.has_kv_lengths ? allocated_bytes(u64(4 * p.B)) : 0);
    lse_ = p.want_lse ? allocated_bytes(u64(p.B * p.Hq * p.Nq) * 4) : 0;
    weights_ = p.want_weights ? allocated_bytes(u64(p.B * p.Hq * p.Nq * p.Nkv) * 4) : 0;
    logits_ = p.want_logits ? allocated_bytes(u64(p.B * p.Hq * p.Nq * p.Nkv) * 4) : 0;
}

std::uint64_t HostTensors::bytes() const { return q_ + k_ + v_ + o_ + masks_ + lse_ + weights_ + logits_; }

std::string HostTensors::itemised() const {
    return "q " + std::to_string(q_) + ", k " + std::to_string(k_) + ", v " + std::to_string(v_) + ", o " +
           std::to_string(o_) + ", masks " + std::to_string(masks_) + ", lse " + std::to_string(lse_) + ", weights " +
           std::to_string(weights_) + ", logits " + std::to_string(logits_);
}

void HostTensors::upload(BatchState& batch, DeviceAttentionInputs& din, DeviceAttentionOutputs& dout) {
    Runtime& rt = *runtime_;
    const Problem& p = *p_;
    const AttentionInputs& in = *in_;
    const AttentionOutputs& out = *out_;
    auto input = [&](const TensorView& host, const char* what) {
        DeviceTensor t = own_tensor(rt, host.dtype, host.shape, host.strides, what);
        write_fresh(batch, t, host.data);
        return t;
    };
    din.q = input(in.q, "q");
    din.k = input(in.k, "k");
    din.v = input(in.v, "v");
    dout.o = own_tensor(rt, p.dtype, out.o.shape, out.o.strides, "o");
    if (p.has_kv_lengths) {
        const auto shape = flat(p.B);
        din.kv_lengths = input(TensorView{p.kv_len.data(), DType::i32, shape, dense_strides(Layout::bhnd, shape)},
                               "kv_lengths");
    }
    if (in.bool_mask) din.bool_mask = own_mask(rt, batch, *in.bool_mask, DType::u8, "bool_mask");
    if (in.float_mask) din.float_mask = own_mask(rt, batch, *in.float_mask, DType::f32, "float_mask");
    din.alibi_slopes = in.alibi_slopes;
    din.sinks = in.sinks;
    din.k_scale = in.k_scale;
    din.v_scale = in.v_scale;
    if (p.want_lse) dout.lse = own_dense(rt, DType::f32, {p.B, p.Hq, p.Nq, 1}, "lse");
    if (p.want_weights) dout.weights = own_dense(rt, DType::f32, {p.B, p.Hq, p.Nq, p.Nkv}, "weights");
    if (p.want_logits) dout.logits = own_dense(rt, DType::f32, {p.B, p.Hq, p.Nq, p.Nkv}, "logits");
}

void HostTensors::download(BatchState& batch, const DeviceAttentionOutputs& dout) {
    const Problem& p = *p_;
    const AttentionOutputs& out = *out_;
    read_back(batch, dout.o, out.o);
    auto dense = [](float* data, const std::array<std::int64_t, 4>& shape) {
        return MutableTensorView{data, DType::f32, shape, dense_strides(Layout::bhnd, shape)};
    };
    if (p.want_lse) read_back(batch, dout.lse, dense(out.lse, {p.B, p.Hq, p.Nq, 1}));
    if (p.want_weights) read_back(batch, dout.weights, dense(out.weights, {p.B, p.Hq, p.Nq, p.Nkv}));
    if (p.want_logits) read_back(batch, dout.logits, dense(out.logits, {p.B, p.Hq, p.Nq, p.Nkv}));
}

}  // namespace vkattn::detail
