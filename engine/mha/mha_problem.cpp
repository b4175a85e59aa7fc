#include "mha/mha_problem.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include "attention/problem.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::ostringstream s;
    s << '[';
    for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
    s << ']';
    return s.str();
}

void expect_shape(const char* name, const std::vector<std::int64_t>& got, const std::vector<std::int64_t>& want,
                  const std::string& meaning) {
    if (got != want)
        throw InvalidArgument(name, "its shape is " + shape_text(got) + " but must be " + shape_text(want) + " (" +
                                        meaning + ").");
}

std::int64_t elements(const std::vector<std::int64_t>& shape, const char* name) {
    std::int64_t n = 1;
    for (const auto d : shape) {
        if (d < 1) throw InvalidArgument(name, "every dimension must be at least 1, but the shape is " + shape_text(shape) + ".");
        n = checked_mul(n, d, name);
    }
    return n;
}

// One PyTorch mask read as "blocked" (bool) or "added" (float) at a logical index.
struct Mask {
    const TorchMask* m = nullptr;
    bool blocked(std::int64_t at) const { return static_cast<const std::uint8_t*>(m->data)[at] != 0; }
    float added(std::int64_t at) const { return static_cast<const float*>(m->data)[at]; }
};

}  // namespace

std::array<std::int64_t, 4> mha_head_strides(bool batch_first, std::int64_t N, std::int64_t T, std::int64_t E,
                                             std::int64_t hd) {
    return batch_first ? std::array<std::int64_t, 4>{T * E, hd, E, 1} : std::array<std::int64_t, 4>{E, hd, N * E, 1};
}

std::array<std::int64_t, 4> MhaProblem::head_strides(std::int64_t T) const {
    return mha_head_strides(batch_first, N, T, E, hd);
}

TensorView MhaProblem::heads(const void* data, DType dtype, std::int64_t T) const {
    return {data, dtype, {N, H, T, hd}, head_strides(T)};
}

MutableTensorView MhaProblem::mutable_heads(void* data, DType dtype, std::int64_t T) const {
    return {data, dtype, {N, H, T, hd}, head_strides(T)};
}

AttentionInputs MhaProblem::core_inputs(const void* q, const void* k, const void* v, DType dtype) const {
    AttentionInputs in{.q = heads(q, dtype, L), .k = heads(k, dtype, S), .v = heads(v, dtype, S)};
    if (!attend.empty()) in.bool_mask = MaskView{attend.data(), attend_shape};
    if (!additive.empty()) in.float_mask = MaskView{additive.data(), additive_shape};
    return in;
}

AttentionOptions MhaProblem::core_options(const MhaOptions& options) const {
    // PyTorch scales by 1/sqrt(head_dim), vkattn's default for Dk = hd.
    return {.dropout = options.dropout, .seed = options.seed, .impl = options.impl};
}

