// The workgroup-matrix forward's layout (shaders/flash_cm2.comp, VariantOverrides::workgroup_matrices,
// the catalogue's coopmat-wg variants; attention/workgroup_matrices.hpp): the layout on a made-up
// device that offers them (which sizes a device's shapes offer: test_matrix_shapes.cpp), each
// matrix within its granularities, the portable
// implementation's on the others, and each refusal by name; and the GEMM ceiling's (bmm_cm2.comp,
// bench --gemm-kernel coopmat-wg) alike.
#include "support/catch.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "attention/coopmat_backward.hpp"
#include "attention/coopmat_tile.hpp"
#include "attention/product_tuning.hpp"
#include "attention/tuning.hpp"
#include "attention/workgroup_matrices.hpp"
#include "fake_devices.hpp"
#include "vk/device_facts.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/variants.hpp"

using namespace vkattn;
using namespace vkattn::detail;
using namespace vkattn::detail::fake;

namespace {

// An NVIDIA-like device whose driver offers f16 workgroup matrices at 128 and 256 invocations, at
// the granularities NVIDIA's drivers list (32 x 16 x 16 and 32 x 32 x 16).
vk::DeviceCaps workgroup_device() {
    vk::DeviceCaps caps = nvidia_like();
    caps.matrix_units = true;
    caps.maximal_reconvergence = true;
    caps.workgroup_matrices = true;
    caps.workgroup_matrix_granularity[7] = {32, 16, 16};
    caps.workgroup_matrix_granularity[8] = {32, 32, 16};
    caps.workgroup_matrix_max_invocations = 256;
    caps.workgroup_matrix_max_dimension = 256;
    caps.workgroup_matrix_reserved_shared = 1024;
    return caps;
}

Problem f16_problem(std::int64_t dk, std::int64_t dv) {
    Problem p = problem(1, 8, 2, 1000, 1000, dk, dv, DType::f16);
    p.k_dtype = p.v_dtype = DType::f16;
    return p;
}

const VariantOverrides& wg(const char* name = "coopmat-wg") { return find_kernel_variant(name)->overrides; }

}  // namespace

TEST_CASE("workgroup matrices: the layout where the device offers them", "[unit][coopmat][workgroup]") {
    const vk::DeviceCaps caps = workgroup_device();
    const auto c = fused_for(caps, f16_problem(64, 64), wg());
    REQUIRE(c);
    REQUIRE(c->coopmat);
    CHECK(c->coopmat->workgroup_matrices);
    CHECK(c->rows_per_workgroup() == 64);
    CHECK(c->subgroups == 4);
    CHECK(c->coopmat->keys == 64);
    CHECK(c->coopmat->dk_tiles == 4);
    CHECK(c->coopmat->column_tiles == 4);
    // The rows' facts alone: the driver stages the matrices (its reserve is checked apart).
    CHECK(c->coopmat->shared_bytes(c->subgroups) == 4 * (64 * (8 + 11) + 4));
    CHECK_THAT(c->describe(), Catch::Contains(" workgroup units"));
    CHECK_THAT(c->describe(), !Catch::Contains(" ahead"));
    // D 128; Dv 200 in two passes of 128 columns; Dk 40 in three d-tiles.
    const auto d128 = fused_for(caps, f16_problem(128, 128), wg());
    CHECK(d128->coopmat->dk_tiles == 8);
    CHECK(d128->coopmat->column_tiles == 8);
    const auto passes = fused_for(caps, f16_problem(40, 200), wg());
    CHECK(passes->coopmat->dk_tiles == 3);
    CHECK(passes->column_passes == 2);
    // The catalogue's shapes: 32-key tiles; 128 rows on 8 subgroups (256 invocations).
    const auto keys32 = fused_for(caps, f16_problem(64, 64), wg("coopmat-wg-64x32"));
    CHECK(keys32->coopmat->keys == 32);
    const auto rows128 = fused_for(caps, f16_problem(64, 64), wg("coopmat-wg-128x64"));
    CHECK(rows128->rows_per_workgroup() == 128);
    CHECK(rows128->subgroups == 8);
    CHECK(rows128->coopmat->stat_columns == 16 * 2);  // 256 invocations' N granularity: 32
    CHECK_THAT(rows128->describe(), Catch::Contains(" rw32"));
    CHECK(c->coopmat->stat_columns == 16);
    // Q stored as f32 beside f16 K/V: f16 operands, taken.
    Problem q32 = f16_problem(64, 64);
    q32.dtype = DType::f32;
    CHECK(fused_for(caps, q32, wg())->coopmat->workgroup_matrices);
}

