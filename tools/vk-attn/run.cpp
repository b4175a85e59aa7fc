// vk-attn run: attention on the user's own tensors, read from and written to .npy files.
// Inputs of rank 4 [B, H, N, D], 3 [H, N, D] or 2 [N, D]; outputs keep the rank of q. Every error
// names the file or the flag and leaves no output file behind.
#include <filesystem>
#include <iostream>
#include <optional>

#include "commands.hpp"
#include "context_parallel.hpp"
#include "device_set.hpp"
#include "parse_impl.hpp"
#include "features.hpp"
#include "kv_storage.hpp"
#include "npy.hpp"
#include "pending_outputs.hpp"
#include "run_tensors.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::tool {
namespace {

struct RunOptions {
    std::string q, k, v, mask, kv_lengths, out, weights, lse, logits;
    std::string logits_stage;  // with --logits; masked when not given
    std::string causal;  // "", "top-left", "bottom-right"
    bool causal_given = false;
    std::optional<double> scale;
    std::string impl = "auto", dtype, device, devices;
    std::string dequantized_k, dequantized_v;  // what the kernels read, as float32
    std::string grad_out, dq, dk, dv, dsinks;  // the backward pass: dO in, gradients out
    bool context_parallel = false, zigzag = false;  // one rank of an MPI job (mpirun -np P)
    FeatureFlags features;
    KvStorageFlags storage;
};

int run_rank(const RunOptions& o, const ContextParallel* cp);

int run(const RunOptions& o) {
    if (o.zigzag && !o.context_parallel) throw InvalidArgument("--zigzag", "shards the sequence for --context-parallel.");
    if (!o.context_parallel) return run_rank(o, nullptr);
    const ContextParallel cp(o.zigzag);
    try {
        return run_rank(o, &cp);
    } catch (const std::exception& e) {
        cp.abort(e);
    }
}

// One process's run: the whole call, or (with cp) this rank's shard of the sequence, every output
// gathered on rank 0, which alone writes them.
int run_rank(const RunOptions& o, const ContextParallel* cp) {
    if (o.out.empty()) throw InvalidArgument("--out", "is required.");
    if (cp && !o.devices.empty())
        throw InvalidArgument("--devices", "each rank of --context-parallel runs on one device (--device, or "
                                           "VKATTN_DEVICE per rank).");
    const npy::RowSelector* shard_rows = cp ? &cp->rows() : nullptr;
    const Impl impl = parse_impl(o.impl);
    if (!o.weights.empty() && (impl == Impl::fused || impl == Impl::split))
        throw InvalidArgument("--weights", "the attention weights need the three-stage path; use --impl auto or unfused.");
    if (!o.logits.empty() && (impl == Impl::fused || impl == Impl::split))
        throw InvalidArgument("--logits", "the logits need the three-stage path; use --impl auto or unfused.");
    if (!o.logits_stage.empty() && o.logits.empty())
        throw InvalidArgument("--logits-stage", "says which logits --logits writes; give --logits too.");
    LogitsStage logits_stage = LogitsStage::masked;
    if (o.logits_stage == "scaled") logits_stage = LogitsStage::scaled;
    else if (o.logits_stage == "softcapped") logits_stage = LogitsStage::softcapped;
    else if (!o.logits_stage.empty() && o.logits_stage != "masked")
        throw InvalidArgument("--logits-stage", "must be scaled, softcapped or masked, not \"" + o.logits_stage + "\".");
    Causal causal = Causal::none;
    if (o.causal_given) {
        if (o.causal.empty() || o.causal == "top-left") causal = Causal::top_left;
        else if (o.causal == "bottom-right") causal = Causal::bottom_right;
        else throw InvalidArgument("--causal", "must be top-left or bottom-right, not \"" + o.causal + "\".");
    }
    // The run's dtype: --dtype, else q's file dtype.
    std::optional<DType> asked;
    if (!o.dtype.empty()) asked = dtype_from_string(o.dtype, "--dtype");
    if (asked && asked != DType::f32 && asked != DType::f16 && asked != DType::bf16)
        throw InvalidArgument("--dtype", "must be f32, f16 or bf16 (K and V take other types through --kv-dtype).");
    const StoredTensor q = load_floats(o.q, "--q", asked, shard_rows);
    const std::int64_t q_total = cp ? cp->last_total() : q.shape[2];  // the whole sequence's queries
    const DType dtype = q.dtype;

    ContextOptions copts;
    copts.device = o.device;
    Context context(copts);
    const StoredKv kv =
        with_flag_names([&] { return load_kv(context, o.k, o.v, load_kv_storage(o.storage, dtype), q.shape[3], shard_rows); });
    const StoredTensor &k = kv.k, &v = kv.v;
    // The whole sequence's keys: the row selector last saw V's file (a V whose rows are not K's is refused
    // by the ring's checks: its shard's rows differ from k's).
    const std::int64_t k_total = cp ? cp->last_total() : k.shape[2];
    AttentionInputs in{.q = q.view(), .k = k.view(), .v = v.view(), .k_scale = kv.scales, .v_scale = kv.scales};

    npy::Array mask;
    if (!o.mask.empty()) {
        // With --context-parallel, this rank's rows of the mask (its second-to-last axis cut as q's),
        // unless the mask broadcasts over the rows there.
        mask = !cp ? npy::read(o.mask) : npy::read_rows(o.mask, [&](std::int64_t n) -> std::vector<npy::RowRange> {
            if (n == 1) return {{0, 1}};
            if (n != q_total)
                throw InvalidArgument("--mask", o.mask + " has " + std::to_string(n) + " rows on its second-to-last axis; "
                                                "a mask's rows are the queries' (" + std::to_string(q_total) + ") or 1.");
            return (*shard_rows)(n);
        });
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
    StoredTensor out_o{{}, o_shape, dtype, std::vector<std::uint8_t>(storage_bytes(dtype, o_shape[0] * o_shape[1] * o_shape[2] * o_shape[3]))};
    const auto rows = static_cast<std::size_t>(o_shape[0] * o_shape[1] * o_shape[2]);
    std::vector<float> weights(o.weights.empty() ? 0 : rows * static_cast<std::size_t>(k_total));
    // The ring's backward takes the forward's lse: kept whenever there is one.
    std::vector<float> lse(o.lse.empty() && !(cp && !o.grad_out.empty()) ? 0 : rows);
    std::vector<float> logits(o.logits.empty() ? 0 : rows * static_cast<std::size_t>(k_total));
    AttentionOutputs out{.o = out_o.mutable_view(),
                         .weights = o.weights.empty() ? nullptr : weights.data(),
                         .lse = lse.empty() ? nullptr : lse.data(),
                         .logits = o.logits.empty() ? nullptr : logits.data()};

    const Features features = load_features(o.features);
    AttentionOptions options{.scale = o.scale, .causal = causal, .impl = impl, .logits_stage = logits_stage};
    features.apply(options, in);

    // The backward pass: dO in the run's dtype, the gradients asked for in the inputs' types.
    const bool backward = !o.grad_out.empty();
    for (const auto& [path, flag] : {std::pair{&o.dq, "--dq"}, std::pair{&o.dk, "--dk"}, std::pair{&o.dv, "--dv"},
                                     std::pair{&o.dsinks, "--dsinks"}})
        if (!path->empty() && !backward) throw InvalidArgument(flag, "a gradient needs --grad-out (dL/dO).");
    if (backward && o.dq.empty() && o.dk.empty() && o.dv.empty() && o.dsinks.empty())
        throw InvalidArgument("--grad-out", "give the gradients to write: --dq, --dk, --dv or --dsinks.");
    std::optional<StoredTensor> grad_out;
    if (backward) {
        grad_out = load_floats(o.grad_out, "--grad-out", dtype, shard_rows);
        if (grad_out->file_shape.size() != q.file_shape.size())
            throw InvalidArgument("--grad-out", o.grad_out + " has rank " + std::to_string(grad_out->file_shape.size()) +
                                                    " but --q has rank " + std::to_string(q.file_shape.size()) +
                                                    "; dL/dO has o's shape.");
    }
    // A gradient's storage, shaped like its input, only where it is asked for.
    auto gradient_of = [](const StoredTensor& t, DType dt, const std::string& path) {
        if (path.empty()) return StoredTensor{};
        StoredTensor g{t.file_shape, t.shape, dt, std::vector<std::uint8_t>(storage_bytes(dt, t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3]))};
        g.bytes.reserve(1);  // a data pointer even for no rows (a rank's shard may have none): asked for is asked for
        return g;
    };
    StoredTensor dq = gradient_of(q, dtype, o.dq), dk = gradient_of(k, k.dtype, o.dk), dv = gradient_of(v, v.dtype, o.dv);
    std::vector<float> dsinks(o.dsinks.empty() ? 0 : static_cast<std::size_t>(q.shape[1]));
    AttentionGradients grads;
    if (!o.dq.empty()) grads.dq = dq.mutable_view();
    if (!o.dk.empty()) grads.dk = dk.mutable_view();
    if (!o.dv.empty()) grads.dv = dv.mutable_view();
    if (!o.dsinks.empty()) grads.d_sinks = dsinks.data();

    const DeviceSet device_set(o.devices, context);
    if (device_set.several() && backward)
        throw InvalidArgument("--devices", "the backward pass runs on one device; drop --devices or --grad-out.");
    with_flag_names([&] {
        // One device: the backward first, its arguments checked before anything is printed (it runs
        // its own forward on the device), so a bad one is the only line on stderr. The ring needs the
        // forward's o and lse first (an error there ends the job whatever was printed).
        AttentionReport backward_report;
        if (cp) {  // the forward, then (its o and lse) the backward, each round the ring
            const RingRun r = cp->attention(context, in, out, options);
            if (cp->rank() == 0)
                std::cerr << "vk-attn: ring attention over " << r.ranks << " ranks (this rank on " << context.device().name
                          << "), " << r.blocks_run << " blocks run, " << r.blocks_skipped << " skipped, median step "
                          << r.step_ms << " ms\n";
            if (!backward) return;
            const RingRun b = cp->backward(context, in, out_o.view(), lse, grad_out->view(), grads, options);
            if (cp->rank() == 0)
                std::cerr << "vk-attn: ring backward, " << b.blocks_run << " blocks run, median step " << b.step_ms << " ms\n";
            return;
        }
        if (backward) backward_report = attention_backward(context, in, grad_out->view(), grads, options);
        const AttentionReport report = device_set.attention(in, out, options);
        std::cerr << "vk-attn: " << to_string(report.path) << " path on "
                  << (device_set.several() ? device_set.describe() : context.device().name) << " [" << report.variant
                  << "], " << report.gpu_ms << " ms\n";
        if (backward) std::cerr << "vk-attn: backward [" << backward_report.variant << "], " << backward_report.gpu_ms << " ms\n";
    });
    std::vector<float> o32 = out_o.floats();
    std::vector<float> seen_k, seen_v;  // the K and V the kernels read: the stored values, scaled
    if (!o.dequantized_k.empty()) seen_k = k.floats(kv.scales);
    if (!o.dequantized_v.empty()) seen_v = v.floats(kv.scales);
    std::vector<float> dq32, dk32, dv32;  // gradients as float32
    if (!o.dq.empty()) dq32 = dq.floats();
    if (!o.dk.empty()) dk32 = dk.floats();
    if (!o.dv.empty()) dv32 = dv.floats();
    // Outputs keep the rank of q; K-shaped ones k's (its sequence the whole's keys).
    std::vector<std::int64_t> rank_shape(q.file_shape.begin(), q.file_shape.end() - 1);
    std::vector<std::int64_t> k_shape = k.float_shape(), v_shape = v.float_shape();
    if (cp) {  // the ranks' rows, in sequence order, on rank 0, which alone writes
        const std::int64_t B = o_shape[0], Hq = o_shape[1], Hkv = k.shape[1];
        o32 = cp->gather(o32, B, Hq, q_total, o_shape[3]);
        if (!o.lse.empty()) lse = cp->gather(lse, B, Hq, q_total, 1);
        if (!o.weights.empty()) weights = cp->gather(weights, B, Hq, q_total, k_total);
        if (!o.logits.empty()) logits = cp->gather(logits, B, Hq, q_total, k_total);
        if (!o.dq.empty()) dq32 = cp->gather(dq32, B, Hq, q_total, q.shape[3]);
        // Every rank gathers what the flags ask for (a rank's rows may be none).
        for (const auto& [keyed, wanted, D] : {std::tuple{&seen_k, !o.dequantized_k.empty(), k.shape[3]},
                                              std::tuple{&dk32, !o.dk.empty(), k.shape[3]},
                                              std::tuple{&seen_v, !o.dequantized_v.empty(), v.shape[3]},
                                              std::tuple{&dv32, !o.dv.empty(), v.shape[3]}})
            if (wanted) *keyed = cp->gather(*keyed, B, Hkv, k_total, D);
        if (cp->rank() != 0) return 0;
        rank_shape.back() = q_total;
        k_shape[k_shape.size() - 2] = v_shape[v_shape.size() - 2] = k_total;
    }
    std::vector<PendingOutput> pending;
    auto with_last = [&](std::int64_t last) {
        auto s = rank_shape;
        s.push_back(last);
        return s;
    };
    pending.push_back({o.out, with_last(v.shape[3]), o32.data()});
    if (!o.weights.empty()) pending.push_back({o.weights, with_last(k_total), weights.data()});
    if (!o.lse.empty()) pending.push_back({o.lse, rank_shape, lse.data()});
    if (!o.logits.empty()) pending.push_back({o.logits, with_last(k_total), logits.data()});
    if (!o.dequantized_k.empty()) pending.push_back({o.dequantized_k, k_shape, seen_k.data()});
    if (!o.dequantized_v.empty()) pending.push_back({o.dequantized_v, v_shape, seen_v.data()});
    if (!o.dq.empty()) pending.push_back({o.dq, with_last(q.shape[3]), dq32.data()});
    if (!o.dk.empty()) pending.push_back({o.dk, k_shape, dk32.data()});
    if (!o.dv.empty()) pending.push_back({o.dv, v_shape, dv32.data()});
    if (!o.dsinks.empty()) pending.push_back({o.dsinks, {q.shape[1]}, dsinks.data()});
    write_all(pending);
    return 0;
}

}  // namespace

