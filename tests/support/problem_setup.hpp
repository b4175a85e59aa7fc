// resolve()'s unit tests' problem (tests/unit/test_problem.cpp, test_problem_features.cpp): a valid
// grouped-query problem whose views, masks and key lengths a test changes, and the argument that
// resolve() then names. resolve() never reads tensor data, so the buffers only have to exist and
// be large enough for the views.
#pragma once

#include "support/catch.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/problem.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::test {

using Shape = std::array<std::int64_t, 4>;

// A valid grouped-query problem: B=2, Hq=4, Hkv=2, Nq=3, Nkv=5, Dk=8, Dv=6.
struct Setup {
    static constexpr std::int64_t B = 2, Hq = 4, Hkv = 2, Nq = 3, Nkv = 5, Dk = 8, Dv = 6;
    std::vector<float> q = std::vector<float>(4096), k = q, v = q, o = q;
    std::vector<std::uint8_t> bool_data = std::vector<std::uint8_t>(4096, 1);
    std::vector<float> float_data = std::vector<float>(4096);
    std::vector<std::int32_t> lengths;
    AttentionInputs in;
    AttentionOutputs out;
    AttentionOptions opt;

    Setup() {
        in.q = make_view<const void*>(q.data(), DType::f32, Layout::bhnd, {B, Hq, Nq, Dk});
        in.k = make_view<const void*>(k.data(), DType::f32, Layout::bhnd, {B, Hkv, Nkv, Dk});
        in.v = make_view<const void*>(v.data(), DType::f32, Layout::bhnd, {B, Hkv, Nkv, Dv});
        out.o = make_view<void*>(o.data(), DType::f32, Layout::bhnd, {B, Hq, Nq, Dv});
    }
    Setup(const Setup&) = delete;
    Setup& operator=(const Setup&) = delete;

    void set_lengths(std::vector<std::int32_t> l) {
        lengths = std::move(l);
        in.kv_lengths = lengths;
    }
    void set_bool_mask(std::vector<std::int64_t> shape) {
        in.bool_mask = MaskView{bool_data.data(), std::move(shape)};
    }
    void set_float_mask(std::vector<std::int64_t> shape) {
        in.float_mask = MaskView{float_data.data(), std::move(shape)};
    }
    detail::Problem resolve() const { return detail::resolve(in, out, opt); }

    // The argument named by the InvalidArgument resolve() throws, or "<accepted>".
    std::string rejected() const {
        try {
            (void)resolve();
        } catch (const InvalidArgument& e) {
            CHECK(std::string(e.what()).rfind(e.argument() + ": ", 0) == 0);
            return e.argument();
        }
        return "<accepted>";
    }
};

}  // namespace vkattn::test