TEST_CASE("workgroup matrices: every matrix within the device's granularities", "[unit][coopmat][workgroup]") {
    // VK_NV_cooperative_matrix2: at a workgroup size, every A's and accumulator's rows a multiple of
    // M, A's columns and B's rows of K, B's and accumulators' columns of N. NVIDIA lists 32 x 16 x 16
    // at 128 invocations and 32 x 32 x 16 at 256.
    const vk::DeviceCaps caps = workgroup_device();
    // At 256, heads of 40 take Q in 4 d-tiles (its accumulator's 64 columns) and O 4 column tiles,
    // zeros past Dk and Dv (the tensor loads clamp, the stores stop at Dv); at 128 they keep 3.
    const auto d40 = fused_for(caps, f16_problem(40, 40), wg("coopmat-wg-128x64"));
    CHECK(d40->coopmat->dk_tiles == 4);
    CHECK(d40->coopmat->column_tiles == 4);
    CHECK(d40->column_passes == 1);
    const auto d40_128 = fused_for(caps, f16_problem(40, 40), wg());
    CHECK(d40_128->coopmat->dk_tiles == 3);
    CHECK(d40_128->coopmat->column_tiles == 3);
    // Knobs the granularity does not divide are refused by name: 16-key tiles at 256 (S's columns).
    VariantOverrides keys16 = wg("coopmat-wg-128x64");
    keys16.tile_keys = 16;
    CHECK_THAT(fused_refusal(caps, f16_problem(64, 64), keys16),
               Catch::StartsWith("variant.tile_keys:") && Catch::Contains("keys per tile (16)") && Catch::Contains("granularity 32"));
    CHECK(fused_for(caps, f16_problem(64, 64), [] { VariantOverrides o = wg(); o.tile_keys = 16; return o; }())->coopmat->keys == 16);
    // A device whose rows come 128 at a time takes no 64-row workgroup of 128 invocations.
    vk::DeviceCaps coarse = caps;
    coarse.workgroup_matrix_granularity[7] = {128, 16, 16};
    CHECK_THAT(fused_refusal(coarse, f16_problem(64, 64), wg()),
               Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("its rows (64)") && Catch::Contains("granularity 128"));
    // The backward rounds its widths alike where N is 32 at its 128 invocations, and refuses rows
    // the granularity does not divide.
    vk::DeviceCaps wide_n = caps;
    wide_n.workgroup_matrix_granularity[7] = {32, 32, 16};
    std::uint32_t subgroups = 0;
    const CoopmatBackwardLayout b40 = choose_coopmat_backward(wide_n, 32, subgroups, f16_problem(40, 72), true);
    CHECK(b40.dk_tiles == 4);
    CHECK(b40.dv_tiles == 6);
    CHECK(b40.column_tiles == 6);
    CHECK_THROWS_MATCHES(choose_coopmat_backward(coarse, 32, subgroups, f16_problem(64, 64), true), InvalidArgument,
                         Catch::Predicate<InvalidArgument>([](const InvalidArgument& e) {
                             return e.argument() == "variant.workgroup_matrices" && std::string(e.what()).find("granularity 128") != std::string::npos;
                         }));
    // The GEMM: a 16-row tile at 128 invocations (4 subgroups across) is refused; 32 rows are taken.
    VariantOverrides gemm{.gemm_kernel = GemmKernel::coopmat, .workgroup_matrices = true};
    gemm.gemm_shape = GemmShape{1, 4, 1, 1, 32, 1, false};
    CHECK_THROWS_MATCHES(choose_gemm(caps, 256, 256, 256, gemm), InvalidArgument,
                         Catch::Predicate<InvalidArgument>([](const InvalidArgument& e) {
                             return std::string(e.what()).find("tile's rows (16)") != std::string::npos;
                         }));
    gemm.gemm_shape = GemmShape{1, 4, 2, 1, 32, 1, false};
    CHECK(choose_gemm(caps, 256, 256, 256, gemm).workgroup_matrices);
    // The probe's 64 x 64 matrices and 16-column row values: the smallest size that takes them.
    CHECK(workgroup_probe_invocations(caps) == 128);
    CHECK(workgroup_probe_invocations(coarse) == 0);  // 128's rows, and 256's 32-column row values
    CHECK(workgroup_probe_invocations(lavapipe_like()) == 0);
    vk::DeviceCaps reserved = caps;  // the probe's staged tile must fit beside the driver's reserve
    reserved.workgroup_matrix_reserved_shared = reserved.max_shared_bytes - kWorkgroupProbeSharedBytes + 1;
    CHECK(workgroup_probe_invocations(reserved) == 0);
}

