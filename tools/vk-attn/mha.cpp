// vk-attn mha: a PyTorch nn.MultiheadAttention layer on the device, from its exported weights (a
// directory of state_dict .npy files or a .safetensors file) and .npy inputs, with PyTorch's mask
// conventions (bool true = NOT allowed); with --grad-out, the layer's backward too: the inputs'
// and every parameter's gradients into a directory, named as PyTorch names them. Same error rules
// as `run`: one line naming the flag or file, status 1, nothing written.
#include <filesystem>
#include <iostream>

#include "commands.hpp"
#include "parse_impl.hpp"
#include "features.hpp"
#include "mha_weights.hpp"
#include "npy.hpp"
#include "pending_outputs.hpp"
#include "state_dict.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::tool {
namespace {

struct MhaFlags {
    std::string query, key, value, weights, key_padding_mask, attn_mask, out, attn_weights;
    std::string grad_out, grads;  // the backward: dL/d out in, gradients into a directory
    std::int64_t num_heads = 0;
    bool batch_first = false, need_weights = false, average = true;
    std::string impl = "auto", dtype = "f32", device;
};

// A float tensor from .npy, widened to fp32.
struct FloatArray {
    std::vector<std::int64_t> shape;
    std::vector<float> values;
};

FloatArray read_floats(const std::string& path, const char* flag) {
    const npy::Array a = npy::read(path);
    FloatArray f{a.shape, std::vector<float>(static_cast<std::size_t>(a.count()))};
    if (a.type == npy::ElementType::f32) std::copy(a.as<float>(), a.as<float>() + a.count(), f.values.begin());
    else if (a.type == npy::ElementType::f16)
        for (std::size_t i = 0; i < f.values.size(); ++i) f.values[i] = half_to_float(a.as<std::uint16_t>()[i]);
    else throw InvalidArgument(flag, path + " holds " + npy::descr_of(a.type) + "; inputs are float32 (<f4) or float16 (<f2).");
    return f;
}

// A PyTorch mask from .npy: bool (true = not allowed) or float32 (added).
TorchMask read_mask(const std::string& path, const char* flag, npy::Array& storage) {
    storage = npy::read(path);
    if (storage.type != npy::ElementType::boolean && storage.type != npy::ElementType::f32)
        throw InvalidArgument(flag, path + " holds " + npy::descr_of(storage.type) +
                                        "; PyTorch masks are bool (|b1, true = not allowed) or float32 (<f4, added).");
    return {storage.data.data(), storage.type == npy::ElementType::boolean, storage.shape};
}

// The layer's argument names as the flags that carry them.
std::string mha_flag_for(const std::string& argument) {
    if (argument == "embed_dim" || argument == "num_heads") return "--num-heads";
    if (argument == "in_proj_weight" || argument == "q_proj_weight" || argument == "k_proj_weight" ||
        argument == "v_proj_weight" || argument == "in_proj_bias" || argument == "out_proj.weight" ||
        argument == "out_proj.bias" || argument == "kdim")
        return "--weights";
    if (argument == "out") return "--out";
    if (argument == "grad_out") return "--grad-out";
    return flag_for(argument);
}

int run_mha(const MhaFlags& f) {
    if (f.num_heads < 1) throw InvalidArgument("--num-heads", "must be at least 1.");
    if (f.need_weights && f.attn_weights.empty())
        throw InvalidArgument("--attn-weights", "is required with --need-weights (where to write the weights).");
    if (!f.key.empty() != !f.value.empty())
        throw InvalidArgument(f.key.empty() ? "--key" : "--value", "--key and --value go together (cross-attention); "
                                                                  "give both, or neither for self-attention.");
    if (!f.grad_out.empty() != !f.grads.empty())
        throw InvalidArgument(f.grad_out.empty() ? "--grads" : "--grad-out",
                              "--grad-out (dL/d out) and --grads (the directory the gradients go to) go together.");
    if (!f.grads.empty() && std::filesystem::exists(f.grads) && !std::filesystem::is_directory(f.grads))
        throw InvalidArgument("--grads", f.grads + " exists and is not a directory.");
    const Impl impl = parse_impl(f.impl);
    if (f.dtype != "f32" && f.dtype != "f16" && f.dtype != "bf16")
        throw InvalidArgument("--dtype", "must be f32, f16 or bf16.");

    // Weights errors name the file they came from; say which flag gave it.
    MhaStateDict sd;
    try {
        sd = mha_from_state_dict(load_state_dict(f.weights), f.num_heads, f.batch_first);
    } catch (const InvalidArgument& e) {
        throw InvalidArgument("--weights", e.what());
    }
    const FloatArray query = read_floats(f.query, "--query");
    FloatArray key, value;
    MhaInputs in{.query = {query.values.data(), query.shape}};
    if (!f.key.empty()) {
        key = read_floats(f.key, "--key");
        value = read_floats(f.value, "--value");
        in.key = {key.values.data(), key.shape};
        in.value = {value.values.data(), value.shape};
    }
    npy::Array kpm, am;
    if (!f.key_padding_mask.empty()) in.key_padding_mask = read_mask(f.key_padding_mask, "--key-padding-mask", kpm);
    if (!f.attn_mask.empty()) in.attn_mask = read_mask(f.attn_mask, "--attn-mask", am);

    // Output shapes: the query's with E features; weights [N, L, S] or [N, H, L, S] (no N unbatched).
    std::vector<std::int64_t> out_shape = query.shape;
    if (!out_shape.empty()) out_shape.back() = sd.config.embed_dim;
    std::int64_t out_count = 1;
    for (const auto d : out_shape) out_count *= std::max<std::int64_t>(d, 0);
    std::vector<float> out(static_cast<std::size_t>(out_count));
    std::vector<std::int64_t> weights_shape;
    if (f.need_weights && query.shape.size() == 3) {
        const std::int64_t N = query.shape[f.batch_first ? 0 : 1], L = query.shape[f.batch_first ? 1 : 0];
        const auto& ks = key.shape.empty() ? query.shape : key.shape;
        const std::int64_t S = ks.size() == 3 ? ks[f.batch_first ? 1 : 0] : 0;
        weights_shape = f.average ? std::vector<std::int64_t>{N, L, S} : std::vector<std::int64_t>{N, f.num_heads, L, S};
    } else if (f.need_weights && query.shape.size() == 2) {
        const std::int64_t L = query.shape[0], S = key.shape.empty() ? L : key.shape[0];
        weights_shape = f.average ? std::vector<std::int64_t>{L, S} : std::vector<std::int64_t>{f.num_heads, L, S};
    }
    std::int64_t weights_count = 1;
    for (const auto d : weights_shape) weights_count *= d;
    std::vector<float> weights(f.need_weights ? static_cast<std::size_t>(weights_count) : 0);

    FloatArray grad_out;
    if (!f.grad_out.empty()) grad_out = read_floats(f.grad_out, "--grad-out");

    ContextOptions copts;
    copts.device = f.device;
    MhaGradients grads;
    try {
        const MultiHeadAttention layer(sd.config, sd.weights);
        Context context(copts);
        const MhaOptions options{.average_attn_weights = f.average, .dtype = dtype_from_string(f.dtype, "--dtype"), .impl = impl};
        // The backward first: its checks (grad_out's shape) then come before anything is printed.
        if (!f.grad_out.empty()) grads = layer.backward(context, in, {grad_out.values.data(), grad_out.shape}, options);
        const MhaReport report = layer.forward(context, in, {out.data(), f.need_weights ? weights.data() : nullptr}, options);
        std::cerr << "vk-attn: mha on " << context.device().name << ": attention " << to_string(report.attention.path)
                  << " path [" << report.attention.variant << "], " << report.gpu_ms << " ms for the whole layer\n";
        if (!f.grad_out.empty())
            std::cerr << "vk-attn: mha backward: attention " << to_string(grads.report.attention.path) << " path ["
                      << grads.report.attention.variant << "], " << grads.report.gpu_ms << " ms for the whole layer\n";
    } catch (const InvalidArgument& e) {
        throw InvalidArgument(mha_flag_for(e.argument()), std::string(e.what()).substr(e.argument().size() + 2));
    }
    std::vector<PendingOutput> pending{{f.out, out_shape, out.data()}};
    if (f.need_weights) pending.push_back({f.attn_weights, weights_shape, weights.data()});
    if (!f.grads.empty()) {
        // The inputs' gradients in their own shapes (only those given as separate tensors), then the
        // parameters' under their state_dict() keys.
        const std::filesystem::path dir(f.grads);
        pending.push_back({(dir / "query.npy").string(), query.shape, grads.query.data()});
        if (!grads.key.empty()) pending.push_back({(dir / "key.npy").string(), key.shape, grads.key.data()});
        if (!grads.value.empty()) pending.push_back({(dir / "value.npy").string(), value.shape, grads.value.data()});
        for (const MhaGradients::Parameter& p : grads.parameters)
            pending.push_back({(dir / (p.name + ".npy")).string(), p.shape, p.values.data()});
        std::filesystem::create_directories(dir);
    }
    write_all(pending);
    return 0;
}

}  // namespace

