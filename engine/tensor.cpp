#include "vkattn/tensor.hpp"

#include <bit>
#include <charconv>
#include <stdexcept>

#include "vkattn/attention.hpp"
#include "vkattn/errors.hpp"

namespace vkattn {

namespace {

struct TypeInfo {
    DType dtype;
    const char* name;
    std::size_t block_elements, block_bytes;
};

// ggml's blocks: q8_0 {fp16 d; int8 qs[32]}, q4_0 {d; qs[16]}, q4_1 {d; m; qs[16]},
// q5_0 {d; u32 qh; qs[16]}, q5_1 {d; m; qh; qs[16]}, iq4_nl {d; qs[16]}.
constexpr TypeInfo kTypes[] = {
    {DType::f32, "f32", 1, 4},        {DType::f16, "f16", 1, 2},       {DType::i32, "i32", 1, 4},
    {DType::u8, "u8", 1, 1},          {DType::bf16, "bf16", 1, 2},     {DType::q8_0, "q8_0", 32, 34},
    {DType::q4_0, "q4_0", 32, 18},    {DType::q4_1, "q4_1", 32, 20},   {DType::q5_0, "q5_0", 32, 22},
    {DType::q5_1, "q5_1", 32, 24},    {DType::iq4_nl, "iq4_nl", 32, 18}, {DType::fp8_e4m3, "fp8_e4m3", 1, 1},
    {DType::fp8_e5m2, "fp8_e5m2", 1, 1},
};

const TypeInfo& info(DType dtype) {
    for (const TypeInfo& t : kTypes)
        if (t.dtype == dtype) return t;
    throw std::logic_error("vkattn: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace

std::size_t block_elements(DType dtype) { return info(dtype).block_elements; }
std::size_t block_bytes(DType dtype) { return info(dtype).block_bytes; }

std::size_t size_of(DType dtype) {
    const TypeInfo& t = info(dtype);
    if (t.block_elements != 1)
        throw std::logic_error(std::string("vkattn: size_of(") + t.name + "): a block type has no size per element");
    return t.block_bytes;
}

std::uint64_t storage_bytes(DType dtype, std::int64_t elements) {
    const TypeInfo& t = info(dtype);
    const auto n = static_cast<std::uint64_t>(elements);
    if (n % t.block_elements != 0)
        throw std::logic_error(std::string("vkattn: ") + std::to_string(elements) + " elements of " + t.name +
                               " are not whole blocks");
    return n / t.block_elements * t.block_bytes;
}

std::string to_string(DType dtype) {
    for (const TypeInfo& t : kTypes)
        if (t.dtype == dtype) return t.name;
    return "unknown dtype " + std::to_string(static_cast<int>(dtype));
}

DType dtype_from_string(const std::string& name, const char* argument) {
    std::string names;
    for (const TypeInfo& t : kTypes) {
        if (name == t.name) return t.dtype;
        names += names.empty() ? t.name : std::string(", ") + t.name;
    }
    throw InvalidArgument(argument, "\"" + name + "\" is not a dtype; the dtypes are " + names + ".");
}

std::string to_string(Layout layout) {
    switch (layout) {
        case Layout::bhnd: return "bhnd";
        case Layout::bnhd: return "bnhd";
    }
    return "unknown layout " + std::to_string(static_cast<int>(layout));
}

std::string to_string(Causal causal) {
    switch (causal) {
        case Causal::none: return "none";
        case Causal::top_left: return "top-left";
        case Causal::bottom_right: return "bottom-right";
    }
    return "unknown causal mode " + std::to_string(static_cast<int>(causal));
}

std::string to_string(Impl impl) {
    switch (impl) {
        case Impl::automatic: return "auto";
        case Impl::unfused: return "unfused";
        case Impl::fused: return "fused";
        case Impl::split: return "split";
    }
    return "unknown impl " + std::to_string(static_cast<int>(impl));
}

std::string to_string(FusedKernel kernel) {
    switch (kernel) {
        case FusedKernel::flash: return "flash";
        case FusedKernel::decode: return "decode";
        case FusedKernel::tile: return "tile";
        case FusedKernel::coopmat: return "coopmat";
    }
    return "unknown fused kernel " + std::to_string(static_cast<int>(kernel));
}

std::string to_string(GemmKernel kernel) {
    switch (kernel) {
        case GemmKernel::blocks: return "blocks";
        case GemmKernel::tile: return "tile";
        case GemmKernel::coopmat: return "coopmat";
    }
    return "unknown gemm kernel " + std::to_string(static_cast<int>(kernel));
}

std::string to_string(const GemmShape& shape) {
    auto n = [](std::uint32_t v) { return std::to_string(v); };
    return n(shape.subgroups_m) + "x" + n(shape.subgroups_n) + "," + n(shape.tiles_m) + "x" + n(shape.tiles_n) + "," +
           n(shape.depth) + "," + n(shape.stages) + (shape.wide ? "" : ",words");
}

std::optional<GemmShape> parse_gemm_shape(std::string_view text) {
    // "2x2,4x4,32,2" with an optional ",words": numbers and the separators between them, nothing else.
    std::uint32_t values[6] = {};
    const char separators[5] = {'x', ',', 'x', ',', ','};  // after each value but the last
    const char* at = text.data();
    const char* const end = text.data() + text.size();
    for (int i = 0; i < 6; ++i) {
        const auto [next, error] = std::from_chars(at, end, values[i]);
        if (error != std::errc() || next == at) return std::nullopt;
        at = next;
        if (i == 5) break;
        if (at == end || *at != separators[i]) return std::nullopt;
        ++at;
    }
    GemmShape shape{values[0], values[1], values[2], values[3], values[4], values[5], true};
    const std::string_view rest(at, static_cast<std::size_t>(end - at));
    if (rest == ",words") shape.wide = false;
    else if (!rest.empty()) return std::nullopt;
    return shape;
}

std::string to_string(LogitsStage stage) {
    switch (stage) {
        case LogitsStage::scaled: return "scaled";
        case LogitsStage::softcapped: return "softcapped";
        case LogitsStage::masked: return "masked";
    }
    return "unknown logits stage " + std::to_string(static_cast<int>(stage));
}

std::array<std::int64_t, 4> dense_strides(Layout layout, const std::array<std::int64_t, 4>& shape) {
    const auto [B, H, N, D] = shape;
    (void)B;
    if (layout == Layout::bnhd) return {N * H * D, D, H * D, 1};  // memory is [B, N, H, D]
    return {H * N * D, N * D, D, 1};
}

// binary32: 1 sign, 8 exponent (bias 127), 23 mantissa bits.
// binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals are m·2^-24.
namespace {

// Shifts `mantissa` right by `shift` (1..31) rounding to nearest, ties to even.
std::uint32_t shift_round_even(std::uint32_t mantissa, int shift) {
    const std::uint32_t kept = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((std::uint32_t{1} << shift) - 1);
    const std::uint32_t half = std::uint32_t{1} << (shift - 1);
    return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

}  // namespace

std::uint16_t float_to_half(float value) {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const std::uint32_t abs = x & 0x7fffffffu;

    if (abs >= 0x7f800000u) {  // inf or NaN; a NaN keeps its top payload bits and is made quiet
        if (abs == 0x7f800000u) return sign | 0x7c00u;
        return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    }
    // 65520 = 65504 + half an ulp: from there on the value rounds (ties to even) to infinity.
    if (abs >= 0x477ff000u) return sign | 0x7c00u;

    const int exponent = static_cast<int>(abs >> 23);  // biased, float
    if (exponent >= 113) {
        // Normal half. A carry out of the mantissa correctly bumps the exponent.
        const std::uint32_t bits = (static_cast<std::uint32_t>(exponent - 112) << 23) |
                                   (abs & 0x7fffffu);
        return static_cast<std::uint16_t>(sign | shift_round_even(bits, 13));
    }
    // Subnormal half (or zero): value = m·2^(exponent-150) = h·2^-24, so h = m >> (126 - exponent).
    // Below 2^-25 (shift >= 25) everything rounds to zero; a carry up to 0x400 is the smallest normal.
    const int shift = 126 - exponent;
    if (shift >= 25) return sign;
    const std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    return static_cast<std::uint16_t>(sign | shift_round_even(mantissa, shift));
}

float half_to_float(std::uint16_t bits) {
    const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
    std::uint32_t exponent = (bits >> 10) & 0x1fu;
    std::uint32_t mantissa = bits & 0x3ffu;

    if (exponent == 0x1f)  // inf, or NaN with its payload
        return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        if (mantissa == 0) return std::bit_cast<float>(sign);
        // Subnormal: normalise, so the float exponent is 113 - (number of shifts).
        exponent = 113;
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            --exponent;
        }
        return std::bit_cast<float>(sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13));
    }
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::uint16_t float_to_bf16(float value) {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bf16_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

}  // namespace vkattn