TEST_CASE("workgroup matrices: the portable implementation where the device has none", "[unit][coopmat][workgroup]") {
    // Every made-up device but workgroup_device() lacks them: the portable implementation
    // (common/wg_matrix.glsl), 16 rows on one subgroup, its keys per tile halved from 64 until its
    // shared memory fits; or, where not even 16 keys fit, refused by name.
    for (const vk::DeviceCaps& other : all_devices()) {
        INFO(other.name);
        for (const std::int64_t d : {64, 128, 40}) {
            const std::string why = fused_refusal(other, f16_problem(d, d), wg());
            if (why != "taken") {
                CHECK_THAT(why, Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("shared memory"));
                continue;
            }
            const auto c = fused_for(other, f16_problem(d, d), wg());
            CHECK_FALSE(c->coopmat->units);
            CHECK_THAT(c->describe(), Catch::Contains(" workgroup portable"));
            CHECK(c->rows_per_workgroup() == 16);
            CHECK(c->coopmat->shared_bytes(c->subgroups) <= other.max_shared_bytes);
            if (c->coopmat->keys < 64) {
                CoopmatLayout wider = *c->coopmat;
                wider.keys *= 2;
                CHECK(wider.shared_bytes(c->subgroups) > other.max_shared_bytes);
            }
        }
    }
    // Lavapipe's 32 KiB at D 128: 64 keys would take 44,240 bytes (the facts' 1,232; Q, K, P and V as
    // f16 pairs, 38,912; S's fp32 4,096), 32 keys 24,784.
    const vk::DeviceCaps cpu = lavapipe_like();
    const auto d128 = fused_for(cpu, f16_problem(128, 128), wg());
    CHECK(d128->coopmat->keys == 32);
    CHECK(d128->coopmat->shared_bytes(d128->subgroups) == 24784);
    CHECK(fused_for(cpu, f16_problem(64, 64), wg())->coopmat->keys == 64);
    // What is forced is kept, or refused by the knob that asked for it.
    VariantOverrides keys64 = wg();
    keys64.tile_keys = 64;
    CHECK_THAT(fused_refusal(cpu, f16_problem(128, 128), keys64), Catch::StartsWith("variant.tile_keys:") && Catch::Contains("44240"));
    CHECK_THAT(fused_refusal(cpu, f16_problem(64, 64), wg("coopmat-wg-128x64")), Catch::StartsWith("variant.tile_keys:"));
    VariantOverrides rows64 = wg();
    rows64.tile_rows = 64;
    const auto four = fused_for(cpu, f16_problem(32, 32), rows64);
    CHECK(four->subgroups == 4);
    CHECK(four->rows_per_workgroup() == 64);
    VariantOverrides rows256 = wg();
    rows256.tile_rows = 256;
    rows256.tile_keys = 16;
    CHECK_THAT(fused_refusal(cpu, f16_problem(16, 16), rows256), Catch::StartsWith("variant.tile_keys:") && Catch::Contains("shared memory"));
    // Its loop trips per tile (lavapipe ends a shader's loops past 65,535 trips in all), as
    // common/wg_matrix.glsl's loops make them: the forward at D 64 (16 rows, 64-key tiles, 8
    // invocations) 1,745, which Mesa 22.3 cut off between 40 and 41 tiles; so 32 tiles a dispatch
    // under the budget's 58,977.
    const auto d64 = fused_for(cpu, f16_problem(64, 64), wg());
    CHECK(workgroup_matrix_loops_per_tile(*d64->coopmat, 8, 1) == 1745);
    vk::DeviceCaps counted = cpu;
    counted.max_loop_iterations = 65535;
    CHECK(fused_keys_per_dispatch(counted, *d64, f16_problem(64, 64)) == 32 * 64);
    // K/V it cannot read by tensor loads are staged: the tiles then hold K's, then V's, tile too, its
    // rows padded by 8 elements. At D 64 that is 35,024 bytes for 64 keys (9,216 of them the stage),
    // past lavapipe's 32 KiB, so 32 keys (19,152), and 2 · 64 more trips a tile (K's and V's 32 × 64
    // elements, 4 a trip over 8 invocations).
    Problem k32 = f16_problem(64, 64);
    k32.k_dtype = DType::f32;
    const auto staged = fused_for(cpu, k32, wg());
    CHECK(staged->coopmat->staged);
    CHECK_THAT(staged->describe(), Catch::Contains(" workgroup portable staged"));
    CHECK(staged->coopmat->keys == 32);
    CHECK(staged->coopmat->shared_bytes(staged->subgroups) == 19152);
    CoopmatLayout unstaged = *staged->coopmat;
    unstaged.staged = false;
    CHECK(workgroup_matrix_loops_per_tile(*staged->coopmat, 8, 1) == workgroup_matrix_loops_per_tile(unstaged, 8, 1) + 128);
    // The kernel's own rules hold portably too.
    CHECK_THAT(fused_refusal(cpu, f16_problem(256, 64), wg()), Catch::StartsWith("variant.workgroup_matrices:"));
}

