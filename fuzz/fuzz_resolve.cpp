// vkattn::detail::resolve on arbitrary shapes, strides, masks and options. resolve() is the one
// place arguments are validated, so whatever it accepts the GPU paths and the reference will index
// with. A finding is any of:
// - an exception other than InvalidArgument or ResourceLimit, a crash, a sanitizer report
//   (UBSan's signed-overflow check included) or a hang;
// - an accepted problem that breaks a promise the engine relies on: positive sizes within the
//   shaders' 32-bit indices, Hq = group·Hkv, one key length per batch within [0, Nkv], masks whose
//   last broadcast element lies inside them, and diagonal positions i + a (± the window) that the
//   shaders' 32-bit arithmetic can hold.
//
// The bytes are read in order (past the end, every read is 0), in the format that
// fuzz/corpus/make_resolve_seeds.py writes:
//   u8 flags     bit 0 fp16, 1 bool mask, 2 float mask, 3 weights out, 4 lse out, 5 key lengths,
//                6 ALiBi slopes, 7 sinks
//   u8 flags2    bit 0 scale, 1 causal offset, 2 softcap, 3 ALiBi max bias, 4-5 causal (mod 3),
//                6 one view of another dtype (u8 which, at the end), 7 one null pointer (u8 which)
//   q, k, v, o   u8 layout (0 dense bhnd, 1 dense bnhd, else explicit strides), 4 × num shape,
//                then 4 × num strides when explicit
//   key lengths  u8 count, count × num                (when flags bit 5)
//   masks        u8 rank (mod 7), rank × num          (bool, then float, when present)
//   slopes/sinks u8 count, count × real               (when flags bits 6 / 7)
//   options      real scale, num causal offset, num window left, num window right, real softcap,
//                real ALiBi max bias, real dropout, u64 seed
// num: a byte below 0xF0 is its own value, 0xF0..0xFE index kSpecialInts, 0xFF reads an i64.
// real: a byte below 0xF0 is (byte - 64) / 8, 0xF0..0xFE index kSpecialReals, 0xFF reads an f64.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "attention/io.hpp"
#include "attention/problem.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;

