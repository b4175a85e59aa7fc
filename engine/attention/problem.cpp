#include "attention/problem.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "vkattn/dropout.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

// The shaders index sequence positions, features and units (b·Hq + h) with 32-bit integers.
constexpr std::int64_t kMaxIndex = std::numeric_limits<std::int32_t>::max();
constexpr const char* kMaxIndexText = "2^31 - 1 = 2147483647";

std::string shape_string(const std::array<std::int64_t, 4>& s) {
    std::ostringstream out;
    out << '[' << s[0] << ", " << s[1] << ", " << s[2] << ", " << s[3] << ']';
    return out.str();
}

// Whether every byte the view touches has a 64-bit offset. Overflow means the strides or the
// shape are nonsense (shapes are at least 1 and strides non-negative by now).
template <class View>
bool span_fits_64_bits(const View& view) {
    std::int64_t end = 1;  // one past the last element offset
    for (int i = 0; i < 4; ++i) {
        std::int64_t step = 0;
        if (__builtin_mul_overflow(view.shape[i] - 1, view.strides[i], &step) ||
            __builtin_add_overflow(end, step, &end))
            return false;
    }
    std::int64_t bytes = 0;
    return !__builtin_mul_overflow(end, static_cast<std::int64_t>(size_of(view.dtype)), &bytes);
}

template <class View>
void check_view(const View& view, const char* name, DType dtype) {
    if (view.data == nullptr) throw InvalidArgument(name, "the tensor has no data pointer.");
    for (int i = 0; i < 4; ++i) {
        if (view.shape[i] <= 0)
            throw InvalidArgument(name, "every dimension must be at least 1, but the shape is " +
                                            shape_string(view.shape) + ".");
        if (view.strides[i] < 0)
            throw InvalidArgument(name, "strides must not be negative, but they are " +
                                            shape_string(view.strides) + ".");
    }
    if (view.strides[3] != 1)
        throw InvalidArgument(name, "the feature dimension must be contiguous (stride 1), but its "
                                    "stride is " + std::to_string(view.strides[3]) + ".");
    if (view.dtype != dtype)
        throw InvalidArgument(name, "its dtype is " + to_string(view.dtype) + " but q is " +
                                        to_string(dtype) + "; q, k, v and o share one dtype.");
    if (!span_fits_64_bits(view))
        throw InvalidArgument(name, "the shape " + shape_string(view.shape) + " with strides " +
                                        shape_string(view.strides) + " spans more than 2^63 - 1 "
                                        "bytes, so the strides or the shape are wrong.");
}

// Whether distinct elements of an output view lie in distinct memory. Sufficient, not necessary:
// taken in order of increasing stride, every dimension must step past all the memory that the
// smaller ones cover. Every dense or padded layout passes. Dimensions of extent 1 never step, so
// their strides do not matter.
bool elements_disjoint(const MutableTensorView& view) {
    std::array<int, 4> order{0, 1, 2, 3};
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return view.strides[a] < view.strides[b]; });
    std::int64_t covered = 1;  // elements spanned by the dimensions taken so far
    for (const int d : order) {
        if (view.shape[d] == 1) continue;
        if (view.strides[d] < covered) return false;
        if (__builtin_mul_overflow(view.strides[d], view.shape[d], &covered))
            covered = std::numeric_limits<std::int64_t>::max();
    }
    return true;
}

// Rejects a size the shaders would index with 32-bit integers when it is above 2^31 - 1.
void check_index_range(const char* name, const std::string& what, std::int64_t value) {
    if (value > kMaxIndex)
        throw InvalidArgument(name, what + " is " + std::to_string(value) + ", above " +
                                        kMaxIndexText + ", the largest size the GPU kernels index "
                                        "with 32-bit integers.");
}

