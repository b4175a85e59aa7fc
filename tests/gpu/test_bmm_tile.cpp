// bmm_tile.comp, the GPUs' matrix products, dispatched directly with each layout the tuning can
// give it (128×128 and 64×64 tiles) in each form (A·Bᵀ, A·B, Aᵀ·B), against a double-precision
// product of the operands' stored values: sizes off every tile and slice, GQA heads, a chunk of rows,
// every addend, the operand types the engine feeds it and every output type. The paths that use it
// (three stages, backward, projections) are tested forced in their own files.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "attention/kernels.hpp"
#include "attention/params.hpp"
#include "attention/tuning.hpp"
#include "plan/program.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "support/expect_case.hpp"
#include "tensor/storage.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::test;

namespace {

struct Product {
    detail::BmmForm form = detail::BmmForm::a_bt;
    std::int64_t B = 1, H = 1, group = 1, M = 1, N = 1, K = 1;
    DType a = DType::f32, b = DType::f32, out = DType::f32;
    detail::BmmAdd add = detail::BmmAdd::none;
    std::int64_t first_row = 0, rows = -1;  // the chunk of rows computed (-1: to M)
    float alpha = 1.0f;
};

// The tensors' shapes: A [B, H, M, K] (Aᵀ·B: [B, H, K, M]); B [B, H/group, N, K] (A·Bᵀ) or
// [B, H/group, K, N]; C and R [B, H, M, N].
std::array<std::int64_t, 4> a_shape(const Product& p) {
    return p.form == detail::BmmForm::at_b ? std::array{p.B, p.H, p.K, p.M} : std::array{p.B, p.H, p.M, p.K};
}
std::array<std::int64_t, 4> b_shape(const Product& p) {
    return p.form == detail::BmmForm::a_bt ? std::array{p.B, p.H / p.group, p.N, p.K}
                                           : std::array{p.B, p.H / p.group, p.K, p.N};
}

detail::TensorDesc dense_desc(const std::array<std::int64_t, 4>& s) {
    detail::TensorDesc d;
    d.stride = {static_cast<std::uint32_t>(s[1] * s[2] * s[3]), static_cast<std::uint32_t>(s[2] * s[3]),
                static_cast<std::uint32_t>(s[3]), 1};
    return d;
}

// Runs the product with `config` and checks every element of C: computed rows against the
// reference, the rest of C still its poison.
void check_product(const detail::BmmConfig& config, const Product& p) {
    Context& ctx = gpu_context();
    detail::Runtime& runtime = detail::ContextAccess::runtime(ctx);
    const unsigned seed = fresh_seed();
    INFO("seed " << seed << " " << config.describe() << " form " << static_cast<int>(p.form) << " M=" << p.M << " N=" << p.N
                 << " K=" << p.K << " a=" << to_string(p.a) << " b=" << to_string(p.b) << " out=" << to_string(p.out)
                 << " add=" << static_cast<int>(p.add) << " rows " << p.first_row << "+" << p.rows);
    std::mt19937 rng(seed);
    const std::array c_shape{p.B, p.H, p.M, p.N};
    const std::int64_t Hb = p.H / p.group;
    const std::vector<float> scales{0.5f, 2.0f, 0.25f, 4.0f};  // fp8 B: head hb's scale
    const testing::HostTensor a = testing::random_tensor(rng, p.a, Layout::bhnd, a_shape(p));
    const testing::HostTensor b = testing::random_tensor(rng, p.b, Layout::bhnd, b_shape(p), 1.0f,
                                                         std::span(scales).first(static_cast<std::size_t>(Hb)));
    const std::vector<float> addend = testing::random_values(rng, p.add == detail::BmmAdd::residual ? p.B * p.H * p.M * p.N : p.N, 1.0f);
    const DeviceTensor da = DeviceTensor::from_host(ctx, a.view()), db = DeviceTensor::from_host(ctx, b.view());
    const testing::HostTensor poison = testing::nan_tensor(p.out, Layout::bhnd, c_shape);
    const DeviceTensor dc = DeviceTensor::from_host(ctx, poison.view());
    const DeviceTensor dadd = DeviceTensor::from_host(
        ctx, make_view<const void*>(addend.data(), DType::f32, Layout::bhnd, {1, 1, 1, static_cast<std::int64_t>(addend.size())}));
    const DeviceTensor dscales = DeviceTensor::from_host(ctx, make_view<const void*>(scales.data(), DType::f32, Layout::bhnd, {1, 1, 1, 4}));

    const std::int64_t rows = p.rows < 0 ? p.M - p.first_row : p.rows;
    detail::BmmParams params{.chunk = {.first_unit = 0, .first_row = static_cast<std::uint32_t>(p.first_row),
                                       .rows = static_cast<std::uint32_t>(rows)},
                             .M = static_cast<std::uint32_t>(p.M),
                             .N = static_cast<std::uint32_t>(p.N),
                             .K = static_cast<std::uint32_t>(p.K),
                             .alpha = p.alpha,
                             .heads = static_cast<std::uint32_t>(p.H),
                             .group = static_cast<std::uint32_t>(p.group),
                             .b_scale_at = 0};
    params.a = dense_desc(a_shape(p));
    params.b = dense_desc(b_shape(p));
    params.c = params.residual = dense_desc(c_shape);
    auto buffer = [](const DeviceTensor& t) -> const vk::Buffer& { return detail::TensorAccess::storage(t)->buffer; };
    auto whole = [&](int slot, const DeviceTensor& t) {
        return detail::Binding{static_cast<std::uint32_t>(slot), &buffer(t), t.offset_bytes(), buffer(t).size() - t.offset_bytes()};
    };
    const vk::Kernel& kernel = detail::bmm_kernel(runtime, config, p.form, p.a, p.b, p.out, p.add);
    detail::Dispatch d{.kernel = &kernel, .params = params};
    d.bindings = {whole(1, da), whole(2, db), whole(3, dc), whole(4, dadd), whole(5, dscales)};
    d.groups = {static_cast<std::uint32_t>((p.N + config.block_cols() - 1) / config.block_cols()),
                static_cast<std::uint32_t>((rows + config.block_rows() - 1) / config.block_rows()),
                static_cast<std::uint32_t>(p.B * p.H)};
    detail::Program program(runtime);
    program.dispatch(d);
    Batch batch = detail::BatchAccess::make(runtime);
    program.replay(detail::BatchAccess::state(batch).begin_op());
    batch.submit().wait();
    CHECK(take_validation_messages(ctx).empty());

    testing::HostTensor got = testing::nan_tensor(p.out, Layout::bhnd, c_shape);
    dc.download(got.mutable_view());
    const double tolerance = p.out == DType::f32 ? 1e-5 : p.out == DType::f16 ? 2e-3 : 1e-2;
    std::int64_t wrong = 0;
    for (std::int64_t bi = 0; bi < p.B; ++bi)
        for (std::int64_t h = 0; h < p.H; ++h)
            for (std::int64_t m = 0; m < p.M; ++m)
                for (std::int64_t n = 0; n < p.N; ++n) {
                    const float value = got.at(bi, h, m, n);
                    if (m < p.first_row || m >= p.first_row + rows) {  // outside the chunk: untouched
                        wrong += std::isnan(value) ? 0 : 1;
                        continue;
                    }
                    const std::int64_t hb = h / p.group;
                    const double b_scale = is_fp8(p.b) ? scales[static_cast<std::size_t>(hb)] : 1.0;
                    double ref = 0, magnitude = 0;
                    for (std::int64_t k = 0; k < p.K; ++k) {
                        const double x = p.form == detail::BmmForm::at_b ? a.at(bi, h, k, m) : a.at(bi, h, m, k);
                        const double y = b_scale * (p.form == detail::BmmForm::a_bt ? b.at(bi, hb, n, k) : b.at(bi, hb, k, n));
                        ref += x * y;
                        magnitude += std::abs(x * y);
                    }
                    ref *= p.alpha;
                    if (p.add == detail::BmmAdd::bias) ref += addend[static_cast<std::size_t>(n)];
                    if (p.add == detail::BmmAdd::residual) ref += addend[static_cast<std::size_t>(((bi * p.H + h) * p.M + m) * p.N + n)];
                    const double bound = tolerance * std::max(1.0, p.alpha * magnitude + 1.0);
                    if (!(std::abs(value - ref) <= bound) && wrong++ < 5)
                        UNSCOPED_INFO("C[" << bi << "," << h << "," << m << "," << n << "] = " << value << ", want " << ref);
                }
    CHECK(wrong == 0);
}

// The tuning's tile configuration for a device with `invocations` per workgroup: 16×16 or 8×8.
detail::BmmConfig gemm_tile_config(std::uint32_t invocations) {
    vk::DeviceCaps caps = detail::ContextAccess::runtime(gpu_context()).device().caps();
    caps.kind = vk::DeviceKind::discrete;
    caps.max_workgroup_invocations = std::min(caps.max_workgroup_invocations, invocations);
    const detail::BmmConfig c = detail::choose_gemm(caps, 1, 1, 1, {.gemm_kernel = GemmKernel::tile});
    REQUIRE(c.tile);
    return c;
}

}  // namespace