namespace {

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kSpecialInts[15] = {-1, -2, kI32Max, kI32Max + 1, (std::int64_t{1} << 32) - 1,
                                           std::int64_t{1} << 32, std::int64_t{1} << 30, (std::int64_t{1} << 30) + 1,
                                           std::int64_t{1} << 62, kI64Max, kI64Min, kI64Max / 2,
                                           65535, 65536, std::int64_t{1} << 20};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kSpecialReals[15] = {std::numeric_limits<double>::quiet_NaN(), kInf, -kInf, 0.0, -0.0,
                                      1e308, -1e308, 1e-308, std::numeric_limits<double>::denorm_min(), 0.5,
                                      0.9999999999, 1.0, 1e-3, 65504.0, 3.4e38};

// Reads the format above; past the end of the input every read is 0.
class Reader {
public:
    Reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
    std::uint8_t u8() { return at_ < size_ ? data_[at_++] : 0; }
    std::uint64_t u64() {
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v |= std::uint64_t{u8()} << (8 * i);
        return v;
    }
    std::int64_t num() {
        const std::uint8_t t = u8();
        if (t < 0xF0) return t;
        if (t < 0xFF) return kSpecialInts[t - 0xF0];
        return static_cast<std::int64_t>(u64());
    }
    double real() {
        const std::uint8_t t = u8();
        if (t < 0xF0) return (t - 64) / 8.0;
        if (t < 0xFF) return kSpecialReals[t - 0xF0];
        const std::uint64_t bits = u64();
        double v;
        std::memcpy(&v, &bits, sizeof v);
        return v;
    }

private:
    const std::uint8_t* data_;
    std::size_t size_, at_ = 0;
};

// resolve() never reads tensor or mask data (only key lengths, slopes and sinks, which are real
// here), so every view points at this byte.
alignas(16) unsigned char fake_data[16];

template <class View>
View read_view(Reader& r, DType dtype, void* data) {
    const std::uint8_t layout = r.u8();
    std::array<std::int64_t, 4> shape{};
    for (auto& d : shape) d = r.num();
    View view{};
    view.data = static_cast<decltype(view.data)>(data);
    view.dtype = dtype;
    view.shape = shape;
    if (layout <= 1) {
        // dense_strides multiplies the shape unchecked; only meaningful shapes make dense views.
        bool small = true;
        for (auto d : shape) small = small && d >= 0 && d < (1 << 15);
        if (small) view.strides = dense_strides(layout == 0 ? Layout::bhnd : Layout::bnhd, shape);
        else view.strides = {1, 1, 1, 1};
    } else {
        for (auto& s : view.strides) s = r.num();
    }
    return view;
}

std::vector<std::int64_t> read_mask_shape(Reader& r) {
    std::vector<std::int64_t> shape(r.u8() % 7);
    for (auto& d : shape) d = r.num();
    return shape;
}

std::vector<float> read_per_head(Reader& r) {
    std::vector<float> values(r.u8());
    for (auto& v : values) v = static_cast<float>(r.real());
    return values;
}

[[noreturn]] void broken(const char* promise) {
    std::fprintf(stderr, "resolve() accepted a problem that breaks its promise: %s\n", promise);
    __builtin_trap();
}

bool fits_i32(std::int64_t v) { return v >= -kI32Max && v <= kI32Max; }

void check_mask(const detail::Problem& p, const detail::BroadcastMask& m) {
    if (!m.present()) return;
    const std::int64_t last = m.offset(p.B - 1, p.Hq - 1, p.Nq - 1, p.Nkv - 1);
    if (last < 0 || last >= m.elements) broken("a mask's last broadcast element lies inside it");
}

// The promises every GPU path and the reference rely on.
void check_problem(const detail::Problem& p, const AttentionInputs& in, const AttentionOutputs& out) {
    for (const std::int64_t size : {p.B, p.Hq, p.Hkv, p.Nq, p.Nkv, p.Dk, p.Dv})
        if (size < 1 || size > kI32Max) broken("every size is in [1, 2^31 - 1]");
    if (p.group * p.Hkv != p.Hq) broken("Hq = group * Hkv");
    if (static_cast<std::int64_t>(p.kv_len.size()) != p.B) broken("one key length per batch");
    for (const std::int32_t len : p.kv_len)
        if (len < 0 || len > p.Nkv) broken("key lengths within [0, Nkv]");
    check_mask(p, p.bool_mask);
    check_mask(p, p.float_mask);
    for (const std::int64_t span : {in.q.span(), in.k.span(), in.v.span(), out.o.span()})
        if (span < 1) broken("every view spans at least one element");
    // The shaders compute i + a, and i + a ± the window's sides, in 32-bit integers.
    for (const std::int64_t b : {std::int64_t{0}, p.B - 1})
        for (const std::int64_t i : {std::int64_t{0}, p.Nq - 1}) {
            const std::int64_t at = i + p.alignment(b);
            if (!fits_i32(at)) broken("the diagonal position i + a fits 32 bits");
            if (p.window.left >= 0 && !fits_i32(at - p.window.left)) broken("i + a - left fits 32 bits");
            if (p.window.right >= 0 && !fits_i32(at + p.window.right + 1)) broken("i + a + right + 1 fits 32 bits");
            const auto range = p.key_range(b, i);
            if (range.limit < 0 || range.limit > p.Nkv) broken("a row's key limit within [0, Nkv]");
        }
    // Every row's key range: cheap while there are few rows.
    if (p.B * p.Nq <= (1 << 16)) (void)p.flops();
    // Sizes of the buffers the host API allocates: may throw ResourceLimit, nothing else.
    (void)detail::own_buffer_operands(p, in.q.strides, in.k.strides, in.v.strides, out.o.strides);
    (void)detail::spec_of(in, out, {}).key();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    Reader r(data, size);
    const std::uint8_t flags = r.u8(), flags2 = r.u8();
    const DType dtype = flags & 1 ? DType::f16 : DType::f32;

    AttentionInputs in;
    AttentionOutputs out;
    in.q = read_view<TensorView>(r, dtype, fake_data);
    in.k = read_view<TensorView>(r, dtype, fake_data);
    in.v = read_view<TensorView>(r, dtype, fake_data);
    out.o = read_view<MutableTensorView>(r, dtype, fake_data);
    // resolve() allocates [B] key lengths and [Hq] ALiBi slopes, as large as the caller's own q
    // must be; these views point at one byte, so keep B and Hq to what a test machine can hold.
    if (in.q.shape[0] > 65536 || in.q.shape[1] > 65536) return 0;

    std::vector<std::int32_t> lengths;
    if (flags & 32) {
        lengths.resize(r.u8());
        for (auto& len : lengths) len = static_cast<std::int32_t>(r.num());
        in.kv_lengths = lengths;
    }
    if (flags & 2) in.bool_mask = MaskView{fake_data, read_mask_shape(r)};
    if (flags & 4) in.float_mask = MaskView{fake_data, read_mask_shape(r)};
    std::vector<float> slopes, sinks;
    if (flags & 64) in.alibi_slopes = slopes = read_per_head(r);
    if (flags & 128) in.sinks = sinks = read_per_head(r);
    float weights_and_lse[4];
    if (flags & 8) out.weights = weights_and_lse;
    if (flags & 16) out.lse = weights_and_lse;

    AttentionOptions options;
    const double scale = r.real();
    if (flags2 & 1) options.scale = scale;
    const std::int64_t offset = r.num();
    if (flags2 & 2) options.causal_offset = offset;
    options.window = {r.num(), r.num()};
    const double softcap = r.real();
    if (flags2 & 4) options.softcap = softcap;
    const double max_bias = r.real();
    if (flags2 & 8) options.alibi_max_bias = max_bias;
    options.causal = static_cast<Causal>(((flags2 >> 4) & 3) % 3);
    options.dropout = r.real();
    options.seed = r.u64();
    if (flags2 & 64) {
        const DType other = dtype == DType::f32 ? DType::f16 : DType::f32;
        switch (r.u8() % 4) {
            case 0: in.q.dtype = other; break;
            case 1: in.k.dtype = other; break;
            case 2: in.v.dtype = other; break;
            default: out.o.dtype = other; break;
        }
    }
    if (flags2 & 128) {
        switch (r.u8() % 6) {
            case 0: in.q.data = nullptr; break;
            case 1: in.k.data = nullptr; break;
            case 2: in.v.data = nullptr; break;
            case 3: out.o.data = nullptr; break;
            case 4: if (in.bool_mask) in.bool_mask->data = nullptr; break;
            default: if (in.float_mask) in.float_mask->data = nullptr; break;
        }
    }

    // Last, so that the fields before keep their bytes: the logits (with or without the weights) and
    // their stage, rarely one that is not a stage (refused by name).
    const std::uint8_t logits = r.u8();
    if (logits & 4) out.logits = weights_and_lse;
    options.logits_stage = static_cast<LogitsStage>(logits == 255 ? 3 : logits % 3);

    try {
        const detail::Problem p = detail::resolve(in, out, options);
        check_problem(p, in, out);
    } catch (const InvalidArgument&) {
    } catch (const ResourceLimit&) {
    }
    return 0;
}
