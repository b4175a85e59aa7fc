// The catalogue of kernel variants: every way the engine can run an attention call, by name, as a
// path and the VariantOverrides that force it. `vk-attn bench --variant NAME` runs one, `vk-attn
// check --variants all` checks them all, and the tuner (issue #32) times them. Knobs a variant does
// not name stay the tuning's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "vkattn/attention.hpp"

namespace vkattn {

struct KernelVariant {
    std::string name;          // e.g. "split-decode"
    Impl impl;                 // the path it runs on (unfused, fused or split)
    VariantOverrides overrides;
    std::string description;
};

// Every catalogued variant, in a fixed order.
const std::vector<KernelVariant>& kernel_variants();

// The variant of that name, or nullptr.
const KernelVariant* find_kernel_variant(std::string_view name);

// Whether the variant's products round their operands to 16 bits (f16, or bf16 for bf16 storage:
// AttentionReport::product_type): the tuner times those for f16 and bf16 storage only, so that no
// measurement lowers an f32 call's precision.
bool rounds_operands(const VariantOverrides& overrides);

// The catalogue's names, comma-separated (for error messages and help).
std::string kernel_variant_names();

// The backward pass's ways to run (attention_backward), by name, for the tuner and `vk-attn bench
// --backward --variant`: the fused backward's register kernels or its cooperative-matrix kernels, or
// the three-stage backward with either product kernel. In a fixed order.
const std::vector<KernelVariant>& backward_variants();

// The backward variant of that name, or nullptr.
const KernelVariant* find_backward_variant(std::string_view name);

// Their names, comma-separated.
std::string backward_variant_names();

// The cooperative-matrix GEMM's candidate shapes (GemmShape), the default first: what `vk-attn bench
// --gemm --gemm-kernel coopmat --gemm-shape tune` times, reporting the fastest as the ceiling (a
// device takes those its invocations and shared memory allow).
const std::vector<GemmShape>& gemm_shapes();

}  // namespace vkattn