TEST_CASE("workgroup matrices: K and V by tensor loads where they allow them, else staged", "[unit][coopmat][workgroup]") {
    // Tensor loads read f16 rows whose every tile starts on 16 bytes, rows at least their length
    // apart; anything else is staged by the typed loaders: other types, strides off 8 elements, a
    // broadcast's stride 0, a paged cache.
    const Problem f16 = f16_problem(64, 64);
    const auto dense = bhnd(f16.Hkv, f16.Nkv, 64);
    CHECK(kv_tensor_loads(f16, dense, dense));
    for (const DType t : {DType::f32, DType::bf16, DType::q8_0, DType::q4_0, DType::fp8_e4m3}) {
        Problem k = f16, v = f16;
        k.k_dtype = v.v_dtype = t;
        CHECK_FALSE(kv_tensor_loads(k, dense, dense));
        CHECK_FALSE(kv_tensor_loads(v, dense, dense));
    }
    Problem paged = f16;
    paged.paged_kv = true;
    CHECK_FALSE(kv_tensor_loads(paged, dense, dense));
    const Problem d36 = f16_problem(36, 36);
    const auto rows36 = bhnd(d36.Hkv, d36.Nkv, 36);
    CHECK_FALSE(kv_tensor_loads(d36, rows36, rows36));
    CHECK(kv_tensor_loads(d36, bhnd(d36.Hkv, d36.Nkv, 40), bhnd(d36.Hkv, d36.Nkv, 40)));  // rows padded to 40
    CHECK_FALSE(kv_tensor_loads(f16, {0, 0, 0, 1}, dense));                                  // one row for every key
    CHECK_FALSE(kv_tensor_loads(f16, dense, {dense[0], dense[1], 64, 2}));                    // columns apart
    // The units take them staged too, the stage in the shared memory they count.
    const vk::DeviceCaps caps = workgroup_device();
    const auto units = fused_for(caps, f16_problem(36, 36), wg());
    REQUIRE(units);
    CHECK(units->coopmat->units);
    CHECK(units->coopmat->staged);
    CoopmatLayout without = *units->coopmat;
    without.staged = false;
    CHECK(units->coopmat->shared_bytes(units->subgroups) ==
          without.shared_bytes(units->subgroups) +
              2 * units->coopmat->keys * (std::max(16 * units->coopmat->dk_tiles, units->coopmat->columns()) + 8));
    CHECK_FALSE(fused_for(caps, f16_problem(64, 64), wg())->coopmat->staged);
    // Where the stage does not fit beside the driver's reserve, unforced keys halve (64 rows at D 128:
    // the facts' 4,880 bytes and the reserve's 1,024; the stage 17,408 at 64 keys, 8,704 at 32).
    vk::DeviceCaps tight = caps;
    tight.max_shared_bytes = 4880 + 1024 + 8704;
    Problem q8 = f16_problem(128, 128);
    q8.k_dtype = q8.v_dtype = DType::q8_0;
    const auto halved = fused_for(tight, q8, wg());
    CHECK(halved->coopmat->staged);
    CHECK(halved->coopmat->keys == 32);
    CHECK(fused_for(tight, f16_problem(128, 128), wg())->coopmat->keys == 64);  // tensor loads: no stage
    // Forced tiles keep their keys: 128 rows' facts and a 64-key stage do not fit, refused by the rows' knob.
    CHECK_THAT(fused_refusal(tight, q8, wg("coopmat-wg-128x64")), Catch::StartsWith("variant.tile_rows:") && Catch::Contains("shared memory"));
}

