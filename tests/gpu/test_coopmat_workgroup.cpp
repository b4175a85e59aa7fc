// The forward on workgroup-scope matrices (shaders/flash_cm2.comp; VariantOverrides::workgroup_matrices,
// the catalogue's coopmat-wg variants; issue #33): every feature set fused and split, several key
// tiles at D 64 and 128 with GQA and a causal diagonal, column passes, f32 Q beside f16 K/V, against
// the reference. Where the suite's device offers the matrices (DeviceInfo::workgroup_matrices:
// NVIDIA's driver with VK_NV_cooperative_matrix2 and a build with a glslang >= 15) through them;
// everywhere else (lavapipe) through common/wg_matrix.glsl's portable implementation, which runs the
// same kernel's tiling, masks and softmax, and refuses by name the tiles its shared memory cannot
// hold; the GEMM ceiling alike. The probe of each operation has no portable twin: it exists to
// check the driver's matrices.
#include "support/catch.hpp"

#include <string>
#include <tuple>

#include "attention/workgroup_matrices.hpp"
#include "support/bmm_product.hpp"
#include "support/device_tuning.hpp"
#include "support/expect_case.hpp"
#include "support/fused_features.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/benchmark.hpp"
#include "vkattn/testing/workgroup_matrix_probe.hpp"
#include "vkattn/variants.hpp"

using namespace vkattn;
using namespace vkattn::test;
using testing::Case;

namespace {

bool workgroup_matrices_here() { return gpu_context().device().workgroup_matrices; }

// The case with the catalogue's variant `name`, checked against the reference on f16 operands,
// through the driver's matrices where the device offers them, else portably.
AttentionReport expect_workgroup(Case c, const char* name) {
    c.variant = find_kernel_variant(name)->overrides;
    const AttentionReport r = expect_coopmat(c);
    CHECK_THAT(r.variant, Catch::Contains(workgroup_matrices_here() ? " workgroup units" : " workgroup portable"));
    return r;
}

// expect_workgroup; or, where the portable implementation's tiles for `name` do not fit the
// device's shared memory, their refusal by the knob that forced them (never on the units): false.
bool expect_workgroup_or_too_big(const Case& c, const char* name) {
    try {
        expect_workgroup(c, name);
    } catch (const InvalidArgument& e) {
        if (workgroup_matrices_here() || std::string(e.what()).find("shared memory") == std::string::npos) throw;
        CHECK((e.argument() == "variant.tile_keys" || e.argument() == "variant.tile_rows"));
        return false;
    }
    return true;
}

}  // namespace

TEST_CASE("workgroup matrices: DeviceInfo says whether the driver runs them", "[gpu][coopmat][workgroup]") {
    const DeviceInfo& info = gpu_context().device();
    CHECK(info.workgroup_matrices == device_caps().workgroup_matrices);
    if (info.matrix_units) CHECK(info.workgroup_matrices != !info.workgroup_matrices_off.empty());
    else CHECK_FALSE(info.workgroup_matrices);
    CHECK(info.workgroup_bf16_matrices == device_caps().workgroup_bf16_matrices);
    if (info.workgroup_bf16_matrices) CHECK((info.workgroup_matrices && info.bf16_matrix_units));
}

TEST_CASE("workgroup matrices: every feature, fused and split", "[gpu][coopmat][workgroup]") {
    if (!device_caps().fp16_storage) return;
    const auto [name, impl] = GENERATE(std::pair<const char*, Impl>{"coopmat-wg", Impl::fused},
                                       std::pair{"split-coopmat-wg", Impl::split}, std::pair{"coopmat-wg-64x32", Impl::fused},
                                       std::pair{"coopmat-wg-128x64", Impl::fused});
    for (int features = 0; features < kFusedFeatureSets; ++features) {
        Case c = forced_kernel_case(FusedKernel::coopmat, impl, DType::f16);
        c.Dk = 40;  // a partial last d-tile; V narrower than K
        c.Dv = 24;
        apply_fused_features(c, features);
        INFO(name << ", features " << features);
        if (!expect_workgroup_or_too_big(c, name)) return;
    }
}

