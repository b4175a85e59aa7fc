// The cooperative-matrix prefill kernel's tuning (attention/coopmat_tile.hpp): chosen for the forward
// on the matrix units for f16 storage where the kernels run with maximal reconvergence, forced
// anywhere; its layout
// on every made-up device and head size, its shared memory and loop budget, and its refusals.
#include "support/catch.hpp"

#include <optional>
#include <string>
#include <tuple>

#include "attention/coopmat_backward.hpp"
#include "attention/coopmat_tile.hpp"
#include "attention/tuning.hpp"
#include "fake_devices.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;
using namespace vkattn::detail;
using namespace vkattn::detail::fake;

TEST_CASE("coopmat tuning: the forward's choice on the units for f16 storage with maximal reconvergence, forced on every device",
          "[unit][tuning][coopmat]") {
    for (vk::DeviceCaps caps : all_devices())
        for (const bool units : {false, true})
            for (const bool reconverges : {false, true})
                for (const std::int64_t nq : {9, 4096}) {
                    // A CPU's units (lavapipe's from Mesa 26.1) are taken when forced, never chosen.
                    caps.matrix_units = units;
                    caps.maximal_reconvergence = reconverges;
                    const bool chosen = caps.matrix_units && reconverges && caps.kind != vk::DeviceKind::cpu;
                    Problem p = problem(1, 8, 8, nq, 4096, 128, 128, DType::f16);
                    p.k_dtype = p.v_dtype = DType::f16;
                    INFO(caps.name << " units " << caps.matrix_units << " reconverges " << reconverges << " Nq=" << nq);
                    CHECK(fused_for(caps, p)->coopmat.has_value() == chosen);
                    CHECK(fused_for(caps, p, {.fused_kernel = FusedKernel::coopmat})->coopmat);
                    CHECK_FALSE(fused_for(caps, p, {.fused_kernel = FusedKernel::tile})->coopmat);
                    // Not for f32 storage (nothing measured hands it f16 products), bf16 (even where
                    // the units take bf16 operands: unvalidated on a GPU, forced there), nor f16 Q
                    // with other K/V types; nor where flash.comp's loads are forced.
                    CHECK_FALSE(fused_for(caps, problem(1, 8, 8, nq, 4096, 128, 128))->coopmat);
                    Problem bf = problem(1, 8, 8, nq, 4096, 128, 128, DType::bf16);
                    bf.k_dtype = bf.v_dtype = DType::bf16;
                    CHECK_FALSE(fused_for(caps, bf)->coopmat);
                    vk::DeviceCaps bf16_units = caps;
                    bf16_units.bf16_matrix_units = caps.matrix_units;
                    CHECK_FALSE(fused_for(bf16_units, bf)->coopmat);
                    const auto bf16_forced = fused_for(bf16_units, bf, {.fused_kernel = FusedKernel::coopmat});
                    REQUIRE(bf16_forced->coopmat);
                    CHECK(bf16_forced->coopmat->operands == DType::bf16);
                    CHECK(bf16_forced->coopmat->units == caps.matrix_units);
                    Problem mixed = p;
                    mixed.k_dtype = mixed.v_dtype = DType::f32;
                    CHECK_FALSE(fused_for(caps, mixed)->coopmat);
                    CHECK_FALSE(fused_for(caps, p, {.texel_loads = true})->coopmat);
                    // Decoding keeps the decode kernel.
                    Problem step = p;
                    step.Nq = 1;
                    if (chosen) CHECK(fused_for(caps, step)->decode);
                    // A head too wide for the units' tile is no error: another kernel (or path) takes it.
                    if (chosen) {
                        Problem wide = problem(1, 8, 8, nq, 4096, 2048, 2048, DType::f16);  // K's tile alone passes 48 KiB
                        wide.k_dtype = wide.v_dtype = DType::f16;
                        std::optional<FusedConfig> config;
                        CHECK_NOTHROW(config = fused_for(caps, wide));
                        CHECK_FALSE((config && config->coopmat));
                    }
                    // The backward by the same rule, for heads the units take (≤ 128); the register
                    // kernels where their knobs are forced, or the heads are wider.
                    const auto dense_q = bhnd(8, nq, 128), dense_k = bhnd(8, 4096, 128);
                    CHECK(choose_backward(caps, p, dense_q, dense_k, dense_k, dense_q, {}, nullptr)->coopmat.has_value() == chosen);
                    CHECK_FALSE(choose_backward(caps, p, dense_q, dense_k, dense_k, dense_q, {.texel_loads = true}, nullptr)->coopmat);
                    CHECK_FALSE(choose_backward(caps, p, dense_q, dense_k, dense_k, dense_q, {.fused_kernel = FusedKernel::tile}, nullptr)->coopmat);
                    CHECK_FALSE(choose_backward(caps, problem(1, 8, 8, nq, 4096, 128, 128), dense_q, dense_k, dense_k, dense_q, {}, nullptr)->coopmat);
                    Problem wide_backward = problem(1, 8, 8, nq, 4096, 160, 160, DType::f16);
                    wide_backward.k_dtype = wide_backward.v_dtype = DType::f16;
                    const auto dense_q160 = bhnd(8, nq, 160), dense_k160 = bhnd(8, 4096, 160);
                    std::optional<BackwardConfig> backward;
                    CHECK_NOTHROW(backward = choose_backward(caps, wide_backward, dense_q160, dense_k160, dense_k160, dense_q160, {}, nullptr));
                    CHECK((backward && !backward->coopmat));
                }
}