TEST_CASE("workgroup matrices: each refusal names its argument and the limit", "[unit][coopmat][workgroup]") {
    const vk::DeviceCaps caps = workgroup_device();
    auto refusal = [](const vk::DeviceCaps& d, const Problem& p, const VariantOverrides& o) { return fused_refusal(d, p, o); };
    // bf16 storage: bf16 operands, which the driver's matrices must take too (DeviceCaps::
    // workgroup_bf16_matrices, at granularities of their own); refused by name where they do not.
    Problem bf16 = f16_problem(64, 64);
    bf16.dtype = bf16.k_dtype = bf16.v_dtype = DType::bf16;
    CHECK_THAT(refusal(caps, bf16, wg()), Catch::StartsWith("variant.fused_kernel:") && Catch::Contains("bf16"));  // no bf16 units
    vk::DeviceCaps bf16_units = caps;
    bf16_units.bf16_matrix_units = true;
    CHECK_THAT(refusal(bf16_units, bf16, wg()), Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("workgroup_bf16_matrices"));
    bf16_units.workgroup_bf16_matrices = true;
    CHECK_THAT(refusal(bf16_units, bf16, wg()), Catch::StartsWith("variant.workgroup_matrices:") &&
                                                     Catch::Contains("bf16 workgroup matrices at none"));  // f16's sizes, not bf16's
    bf16_units.workgroup_matrix_bf16_granularity[7] = {32, 16, 16};
    const auto on_bf16 = fused_for(bf16_units, bf16, wg());
    CHECK(on_bf16->coopmat->units);
    CHECK(on_bf16->coopmat->operands == DType::bf16);
    CHECK_FALSE(on_bf16->coopmat->staged);  // bf16 K/V are the operands' type: tensor loads
    // Heads past 128.
    CHECK_THAT(refusal(caps, f16_problem(256, 64), wg()), Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("Dk = 256"));
    // A workgroup size the driver does not offer: 32 rows on 2 subgroups (64 invocations).
    VariantOverrides rows32 = wg();
    rows32.tile_rows = 32;
    CHECK_THAT(refusal(caps, f16_problem(64, 64), rows32), Catch::StartsWith("variant.tile_rows:") && Catch::Contains("128 (granularity 32 x 16 x 16), 256"));
    VariantOverrides rows24 = wg();
    rows24.tile_rows = 24;
    CHECK_THAT(refusal(caps, f16_problem(64, 64), rows24), Catch::StartsWith("variant.tile_rows:"));
    VariantOverrides keys40 = wg();
    keys40.tile_keys = 40;
    CHECK_THAT(refusal(caps, f16_problem(64, 64), keys40), Catch::StartsWith("variant.tile_keys:"));
    // The other layout knobs have no meaning here.
    VariantOverrides apart = wg();
    apart.kv_apart = true;
    CHECK_THAT(refusal(caps, f16_problem(64, 64), apart), Catch::StartsWith("variant.kv_apart:"));
    VariantOverrides named = wg();
    named.named_accumulators = false;
    CHECK_THAT(refusal(caps, f16_problem(64, 64), named), Catch::StartsWith("variant.named_accumulators:"));
    // Matrices past the device's dimension, and shared memory the driver keeps.
    vk::DeviceCaps small = caps;
    small.workgroup_matrix_max_dimension = 64;
    CHECK(refusal(small, f16_problem(64, 64), wg()) == "taken");
    CHECK_THAT(refusal(small, f16_problem(128, 128), wg()), Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("reach 64"));
    vk::DeviceCaps reserved = caps;
    reserved.workgroup_matrix_reserved_shared = 48000;
    CHECK_THAT(refusal(reserved, f16_problem(64, 64), wg()), Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("shared memory"));
    // Never chosen unforced: the heuristics' kernel on this device is flash_coopmat.comp's.
    const auto chosen = fused_for(caps, f16_problem(64, 64));
    if (chosen && chosen->coopmat) CHECK_FALSE(chosen->coopmat->workgroup_matrices);
}

