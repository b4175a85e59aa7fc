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
    std::array<std::uint32_t, 4> masking{}; // MASK_* flags, alignment offset, window left, right (int)
    std::array<std::uint32_t, 4> split{};   // splits, keys per split, O elements per split, lse per split
    std::array<std::uint32_t, 4> part{};    // flash: first output column, first split; bmm: residual
    std::array<float, 4> terms{};           // softcap, 1 / softcap, dropout keep scale
    std::array<std::uint32_t, 4> dropout{}; // threshold, seed low, seed high
    TensorDesc ta, tb, tc, to, tlse, tbool, tfloat;
};

static_assert(sizeof(TensorDesc) == 32);
static_assert(offsetof(Params, attn) == 16);
static_assert(offsetof(Params, gemm) == 32);
static_assert(offsetof(Params, chunk) == 48);
static_assert(offsetof(Params, scalars) == 64);
static_assert(offsetof(Params, masking) == 80);
static_assert(offsetof(Params, split) == 96);
static_assert(offsetof(Params, part) == 112);
static_assert(offsetof(Params, terms) == 128);
static_assert(offsetof(Params, dropout) == 144);
static_assert(offsetof(Params, ta) == 160);
static_assert(offsetof(Params, tlse) == 288);
static_assert(offsetof(Params, tfloat) == 352);
static_assert(sizeof(Params) == 384);

// The masking.x flags, as shaders/common/mask.glsl names them.
enum MaskFlag : std::uint32_t {
    kMaskCausal = 1,
    kMaskLengths = 2,
    kMaskBool = 4,
    kMaskFloat = 8,
    kMaskBottomRight = 16,
    kMaskAlibi = 32,
    kMaskSinks = 64,
};

struct Problem;
// masking, terms and dropout for a problem: every mask and model feature, the same for every kernel.
void set_features(Params& params, const Problem& problem);

}  // namespace vkattn::detail