TEST_CASE("coopmat tuning: a layout every device runs, for head sizes up to 256", "[unit][tuning][coopmat]") {
    const std::int64_t dims[] = {1, 8, 36, 64, 100, 128, 200, 256};
    for (const vk::DeviceCaps& caps : all_devices())
        for (const std::int64_t dk : dims)
            for (const std::int64_t dv : dims) {
                const Problem p = problem(2, 8, 2, 300, 1000, dk, dv);
                const auto c = fused_for(caps, p, {.fused_kernel = FusedKernel::coopmat});
                INFO(caps.name << " Dk " << dk << " Dv " << dv);
                REQUIRE(c);
                REQUIRE(c->coopmat);
                const CoopmatLayout& t = *c->coopmat;
                INFO(c->describe());
                CHECK(t.keys % 16 == 0);
                CHECK(t.keys >= 16);
                CHECK(16 * t.dk_tiles >= dk);
                CHECK(16 * (t.dk_tiles - 1) < std::max<std::int64_t>(dk, 1));
                CHECK(t.column_tiles <= 8);  // O: at most 8 accumulators per subgroup
                CHECK(c->column_passes * c->columns_per_pass() >= dv);
                CHECK((c->column_passes - 1) * c->columns_per_pass() < dv);
                CHECK(c->rows_per_workgroup() == 16 * c->subgroups);
                CHECK(c->subgroups * c->subgroup <= caps.max_workgroup_invocations);
                CHECK(t.shared_bytes(c->subgroups) <= caps.max_shared_bytes);
                CHECK_FALSE(c->texel);  // the typed loaders read every storage type as words
                if (caps.max_loop_iterations > 0) CHECK(fused_keys_per_dispatch(caps, *c, p) >= t.keys);
            }
}

TEST_CASE("coopmat tuning: the default tile where shared memory allows, smaller where it does not",
          "[unit][tuning][coopmat]") {
    // 48 KiB and fp32 operands (the portable implementation) at D = 64: 64 rows × 32 keys.
    const vk::DeviceCaps nvidia = nvidia_like();
    const auto c = fused_for(nvidia, problem(1, 8, 8, 1024, 1024, 64, 64), {.fused_kernel = FusedKernel::coopmat});
    REQUIRE(c);
    CHECK(c->subgroups * 16 == c->rows_per_workgroup());
    CHECK(c->coopmat->shared_bytes(c->subgroups) <= 49152);
    // More shared memory never gives a smaller tile.
    const auto big = fused_for(nvidia_like(98304), problem(1, 8, 8, 1024, 1024, 64, 64), {.fused_kernel = FusedKernel::coopmat});
    REQUIRE(big);
    CHECK(big->rows_per_workgroup() * big->coopmat->keys >= c->rows_per_workgroup() * c->coopmat->keys);
    CHECK(big->rows_per_workgroup() == 64);
    CHECK(big->coopmat->keys == 64);
}