TEST_CASE("workgroup matrices: the GEMM ceiling's shape, or a refusal by name", "[unit][coopmat][workgroup]") {
    const vk::DeviceCaps caps = workgroup_device();
    const VariantOverrides wg_gemm{.gemm_kernel = GemmKernel::coopmat, .workgroup_matrices = true};
    // The default shape's 128 × 128 tile, 32 deep, on 4 subgroups (128 invocations).
    const BmmConfig c = choose_gemm(caps, 4096, 4096, 4096, wg_gemm);
    CHECK(c.coopmat);
    CHECK(c.workgroup_matrices);
    CHECK(c.block_rows() == 128);
    CHECK(c.block_cols() == 128);
    CHECK(c.subgroups() * c.subgroup == 128);
    CHECK_THAT(c.describe(), Catch::Contains("workgroup") && Catch::Contains("128x128x32 tensor loads"));
    // Eight subgroups (256 invocations, offered); one (32, not offered); a 512-wide tile past the
    // device's 256.
    VariantOverrides eight = wg_gemm;
    eight.gemm_shape = GemmShape{2, 4, 4, 2, 32, 1, false};
    CHECK(choose_gemm(caps, 4096, 4096, 4096, eight).workgroup_matrices);
    VariantOverrides one = wg_gemm;
    one.gemm_shape = GemmShape{1, 1, 4, 4, 32, 1, false};
    CHECK_THROWS_MATCHES(choose_gemm(caps, 4096, 4096, 4096, one), InvalidArgument,
                         Catch::Predicate<InvalidArgument>([](const InvalidArgument& e) { return e.argument() == "variant.workgroup_matrices"; }));
    VariantOverrides wide = wg_gemm;  // BM 512 (a shape bmm_coopmat.comp's rules take)
    wide.gemm_shape = GemmShape{2, 1, 16, 1, 32, 1, false};
    CHECK_THROWS_MATCHES(choose_gemm(caps, 4096, 4096, 4096, wide), InvalidArgument,
                         Catch::Predicate<InvalidArgument>([](const InvalidArgument& e) {
                             return e.argument() == "variant.workgroup_matrices" && std::string(e.what()).find("512") != std::string::npos;
                         }));
    // Devices without workgroup matrices: the portable twin (A's and B's 128 × 32 and 32 × 128
    // slices as f16 pairs, 16,384 bytes), within a loop budget: its trips are C's fill and store
    // (256 pairs each on 32 invocations) and per 32-deep slice 1 + 32 + 32 + 256 · 3 = 833.
    vk::DeviceCaps cpu = lavapipe_like();
    const BmmConfig twin = choose_gemm(cpu, 264, 264, 264, wg_gemm);
    CHECK(twin.workgroup_matrices);
    CHECK_FALSE(twin.units);
    CHECK_THAT(twin.describe(), Catch::Contains("workgroup portable"));
    CHECK(workgroup_gemm_loops(twin, 264) == 512 + 9 * 833);
    cpu.max_loop_iterations = 65535;  // 58,977 of budget: 70 slices, K ≤ 2,240
    CHECK(choose_gemm(cpu, 2240, 2240, 2240, wg_gemm).workgroup_matrices);
    CHECK_THROWS_MATCHES(choose_gemm(cpu, 2272, 2272, 2272, wg_gemm), ResourceLimit,
                         Catch::Predicate<ResourceLimit>([](const ResourceLimit& e) { return std::string(e.what()).rfind("k: ", 0) == 0; }));
    vk::DeviceCaps small = lavapipe_like();
    small.max_shared_bytes = 16383;
    CHECK_THROWS_MATCHES(choose_gemm(small, 264, 264, 264, wg_gemm), InvalidArgument,
                         Catch::Predicate<InvalidArgument>([](const InvalidArgument& e) { return e.argument() == "variant.workgroup_matrices"; }));
    // What bmm_cm2.comp cannot read: Aᵀ·B, and A or B stored as other than f16.
    CHECK_NOTHROW(check_workgroup_gemm(BmmForm::a_b, DType::f16, DType::f16));
    CHECK_NOTHROW(check_workgroup_gemm(BmmForm::a_bt, DType::f16, DType::f16));
    CHECK_THROWS_AS(check_workgroup_gemm(BmmForm::at_b, DType::f16, DType::f16), InvalidArgument);
    CHECK_THROWS_AS(check_workgroup_gemm(BmmForm::a_b, DType::f32, DType::f16), InvalidArgument);
    CHECK_THROWS_AS(check_workgroup_gemm(BmmForm::a_b, DType::f16, DType::bf16), InvalidArgument);
}