TEST_CASE("workgroup matrices: several key tiles, column passes, f32 Q", "[gpu][coopmat][workgroup]") {
    if (!device_caps().fp16_storage) return;
    for (const std::int64_t d : {64, 128, 72}) {
        for (const Impl impl : {Impl::fused, Impl::split}) {
            Case c = several_key_tiles_case(impl, d);
            INFO("D " << d << (impl == Impl::split ? " split" : " fused"));
            expect_workgroup(c, impl == Impl::split ? "split-coopmat-wg" : "coopmat-wg");
        }
    }
    Case passes = several_key_tiles_case(Impl::fused, 64);
    passes.Dv = 200;  // two passes of 128 columns
    CHECK_THAT(expect_workgroup(passes, "coopmat-wg").variant, Catch::Contains(" passes="));
    Case q32 = several_key_tiles_case(Impl::fused, 64);
    q32.dtype = DType::f32;
    q32.k_dtype = q32.v_dtype = DType::f16;
    CHECK_THAT(expect_workgroup(q32, "coopmat-wg").variant, !Catch::Contains(" staged"));  // f16 K/V by tensor loads
}

TEST_CASE("workgroup matrices: K and V staged: every storage type, heads off 8 elements", "[gpu][coopmat][workgroup][storage_types]") {
    // What tensor loads cannot read (kv_tensor_loads) the workgroup stages as f16 through the typed
    // loaders: every K/V storage type, rows whose tiles do not all start on 16 bytes (heads of 60:
    // rows 120 bytes apart), over several key tiles with GQA, a causal diagonal and key lengths.
    if (!device_caps().fp16_storage) return;
    const DType kv = GENERATE(DType::f32, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::iq4_nl,
                              DType::fp8_e4m3, DType::fp8_e5m2, DType::f16);
    const Impl impl = GENERATE(Impl::fused, Impl::split);
    Case c = several_key_tiles_case(impl, kv == DType::f16 ? 60 : 64);  // ggml's blocks take heads of a multiple of 32
    c.k_dtype = c.v_dtype = kv;
    c.kv_scales = is_fp8(kv);
    c.kv_lengths = true;
    INFO(to_string(kv) << (impl == Impl::split ? " split" : " fused"));
    CHECK_THAT(expect_workgroup(c, impl == Impl::split ? "split-coopmat-wg" : "coopmat-wg").variant, Catch::Contains(" workgroup") && Catch::Contains(" staged"));
    // K and V of different types, Dk ≠ Dv with two column passes.
    if (kv != DType::q8_0 || impl != Impl::fused) return;
    Case mixed = several_key_tiles_case(Impl::fused, 64);
    mixed.k_dtype = DType::q4_0;
    mixed.v_dtype = DType::f16;
    mixed.Dv = 136;
    CHECK_THAT(expect_workgroup(mixed, "coopmat-wg").variant, Catch::Contains(" staged") && Catch::Contains(" passes="));
}

TEST_CASE("workgroup matrices: bf16 operands, by tensor loads and staged, past f16's range", "[gpu][coopmat][workgroup][bf16]") {
    // Where q, k or v is stored as bf16 the kernel multiplies bf16 operands (its _bf16 builds): dense
    // bf16 K/V by tensor loads, fused and split; f32 Q beside them; q8_0 K/V staged beside bf16 Q;
    // q and k up to 10⁶, past f16's 65,504, the scale bringing the scores back. Refused by name
    // where the driver's workgroup matrices take f16 alone.
    if (!device_caps().fp16_storage) return;
    Case c = several_key_tiles_case(Impl::fused, 64);
    c.dtype = DType::bf16;
    c.variant = find_kernel_variant("coopmat-wg")->overrides;
    if (!workgroup_bf16_runs_here()) {
        CHECK_THAT(expect_refused(c, device_caps().bf16_matrix_units ? "variant.workgroup_matrices" : "variant.fused_kernel"),
                   Catch::Contains("bf16"));
        return;
    }
    CHECK_THAT(expect_workgroup(c, "coopmat-wg").variant, Catch::Contains(" bf16") && !Catch::Contains(" staged"));
    Case split = c;
    split.impl = Impl::split;
    split.Dk = split.Dv = 128;
    expect_workgroup(split, "split-coopmat-wg");
    Case q32 = c;
    q32.dtype = DType::f32;
    q32.k_dtype = q32.v_dtype = DType::bf16;
    CHECK_THAT(expect_workgroup(q32, "coopmat-wg").variant, Catch::Contains(" bf16"));
    Case q8 = c;
    q8.k_dtype = q8.v_dtype = DType::q8_0;
    CHECK_THAT(expect_workgroup(q8, "coopmat-wg").variant, Catch::Contains(" staged") && Catch::Contains(" bf16"));
    expect_workgroup(past_f16_range(c), "coopmat-wg");
}

