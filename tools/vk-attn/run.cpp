// vk-attn run: attention on the user's own tensors, read from and written to .npy files.
// Inputs of rank 4 [B, H, N, D], 3 [H, N, D] or 2 [N, D]; outputs keep the rank of q. Every error
// names the file or the flag and leaves no output file behind.
#include <filesystem>
#include <iostream>
#include <optional>

#include "commands.hpp"
#include "parse_impl.hpp"
#include "features.hpp"
#include "npy.hpp"
#include "pending_outputs.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::tool {
namespace {

struct RunOptions {
    std::string q, k, v, mask, kv_lengths, out, weights, lse;
    std::string causal;  // "", "top-left", "bottom-right"
    bool causal_given = false;
    std::optional<double> scale;
    std::string impl = "auto", dtype, device;
    FeatureFlags features;
};

// An input tensor promoted to rank 4, in the dtype the run uses.
struct Loaded {
    std::vector<std::int64_t> file_shape;
    std::array<std::int64_t, 4> shape{};
    std::vector<float> f32;
    std::vector<std::uint16_t> f16;
};

Loaded load_tensor(const std::string& path, const std::string& flag, DType dtype) {
    if (path.empty()) throw InvalidArgument(flag, "is required.");
    const npy::Array a = npy::read(path);
    if (a.type != npy::ElementType::f32 && a.type != npy::ElementType::f16)
        throw InvalidArgument(flag, path + " holds " + npy::descr_of(a.type) + "; tensors must be float32 (<f4) or float16 (<f2).");
    if (a.shape.size() < 2 || a.shape.size() > 4)
        throw InvalidArgument(flag, path + " has rank " + std::to_string(a.shape.size()) +
                                        "; tensors are [B, H, N, D], [H, N, D] or [N, D].");
    Loaded t;
    t.file_shape = a.shape;
    t.shape = {1, 1, 1, 1};
    for (std::size_t i = 0; i < a.shape.size(); ++i) t.shape[4 - a.shape.size() + i] = a.shape[i];
    for (auto d : t.shape)
        if (d < 1) throw InvalidArgument(flag, path + " has an empty dimension.");
    const auto n = static_cast<std::size_t>(a.count());
    if (dtype == DType::f32) {
        t.f32.resize(n);
        for (std::size_t i = 0; i < n; ++i)
            t.f32[i] = a.type == npy::ElementType::f32 ? a.as<float>()[i] : half_to_float(a.as<std::uint16_t>()[i]);
    } else {
        t.f16.resize(n);
        for (std::size_t i = 0; i < n; ++i)
            t.f16[i] = a.type == npy::ElementType::f16 ? a.as<std::uint16_t>()[i] : float_to_half(a.as<float>()[i]);
    }
    return t;
}

TensorView view_of(const Loaded& t, DType dtype) {
    return make_view<const void*>(dtype == DType::f32 ? static_cast<const void*>(t.f32.data()) : t.f16.data(), dtype,
                                  Layout::bhnd, t.shape);
}

int run(const RunOptions& o) {
    if (o.out.empty()) throw InvalidArgument("--out", "is required.");
    const Impl impl = parse_impl(o.impl);
    if (!o.weights.empty() && (impl == Impl::fused || impl == Impl::split))
        throw InvalidArgument("--weights", "the attention weights need the three-stage path; use --impl auto or unfused.");
    Causal causal = Causal::none;
    if (o.causal_given) {
        if (o.causal.empty() || o.causal == "top-left") causal = Causal::top_left;
        else if (o.causal == "bottom-right") causal = Causal::bottom_right;
        else throw InvalidArgument("--causal", "must be top-left or bottom-right, not \"" + o.causal + "\".");
    }
    // The run's dtype: --dtype, else q's file dtype.
    DType dtype = DType::f32;
    if (o.dtype == "f16") dtype = DType::f16;
    else if (o.dtype.empty() && !o.q.empty() && npy::read(o.q).type == npy::ElementType::f16) dtype = DType::f16;
    else if (!o.dtype.empty() && o.dtype != "f32") throw InvalidArgument("--dtype", "must be f32 or f16.");

    const Loaded q = load_tensor(o.q, "--q", dtype), k = load_tensor(o.k, "--k", dtype), v = load_tensor(o.v, "--v", dtype);
    AttentionInputs in{.q = view_of(q, dtype), .k = view_of(k, dtype), .v = view_of(v, dtype)};

    npy::Array mask;
    if (!o.mask.empty()) {
        mask = npy::read(o.mask);
        if (mask.type == npy::ElementType::boolean) in.bool_mask = MaskView{mask.data.data(), mask.shape};
        else if (mask.type == npy::ElementType::f32) in.float_mask = MaskView{mask.data.data(), mask.shape};
        else throw InvalidArgument("--mask", o.mask + " holds " + npy::descr_of(mask.type) +
                                                 "; masks are bool (|b1, true = attend) or float32 (<f4, added to the scores).");
    }
    std::vector<std::int32_t> lengths;
    if (!o.kv_lengths.empty()) {
        const npy::Array l = npy::read(o.kv_lengths);
        if (l.shape.size() != 1)
            throw InvalidArgument("--kv-lengths", o.kv_lengths + " must be a 1-D array [B].");
        for (std::int64_t i = 0; i < l.count(); ++i) {
            std::int64_t value;
            if (l.type == npy::ElementType::i32) value = l.as<std::int32_t>()[i];
            else if (l.type == npy::ElementType::i64) value = l.as<std::int64_t>()[i];
            else throw InvalidArgument("--kv-lengths", o.kv_lengths + " holds " + npy::descr_of(l.type) + "; key lengths are int32 or int64.");
            if (value < 0 || value > std::numeric_limits<std::int32_t>::max())
                throw InvalidArgument("--kv-lengths", "the key length " + std::to_string(value) + " is out of range.");
            lengths.push_back(static_cast<std::int32_t>(value));
        }
        in.kv_lengths = lengths;
    }

    const std::array<std::int64_t, 4> o_shape{q.shape[0], q.shape[1], q.shape[2], v.shape[3]};
    const auto o_count = static_cast<std::size_t>(o_shape[0] * o_shape[1] * o_shape[2] * o_shape[3]);
    std::vector<float> o32(dtype == DType::f32 ? o_count : 0);
    std::vector<std::uint16_t> o16(dtype == DType::f16 ? o_count : 0);
    const auto rows = static_cast<std::size_t>(o_shape[0] * o_shape[1] * o_shape[2]);
    std::vector<float> weights(o.weights.empty() ? 0 : rows * static_cast<std::size_t>(k.shape[2]));
    std::vector<float> lse(o.lse.empty() ? 0 : rows);
    AttentionOutputs out{
        .o = make_view<void*>(dtype == DType::f32 ? static_cast<void*>(o32.data()) : o16.data(), dtype, Layout::bhnd, o_shape),
        .weights = o.weights.empty() ? nullptr : weights.data(),
        .lse = o.lse.empty() ? nullptr : lse.data()};

    const Features features = load_features(o.features);
    AttentionOptions options{.scale = o.scale, .causal = causal, .impl = impl};
    features.apply(options, in);

    ContextOptions copts;
    copts.device = o.device;
    with_flag_names([&] {
        Context context(copts);
        const AttentionReport report = attention(context, in, out, options);
        std::cerr << "vk-attn: " << to_string(report.path) << " path on " << context.device().name << " ["
                  << report.variant << "], " << report.gpu_ms << " ms\n";
    });
    if (dtype == DType::f16) {
        o32.resize(o_count);
        for (std::size_t i = 0; i < o_count; ++i) o32[i] = half_to_float(o16[i]);
    }
    // Outputs keep the rank of q.
    std::vector<std::int64_t> rank_shape(q.file_shape.begin(), q.file_shape.end() - 1);
    std::vector<PendingOutput> pending;
    auto with_last = [&](std::int64_t last) {
        auto s = rank_shape;
        s.push_back(last);
        return s;
    };
    pending.push_back({o.out, with_last(v.shape[3]), o32.data()});
    if (!o.weights.empty()) pending.push_back({o.weights, with_last(k.shape[2]), weights.data()});
    if (!o.lse.empty()) pending.push_back({o.lse, rank_shape, lse.data()});
    write_all(pending);
    return 0;
}

}  // namespace

