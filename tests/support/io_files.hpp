// What the tensor file format tests share (tests/unit/test_npy.cpp, test_safetensors.cpp,
// test_state_dict.cpp): a scratch directory per test, random arrays of every element type and their
// comparison, the refusal a call throws, and the check that a message is printable ASCII.
#pragma once

#include "support/catch.hpp"

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "npy.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::test {

namespace fs = std::filesystem;

// A fresh directory per test, so tests can run in parallel (ctest -j) without sharing files.
inline fs::path scratch_dir(const std::string& test) {
    const fs::path dir = fs::temp_directory_path() / ("vkattn-io-" + test + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

// Random but valid contents for `type` (bools are 0 or 1, as NumPy and safetensors require).
inline npy::Array random_array(npy::ElementType type, std::vector<std::int64_t> shape, unsigned seed) {
    npy::Array a{.type = type, .shape = std::move(shape), .data = {}};
    a.data.resize(static_cast<std::size_t>(a.count()) * npy::element_size(type));
    std::mt19937 rng(seed);
    for (auto& b : a.data) b = static_cast<std::byte>(type == npy::ElementType::boolean ? rng() % 2 : rng() % 256);
    return a;
}

inline void check_same(const npy::Array& a, const npy::Array& b) {
    CHECK(a.type == b.type);
    CHECK(a.shape == b.shape);
    CHECK(a.data == b.data);
}

template <class F>
inline std::string message_of(F&& call) {
    try {
        call();
    } catch (const InvalidArgument& e) {
        return e.what();
    }
    FAIL("no InvalidArgument was thrown");
    return {};
}

// Every element type the readers take.
inline const std::vector<npy::ElementType> all_types{npy::ElementType::f32, npy::ElementType::f16, npy::ElementType::boolean,
                                                     npy::ElementType::i32, npy::ElementType::i64, npy::ElementType::u8,
                                                     npy::ElementType::u16};

// A message holds printable ASCII only: no raw byte of a header reaches the user's terminal.
inline bool printable_ascii(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u >= 0x20 && u < 0x7f;
    });
}

}  // namespace vkattn::test