BroadcastMask broadcast(const MaskView& mask, const char* name,
                        const std::array<std::int64_t, 4>& target) {
    if (mask.data == nullptr) throw InvalidArgument(name, "the mask has no data pointer.");
    const auto rank = static_cast<int>(mask.shape.size());
    if (rank > 4)
        throw InvalidArgument(name, "a mask has at most 4 dimensions, but this one has " +
                                        std::to_string(rank) + ".");
    BroadcastMask out;
    out.data = mask.data;
    std::int64_t stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
        const int t = 4 - rank + i;  // the target dimension this one is aligned with
        const std::int64_t n = mask.shape[static_cast<std::size_t>(i)];
        if (n != 1 && n != target[t]) {
            std::ostringstream msg;
            msg << "a mask of shape [";
            for (int k = 0; k < rank; ++k) msg << (k ? ", " : "") << mask.shape[k];
            msg << "] does not broadcast to [B, Hq, Nq, Nkv] = " << shape_string(target)
                << ": dimension " << i << " is " << n << ", which is neither 1 nor " << target[t]
                << ".";
            throw InvalidArgument(name, msg.str());
        }
        out.strides[t] = n == 1 ? 0 : stride;
        stride = checked_mul(stride, n, name);
    }
    out.elements = stride;
    return out;
}

}  // namespace

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r))
        throw ResourceLimit(std::string(what) + ": the size " + std::to_string(a) + " x " +
                            std::to_string(b) + " overflows 64 bits.");
    return r;
}

bool Problem::kept(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return dropout_keeps(seed, drop_threshold, static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(h),
                         static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
}

double Problem::visible_pairs() const {
    double pairs = 0.0;
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t i = 0; i < Nq; ++i) {
            const KeyRange r = key_range(b, i);
            pairs += static_cast<double>(std::max<std::int64_t>(r.limit - r.first, 0));
        }
    return pairs * static_cast<double>(Hq);
}

double Problem::flops() const { return 2.0 * visible_pairs() * static_cast<double>(Dk + Dv); }

namespace {

// A per-head vector ([Hq] floats): its size checked, every value checked by `ok`.
std::vector<float> per_head(std::span<const float> values, std::int64_t heads, const char* name,
                            bool (*ok)(float), const char* requirement) {
    if (static_cast<std::int64_t>(values.size()) != heads)
        throw InvalidArgument(name, "there are " + std::to_string(values.size()) + " values but q has " +
                                        std::to_string(heads) + " heads; one per query head is needed.");
    for (std::size_t h = 0; h < values.size(); ++h)
        if (!ok(values[h]))
            throw InvalidArgument(name, "the value of head " + std::to_string(h) + " is " +
                                            std::to_string(values[h]) + "; " + requirement + ".");
    return {values.begin(), values.end()};
}

// The model features: causal offset, window, softcap, ALiBi, sinks, dropout.
void resolve_features(Problem& p, const AttentionInputs& in, const AttentionOptions& options) {
    if (options.causal_offset) {
        if (options.causal == Causal::bottom_right)
            throw InvalidArgument("causal_offset", "an explicit causal offset sets the alignment itself; it "
                                                   "cannot be combined with bottom-right alignment "
                                                   "(which is len[b] - Nq).");
        p.causal = Causal::top_left;
        p.offset = *options.causal_offset;
    }
    p.window = options.window;
    if (p.window.left < -1 || p.window.right < -1)
        throw InvalidArgument("window", "the window (" + std::to_string(p.window.left) + ", " +
                                            std::to_string(p.window.right) + ") has a side below -1; each "
                                            "side is a number of keys >= 0, or -1 for unbounded.");

    if (options.softcap) {
        if (!std::isfinite(*options.softcap) || *options.softcap <= 0.0)
            throw InvalidArgument("softcap", "the logit cap must be a finite number above 0, not " +
                                                 std::to_string(*options.softcap) + ".");
        p.softcap = *options.softcap;
    }

    if (options.alibi_max_bias && !in.alibi_slopes.empty())
        throw InvalidArgument("alibi_slopes", "give either ALiBi slopes or alibi_max_bias, not both.");
    if (options.alibi_max_bias) {
        if (!std::isfinite(*options.alibi_max_bias) || *options.alibi_max_bias <= 0.0)
            throw InvalidArgument("alibi_max_bias", "must be a finite number above 0 (8 in BLOOM and MPT), not " +
                                                        std::to_string(*options.alibi_max_bias) + ".");
        p.alibi = alibi_slopes(p.Hq, *options.alibi_max_bias);
    } else if (!in.alibi_slopes.empty()) {
        p.alibi = per_head(in.alibi_slopes, p.Hq, "alibi_slopes", [](float x) { return std::isfinite(x); },
                           "slopes must be finite");
    }
    if (!in.sinks.empty())
        p.sinks = per_head(in.sinks, p.Hq, "sinks", [](float x) { return !std::isnan(x) && x != INFINITY; },
                           "a sink is a finite logit, or -inf for none");

    if (!(options.dropout >= 0.0 && options.dropout < 1.0))
        throw InvalidArgument("dropout", "the drop probability must be in [0, 1), not " +
                                             std::to_string(options.dropout) + ".");
    p.dropout = options.dropout;
    p.drop_threshold = dropout_threshold(options.dropout);
    p.seed = options.seed;

    // The shaders compute positions i + a ± window and distances i + a - j in 32-bit integers.
    if (options.causal_offset || p.window.bounded() || !p.alibi.empty()) {
        const std::int64_t reach = std::max<std::int64_t>({p.window.left, p.window.right, 0});
        constexpr std::int64_t kHalf = std::int64_t{1} << 30;
        // Bounded before std::abs, which is undefined for -2^63.
        const bool offset_too_far = p.offset < -kHalf || p.offset > kHalf;
        if (offset_too_far)
            throw InvalidArgument("causal_offset", "the causal offset " + std::to_string(p.offset) +
                                                       " is outside [-2^30, 2^30], the range the shaders' 32-bit "
                                                       "positions allow.");
        if (reach > kHalf || p.Nq + p.Nkv + std::abs(p.offset) + reach + 1 > kMaxIndex)
            throw InvalidArgument("window", "with a causal offset, a window or ALiBi, Nq + Nkv + |causal offset| + "
                                            "the wider window side = " + std::to_string(p.Nq) + " + " +
                                                std::to_string(p.Nkv) + " + " + std::to_string(std::abs(p.offset)) +
                                                " + " + std::to_string(reach) + " must stay below " + kMaxIndexText +
                                                ", and the window side within 2^30.");
    }
}

}  // namespace