TEST_CASE("workgroup matrices: which tensors tensor loads may read", "[unit][coopmat][workgroup]") {
    TensorDesc dense;  // [B][H][N][64]
    dense.stride = {8 * 1000 * 64, 1000 * 64, 64, 1};
    CHECK(tensor_loads_aligned(dense, 64));
    TensorDesc d60 = dense;  // rows of 60: 120 bytes apart
    d60.stride = {8 * 1000 * 60, 1000 * 60, 60, 1};
    CHECK_FALSE(tensor_loads_aligned(d60, 60));
    TensorDesc offset = dense;
    offset.origin = {0, 0, 0, 4};  // a binding's view starting 8 bytes into a tile
    CHECK_FALSE(tensor_loads_aligned(offset, 64));
    TensorDesc strided = dense;  // d not of unit stride (a transposed view)
    strided.stride = {8 * 1000 * 64, 1000 * 64, 1, 1000};
    CHECK_FALSE(tensor_loads_aligned(strided, 64));
    TensorDesc broadcast = dense;  // every row the same one: a layout's rows may not overlap
    broadcast.stride = {64, 64, 0, 1};
    CHECK_FALSE(tensor_loads_aligned(broadcast, 64));
    CHECK_FALSE(tensor_loads_aligned(dense, 72));  // rows of 72 read 64 apart
    CHECK(tensor_loads_aligned(dense, 56));        // rows of 56 in a wider buffer's
    try {
        require_tensor_loads_aligned(d60, 60, "K");
        FAIL("taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.workgroup_matrices");
        CHECK_THAT(e.what(), Catch::Contains("K by tensor loads") && Catch::Contains("60"));
    }
}

