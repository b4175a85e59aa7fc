// vk-attn check: a self-test for the user's own device. Every implementation (three-stage, fused,
// split-KV) in every dtype the device supports, over a compact matrix of awkward shapes, masks, model
// features and kernel variants, against the CPU reference; a pass/fail table, and exit status 1 on any failure.
// A path the device cannot run at all is listed as unavailable, with the reason, not as a failure.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "output_table.hpp"
#include "parse_impl.hpp"
#include "vkattn/testing/attention_case.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::tool {
namespace {

using testing::Case;

struct Named {
    std::string name;
    Case c;
};

std::vector<Named> check_matrix() {
    std::vector<Named> out;
    auto add = [&](std::string name, auto&& edit) {
        Case c;
        edit(c);
        out.push_back({std::move(name), c});
    };
    add("single query and key", [](Case& c) { c.Nq = c.Nkv = 1; c.Dk = c.Dv = 1; });
    add("cross-attention Dk != Dv", [](Case& c) { c.B = 2; c.Hq = c.Hkv = 3; c.Nq = 7; c.Nkv = 65; c.Dk = 24; c.Dv = 28; });
    add("GQA 12/2, bnhd layout", [](Case& c) { c.B = 2; c.Hq = 12; c.Hkv = 2; c.Nq = 26; c.Nkv = 61; c.Dk = c.Dv = 8; c.layout = Layout::bnhd; });
    add("MQA, causal top-left", [](Case& c) { c.Hq = 8; c.Hkv = 1; c.Nq = c.Nkv = 65; c.Dk = c.Dv = 64; c.causal = Causal::top_left; });
    add("KV cache: bottom-right + key lengths", [](Case& c) { c.B = 3; c.Hq = c.Hkv = 2; c.Nq = 5; c.Nkv = 113; c.Dk = c.Dv = 80; c.causal = Causal::bottom_right; c.kv_lengths = true; });
    add("bool + float masks, broadcast", [](Case& c) {
        c.B = 2; c.Hq = 4; c.Hkv = 2; c.Nq = 13; c.Nkv = 7; c.Dk = c.Dv = 28;
        c.bool_mask_shape = std::vector<std::int64_t>{2, 1, 13, 7};
        c.float_mask_shape = std::vector<std::int64_t>{7};
    });
    add("scores ~1e4", [](Case& c) { c.Hq = c.Hkv = 2; c.Nq = 33; c.Nkv = 47; c.Dk = c.Dv = 16; c.amplitude = 100; c.scale = 1.0; });
    add("head dim 256", [](Case& c) { c.Nq = c.Nkv = 64; c.Dk = c.Dv = 256; });
    add("sliding window + causal offset", [](Case& c) { c.B = 2; c.Hq = 4; c.Hkv = 2; c.Nq = 37; c.Nkv = 150; c.Dk = c.Dv = 32; c.causal_offset = 100; c.window = {40, -1}; });
    add("softcap + ALiBi + sinks", [](Case& c) { c.Hq = 4; c.Hkv = 1; c.Nq = 29; c.Nkv = 90; c.Dk = c.Dv = 40; c.causal = Causal::bottom_right; c.softcap = 10; c.alibi_max_bias = 8; c.sinks = true; });
    add("dropout 0.1", [](Case& c) { c.B = 2; c.Hq = c.Hkv = 2; c.Nq = 21; c.Nkv = 77; c.Dk = c.Dv = 16; c.dropout = 0.1; c.dropout_seed = 1234; });
    return out;
}

// One variant run over the matrix: a path and what it forces.
struct Variant {
    Impl impl;
    std::string name;
    VariantOverrides overrides;
};

// What to check: every path and dtype unless narrowed (--impl, --dtype); the tuning's variants and
// the knobs one at a time, or the catalogue's (--variants all, or names).
struct CheckFlags {
    std::string device;
    std::vector<std::string> impls{"unfused", "fused", "split"};
    std::vector<std::string> dtypes;  // empty: every dtype the device stores
    std::vector<std::string> variants;  // empty: the tuned runs and each knob forced
    bool json = false;  // a JSON line per case as it finishes (a time-boxed run keeps what it did)
};

// The runs of the default check: per path, the tuning's choice and each knob forced alone (those a
// path has). On a CPU device the tuned variant of every path is the register one: running it twice
// checks nothing.
std::vector<Variant> knob_variants(const std::vector<Impl>& impls, bool cpu) {
    const std::vector<std::pair<std::string, VariantOverrides>> knobs{
        {"tuned", {}},
        {"scalar loads", {.texel_loads = false}},
        {"shared tiles", {.shared_tiles = true}},
        {"registers", {.shared_tiles = false}},
        {"no subgroups", {.subgroup_ops = false}},
        {"decode kernel", {.fused_kernel = FusedKernel::decode}},
        {"tile kernel", {.fused_kernel = FusedKernel::tile}},
        {"coopmat kernel", {.fused_kernel = FusedKernel::coopmat}},
        {"gemm tile kernel", {.gemm_kernel = GemmKernel::tile}}};
    std::vector<Variant> out;
    for (const Impl impl : impls)
        for (const auto& [name, overrides] : knobs) {
            if (impl != Impl::unfused && name == "no subgroups") continue;  // the fused kernels need subgroups
            if (cpu && name == "registers") continue;
            // The fused kernels run on the fused paths; the decode kernel writes split partials.
            if (overrides.fused_kernel && impl == Impl::unfused) continue;
            if (overrides.fused_kernel == FusedKernel::decode && impl != Impl::split) continue;
            if (overrides.gemm_kernel && impl != Impl::unfused) continue;  // the products are the three stages'
            out.push_back({impl, name, overrides});
        }
    return out;
}

// The catalogue's variants (vkattn/variants.hpp) on the paths asked for: all, or those named.
std::vector<Variant> catalogue_variants(const std::vector<Impl>& impls, const std::vector<std::string>& names) {
    std::vector<Variant> out;
    auto wanted_path = [&](Impl impl) { return std::find(impls.begin(), impls.end(), impl) != impls.end(); };
    if (names.size() == 1 && names[0] == "all") {
        for (const KernelVariant& v : kernel_variants())
            if (wanted_path(v.impl)) out.push_back({v.impl, v.name, v.overrides});
        return out;
    }
    for (const std::string& name : names) {
        const KernelVariant* v = find_kernel_variant(name);
        if (!v) throw InvalidArgument("--variants", "no variant is named '" + name + "'; the catalogue has: all, " + kernel_variant_names() + ".");
        out.push_back({v->impl, v->name, v->overrides});
    }
    return out;
}

int check(const CheckFlags& flags) {
    const std::string& device = flags.device;
    ContextOptions options;
    options.device = device;
    options.poison_outputs = true;
    Context context(options);
    std::cerr << "checking " << context.device().name << " (" << context.device().type << ")\n";
    const bool cpu = context.device().type == "cpu";
    std::vector<DType> dtypes{DType::f32};
    if (context.device().fp16_storage) dtypes.push_back(DType::f16);
    if (!flags.dtypes.empty()) {
        dtypes.clear();
        for (const std::string& d : flags.dtypes) {
            if (d != "f32" && !context.device().fp16_storage)  // 16-bit outputs
                throw InvalidArgument("--dtype", "the device " + context.device().name + " does not store " + d + ".");
            dtypes.push_back(d == "f16" ? DType::f16 : d == "bf16" ? DType::bf16 : DType::f32);
        }
    }
    std::vector<Impl> impls;
    for (const std::string& i : flags.impls) impls.push_back(parse_impl(i));
    const std::vector<Variant> variants =
        flags.variants.empty() ? knob_variants(impls, cpu) : catalogue_variants(impls, flags.variants);
    Printer printer(std::cout, flags.json ? Format::json : Format::table);
    int failures = 0, total = 0;
    unsigned seed = 1;
    for (const Variant& variant : variants)
        for (const DType dtype : dtypes)
            for (const auto& [name, base] : check_matrix()) {
                const Impl impl = variant.impl;
                Case c = base;
                c.impl = impl;
                c.weights = impl == Impl::unfused;  // only the three-stage path has them
                c.splits = impl == Impl::split ? 3 : 0;
                c.dtype = dtype;
                c.variant = variant.overrides;
                Row r;
                for (auto& [field, text] : {std::pair<const char*, std::string>{"impl", to_string(impl)},
                                            {"dtype", to_string(dtype)}, {"variant", variant.name}, {"case", name}})
                    r.add(field, text);
                std::string result = "pass";
                try {
                    const auto outcome = testing::run_case(context, c, seed++);
                    if (!outcome.ok) {
                        result = "FAIL";
                        std::cerr << outcome.message;
                    }
                } catch (const InvalidArgument& e) {
                    // A path or a kernel parameter this device cannot take (a catalogued variant
                    // sized for wider subgroups): reported, not failed.
                    if (e.argument() != "impl" && !e.argument().starts_with("variant.")) throw;
                    result = "unavailable";
                    std::cerr << e.what() << '\n';
                } catch (const Error& e) {
                    result = "FAIL";
                    std::cerr << c.describe(seed - 1) << ": " << e.what() << '\n';
                }
                failures += result == "FAIL";
                ++total;
                r.add("result", result);
                printer.print(r);
            }
    printer.finish();
    if (flags.json) std::cout << nlohmann::ordered_json{{"passed", total - failures}, {"failed", failures}}.dump() << '\n';
    else std::cout << total - failures << " passed, " << failures << " failed\n";
    return failures == 0 ? 0 : 1;
}

}  // namespace

Action add_check(CLI::App& app) {
    auto flags = std::make_shared<CheckFlags>();
    app.add_option("--device", flags->device, "Device index or name substring");
    app.add_option("--impl", flags->impls, "Paths to check (comma-separated): unfused, fused, split")
        ->delimiter(',')
        ->check(CLI::IsMember({"unfused", "fused", "split"}))
        ->capture_default_str();
    app.add_option("--dtype", flags->dtypes,
                   "Storage types to check (comma-separated; default: f32, and f16 where the device stores it; bf16 "
                   "on request, e.g. for the cooperative-matrix kernels' bf16 operands)")
        ->delimiter(',')
        ->check(CLI::IsMember({"f32", "f16", "bf16"}));
    app.add_option("--variants", flags->variants,
                   "Check the catalogue's kernel variants forced instead of the tuning's choices: all (those of the "
                   "paths --impl names), or names (comma-separated): " + kernel_variant_names())
        ->delimiter(',');
    app.add_flag("--json", flags->json,
                 "One JSON object per case on stdout as it finishes, then the totals (the table waits for the end)");
    return [flags] { return check(*flags); };
}

}  // namespace vkattn::tool
