// One matrix product dispatched directly with a given BmmConfig (bmm.comp, bmm_tile.comp,
// bmm_coopmat.comp share its contract) and checked against a double-precision product of the
// operands' stored values: the kernel tests' common check (test_bmm_tile.cpp, test_bmm_coopmat.cpp).
#pragma once

#include "support/catch.hpp"

#include <cmath>
#include <random>
#include <vector>

#include "attention/kernels.hpp"
#include "attention/params.hpp"
#include "attention/tuning.hpp"
#include "plan/program.hpp"
#include "runtime.hpp"
#include "submit/batch_state.hpp"
#include "support/expect_case.hpp"
#include "tensor/storage.hpp"
#include "vkattn/testing/rounded_operands.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::test {

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
inline std::array<std::int64_t, 4> a_shape(const Product& p) {
    return p.form == detail::BmmForm::at_b ? std::array{p.B, p.H, p.K, p.M} : std::array{p.B, p.H, p.M, p.K};
}
inline std::array<std::int64_t, 4> b_shape(const Product& p) {
    return p.form == detail::BmmForm::a_bt ? std::array{p.B, p.H / p.group, p.N, p.K}
                                           : std::array{p.B, p.H / p.group, p.K, p.N};
}

inline detail::TensorDesc dense_desc(const std::array<std::int64_t, 4>& s) {
    detail::TensorDesc d;
    d.stride = {static_cast<std::uint32_t>(s[1] * s[2] * s[3]), static_cast<std::uint32_t>(s[2] * s[3]),
                static_cast<std::uint32_t>(s[3]), 1};
    return d;
}

// Runs the product with `config` and checks every element of C: computed rows against the
// reference, the rest of C still its poison. The cooperative-matrix products round their operands
// to f16, or bf16 where A or B is stored as bf16 (after an fp8 operand's scale): the reference
// rounds them alike, so that only the fp32
// accumulation differs; they load 16 bytes at a time where the operands allow
// (coopmat_wide_operands). Returns the configuration that ran.
inline detail::BmmConfig check_product(detail::BmmConfig config, const Product& p) {
    Context& ctx = gpu_context();
    detail::Runtime& runtime = detail::ContextAccess::runtime(ctx);
    const unsigned seed = fresh_seed();
    INFO("seed " << seed << " form " << static_cast<int>(p.form) << " M=" << p.M << " N=" << p.N
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
    config.coopmat_wide = detail::coopmat_wide_operands(config, p.form, p.a, p.b, params.a, params.b, p.N, p.K);
    INFO(config.describe());
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
    const DType product_type = !config.coopmat ? DType::f32 : p.a == DType::bf16 || p.b == DType::bf16 ? DType::bf16 : DType::f16;
    auto operand = [&](float value) { return product_type == DType::f32 ? value : testing::round_to(product_type, value); };
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
                        const double x = operand(p.form == detail::BmmForm::at_b ? a.at(bi, h, k, m) : a.at(bi, h, m, k));
                        const double y = operand(static_cast<float>(b_scale) *
                                                 (p.form == detail::BmmForm::a_bt ? b.at(bi, hb, n, k) : b.at(bi, hb, k, n)));
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
    return config;
}

}  // namespace vkattn::test
