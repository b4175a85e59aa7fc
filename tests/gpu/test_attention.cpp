// The three-stage path against the CPU reference: awkward shapes, every mask kind and combination,
// cross-attention, GQA/MQA, both layouts, every kernel variant, fp32 and fp16 storage.
#include "support/catch.hpp"

#include <string>

#include "runtime.hpp"
#include "support/expect_case.hpp"

using namespace vkattn;
using namespace vkattn::test;
using namespace vkattn::testing;

TEST_CASE("unfused: sequence lengths x head dims", "[gpu][unfused]") {
    const std::int64_t n = GENERATE(1, 7, 63, 64, 65, 257, 1000);
    const std::int64_t d = GENERATE(1, 8, 24, 28, 64, 80, 128, 256);
    Case c;
    c.B = 1;
    c.Hq = c.Hkv = n >= 1000 ? 1 : 2;
    c.Nq = c.Nkv = n;
    c.Dk = c.Dv = d;
    expect_pass(c);
}

TEST_CASE("unfused: cross-attention with Dk != Dv", "[gpu][unfused]") {
    const auto [nq, nkv] = GENERATE(std::pair<std::int64_t, std::int64_t>{2, 5}, std::pair{5, 2},
                                    std::pair{1, 203}, std::pair{113, 7}, std::pair{65, 257});
    const auto [dk, dv] = GENERATE(std::pair<std::int64_t, std::int64_t>{24, 28}, std::pair{59, 111},
                                   std::pair{64, 32});
    Case c;
    c.B = 2;
    c.Hq = c.Hkv = 3;
    c.Nq = nq;
    c.Nkv = nkv;
    c.Dk = dk;
    c.Dv = dv;
    expect_pass(c);
}

TEST_CASE("unfused: grouped-query and multi-query attention", "[gpu][unfused]") {
    const auto [hq, hkv] = GENERATE(std::pair<std::int64_t, std::int64_t>{12, 2}, std::pair{8, 1},
                                    std::pair{16, 4}, std::pair{4, 4});
    const Layout layout = GENERATE(Layout::bhnd, Layout::bnhd);
    Case c;
    c.B = 2;
    c.Hq = hq;
    c.Hkv = hkv;
    c.Nq = 26;
    c.Nkv = 61;
    c.Dk = c.Dv = 8;
    c.layout = layout;
    expect_pass(c);
}

TEST_CASE("unfused: every mask kind and combination", "[gpu][unfused][mask]") {
    const Causal causal = GENERATE(Causal::none, Causal::top_left, Causal::bottom_right);
    const bool lengths = GENERATE(false, true);
    const int bool_form = GENERATE(0, 1, 2, 3);   // none, [Nq,Nkv], [B,1,1,Nkv], [B,Hq,Nq,Nkv]
    const int float_form = GENERATE(0, 1, 2);     // none, [Nkv], [1,Hq,Nq,Nkv]
    const auto [nq, nkv] = GENERATE(std::pair<std::int64_t, std::int64_t>{7, 13}, std::pair{13, 7});
    Case c;
    c.B = 3;
    c.Hq = 4;
    c.Hkv = 2;
    c.Nq = nq;
    c.Nkv = nkv;
    c.Dk = 24;
    c.Dv = 28;
    c.causal = causal;
    c.kv_lengths = lengths;
    if (bool_form == 1) c.bool_mask_shape = std::vector<std::int64_t>{nq, nkv};
    if (bool_form == 2) c.bool_mask_shape = std::vector<std::int64_t>{3, 1, 1, nkv};
    if (bool_form == 3) c.bool_mask_shape = std::vector<std::int64_t>{3, 4, nq, nkv};
    if (float_form == 1) c.float_mask_shape = std::vector<std::int64_t>{nkv};
    if (float_form == 2) c.float_mask_shape = std::vector<std::int64_t>{1, 4, nq, nkv};
    expect_pass(c);
}