TEST_CASE("workgroup matrices: the GEMM ceiling against a double product", "[gpu][coopmat][workgroup]") {
    if (!device_caps().fp16_storage) return;
    const VariantOverrides wg_gemm{.gemm_kernel = GemmKernel::coopmat, .workgroup_matrices = true};
    Context& ctx = gpu_context();
    // Sizes off the 128 × 128 × 32 tiles, and on them; f16 operands, so only the fp32 sums differ
    // from the reference's double product of the same values. The driver's matrices, or the twin.
    for (const auto& [m, n, k] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{200, 136, 72}, {256, 256, 256}, {1000, 520, 264}}) {
        INFO(m << " x " << n << " x " << k);
        const testing::GemmResult r = testing::benchmark_gemm(ctx, m, n, k, 0, 1, true, wg_gemm);
        CHECK_THAT(r.variant, Catch::Contains(workgroup_matrices_here() ? "coopmat[workgroup sg" : "coopmat[workgroup portable"));
        CHECK(r.rel_l2_err >= 0);
        CHECK(r.rel_l2_err < 1e-5);
        CHECK(take_validation_messages(ctx).empty());
    }
}

TEST_CASE("workgroup matrices: the GEMM's forms, heads, chunks, addends and outputs", "[gpu][coopmat][workgroup]") {
    // bmm.comp's contract for what bmm_cm2.comp reads: A·B and A·Bᵀ (B through the transposed view),
    // f16 A and B, GQA heads, a chunk of rows, alpha, the addends and each output type, at sizes off
    // the tiles (K and N multiples of 8: tensor loads start every tile on 16 bytes).
    if (!device_caps().fp16_storage) return;
    const detail::BmmConfig config = detail::choose_gemm(device_caps(), 1, 1, 1,
                                                         {.gemm_kernel = GemmKernel::coopmat, .workgroup_matrices = true});
    REQUIRE(config.workgroup_matrices);
    for (const detail::BmmForm form : {detail::BmmForm::a_b, detail::BmmForm::a_bt}) {
        check_product(config, {.form = form, .H = 2, .M = 150, .N = 88, .K = 104, .a = DType::f16, .b = DType::f16});
        check_product(config, {.form = form, .B = 2, .H = 4, .group = 2, .M = 37, .N = 72, .K = 40, .a = DType::f16, .b = DType::f16,
                               .out = DType::f16, .add = detail::BmmAdd::residual, .first_row = 5, .rows = 20, .alpha = 0.5f});
        check_product(config, {.form = form, .M = 19, .N = 24, .K = 8, .a = DType::f16, .b = DType::f16, .out = DType::bf16,
                               .add = detail::BmmAdd::bias});
    }
}

TEST_CASE("workgroup matrices: each operation the kernels rely on, alone, on exact values", "[gpu][coopmat][workgroup]") {
    const auto checks = testing::probe_workgroup_matrices(gpu_context());
    // It runs wherever the driver's matrices do at a workgroup size whose granularity takes its 64 x 64
    // matrices (NVIDIA's 128 invocations, 32 x 16 x 16).
    const std::uint32_t invocations = detail::workgroup_probe_invocations(detail::ContextAccess::runtime(gpu_context()).device().caps());
    CHECK(checks.has_value() == (invocations != 0));
    if (!checks) return;
    REQUIRE(checks->size() == 11);
    for (const testing::WorkgroupMatrixCheck& c : *checks) {
        INFO(c.name << ": " << c.mismatches << " of " << c.elements << " wrong; the first at " << c.first << ": " << c.got
                    << " where " << c.want);
        CHECK(c.mismatches == 0);
    }
    CHECK(take_validation_messages(gpu_context()).empty());
}