TEST_CASE("coopmat tuning: what it refuses, by name and limit", "[unit][tuning][coopmat]") {
    const vk::DeviceCaps caps = lavapipe_like();
    const Problem p = problem(1, 8, 8, 128, 128, 64, 64);
    auto refused = [&](const Problem& problem, const VariantOverrides& o) { return fused_refusal(caps, problem, o); };
    CHECK_THAT(refused(p, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 24}), Catch::StartsWith("variant.tile_rows"));
    CHECK_THAT(refused(p, {.fused_kernel = FusedKernel::coopmat, .tile_keys = 8}), Catch::StartsWith("variant.tile_keys"));
    CHECK_THAT(refused(p, {.fused_kernel = FusedKernel::coopmat, .tile_keys = 272}), Catch::StartsWith("variant.tile_keys"));
    // 64 rows of 512 fp32 dimensions are 131 KiB: no tile fits lavapipe's 32 KiB.
    CHECK_THAT(refused(problem(1, 8, 8, 128, 128, 512, 512), {.fused_kernel = FusedKernel::coopmat}),
               Catch::StartsWith("variant.fused_kernel") && Catch::Contains("shared memory"));
    // f16 and bf16 storage mixed is refused (one type of operands for all); bf16 alone takes bf16
    // operands portably, and on matrix units that take them, never f16's (which would overflow).
    Problem mixed = problem(1, 8, 8, 128, 128, 64, 64, DType::bf16);
    mixed.k_dtype = DType::f16;
    CHECK_THAT(refused(mixed, {.fused_kernel = FusedKernel::coopmat}),
               Catch::StartsWith("variant.fused_kernel") && Catch::Contains("f16 or bf16"));
    CHECK(refused(problem(1, 8, 8, 128, 128, 64, 64, DType::bf16), {.fused_kernel = FusedKernel::coopmat}) == "taken");
    CHECK(refused(p, {.fused_kernel = FusedKernel::coopmat, .tile_rows = 32, .tile_keys = 48}) == "taken");
}