TEST_CASE("bmm tile: every form at sizes off the tiles and slices, both layouts", "[gpu][bmm][tile]") {
    const std::uint32_t invocations = GENERATE(256u, 64u);
    const detail::BmmConfig config = gemm_tile_config(invocations);
    CHECK(config.block_rows() == (invocations >= 256 ? 128u : 64u));
    const detail::BmmForm form = GENERATE(detail::BmmForm::a_bt, detail::BmmForm::a_b, detail::BmmForm::at_b);
    // Several tiles each way with ragged edges, K a few slices and a part; then one element.
    check_product(config, {.form = form, .B = 1, .H = 2, .M = 150, .N = 133, .K = 21});
    check_product(config, {.form = form, .M = 1, .N = 1, .K = 1});
}

TEST_CASE("bmm tile: GQA heads, a chunk of rows, alpha and the addends", "[gpu][bmm][tile]") {
    const detail::BmmConfig config = gemm_tile_config(256);
    check_product(config, {.form = detail::BmmForm::a_bt, .B = 2, .H = 4, .group = 2, .M = 37, .N = 70, .K = 40,
                           .first_row = 5, .rows = 20, .alpha = 0.125f});
    check_product(config, {.form = detail::BmmForm::a_bt, .M = 70, .N = 33, .K = 9, .add = detail::BmmAdd::bias});
    check_product(config, {.form = detail::BmmForm::a_b, .H = 2, .M = 45, .N = 12, .K = 130, .add = detail::BmmAdd::residual});
    check_product(config, {.form = detail::BmmForm::at_b, .H = 2, .M = 131, .N = 20, .K = 17, .first_row = 64, .rows = 67});
}