Action add_run(CLI::App& app) {
    auto o = std::make_shared<RunOptions>();
    app.add_option("--q", o->q, "Queries .npy, [B, Hq, Nq, Dk], [Hq, Nq, Dk] or [Nq, Dk]: float32, float16 or bf16 bit "
                                "patterns (uint16)")->required();
    app.add_option("--k", o->k, "Keys .npy, [B, Hkv, Nkv, Dk] (or rank 3 / 2), floats as --q; with a block or fp8 "
                                "--kv-dtype also uint8 rows already quantized, [B, Hkv, Nkv, row bytes]")->required();
    app.add_option("--v", o->v, "Values .npy, [B, Hkv, Nkv, Dv] (or rank 3 / 2), as --k")->required();
    app.add_option("--mask", o->mask, "Mask .npy broadcastable to [B, Hq, Nq, Nkv]: bool (true = attend) or float32 (added)");
    app.add_option("--kv-lengths", o->kv_lengths, "Key lengths .npy, int32 or int64 [B]");
    CLI::Option* causal = app.add_option("--causal", o->causal,
                                         "Causal mask: top-left (default when given without a value) or bottom-right")
                              ->expected(0, 1);
    app.add_option("--scale", o->scale, "Score scale (default 1/sqrt(Dk))");
    app.add_option("--impl", o->impl, "auto, unfused, fused or split")->capture_default_str();
    app.add_option("--dtype", o->dtype, "Storage type of Q and O on the device (and of K and V without --kv-dtype): f32, "
                                        "f16 or bf16 (default: that of --q)");
    add_kv_storage_flags(app, o->storage, "float --k/--v are quantized on the device (ggml's reference rounding, "
                                          "fp8(x / scale))");
    app.add_option("--dequantized-k", o->dequantized_k, "Also write the K the kernels read (float32, the shape of --k "
                                                        "with Dk elements): the stored values, scaled");
    app.add_option("--dequantized-v", o->dequantized_v, "Also write the V the kernels read (float32)");
    app.add_option("--device", o->device, "Device index or name substring");
    app.add_option("--devices", o->devices, "Several devices, e.g. 0,1 (a device may repeat): the call's (batch, "
                                            "K/V head) units split among them, one thread each");
    app.add_flag("--context-parallel", o->context_parallel,
                 "Run as one rank of an MPI job (mpirun -np P vk-attn run ...): each rank reads only its shard of the "
                 "sequence (and of the mask), ring attention passes the K/V shards round (the backward too, with "
                 "--grad-out), rank 0 writes every output a single-device run writes");
    app.add_flag("--zigzag", o->zigzag, "With --context-parallel: rank r holds chunks r and 2P-1-r of 2P (balances causal)");
    add_feature_flags(app, o->features);
    app.add_option("--out", o->out, "Output O .npy (float32, the rank of --q)")->required();
    app.add_option("--weights", o->weights, "Also write the attention weights .npy (float32 [.., Nq, Nkv])");
    app.add_option("--lse", o->lse, "Also write the row log-sum-exp .npy (float32 [.., Nq])");
    app.add_option("--logits", o->logits, "Also write the logits .npy (float32 [.., Nq, Nkv]) at --logits-stage");
    app.add_option("--logits-stage", o->logits_stage, "scaled (scale*q.k), softcapped, or masked (what the softmax "
                                                      "takes: softcapped, plus ALiBi and a float mask; -inf where "
                                                      "masked; the default)");
    app.add_option("--grad-out", o->grad_out, "Backward pass: dL/dO .npy (o's shape, a float type as --q); runs the "
                                              "forward and the backward with the same flags");
    app.add_option("--dq", o->dq, "Write dL/dQ .npy (float32, the shape of --q); needs --grad-out");
    app.add_option("--dk", o->dk, "Write dL/dK .npy (float32, the shape of --k); needs --grad-out");
    app.add_option("--dv", o->dv, "Write dL/dV .npy (float32, the shape of --v); needs --grad-out");
    app.add_option("--dsinks", o->dsinks, "Write dL/dsinks .npy (float32 [Hq]); needs --grad-out and --sinks");
    return [o, causal] {
        o->causal_given = causal->count() > 0;
        return run(*o);
    };
}

}  // namespace vkattn::tool