Action add_run(CLI::App& app) {
    auto o = std::make_shared<RunOptions>();
    app.add_option("--q", o->q, "Queries .npy, [B, Hq, Nq, Dk], [Hq, Nq, Dk] or [Nq, Dk], float32 or float16")->required();
    app.add_option("--k", o->k, "Keys .npy, [B, Hkv, Nkv, Dk] (or rank 3 / 2)")->required();
    app.add_option("--v", o->v, "Values .npy, [B, Hkv, Nkv, Dv] (or rank 3 / 2)")->required();
    app.add_option("--mask", o->mask, "Mask .npy broadcastable to [B, Hq, Nq, Nkv]: bool (true = attend) or float32 (added)");
    app.add_option("--kv-lengths", o->kv_lengths, "Key lengths .npy, int32 or int64 [B]");
    CLI::Option* causal = app.add_option("--causal", o->causal,
                                         "Causal mask: top-left (default when given without a value) or bottom-right")
                              ->expected(0, 1);
    app.add_option("--scale", o->scale, "Score scale (default 1/sqrt(Dk))");
    app.add_option("--impl", o->impl, "auto, unfused, fused or split")->capture_default_str();
    app.add_option("--dtype", o->dtype, "Storage type on the device: f32 or f16 (default: that of --q)");
    app.add_option("--device", o->device, "Device index or name substring");
    add_feature_flags(app, o->features);
    app.add_option("--out", o->out, "Output O .npy (float32, the rank of --q)")->required();
    app.add_option("--weights", o->weights, "Also write the attention weights .npy (float32 [.., Nq, Nkv])");
    app.add_option("--lse", o->lse, "Also write the row log-sum-exp .npy (float32 [.., Nq])");
    return [o, causal] {
        o->causal_given = causal->count() > 0;
        return run(*o);
    };
}

}  // namespace vkattn::tool