TEST_CASE("coopmat tuning: on the matrix units, f16 operands in shared memory and the units' shaders", "[unit][tuning][coopmat]") {
    vk::DeviceCaps caps = nvidia_like();
    caps.matrix_units = true;
    // f16 operands: the 64 × 64 tile fits 48 KiB at D = 128 (44,040 bytes: GPU_KERNELS.md's count,
    // and 16 each for the placeholders of Q's and V's own tiles).
    const auto c = fused_for(caps, problem(1, 8, 8, 4096, 4096, 128, 128, DType::f16), {.fused_kernel = FusedKernel::coopmat});
    REQUIRE(c);
    REQUIRE(c->coopmat);
    CHECK(c->coopmat->units);
    CHECK(c->rows_per_workgroup() == 64);
    CHECK(c->coopmat->keys == 64);
    CHECK(c->coopmat->shared_bytes(c->subgroups) == 44072);
    CHECK_THAT(c->describe(), Catch::Contains(" units"));
    // The tile-ahead staging and 16-byte K/V loads up to 6 d-tiles and column tiles
    // (CoopmatLayout::staged_ahead), the variant says so; through the typed loaders (rows not of 8
    // f16 elements, or other types) up to 8 tiles in all (CoopmatLayout::ahead_with).
    CHECK_FALSE(c->coopmat->staged_ahead());
    CHECK_FALSE(c->coopmat->ahead);
    CHECK_THAT(c->describe(), !Catch::Contains(" ahead"));
    Problem f16_kv = problem(1, 8, 8, 4096, 4096, 96, 96, DType::f16);
    f16_kv.k_dtype = f16_kv.v_dtype = DType::f16;  // rows of 8 f16 elements: 16-byte loads
    const auto narrow = fused_for(caps, f16_kv, {.fused_kernel = FusedKernel::coopmat});
    CHECK(narrow->coopmat->staged_ahead());
    CHECK(narrow->coopmat->ahead);
    CHECK_THAT(narrow->describe(), Catch::Contains(" ahead units"));
    CHECK(narrow->coopmat->ahead_with(false) == false);
    struct Staging {
        int d;
        DType kv;
        bool ahead;
    };
    for (const Staging s : {Staging{92, DType::f16, false}, Staging{96, DType::q8_0, false}, Staging{64, DType::q8_0, true},
                            Staging{44, DType::f16, true}, Staging{72, DType::f16, true}, Staging{68, DType::f16, false}}) {
        Problem p = problem(1, 8, 8, 4096, 4096, s.d, s.d, DType::f16);
        p.k_dtype = p.v_dtype = s.kv;
        const auto staged = fused_for(caps, p, {.fused_kernel = FusedKernel::coopmat});
        INFO("D " << s.d << " " << to_string(s.kv));
        CHECK(staged->coopmat->ahead == s.ahead);
    }
    // O as named accumulators where d-tiles and column tiles number 15 at most
    // (CoopmatLayout::named_by_default): D 96, and Dk 128 with Dv 64 (and back), not D 120 or 128.
    CHECK_FALSE(c->coopmat->named);
    CHECK_THAT(c->describe(), !Catch::Contains(" named"));
    CHECK(narrow->coopmat->named);
    CHECK_THAT(narrow->describe(), Catch::Contains(" named ahead units"));
    struct Heads {
        int dk, dv;
        bool named;
    };
    for (const Heads h : {Heads{128, 64, true}, Heads{64, 128, true}, Heads{112, 112, true}, Heads{120, 120, false}}) {
        const auto n = fused_for(caps, problem(1, 8, 8, 4096, 4096, h.dk, h.dv, DType::f16), {.fused_kernel = FusedKernel::coopmat});
        CHECK(n->coopmat->named == h.named);
    }
    // Forced: the array anywhere; named past the rule refused on the units, by name.
    const auto array = fused_for(caps, problem(1, 8, 8, 4096, 4096, 64, 64, DType::f16),
                                 {.fused_kernel = FusedKernel::coopmat, .named_accumulators = false});
    CHECK_FALSE(array->coopmat->named);
    CHECK_THAT(array->describe(), !Catch::Contains(" named"));
    try {
        (void)fused_for(caps, problem(1, 8, 8, 4096, 4096, 128, 128, DType::f16),
                        {.fused_kernel = FusedKernel::coopmat, .named_accumulators = true});
        FAIL("named O at D = 128 on the units was taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.named_accumulators");
        CHECK_THAT(e.what(), Catch::Contains("15 of them at most") && Catch::Contains("Dk = 128"));
    }
    // Heads past 128 are refused there (wrong on NVIDIA's driver), by name; unforced they take the
    // tile kernel.
    try {
        (void)fused_for(caps, problem(1, 8, 8, 4096, 4096, 256, 256, DType::f16), {.fused_kernel = FusedKernel::coopmat});
        FAIL("D = 256 on the units was taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.fused_kernel");
        CHECK_THAT(e.what(), Catch::Contains("up to 128") && Catch::Contains("Dk = 256"));
    }
    // With Q forced into its own tile (the form that validated at D 128 where held Q failed) they
    // are taken, for a GPU session to validate: named O in column passes of 128, 32 × 32 tiles
    // (40,984 bytes of the units' 48 KiB).
    {
        Problem q_shared = problem(1, 8, 8, 4096, 4096, 256, 256, DType::f16);
        q_shared.k_dtype = q_shared.v_dtype = DType::f16;
        const auto taken = fused_for(caps, q_shared, {.fused_kernel = FusedKernel::coopmat, .q_in_shared = true});
        REQUIRE(taken);
        REQUIRE(taken->coopmat);
        CHECK(taken->coopmat->q_in_shared);
        CHECK(taken->coopmat->named);
        CHECK(taken->column_passes == 2);
        CHECK(taken->coopmat->shared_bytes(taken->subgroups) <= caps.max_shared_bytes);
        CHECK(taken->coopmat->keys == 32);  // 32 × 32 tiles: Q's and K/V's 264-element rows fill 48 KiB
        CHECK(taken->subgroups == 2);
        // Two row tiles read Q so too; Q forced held is refused.
        const auto two = fused_for(caps, q_shared, {.fused_kernel = FusedKernel::coopmat, .row_tiles = 2});
        REQUIRE(two);
        CHECK(two->coopmat->q_in_shared);
        try {
            (void)fused_for(caps, q_shared, {.fused_kernel = FusedKernel::coopmat, .q_in_shared = false});
            FAIL("D = 256 with Q held taken on the units");
        } catch (const InvalidArgument& e) {
            CHECK(e.argument() == "variant.fused_kernel");
            CHECK_THAT(e.what(), Catch::Contains("up to 128") && Catch::Contains("held"));
        }
        caps.matrix_units = false;  // (and portably, as always)
        const auto portable = fused_for(caps, q_shared, {.fused_kernel = FusedKernel::coopmat, .q_in_shared = true});
        REQUIRE(portable);
        CHECK(portable->coopmat);
        caps.matrix_units = true;
    }
    // The backward's, forced, alike.
    try {
        const auto q256 = bhnd(8, 4096, 256);
        (void)choose_backward(caps, problem(1, 8, 8, 4096, 4096, 256, 256, DType::f16), q256, q256, q256, q256,
                              {.fused_kernel = FusedKernel::coopmat}, nullptr);
        FAIL("the backward at D = 256 on the units was taken");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.fused_kernel");
        CHECK_THAT(e.what(), Catch::Contains("backward") && Catch::Contains("up to 128"));
    }
    caps.maximal_reconvergence = true;
    Problem d256 = problem(1, 8, 8, 4096, 4096, 256, 256, DType::f16);
    d256.k_dtype = d256.v_dtype = DType::f16;
    const auto unforced = fused_for(caps, d256, {});
    REQUIRE(unforced);
    CHECK_FALSE(unforced->coopmat);
    CHECK(unforced->tile);
    caps.maximal_reconvergence = false;
    // The GEMM ceiling's products run there too.
    const BmmConfig gemm = choose_gemm(caps, 4096, 4096, 4096, {.gemm_kernel = GemmKernel::coopmat});
    CHECK(gemm.units);
    // 4 × 4 accumulators per subgroup (128 × 128 per workgroup), 32-deep slices of f16 in two
    // buffers (test_gemm_shape.cpp has the shapes' counts).
    CHECK(gemm.coopmat_shape == GemmShape{2, 2, 4, 4, 32, 2, true});
    CHECK(gemm.block_rows() == 128);
    CHECK(gemm.shared_bytes() == 40976);
    caps.matrix_units = false;
    CHECK_FALSE(fused_for(caps, problem(1, 8, 8, 4096, 4096, 128, 128, DType::f16), {.fused_kernel = FusedKernel::coopmat})->coopmat->units);
    CHECK_FALSE(choose_gemm(caps, 4096, 4096, 4096, {.gemm_kernel = GemmKernel::coopmat}).units);
}