TEST_CASE("unfused: every kernel variant in both dtypes", "[gpu][unfused][variants]") {
    const bool texel = GENERATE(false, true);
    const bool shared = GENERATE(false, true);
    const bool subgroup = GENERATE(false, true);
    const DType dtype = GENERATE(DType::f32, DType::f16);
    // Stage 3 reads rows of P, Nkv scores long: texel loads there need Nkv % 4 == 0 (68, 132; no
    // multiple of a tile), and Nkv = 69 shows the fallback to scalar loads. Every D is 4-aligned.
    const auto [nq, nkv, d] = GENERATE(std::tuple<std::int64_t, std::int64_t, std::int64_t>{65, 69, 64},
                                       std::tuple{63, 68, 28}, std::tuple{130, 132, 80});
    Case c;
    c.B = 2;
    c.Hq = 4;
    c.Hkv = 2;
    c.Nq = nq;
    c.Nkv = nkv;
    c.Dk = d;
    c.Dv = d;
    c.dtype = dtype;
    c.causal = Causal::bottom_right;
    c.variant = {.texel_loads = texel, .shared_tiles = shared, .subgroup_ops = subgroup};
    const AttentionReport report = expect_pass(c);
    // What was asked for ran (UnfusedConfig::describe()), where the device has it.
    const auto& caps = detail::ContextAccess::runtime(gpu_context()).device().caps();
    const bool texel_format = dtype == DType::f32 ? caps.texel_rgba32f : caps.texel_rgba16f;
    const std::string tiles = shared ? "/shared" : "/regs";
    const bool scores_texel = texel && texel_format;
    const bool output_texel = scores_texel && caps.texel_rgba32f && nkv % 4 == 0;  // P is fp32
    CHECK_THAT(report.variant, Catch::Contains("scores[" + std::string(scores_texel ? "texel" : "words") + tiles));
    CHECK_THAT(report.variant, Catch::Contains("output[" + std::string(output_texel ? "texel" : "words") + tiles));
    CHECK_THAT(report.variant, Catch::Contains(subgroup && caps.subgroup_arithmetic ? "softmax[subgroup]"
                                                                                    : "softmax[shared-tree]"));
}

TEST_CASE("unfused: bmm_tile.comp's products forced, with masks, GQA and every storage", "[gpu][unfused][variants]") {
    // The GPUs' products on any device: 128x128 tiles over shapes that fill none, both stages.
    const DType dtype = GENERATE(DType::f32, DType::f16, DType::bf16);
    const auto [nq, nkv, dk, dv] = GENERATE(std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>{65, 69, 64, 40},
                                            std::tuple{130, 140, 8, 72});
    Case c;
    c.B = 2;
    c.Hq = 4;
    c.Hkv = 2;
    c.Nq = nq;
    c.Nkv = nkv;
    c.Dk = dk;
    c.Dv = dv;
    c.dtype = dtype;
    c.causal = Causal::bottom_right;
    c.kv_lengths = true;
    c.float_mask_shape = std::vector<std::int64_t>{1, 4, nq, nkv};
    c.impl = Impl::unfused;
    c.layout = nq == 65 ? Layout::bhnd : Layout::bnhd;  // interleaved heads: row strides past the row
    c.variant = {.gemm_kernel = GemmKernel::tile};
    const AttentionReport report = expect_pass(c);
    CHECK_THAT(report.variant, Catch::Contains("scores[tile ") && Catch::Contains("output[tile "));
}

TEST_CASE("unfused: scores of magnitude 1e4 stay finite and exact", "[gpu][unfused][numerics]") {
    Case c;
    c.B = 1;
    c.Hq = c.Hkv = 2;
    c.Nq = 33;
    c.Nkv = 47;
    c.Dk = c.Dv = 16;
    c.amplitude = 100.0f;  // |q·k|·scale up to ~1e4
    c.scale = 1.0;
    c.causal = Causal::top_left;
    expect_pass(c);
}

TEST_CASE("unfused: bnhd layout with batch 4 and 16 heads", "[gpu][unfused]") {
    Case c;
    c.B = 4;
    c.Hq = 16;
    c.Hkv = 16;
    c.Nq = 31;
    c.Nkv = 40;
    c.Dk = c.Dv = 32;
    c.layout = Layout::bnhd;
    c.kv_lengths = true;
    expect_pass(c);
}