TEST_CASE("bmm tile: the operand and output types the engine feeds it", "[gpu][bmm][tile]") {
    const detail::BmmConfig config = gemm_tile_config(256);
    // Scores: Q (f16, bf16) times K of any storage type, rows of 64 (block types need 32s).
    for (const DType k : {DType::f16, DType::bf16, DType::q8_0, DType::q4_1, DType::iq4_nl, DType::fp8_e4m3})
        check_product(config, {.form = detail::BmmForm::a_bt, .H = 2, .group = 2, .M = 19, .N = 35, .K = 64,
                               .a = k == DType::bf16 ? DType::bf16 : DType::f16, .b = k});
    // Outputs: P (f32) times V of a block type and fp8, into f16 and bf16.
    check_product(config, {.form = detail::BmmForm::a_b, .M = 30, .N = 64, .K = 27, .b = DType::q5_0, .out = DType::f16});
    check_product(config, {.form = detail::BmmForm::a_b, .M = 30, .N = 32, .K = 27, .b = DType::fp8_e5m2, .out = DType::bf16});
    // The 64x64 layout (devices of fewer invocations) on a block type and fp8, into f16, a chunk.
    check_product(gemm_tile_config(64), {.form = detail::BmmForm::a_bt, .H = 2, .M = 70, .N = 67, .K = 96, .a = DType::f16,
                                         .b = DType::q4_0, .out = DType::f16, .first_row = 3, .rows = 66});
    check_product(gemm_tile_config(64), {.form = detail::BmmForm::a_b, .M = 65, .N = 64, .K = 50, .b = DType::fp8_e4m3,
                                         .add = detail::BmmAdd::bias});
    // Odd f16 rows (no two-word loads).
    check_product(config, {.form = detail::BmmForm::a_bt, .M = 9, .N = 11, .K = 7, .a = DType::f16, .b = DType::f16});
    check_product(config, {.form = detail::BmmForm::at_b, .M = 9, .N = 11, .K = 7, .a = DType::f16, .b = DType::f16});
}