MhaProblem resolve_mha(const MhaConfig& config, const MhaInputs& in, const MhaOutputs& out, const MhaOptions& options) {
    MhaProblem p;
    p.E = config.embed_dim;
    p.H = config.num_heads;
    p.kdim = config.kdim ? config.kdim : config.embed_dim;
    p.vdim = config.vdim ? config.vdim : config.embed_dim;
    p.hd = p.E / p.H;
    p.batch_first = config.batch_first;

    if (in.query.data == nullptr) throw InvalidArgument("query", "the tensor has no data pointer.");
    const auto rank = in.query.shape.size();
    if (rank != 3 && rank != 2)
        throw InvalidArgument("query", "must be [L, N, E] (" + std::string(config.batch_first ? "[N, L, E] with batch_first" : "batch_first=False") +
                                           ") or [L, E] unbatched, but its shape is " + shape_text(in.query.shape) + ".");
    p.batched = rank == 3;
    elements(in.query.shape, "query");
    const std::size_t seq = p.batched && config.batch_first ? 1 : 0;  // the sequence dimension
    p.L = in.query.shape[seq];
    p.N = p.batched ? in.query.shape[config.batch_first ? 0 : 1] : 1;
    if (in.query.shape.back() != p.E)
        throw InvalidArgument("query", "has " + std::to_string(in.query.shape.back()) + " features but embed_dim is " +
                                           std::to_string(p.E) + ".");
    p.batch_first = config.batch_first && p.batched;

    // key and value default to the query (self-attention) and the key.
    HostArray key = in.key.data ? in.key : in.query;
    HostArray value = in.value.data ? in.value : key;
    if (!in.key.data && p.kdim != p.E)
        throw InvalidArgument("key", "is required when kdim (" + std::to_string(p.kdim) + ") differs from embed_dim.");
    if (!in.value.data && p.vdim != (in.key.data ? p.kdim : p.E))
        throw InvalidArgument("value", "is required when vdim (" + std::to_string(p.vdim) +
                                           ") differs from the key's features.");
    const char* key_name = "key";
    for (const auto* t : {&key, &value}) {
        const char* name = t == &key ? key_name : "value";
        if (t->shape.size() != rank)
            throw InvalidArgument(name, "has rank " + std::to_string(t->shape.size()) + " but the query has rank " +
                                            std::to_string(rank) + ".");
        elements(t->shape, name);
    }
    p.S = key.shape[seq];
    const std::int64_t features_k = p.kdim, features_v = p.vdim;
    auto expected = [&](std::int64_t features) {
        if (!p.batched) return std::vector<std::int64_t>{p.S, features};
        return config.batch_first ? std::vector<std::int64_t>{p.N, p.S, features}
                                  : std::vector<std::int64_t>{p.S, p.N, features};
    };
    const std::string layout = !p.batched ? "[S, features] unbatched" : config.batch_first ? "[N, S, features] with batch_first" : "[S, N, features]";
    expect_shape("key", key.shape, expected(features_k), layout + ", features = kdim = " + std::to_string(p.kdim));
    expect_shape("value", value.shape, expected(features_v), layout + ", features = vdim = " + std::to_string(p.vdim) +
                                                                 ", S and N as the key's");
    p.query = in.query.data;
    p.key = key.data;
    p.value = value.data;
    for (const std::int64_t v : {p.L, p.S, p.N})
        if (v > std::numeric_limits<std::int32_t>::max())
            throw InvalidArgument("query", "a sequence length or the batch exceeds 2^31 - 1.");
    checked_mul(checked_mul(p.N, std::max(p.L, p.S), "query"), std::max({p.E, p.kdim, p.vdim}), "query");

    if (out.out == nullptr) throw InvalidArgument("out", "the output has no data pointer.");
    p.want_weights = out.attn_weights != nullptr;
    p.average_weights = options.average_attn_weights;
    if (options.dtype != DType::f32 && options.dtype != DType::f16 && options.dtype != DType::bf16)
        throw InvalidArgument("dtype", "must be f32, f16 or bf16.");

    // Masks: PyTorch's bool = blocked and float = added, into vkattn's bool = attend and float = added.
    std::optional<Mask> kpm, am;
    bool am_per_head = false;
    if (in.key_padding_mask) {
        const TorchMask& m = *in.key_padding_mask;
        if (m.data == nullptr) throw InvalidArgument("key_padding_mask", "the mask has no data pointer.");
        expect_shape("key_padding_mask", m.shape, p.batched ? std::vector<std::int64_t>{p.N, p.S} : std::vector<std::int64_t>{p.S},
                     p.batched ? "[N, S]" : "[S] unbatched");
        kpm = Mask{&m};
    }
    if (in.attn_mask) {
        const TorchMask& m = *in.attn_mask;
        if (m.data == nullptr) throw InvalidArgument("attn_mask", "the mask has no data pointer.");
        am_per_head = m.shape.size() == 3;
        const std::vector<std::int64_t> want = am_per_head ? std::vector<std::int64_t>{p.N * p.H, p.L, p.S}
                                                           : std::vector<std::int64_t>{p.L, p.S};
        expect_shape("attn_mask", m.shape, want, am_per_head ? "[N·num_heads, L, S]" : "[L, S], or [N·num_heads, L, S]");
        am = Mask{&m};
    }
    // Each kind of mask (bool, float) becomes one array; where both PyTorch masks are of that kind
    // they are combined over [N, H or 1, L, S].
    const std::int64_t Hm = am_per_head ? p.H : 1;
    auto am_index = [&](std::int64_t n, std::int64_t h, std::int64_t l, std::int64_t s) {
        return am_per_head ? ((n * p.H + h) * p.L + l) * p.S + s : l * p.S + s;
    };
    const bool kpm_bool = kpm && kpm->m->is_bool, am_bool = am && am->m->is_bool;
    const bool kpm_float = kpm && !kpm->m->is_bool, am_float = am && !am->m->is_bool;
    // Both masks of one kind: their combination over [N, H or 1, L, S], element by element.
    auto combine = [&](auto& combined, std::vector<std::int64_t>& shape, auto element) {
        shape = {p.N, Hm, p.L, p.S};
        combined.resize(static_cast<std::size_t>(p.N * Hm * p.L * p.S));
        std::size_t at = 0;
        for (std::int64_t n = 0; n < p.N; ++n)
            for (std::int64_t h = 0; h < Hm; ++h)
                for (std::int64_t l = 0; l < p.L; ++l)
                    for (std::int64_t s = 0; s < p.S; ++s) combined[at++] = element(n * p.S + s, am_index(n, h, l, s));
    };
    // One mask alone keeps its own layout, as a broadcastable shape.
    auto alone_shape = [&](bool is_kpm) {
        if (is_kpm) return std::vector<std::int64_t>{p.N, 1, 1, p.S};
        return am_per_head ? std::vector<std::int64_t>{p.N, p.H, p.L, p.S} : std::vector<std::int64_t>{p.L, p.S};
    };
    if (kpm_bool && am_bool) {
        combine(p.attend, p.attend_shape, [&](std::int64_t k, std::int64_t a) {
            return static_cast<std::uint8_t>(!kpm->blocked(k) && !am->blocked(a));
        });
    } else if (kpm_bool || am_bool) {
        const Mask& m = kpm_bool ? *kpm : *am;
        p.attend_shape = alone_shape(kpm_bool);
        p.attend.resize(static_cast<std::size_t>(elements(m.m->shape, "mask")));
        for (std::size_t i = 0; i < p.attend.size(); ++i) p.attend[i] = !m.blocked(static_cast<std::int64_t>(i));
    }
    if (kpm_float && am_float) {
        combine(p.additive, p.additive_shape,
                [&](std::int64_t k, std::int64_t a) { return kpm->added(k) + am->added(a); });
    } else if (kpm_float || am_float) {
        const Mask& m = kpm_float ? *kpm : *am;
        p.additive_shape = alone_shape(kpm_float);
        const auto* src = static_cast<const float*>(m.m->data);
        p.additive.assign(src, src + elements(m.m->shape, "mask"));
    }
    return p;
}