TEST_CASE("coopmat tuning: the backward's layout on every device, forced for f32 storage", "[unit][tuning][coopmat][backward]") {
    const std::int64_t dims[] = {1, 24, 64, 100, 128, 256};
    for (const vk::DeviceCaps& caps : all_devices())
        for (const std::int64_t dk : dims)
            for (const std::int64_t dv : dims) {
                const Problem p = problem(2, 8, 2, 300, 1000, dk, dv);
                const auto dense_q = bhnd(p.Hq, p.Nq, p.Dk), dense_k = bhnd(p.Hkv, p.Nkv, p.Dk), dense_v = bhnd(p.Hkv, p.Nkv, p.Dv);
                const auto dense_o = bhnd(p.Hq, p.Nq, p.Dv);
                INFO(caps.name << " Dk " << dk << " Dv " << dv);
                CHECK_FALSE(choose_backward(caps, p, dense_q, dense_k, dense_v, dense_o, {}, nullptr)->coopmat);
                const auto c = choose_backward(caps, p, dense_q, dense_k, dense_v, dense_o, {.fused_kernel = FusedKernel::coopmat}, nullptr);
                REQUIRE(c);
                REQUIRE(c->coopmat);
                const CoopmatBackwardLayout& t = *c->coopmat;
                INFO(c->describe());
                CHECK(t.tile % 16 == 0);
                CHECK(c->q_rows == 16);
                CHECK(c->kv_keys == 16);
                CHECK(t.shared_bytes(c->subgroups) <= caps.max_shared_bytes);
                CHECK(c->subgroups * c->subgroup <= caps.max_workgroup_invocations);
                CHECK(c->column_passes * c->columns_per_pass() >= std::max(dk, dv));
                CHECK((c->column_passes - 1) * c->columns_per_pass() < std::max(dk, dv));
                CHECK(t.units == caps.matrix_units);
                if (caps.max_loop_iterations > 0) {
                    CHECK(backward_keys_limit(caps, *c, p) >= t.tile);
                    CHECK(backward_queries_limit(caps, *c, p) >= t.tile);
                }
            }
    // bf16 storage: bf16 operands portably and on units that take them; refused by name on units
    // that do not.
    Problem bf = problem(1, 2, 2, 16, 16, 64, 64, DType::bf16);
    bf.k_dtype = bf.v_dtype = DType::bf16;
    const auto strides = bhnd(2, 16, 64);
    const auto portable = choose_backward(lavapipe_like(), bf, strides, strides, strides, strides, {.fused_kernel = FusedKernel::coopmat}, nullptr);
    REQUIRE(portable);
    REQUIRE(portable->coopmat);
    CHECK(portable->coopmat->operands == DType::bf16);
    vk::DeviceCaps units = nvidia_like();
    units.matrix_units = units.maximal_reconvergence = true;
    try {
        (void)choose_backward(units, bf, strides, strides, strides, strides, {.fused_kernel = FusedKernel::coopmat}, nullptr);
        FAIL("bf16 taken on units without bf16");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "variant.fused_kernel");
        CHECK_THAT(e.what(), Catch::Contains("bf16_matrix_units_off"));
    }
    units.bf16_matrix_units = true;
    const auto unforced = choose_backward(units, bf, strides, strides, strides, strides, {}, nullptr);
    REQUIRE(unforced);
    CHECK_FALSE(unforced->coopmat);  // as the forward's (coopmat_by_default: f16 alone)
    const auto on_units = choose_backward(units, bf, strides, strides, strides, strides, {.fused_kernel = FusedKernel::coopmat}, nullptr);
    REQUIRE(on_units);
    REQUIRE(on_units->coopmat);
    CHECK(on_units->coopmat->operands == DType::bf16);
    CHECK(on_units->coopmat->units);
}