TEST_CASE("workgroup matrices: the backward's layout, or a refusal by name", "[unit][coopmat][workgroup]") {
    const vk::DeviceCaps caps = workgroup_device();
    std::uint32_t subgroups = 0;
    const CoopmatBackwardLayout t = choose_coopmat_backward(caps, 32, subgroups, f16_problem(64, 128), true);
    CHECK(t.workgroup_matrices);
    CHECK(subgroups == 4);
    CHECK(t.tile == 64);
    CHECK(t.dk_tiles == 4);
    CHECK(t.dv_tiles == 8);
    CHECK(t.shared_bytes(subgroups) == 4 * (64 * (9 + 11) + 4));  // the rows' facts: the driver stages the matrices
    CHECK_THAT(t.describe(), Catch::EndsWith(" workgroup"));
    auto argument_of = [&](const vk::DeviceCaps& d, const Problem& p) {
        std::uint32_t n = 0;
        try {
            (void)choose_coopmat_backward(d, 32, n, p, true);
        } catch (const InvalidArgument& e) {
            return e.argument() + ": " + e.what();
        }
        return std::string("taken");
    };
    Problem q32 = f16_problem(64, 64);  // the backward reads q by tensor loads too
    q32.dtype = DType::f32;
    CHECK_THAT(argument_of(caps, q32), Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("all of one type"));
    // bf16 q, k and v: bf16 operands, where the driver's matrices take them (its bf16 granularities);
    // refused by name where they take f16 alone; mixed with f16, refused.
    Problem bf16 = f16_problem(64, 64);
    bf16.dtype = bf16.k_dtype = bf16.v_dtype = DType::bf16;
    CHECK_THAT(argument_of(caps, bf16), Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("workgroup_bf16_matrices"));
    vk::DeviceCaps bf16_caps = caps;
    bf16_caps.bf16_matrix_units = bf16_caps.workgroup_bf16_matrices = true;
    CHECK_THAT(argument_of(bf16_caps, bf16), Catch::Contains("bf16 workgroup matrices come at none"));  // no bf16 sizes listed
    bf16_caps.workgroup_matrix_bf16_granularity = bf16_caps.workgroup_matrix_granularity;
    std::uint32_t bf16_subgroups = 0;
    const CoopmatBackwardLayout on_bf16 = choose_coopmat_backward(bf16_caps, 32, bf16_subgroups, bf16, true);
    CHECK(on_bf16.units);
    CHECK(on_bf16.operands == DType::bf16);
    Problem mixed = bf16;
    mixed.k_dtype = DType::f16;
    CHECK_THAT(argument_of(bf16_caps, mixed), Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("all of one type"));
    const CoopmatBackwardLayout portable_bf16 = choose_coopmat_backward(lavapipe_like(), 8, bf16_subgroups, bf16, true);
    CHECK_FALSE(portable_bf16.units);
    CHECK(portable_bf16.operands == DType::bf16);
    // Without them, the portable implementation: one subgroup of 16 keys (rows), tiles halved from 64
    // until shared memory holds them. Lavapipe's 32 KiB at D 128: 64-wide tiles would take 81,680
    // bytes (the dK/dV kernel's, the larger), 32-wide 44,944, 16-wide 26,576 (its K, V, Qᵀ, dOᵀ, W,
    // dS, dO and Q as f16 pairs: 25,600; the query terms' 976).
    std::uint32_t portable_subgroups = 0;
    const CoopmatBackwardLayout portable = choose_coopmat_backward(lavapipe_like(), 8, portable_subgroups, f16_problem(128, 128), true);
    CHECK_FALSE(portable.units);
    CHECK(portable_subgroups == 1);
    CHECK(portable.tile == 16);
    CHECK(portable.shared_bytes(portable_subgroups) == 26576);
    CHECK_THAT(portable.describe(), Catch::Contains(" portable") && Catch::EndsWith(" workgroup"));
    std::uint32_t d64_subgroups = 0;
    const CoopmatBackwardLayout d64 = choose_coopmat_backward(lavapipe_like(), 8, d64_subgroups, f16_problem(64, 64), true);
    CHECK(d64.tile == 32);
    // The portable kernels' loop trips per tile (common/wg_matrix.glsl's loops): dQ's per key tile,
    // dK/dV's per query tile of each head of the group.
    CHECK(coopmat_backward_loops_per_key_tile(d64, 8, 1) == 865);
    CHECK(coopmat_backward_loops_per_query_tile(d64, 8, 1) == 1223);
    CHECK(coopmat_backward_loops_per_key_tile(portable, 8, 1) == 817);
    CHECK(coopmat_backward_loops_per_query_tile(portable, 8, 1) == 1189);
    vk::DeviceCaps tiny = lavapipe_like();
    tiny.max_shared_bytes = 16384;
    CHECK_THAT(argument_of(tiny, f16_problem(128, 128)), Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("16384"));
    CHECK_THAT(argument_of(caps, f16_problem(256, 64)), Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("Dk = 256"));
    vk::DeviceCaps no256 = caps;
    no256.workgroup_matrix_granularity[7] = {};  // 256 alone, not 128
    CHECK_THAT(argument_of(no256, f16_problem(64, 64)), Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("128 invocations"));
    // Asked for without the cooperative-matrix kernels it shapes: refused, not ignored.
    CHECK_THAT(fused_refusal(caps, f16_problem(64, 64), {.workgroup_matrices = true}), Catch::StartsWith("variant.workgroup_matrices:"));
    CHECK_THAT(fused_refusal(caps, f16_problem(64, 64), {.fused_kernel = FusedKernel::tile, .workgroup_matrices = true}),
               Catch::StartsWith("variant.workgroup_matrices:") && Catch::Contains("fused_kernel = coopmat"));
    CHECK_THROWS_AS(choose_gemm(caps, 256, 256, 256, {.workgroup_matrices = true}), InvalidArgument);
}