int MhaProblem::same_as(int i) const {
    const float* data[3] = {query, key, value};
    const std::int64_t rows[3] = {L, S, S}, features[3] = {E, kdim, vdim};
    for (int j = 0; j < i; ++j)
        if (data[j] == data[i] && rows[j] == rows[i] && features[j] == features[i]) return j;
    return i;
}

void check_mha_grad_out(const MhaProblem& p, const MhaInputs& inputs, const HostArray& grad_out) {
    std::vector<std::int64_t> want = inputs.query.shape;
    want.back() = p.E;
    if (grad_out.data == nullptr) throw InvalidArgument("grad_out", "the tensor has no data pointer.");
    expect_shape("grad_out", grad_out.shape, want, "the output's: the query's with embed_dim features");
}

std::vector<MhaGradients::Parameter> named_parameters(const MhaProblem& mp, bool bias, std::vector<float> (&dw)[4],
                                                      std::vector<float> (&db)[4]) {
    using P = MultiHeadAttention::Projection;
    const std::int64_t E = mp.E;
    std::vector<MhaGradients::Parameter> out;
    if (mp.kdim == E && mp.vdim == E) {
        std::vector<float> packed;
        for (int i = 0; i < 3; ++i) packed.insert(packed.end(), dw[i].begin(), dw[i].end());
        out.push_back({"in_proj_weight", {3 * E, E}, std::move(packed)});
    } else {
        out.push_back({"q_proj_weight", {E, E}, std::move(dw[P::q])});
        out.push_back({"k_proj_weight", {E, mp.kdim}, std::move(dw[P::k])});
        out.push_back({"v_proj_weight", {E, mp.vdim}, std::move(dw[P::v])});
    }
    if (bias) {
        std::vector<float> packed;
        for (int i = 0; i < 3; ++i) packed.insert(packed.end(), db[i].begin(), db[i].end());
        out.push_back({"in_proj_bias", {3 * E}, std::move(packed)});
    }
    out.push_back({"out_proj.weight", {E, E}, std::move(dw[P::o])});
    if (bias) out.push_back({"out_proj.bias", {E}, std::move(db[P::o])});
    return out;
}

void store_mha_weights(const MhaProblem& p, const std::vector<float>& per_head, float* dst) {
    const std::int64_t plane = p.L * p.S;
    if (!p.average_weights) {
        std::copy(per_head.begin(), per_head.end(), dst);
        return;
    }
    for (std::int64_t n = 0; n < p.N; ++n)
        for (std::int64_t x = 0; x < plane; ++x) {
            double sum = 0.0;
            for (std::int64_t h = 0; h < p.H; ++h) sum += per_head[static_cast<std::size_t>((n * p.H + h) * plane + x)];
            dst[n * plane + x] = static_cast<float>(sum / static_cast<double>(p.H));
        }
}

}  // namespace vkattn::detail
