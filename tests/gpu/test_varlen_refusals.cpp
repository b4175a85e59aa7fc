// Variable-length batches (DeviceVarlen): what is refused, and how a KV cache's packed appends
// check their offsets. Each refusal names the argument; nothing is run or half-written.
#include "support/catch.hpp"

#include <string>
#include <vector>

#include "support/gpu_context.hpp"
#include "support/varlen_support.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/testing/random.hpp"
#include "vkattn/vkattn.hpp"

using namespace vkattn;
using namespace vkattn::testing;
using vkattn::test::cu_tensor;

TEST_CASE("varlen: bad offsets, shapes and options name the argument", "[gpu][varlen]") {
    Context& ctx = test::gpu_context();
    const DeviceTensor q = DeviceTensor::empty(ctx, DType::f32, {1, 2, 10, 8}, Layout::bnhd);
    const DeviceTensor o = DeviceTensor::empty(ctx, DType::f32, {1, 2, 10, 8}, Layout::bnhd);
    const DeviceTensor cu = cu_tensor(ctx, {0, 4, 10});
    auto argument = [&](DeviceAttentionInputs in, DeviceAttentionOutputs out, AttentionOptions options = {}) {
        try {
            AttentionPlan plan(ctx, in, out, options);
        } catch (const InvalidArgument& e) {
            return e.argument();
        }
        return std::string("(nothing thrown)");
    };
    const DeviceAttentionInputs good{.q = q, .k = q, .v = q,
                                     .varlen = {.cu_seqlens_q = cu, .cu_seqlens_k = cu, .max_seqlen_q = 6, .max_seqlen_k = 6}};
    CHECK(argument(good, {.o = o}) == "(nothing thrown)");
    DeviceAttentionInputs in = good;
    in.varlen.max_seqlen_q = 0;
    CHECK(argument(in, {.o = o}) == "varlen.max_seqlen_q");
    in = good;
    in.varlen.cu_seqlens_k = cu_tensor(ctx, {0, 10});
    CHECK(argument(in, {.o = o}) == "varlen.cu_seqlens_k");
    in = good;
    in.varlen.cu_seqlens_q = DeviceTensor::empty(ctx, DType::f32, {1, 1, 1, 3});
    CHECK(argument(in, {.o = o}) == "varlen.cu_seqlens_q");
    in = good;
    in.q = DeviceTensor::empty(ctx, DType::f32, {2, 2, 5, 8});
    CHECK(argument(in, {.o = o}) == "q");
    CHECK(argument(good, {.o = DeviceTensor::empty(ctx, DType::f32, {1, 2, 9, 8})}) == "o");
    in = good;
    in.kv_lengths = DeviceTensor::empty(ctx, DType::i32, {2, 1, 1, 1});
    CHECK(argument(in, {.o = o}) == "kv_lengths");
    in = good;
    in.bool_mask = DeviceTensor::empty(ctx, DType::u8, {1, 1, 6, 6});
    CHECK(argument(in, {.o = o}) == "bool_mask");
    CHECK(argument(good, {.o = o, .weights = DeviceTensor::empty(ctx, DType::f32, {2, 2, 6, 6})}) == "weights");
    CHECK(argument(good, {.o = o, .logits = DeviceTensor::empty(ctx, DType::f32, {2, 2, 6, 6})}) == "logits");
    CHECK(argument(good, {.o = o}, {.impl = Impl::unfused}) == "impl");
    in = good;
    in.varlen.cu_seqlens_k = {};
    CHECK(argument(in, {.o = o}) == "varlen.max_seqlen_k");  // max_seqlen_k goes with cu_seqlens_k
    // A plan for packed sequences refuses a run without them, and the other way round.
    const AttentionPlan plan(ctx, good, {.o = o});
    Batch batch(ctx);
    try {
        plan.run(batch, {.q = q, .k = q, .v = q}, {.o = o});
        FAIL("a run without cu_seqlens was accepted");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "varlen");
    }
    DeviceAttentionInputs longer = good;
    longer.varlen.max_seqlen_q = 7;
    try {
        plan.run(batch, longer, {.o = o});
        FAIL("another max_seqlen_q was accepted");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "varlen.max_seqlen_q");
    }
    // Packed appends: the offsets must cover the packed rows, one per sequence and one more.
    KvCache cache(ctx, {.batch = 2, .kv_heads = 2, .capacity = 8, .dim = 8});
    const DeviceTensor rows = DeviceTensor::empty(ctx, DType::f32, {1, 2, 6, 8}, Layout::bnhd);
    auto append_argument = [&](std::vector<std::int32_t> cu_seqlens) {
        try {
            cache.append_packed(batch, rows, rows, cu_seqlens);
        } catch (const InvalidArgument& e) {
            return e.argument();
        }
        return std::string("(nothing thrown)");
    };
    CHECK(append_argument({0, 6}) == "cu_seqlens");
    CHECK(append_argument({0, 2, 5}) == "cu_seqlens");
    CHECK(append_argument({1, 2, 6}) == "cu_seqlens");
    CHECK(append_argument({0, 4, 2, 6}) == "cu_seqlens");
    CHECK(append_argument({0, 5, 6}) == "(nothing thrown)");
    CHECK(cache.recorded_lengths() == std::vector<std::int32_t>{5, 1});
    const DeviceTensor padded_rows = DeviceTensor::empty(ctx, DType::f32, {2, 2, 3, 8});
    try {
        cache.append_packed(batch, padded_rows, padded_rows, std::vector<std::int32_t>{0, 3, 6});
        FAIL("a [B, Hkv, T, D] tensor was taken as packed rows");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "k_new");
    }
    batch.submit().wait();
    CHECK(test::take_validation_messages(ctx).empty());
}