Problem resolve(const AttentionInputs& in, const AttentionOutputs& out,
                const AttentionOptions& options) {
    Problem p;
    p.dtype = in.q.dtype;
    check_view(in.q, "q", p.dtype);
    check_view(in.k, "k", p.dtype);
    check_view(in.v, "v", p.dtype);
    check_view(out.o, "o", p.dtype);
    if (!elements_disjoint(out.o))
        throw InvalidArgument("o", "the strides " + shape_string(out.o.strides) + " make distinct "
                                   "elements of the output shape " + shape_string(out.o.shape) +
                                   " share memory (a stride of 0 on a dimension larger than 1, or "
                                   "dimensions that overlap); every output element needs its own "
                                   "location.");

    p.B = in.q.shape[0];
    p.Hq = in.q.shape[1];
    p.Nq = in.q.shape[2];
    p.Dk = in.q.shape[3];
    p.Hkv = in.k.shape[1];
    p.Nkv = in.k.shape[2];
    p.Dv = in.v.shape[3];

    auto expect = [](const char* name, const char* what, std::int64_t got, std::int64_t want,
                     const char* because) {
        if (got != want)
            throw InvalidArgument(name, std::string(what) + " is " + std::to_string(got) +
                                            " but must be " + std::to_string(want) + " " +
                                            because + ".");
    };
    expect("k", "the batch size", in.k.shape[0], p.B, "(the batch size of q)");
    expect("v", "the batch size", in.v.shape[0], p.B, "(the batch size of q)");
    expect("k", "the head dimension", in.k.shape[3], p.Dk, "(the head dimension of q)");
    expect("v", "the number of heads", in.v.shape[1], p.Hkv, "(the number of heads of k)");
    expect("v", "the sequence length", in.v.shape[2], p.Nkv, "(the sequence length of k)");
    if (p.Hq % p.Hkv != 0)
        throw InvalidArgument("k", "q has " + std::to_string(p.Hq) + " heads, which is not a "
                                   "multiple of the " + std::to_string(p.Hkv) +
                                   " heads of k and v (grouped-query attention needs Hq = g·Hkv).");
    p.group = p.Hq / p.Hkv;
    check_index_range("q", "the query sequence length Nq", p.Nq);
    check_index_range("k", "the key sequence length Nkv", p.Nkv);
    check_index_range("q", "the key head dimension Dk", p.Dk);
    check_index_range("v", "the value head dimension Dv", p.Dv);
    std::int64_t units = 0;  // query rows are grouped into units b·Hq + h
    if (__builtin_mul_overflow(p.B, p.Hq, &units) || units > kMaxIndex)
        throw InvalidArgument("q", "the batch size times the number of query heads, B·Hq = " +
                                       std::to_string(p.B) + "·" + std::to_string(p.Hq) +
                                       ", is above " + kMaxIndexText + ", the largest size the "
                                       "GPU kernels index with 32-bit integers.");
    const std::array<std::int64_t, 4> o_shape{p.B, p.Hq, p.Nq, p.Dv};
    if (out.o.shape != o_shape)
        throw InvalidArgument("o", "the output shape is " + shape_string(out.o.shape) +
                                       " but must be [B, Hq, Nq, Dv] = " + shape_string(o_shape) +
                                       ".");

    const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(p.Dk)));
    if (!std::isfinite(scale))
        throw InvalidArgument("scale", "the scale must be a finite number.");
    p.scale = scale;
    p.causal = options.causal;

    if (!in.kv_lengths.empty()) {
        if (static_cast<std::int64_t>(in.kv_lengths.size()) != p.B)
            throw InvalidArgument("kv_lengths", "there are " + std::to_string(in.kv_lengths.size()) +
                                                    " key lengths but the batch size is " +
                                                    std::to_string(p.B) + ".");
        for (std::size_t b = 0; b < in.kv_lengths.size(); ++b) {
            const std::int32_t len = in.kv_lengths[b];
            if (len < 0 || len > p.Nkv)
                throw InvalidArgument("kv_lengths", "the key length of batch " + std::to_string(b) +
                                                        " is " + std::to_string(len) +
                                                        ", outside [0, Nkv = " +
                                                        std::to_string(p.Nkv) + "].");
        }
        p.kv_len.assign(in.kv_lengths.begin(), in.kv_lengths.end());
        p.has_kv_lengths = true;
    } else {
        p.kv_len.assign(static_cast<std::size_t>(p.B), static_cast<std::int32_t>(p.Nkv));
    }

    const std::array<std::int64_t, 4> scores{p.B, p.Hq, p.Nq, p.Nkv};
    if (in.bool_mask) p.bool_mask = broadcast(*in.bool_mask, "bool_mask", scores);
    if (in.float_mask) p.float_mask = broadcast(*in.float_mask, "float_mask", scores);

    resolve_features(p, in, options);

    p.want_weights = out.weights != nullptr;
    p.want_lse = out.lse != nullptr;
    checked_mul(checked_mul(checked_mul(p.B, p.Hq, "weights"), p.Nq, "weights"), p.Nkv, "weights");
    return p;
}

}  // namespace vkattn::detail

namespace vkattn {

std::vector<float> alibi_slopes(std::int64_t heads, double max_bias) {
    if (heads < 1) throw InvalidArgument("heads", "ALiBi needs at least one head.");
    std::int64_t n2 = 1;
    while (n2 * 2 <= heads) n2 *= 2;  // 2^floor(log2 heads)
    const double m0 = std::exp2(-max_bias / static_cast<double>(n2));
    const double m1 = std::exp2(-max_bias / 2.0 / static_cast<double>(n2));
    std::vector<float> slopes(static_cast<std::size_t>(heads));
    for (std::int64_t h = 0; h < heads; ++h)
        slopes[static_cast<std::size_t>(h)] = static_cast<float>(
            h < n2 ? std::pow(m0, static_cast<double>(h + 1)) : std::pow(m1, static_cast<double>(2 * (h - n2) + 1)));
    return slopes;
}

}  // namespace vkattn
