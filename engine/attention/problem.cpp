#include "attention/problem.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "tensor/storage_rules.hpp"
#include "vkattn/dropout.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {

namespace {

// The shaders index sequence positions, features and units (b·Hq + h) with 32-bit integers.
constexpr std::int64_t kMaxIndex = std::numeric_limits<std::int32_t>::max();
constexpr const char* kMaxIndexText = "2^31 - 1 = 2147483647";

// Rejects a size the shaders would index with 32-bit integers when it is above 2^31 - 1.
void check_index_range(const char* name, const std::string& what, std::int64_t value) {
    if (value > kMaxIndex)
        throw InvalidArgument(name, what + " is " + std::to_string(value) + ", above " +
                                        kMaxIndexText + ", the largest size the GPU kernels index "
                                        "with 32-bit integers.");
}

}  // namespace

bool Problem::kept(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return dropout_keeps(seed, drop_threshold, static_cast<std::uint32_t>(b + origin[0]),
                         static_cast<std::uint32_t>(h + origin[1]), static_cast<std::uint32_t>(i + origin[2]),
                         static_cast<std::uint32_t>(j + origin[3]));
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
void resolve_features(Problem& p, std::span<const float> slopes, std::span<const float> sinks,
                      const AttentionOptions& options) {
    if (options.causal_offset) {
        if (options.causal == Causal::bottom_right)
            throw InvalidArgument("causal_offset", "an explicit causal offset sets the alignment itself; it "
                                                   "cannot be combined with bottom-right alignment "
                                                   "(which is len[b] - Nq).");
        p.causal = Causal::top_left;
        p.offset = *options.causal_offset;
    }
    p.bottom_right = p.causal == Causal::bottom_right;
    if (options.diagonal_offset != 0 || options.diagonal_bottom_right) {
        if (p.causal != Causal::none)
            throw InvalidArgument("diagonal_offset", "places the diagonal without causal masking; with causal, "
                                                     "causal_offset and bottom-right alignment place it.");
        p.offset = options.diagonal_offset;
        p.bottom_right = options.diagonal_bottom_right;
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

    if (options.alibi_max_bias && !slopes.empty())
        throw InvalidArgument("alibi_slopes", "give either ALiBi slopes or alibi_max_bias, not both.");
    if (options.alibi_max_bias) {
        if (!std::isfinite(*options.alibi_max_bias) || *options.alibi_max_bias <= 0.0)
            throw InvalidArgument("alibi_max_bias", "must be a finite number above 0 (8 in BLOOM and MPT), not " +
                                                        std::to_string(*options.alibi_max_bias) + ".");
        p.alibi = alibi_slopes(p.Hq, *options.alibi_max_bias);
    } else if (!slopes.empty()) {
        p.alibi = per_head(slopes, p.Hq, "alibi_slopes", [](float x) { return std::isfinite(x); },
                           "slopes must be finite");
    }
    if (!sinks.empty())
        p.sinks = per_head(sinks, p.Hq, "sinks", [](float x) { return !std::isnan(x) && x != INFINITY; },
                           "a sink is a finite logit, or -inf for none");

    if (!(options.dropout >= 0.0 && options.dropout < 1.0))
        throw InvalidArgument("dropout", "the drop probability must be in [0, 1), not " +
                                             std::to_string(options.dropout) + ".");
    p.dropout = options.dropout;
    p.drop_threshold = dropout_threshold(options.dropout);
    p.seed = options.seed;

    // The shaders compute positions i + a ± window and distances i + a - j in 32-bit integers.
    if (options.causal_offset || options.diagonal_offset != 0 || p.window.bounded() || !p.alibi.empty()) {
        const std::int64_t reach = std::max<std::int64_t>({p.window.left, p.window.right, 0});
        constexpr std::int64_t kHalf = std::int64_t{1} << 30;
        // Bounded before std::abs, which is undefined for -2^63.
        const bool offset_too_far = p.offset < -kHalf || p.offset > kHalf;
        if (offset_too_far)
            throw InvalidArgument(options.causal_offset ? "causal_offset" : "diagonal_offset",
                                  "the diagonal's offset " + std::to_string(p.offset) +
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

// The call as a block of a larger attention: its origin and the whole's sizes checked, the
// diagonal's offset moved into the block's coordinates. Without a block: origin 0, key_total = Nkv.
void resolve_block(Problem& p, const AttentionOptions& options, bool paged_or_varlen) {
    const Block& block = options.block;
    p.key_total = p.Nkv;
    if (block.whole()) return;
    if (paged_or_varlen)
        throw InvalidArgument("block", "a block of a larger attention takes contiguous k and v, not a paged K/V or "
                                       "packed sequences.");
    if (options.alibi_max_bias)  // the slopes depend on the whole's head count, which a block does not know
        throw InvalidArgument("block", "ALiBi's standard slopes are the whole's: pass the block's heads' "
                                       "alibi_slopes (vkattn::alibi_slopes(whole heads, max bias), narrowed) instead "
                                       "of alibi_max_bias.");
    constexpr std::int64_t kHalf = std::int64_t{1} << 30;
    const std::int64_t queries = block.queries ? block.queries : block.query + p.Nq;
    const std::int64_t keys = block.keys ? block.keys : block.key + p.Nkv;
    for (const auto& [value, name] : {std::pair{block.batch, "batch"}, std::pair{block.head, "head"},
                                      std::pair{block.query, "query"}, std::pair{block.key, "key"},
                                      std::pair{queries, "queries"}, std::pair{keys, "keys"}})
        if (value < 0 || value > kHalf)
            throw InvalidArgument("block", std::string("its ") + name + " is " + std::to_string(value) +
                                               ", outside [0, 2^30].");
    if (queries < block.query + p.Nq || keys < block.key + p.Nkv)
        throw InvalidArgument("block", "the whole has " + std::to_string(queries) + " queries and " +
                                           std::to_string(keys) + " keys, fewer than the block's last, " +
                                           std::to_string(block.query + p.Nq) + " and " +
                                           std::to_string(block.key + p.Nkv) + ".");
    p.origin = {block.batch, block.head, block.query, block.key};
    p.key_total = keys;
    // Query i, key j of the block are the whole's i + query, j + key: j <= i + a in the whole is
    // j <= i + a + query - key here, and bottom-right's a = len[b] - queries is len[b] - Nq here
    // plus Nq - queries.
    p.offset += block.query - block.key + (p.bottom_right ? p.Nq - queries : 0);
    if (p.offset < -kHalf || p.offset > kHalf)
        throw InvalidArgument("block", "the diagonal's offset in the block's coordinates, " + std::to_string(p.offset) +
                                           ", is outside [-2^30, 2^30], the range the shaders' 32-bit positions allow.");
}

}  // namespace

std::vector<float> resolve_fp8_scale(std::span<const float> given, DType dtype, std::int64_t Hkv, const char* name,
                                 const char* tensor) {
    if (!is_fp8(dtype)) {
        if (!given.empty())
            throw InvalidArgument(name, std::string("a scale applies to an fp8 ") + tensor + " only; " + tensor +
                                            " is " + to_string(dtype) + ".");
        return {};
    }
    if (given.empty()) return std::vector<float>(static_cast<std::size_t>(Hkv), 1.0f);
    if (given.size() != 1 && static_cast<std::int64_t>(given.size()) != Hkv)
        throw InvalidArgument(name, "it holds " + std::to_string(given.size()) + " scales; give 1 (the tensor's) or Hkv = " +
                                        std::to_string(Hkv) + " (one per head).");
    for (const float s : given)
        if (!(std::isfinite(s) && s > 0.0f))
            throw InvalidArgument(name, "an fp8 scale is a finite number above 0, not " + std::to_string(s) + ".");
    if (given.size() == 1) return std::vector<float>(static_cast<std::size_t>(Hkv), given[0]);
    return {given.begin(), given.end()};
}

std::vector<float> fp8_scale_terms(const std::vector<float>& k_scale, const std::vector<float>& v_scale, std::int64_t Hkv) {
    const auto hkv = static_cast<std::size_t>(Hkv);
    std::vector<float> terms(2 * hkv, 1.0f);
    std::copy(k_scale.begin(), k_scale.end(), terms.begin());
    std::copy(v_scale.begin(), v_scale.end(), terms.begin() + static_cast<std::ptrdiff_t>(hkv));
    return terms;
}

Problem resolve(const AttentionSpec& spec) {
    const TensorLayout& q = spec.q;
    const TensorLayout& k = spec.k;
    const TensorLayout& v = spec.v;
    const TensorLayout& o = spec.o;
    const AttentionOptions& options = spec.options;
    Problem p;
    p.dtype = q.dtype;
    p.k_dtype = k.dtype;
    p.v_dtype = v.dtype;
    if (!is_activation_type(p.dtype))
        throw InvalidArgument("q", "its dtype is " + to_string(p.dtype) + "; q and o are f32, f16 or bf16.");
    if (o.dtype != p.dtype)
        throw InvalidArgument("o", "its dtype is " + to_string(o.dtype) + " but q's is " + to_string(p.dtype) +
                                       "; o has q's dtype.");
    for (const auto& [view, name] : {std::pair{&k, "k"}, std::pair{&v, "v"}})
        if (!is_kv_type(view->dtype))
            throw InvalidArgument(name, "its dtype is " + to_string(view->dtype) + "; k and v are float (f32, f16, "
                                        "bf16), ggml's blocks (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) or fp8 "
                                        "(fp8_e4m3, fp8_e5m2).");
    check_layout(q, "q");
    check_layout(k, "k");
    check_layout(v, "v");
    check_layout(o, "o");
    // A packed (varlen) output's own layout says whether its elements are distinct; its virtual
    // one shares a batch stride of 0 by design.
    const TensorLayout& o_memory = spec.varlen ? spec.varlen->o : o;
    if (!elements_disjoint(o_memory))
        throw InvalidArgument("o", "the strides " + shape_text(o_memory.strides) + " make distinct "
                                   "elements of the output shape " + shape_text(o_memory.shape) +
                                   " share memory (a stride of 0 on a dimension larger than 1, or "
                                   "dimensions that overlap); every output element needs its own "
                                   "location.");

    p.B = q.shape[0];
    p.Hq = q.shape[1];
    p.Nq = q.shape[2];
    p.Dk = q.shape[3];
    p.Hkv = k.shape[1];
    p.Nkv = k.shape[2];
    p.Dv = v.shape[3];

    auto expect = [](const char* name, const char* what, std::int64_t got, std::int64_t want,
                     const char* because) {
        if (got != want)
            throw InvalidArgument(name, std::string(what) + " is " + std::to_string(got) +
                                            " but must be " + std::to_string(want) + " " +
                                            because + ".");
    };
    expect("k", "the batch size", k.shape[0], p.B, "(the batch size of q)");
    expect("v", "the batch size", v.shape[0], p.B, "(the batch size of q)");
    expect("k", "the head dimension", k.shape[3], p.Dk, "(the head dimension of q)");
    expect("v", "the number of heads", v.shape[1], p.Hkv, "(the number of heads of k)");
    expect("v", "the sequence length", v.shape[2], p.Nkv, "(the sequence length of k)");
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
    if (o.shape != o_shape)
        throw InvalidArgument("o", "the output shape is " + shape_text(o.shape) +
                                       " but must be [B, Hq, Nq, Dv] = " + shape_text(o_shape) +
                                       ".");

    const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(p.Dk)));
    if (!std::isfinite(scale))
        throw InvalidArgument("scale", "the scale must be a finite number.");
    p.scale = scale;
    p.causal = options.causal;

    p.has_kv_lengths = spec.kv_lengths;
    p.paged_kv = spec.paged.has_value();

    const std::array<std::int64_t, 4> scores{p.B, p.Hq, p.Nq, p.Nkv};
    if (spec.bool_mask) p.bool_mask = broadcast_mask(*spec.bool_mask, "bool_mask", scores);
    if (spec.float_mask) p.float_mask = broadcast_mask(*spec.float_mask, "float_mask", scores);

    resolve_features(p, spec.alibi_slopes, spec.sinks, options);
    resolve_block(p, options, spec.paged.has_value() || spec.varlen.has_value());
    p.kv_len.assign(static_cast<std::size_t>(p.B), static_cast<std::int32_t>(p.key_total));
    p.k_scale = resolve_fp8_scale(spec.k_scale, p.k_dtype, p.Hkv, "k_scale", "k");
    p.v_scale = resolve_fp8_scale(spec.v_scale, p.v_dtype, p.Hkv, "v_scale", "v");

    p.want_weights = spec.weights;
    p.want_lse = spec.lse;
    p.want_logits = spec.logits;
    p.logits_stage = options.logits_stage;
    if (p.logits_stage != LogitsStage::scaled && p.logits_stage != LogitsStage::softcapped &&
        p.logits_stage != LogitsStage::masked)
        throw InvalidArgument("logits_stage", "unknown stage " + std::to_string(static_cast<int>(p.logits_stage)) +
                                                  "; scaled, softcapped or masked.");
    if (spec.varlen) {
        if (p.bool_mask.present() || p.float_mask.present())
            throw InvalidArgument(p.bool_mask.present() ? "bool_mask" : "float_mask",
                                  "masks are not taken with packed sequences (varlen); use the causal mask, a window "
                                  "or the key lengths.");
        if (p.want_weights)
            throw InvalidArgument("weights", "the attention weights are not returned for packed sequences (varlen).");
        if (p.want_logits)
            throw InvalidArgument("logits", "the logits are not returned for packed sequences (varlen).");
        p.packed_q = true;
        p.total_q = spec.varlen->q.shape[2];
        p.packed_k = spec.varlen->k.has_value();
        p.total_k = p.packed_k ? spec.varlen->k->shape[2] : 0;
    }
    checked_mul(checked_mul(checked_mul(p.B, p.Hq, "weights"), p.Nq, "weights"), p.Nkv, "weights");
    return p;
}

Problem resolve(const AttentionInputs& in, const AttentionOutputs& out, const AttentionOptions& options) {
    for (const auto& [data, name] : {std::pair{in.q.data, "q"}, std::pair{in.k.data, "k"}, std::pair{in.v.data, "v"},
                                     std::pair<const void*, const char*>{out.o.data, "o"}})
        if (data == nullptr) throw InvalidArgument(name, "the tensor has no data pointer.");
    if (in.bool_mask && in.bool_mask->data == nullptr) throw InvalidArgument("bool_mask", "the mask has no data pointer.");
    if (in.float_mask && in.float_mask->data == nullptr)
        throw InvalidArgument("float_mask", "the mask has no data pointer.");
    Problem p = resolve(spec_of(in, out, options));
    if (!in.kv_lengths.empty()) {
        if (static_cast<std::int64_t>(in.kv_lengths.size()) != p.B)
            throw InvalidArgument("kv_lengths", "there are " + std::to_string(in.kv_lengths.size()) +
                                                    " key lengths but the batch size is " + std::to_string(p.B) + ".");
        for (std::size_t b = 0; b < in.kv_lengths.size(); ++b) {
            const std::int32_t len = in.kv_lengths[b];
            if (len < 0 || len > p.key_total)
                throw InvalidArgument("kv_lengths", "the key length of batch " + std::to_string(b) + " is " +
                                                        std::to_string(len) + ", outside [0, " +
                                                        (p.key_total == p.Nkv ? "Nkv" : "the whole's keys") + " = " +
                                                        std::to_string(p.key_total) + "].");
        }
        p.kv_len.assign(in.kv_lengths.begin(), in.kv_lengths.end());
    }
    if (in.bool_mask) p.bool_mask.data = in.bool_mask->data;
    if (in.float_mask) p.float_mask.data = in.float_mask->data;
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