Action add_mha(CLI::App& app) {
    auto f = std::make_shared<MhaFlags>();
    app.add_option("--query", f->query, "Query .npy: [L, N, E] ([N, L, E] with --batch-first; [L, E] unbatched)")->required();
    app.add_option("--key", f->key, "Key .npy [S, N, kdim] (default: the query: self-attention)");
    app.add_option("--value", f->value, "Value .npy [S, N, vdim] (with --key)");
    app.add_option("--weights", f->weights,
                   "The layer's state_dict: a directory of <key>.npy files or a .safetensors file")->required();
    app.add_option("--num-heads", f->num_heads, "Number of heads (embed_dim must be a multiple)")->required();
    app.add_flag("--batch-first", f->batch_first, "Inputs and output are [N, L, E] (PyTorch batch_first=True)");
    app.add_option("--key-padding-mask", f->key_padding_mask,
                   "[N, S] .npy: bool (true = ignore that key) or float32 (added)");
    app.add_option("--attn-mask", f->attn_mask,
                   "[L, S] or [N*num_heads, L, S] .npy: bool (true = not allowed) or float32 (added)");
    app.add_flag("--need-weights", f->need_weights, "Also return the attention weights (--attn-weights)");
    app.add_flag("--average-attn-weights,!--no-average-attn-weights", f->average,
                 "Weights averaged over heads [N, L, S] (default) or per head [N, H, L, S]");
    app.add_option("--impl", f->impl, "Attention path: auto, unfused, fused or split")->capture_default_str();
    app.add_option("--dtype", f->dtype, "Storage on the device: f32, f16 or bf16 (fp32 arithmetic)")->capture_default_str();
    app.add_option("--device", f->device, "Device index or name substring");
    app.add_option("--out", f->out, "Output .npy (float32, the query's layout with embed_dim features)")->required();
    app.add_option("--attn-weights", f->attn_weights, "Where --need-weights writes the weights .npy (float32)");
    app.add_option("--grad-out", f->grad_out,
                   "Backward: dL/d out .npy (the output's shape); also runs the layer's backward (with --grads)");
    app.add_option("--grads", f->grads,
                   "Backward: a directory for query.npy (key.npy, value.npy when given) and one .npy per "
                   "parameter, named as its state_dict() key (float32)");
    return [f] { return run_mha(*f); };
}

}  // namespace vkattn::tool