TEST_CASE("coopmat tuning: the backward's shared memory on the units, term by term", "[unit][tuning][coopmat][backward]") {
    vk::DeviceCaps units = nvidia_like();
    units.matrix_units = units.maximal_reconvergence = true;
    // The dK/dV kernel's declarations (flash_bwd_kv_coopmat.comp): the Q/dO tile [max(tile, 64)][D + 8]
    // f16, per subgroup two fp32 tiles [16][tile + 4] and two f16 tiles [16][tile + 8], and the query
    // tile's lse, Δ, first and limit (16 bytes a query). 64-wide tiles would need 71,680 bytes at
    // D 128 and 63,488 at D 64 on 4 subgroups, so 48 KiB takes 32-wide ones at both.
    for (const auto& [d, tile, bytes] : {std::tuple<std::int64_t, std::uint32_t, std::uint32_t>{128, 32, 17408 + 28672 + 512},
                                         std::tuple<std::int64_t, std::uint32_t, std::uint32_t>{64, 32, 9216 + 28672 + 512}}) {
        Problem p = problem(1, 32, 32, 4096, 4096, d, d, DType::f16);
        p.k_dtype = p.v_dtype = DType::f16;
        std::uint32_t subgroups = 4;
        INFO("D " << d);
        const CoopmatBackwardLayout t = choose_coopmat_backward(units, 32, subgroups, p);
        CHECK(subgroups == 4);
        CHECK(t.tile == tile);
        CHECK(t.shared_bytes(subgroups) == bytes);
    }
}

TEST_CASE("coopmat tuning: units whose tile is in parts run the kernels at its width of lanes", "[unit][tuning][coopmat]") {
    // Intel's Arc lists 8 x 8 x 16 (DPAS 8 lanes wide), Xe2 8 x 16 x 16: the kernels then require
    // subgroups of the tile's N where the device lets a pipeline require a size.
    for (const std::uint32_t n : {8u, 16u}) {
        vk::DeviceCaps caps = intel_like();
        caps.matrix_units = true;
        caps.matrix_tile = {8, n};
        Problem p = problem(1, 8, 8, 300, 300, 64, 64, DType::f16);
        p.k_dtype = p.v_dtype = DType::f16;
        caps.maximal_reconvergence = true;
        CHECK_FALSE(coopmat_by_default(caps, p));  // forced or tuned until an Intel GPU validates them
        const auto c = fused_for(caps, p, {.fused_kernel = FusedKernel::coopmat});
        INFO("N " << n);
        REQUIRE(c);
        CHECK(c->subgroup == n);
        CHECK(c->require_subgroup);
        const BmmConfig g = choose_gemm(caps, 256, 256, 256, {.gemm_kernel = GemmKernel::coopmat});
        CHECK(g.subgroup == n);
        CHECK(g.require_subgroup);
        // bf16 operands take the whole-matrix bf16 build (where the units list a 16 x 16 x 16 bf16
        // shape), so the engine's choice (32 lanes here); 16 x 16 tiles alike.
        caps.bf16_matrix_units = true;
        Problem bf = problem(1, 8, 8, 300, 300, 64, 64, DType::bf16);
        bf.k_dtype = bf.v_dtype = DType::bf16;
        CHECK(fused_for(caps, bf, {.fused_kernel = FusedKernel::coopmat})->subgroup == 32);
        caps.matrix_tile = {16, 16};
        CHECK(fused_for(caps, p, {.fused_kernel = FusedKernel::coopmat})->subgroup == 32);
        CHECK(coopmat_by_default(caps, p));
    }
}
