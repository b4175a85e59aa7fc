// The cooperative-matrix kernels' operand type (attention/coopmat_tile.hpp's coopmat_operands) and
// the shader build it names (coopmat_build): bf16 where an operand is stored as bf16, else f16;
// f16 beside bf16 and bf16 on matrix units that do not take it refused by the argument named.
#include "support/catch.hpp"

#include <string>

#include "attention/coopmat_tile.hpp"
#include "fake_devices.hpp"
#include "vkattn/errors.hpp"

using namespace vkattn;
using namespace vkattn::detail;
using namespace vkattn::detail::fake;

namespace {

std::string refusal(const vk::DeviceCaps& caps, std::initializer_list<DType> stored) {
    try {
        (void)coopmat_operands(caps, stored, "a", "the kernel", "another");
    } catch (const InvalidArgument& e) {
        CHECK(e.argument() == "a");
        return e.what();
    }
    return "taken";
}

}  // namespace

TEST_CASE("coopmat operands: bf16 where one is stored so, f16 otherwise; refusals by name", "[unit][coopmat]") {
    vk::DeviceCaps portable = lavapipe_like(), units = nvidia_like(), bf16_units = nvidia_like();
    units.matrix_units = bf16_units.matrix_units = true;
    bf16_units.bf16_matrix_units = true;
    for (const vk::DeviceCaps& caps : {portable, units, bf16_units}) {
        INFO(caps.name << " units " << caps.matrix_units << " bf16 " << caps.bf16_matrix_units);
        // f32, f16 and the quantized types multiply as f16 everywhere.
        CHECK(coopmat_operands(caps, {DType::f32, DType::f32}, "a", "k", "i") == DType::f16);
        CHECK(coopmat_operands(caps, {DType::f16, DType::q8_0, DType::fp8_e4m3}, "a", "k", "i") == DType::f16);
        // bf16 (beside f32 or quantized types) multiplies as bf16 where the device runs it.
        for (const auto stored : {std::initializer_list<DType>{DType::bf16, DType::bf16, DType::bf16},
                                  std::initializer_list<DType>{DType::f32, DType::bf16},
                                  std::initializer_list<DType>{DType::bf16, DType::q4_1}}) {
            if (caps.matrix_units && !caps.bf16_matrix_units)
                CHECK_THAT(refusal(caps, stored), Catch::Contains("bf16_matrix_units_off") && Catch::Contains("65,504"));
            else
                CHECK(coopmat_operands(caps, stored, "a", "k", "i") == DType::bf16);
        }
        // f16 beside bf16: one would round to the other's precision or range.
        CHECK_THAT(refusal(caps, {DType::f16, DType::bf16}), Catch::Contains("f16 or bf16") && Catch::Contains("another"));
    }
    CHECK(coopmat_build(false, DType::f16) == "coopmat");
    CHECK(coopmat_build(false, DType::bf16) == "coopmat_bf16");
    CHECK(coopmat_build(true, DType::f16) == "coopmat_units");
    CHECK(coopmat_build(true, DType::bf16) == "coopmat_units_bf16");
}
