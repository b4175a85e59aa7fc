// The C++ twin of shaders/common/params.glsl. The static_asserts pin the std140 layout: change one
// side and the build fails here rather than the GPU reading garbage.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace vkattn::detail {

struct TensorDesc {
    std::array<std::uint32_t, 4> stride{};  // b, h, n, d (element strides; bytes for the bool mask)
    std::array<std::uint32_t, 4> origin{};  // first b, h, n of the slice; element offset in binding
};

struct Params {
    std::array<std::uint32_t, 4> shape0{};  // B, Hq, Hkv, group
    std::array<std::uint32_t, 4> attn{};    // Nq, Nkv, Dk, Dv
    std::array<std::uint32_t, 4> gemm{};    // M, N, K (bmm)
    std::array<std::uint32_t, 4> chunk{};   // first unit, first row, rows, units
    std::array<float, 4> scalars{};         // alpha
    std::array<std::uint32_t, 4> masking{}; // causal, has key lengths, has bool mask, has float mask
    std::array<std::uint32_t, 4> split{};   // splits, keys per split, O elements per split, lse per split
    std::array<std::uint32_t, 4> columns{}; // flash: first output column of this pass
    TensorDesc ta, tb, tc, to, tlse, tbool, tfloat;
};

static_assert(sizeof(TensorDesc) == 32);
static_assert(offsetof(Params, attn) == 16);
static_assert(offsetof(Params, gemm) == 32);
static_assert(offsetof(Params, chunk) == 48);
static_assert(offsetof(Params, scalars) == 64);
static_assert(offsetof(Params, masking) == 80);
static_assert(offsetof(Params, split) == 96);
static_assert(offsetof(Params, columns) == 112);
static_assert(offsetof(Params, ta) == 128);
static_assert(offsetof(Params, tlse) == 256);
static_assert(offsetof(Params, tfloat) == 320);
static_assert(sizeof(Params) == 352);

}  // namespace vkattn::detail
