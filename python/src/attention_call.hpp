// One attention call from Python: NumPy arrays (any strides, through nanobind) as the engine's views,
// run on a Context or on the CPU reference. The Python layer (vkattn/_sdpa.py) has already turned
// PyTorch's argument conventions into rank-4 views and vkattn's mask model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "vkattn/vkattn.hpp"

namespace vkattn::python {

using Input = nanobind::ndarray<nanobind::ro, nanobind::device::cpu>;  // read-only arrays welcome
using Output = nanobind::ndarray<nanobind::device::cpu>;

struct AttentionCall {
    Input q, k, v;                                   // [B, H, N, D] views
    Output out;                                      // [B, H, N, Dv], written
    std::optional<Input> bool_mask, float_mask;      // C-contiguous, rank 4, broadcastable (uint8 / float32)
    std::optional<Input> kv_lengths;                 // [B] int32
    std::optional<Input> alibi_slopes, sinks;        // [Hq] float32
    std::optional<Output> lse, weights;              // float32 C-contiguous [B, Hq, Nq] / [B, Hq, Nq, Nkv], written
    std::optional<Output> logits;                    // float32 C-contiguous [B, Hq, Nq, Nkv] at logits_stage, written
    std::string logits_stage = "masked";             // scaled, softcapped, masked (vkattn::LogitsStage)
    std::optional<double> scale, softcap, alibi_max_bias;
    std::string causal = "none";                     // none, top-left, bottom-right
    std::optional<std::int64_t> causal_offset;       // top-left causal with the diagonal at i + offset
    std::int64_t diagonal_offset = 0;                // without causal: the window's diagonal
    bool diagonal_bottom_right = false;
    std::int64_t window_left = -1, window_right = -1;
    double dropout = 0.0;
    std::uint64_t seed = 0;
    std::string impl = "auto";
};

// The call's options as the engine takes them (scale, causal, window, softcap, ALiBi, dropout, impl).
AttentionOptions options_of(const AttentionCall& call);
// A report as Python sees it: a dict of path, variant, gpu_ms, flops.
nanobind::object report_dict(const AttentionReport& report);
// Runs `body`, an engine InvalidArgument's argument renamed as the Python API names it.
template <class Body>
auto python_names(Body&& body) -> decltype(body());
[[noreturn]] void rethrow_with_python_name(const InvalidArgument& error);
// An array's elements as `count` float32 values in C order, or InvalidArgument naming it (the
// engine cannot check raw pointers).
void require_floats(const Output& array, const char* name, std::size_t count);
void require_input_floats(const Input& array, const char* name);

// Whether `a` holds its elements densely in C order.
template <class Array>
bool c_contiguous(const Array& a) {
    std::int64_t expected = 1;
    for (std::size_t i = a.ndim(); i-- > 0;) {
        if (a.shape(i) != 1 && a.stride(i) != expected) return false;
        expected *= static_cast<std::int64_t>(a.shape(i));
    }
    return true;
}

// Runs the call on `context` (the GIL released meanwhile), or on the CPU reference when null.
// Returns the report as a dict (path, variant, gpu_ms, flops), None for the reference. Engine
// errors propagate as the engine's exceptions, their arguments named as the Python API names them.
nanobind::object run_attention(Context* context, const AttentionCall& call);

// The gradients of the call's attention for grad_out (out's shape; the call's out is not written):
// dq, dk, dv ([B, H, N, D] views of the inputs' dtypes) and d_sinks ([Hq] float32), each optional
// (not wanted). The engine's backward (docs/SEMANTICS.md, "The backward pass"), or its CPU reference
// when `context` is null; the report as run_attention's.
struct Gradients {
    std::optional<Output> dq, dk, dv, d_sinks;
};
nanobind::object run_attention_backward(Context* context, const AttentionCall& call, const Input& grad_out,
                                        const Gradients& gradients);

template <class Body>
auto python_names(Body&& body) -> decltype(body()) {
    try {
        return body();
    } catch (const InvalidArgument& e) {
        rethrow_with_python_name(e);
    }
}

}  // namespace vkattn::python
