// What the vk-attn tool's end-to-end tests share: running the tool with its output captured, a
// scratch directory per case, random .npy inputs, and comparisons of .npy outputs.
#pragma once

#include "support/catch.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "npy.hpp"
#include "support/element_count.hpp"
#include "vkattn/testing/compare.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::cli_test {

namespace fs = std::filesystem;
using namespace vkattn::testing;

struct Result {
    int status = -1;
    std::string out, err;
};

// Runs vk-attn with arguments; captures stdout and stderr through files.
inline Result vk_attn_with(const std::string& program, const std::string& args) {
    static int counter = 0;
    const fs::path dir = fs::temp_directory_path() / ("vkattn-cli-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const fs::path out = dir / ("out" + std::to_string(counter) + ".txt"), err = dir / ("err" + std::to_string(counter++) + ".txt");
    const std::string command = program + " " + args + " >" + out.string() + " 2>" + err.string();
    const int raw = std::system(command.c_str());
    Result r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    auto slurp = [](const fs::path& p) {
        std::ifstream in(p);
        return std::string((std::istreambuf_iterator<char>(in)), {});
    };
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

inline Result vk_attn(const std::string& args) { return vk_attn_with(VK_ATTN_PATH, args); }

// A scratch directory per test case, removed after it.
struct Workdir {
    fs::path path;
    Workdir() : path(fs::temp_directory_path() / ("vkattn-cli-case-" + std::to_string(::getpid()) + "-" + std::to_string(next()))) {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~Workdir() { fs::remove_all(path); }
    std::string operator/(const std::string& name) const { return (path / name).string(); }
    static int next() {
        static int n = 0;
        return n++;
    }
};

// `n` values uniform in [-1, 1).
inline std::vector<float> random_floats(std::mt19937& rng, std::size_t n) {
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// Writes a random tensor as f32 or f16 and returns its values as the file holds them (as float).
inline std::vector<float> write_tensor(std::mt19937& rng, const std::string& path, const std::vector<std::int64_t>& shape, bool f16) {
    auto values = random_floats(rng, test::element_count(shape));
    if (!f16) {
        npy::write(path, npy::ElementType::f32, shape, values.data());
        return values;
    }
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        bits[i] = float_to_half(values[i]);
        values[i] = half_to_float(bits[i]);
    }
    npy::write(path, npy::ElementType::f16, shape, bits.data());
    return values;
}

// A shape of rank 1 to 4 as rank 4, left-padded with 1s (the library's views).
inline std::array<std::int64_t, 4> as4(const std::vector<std::int64_t>& s) {
    std::array<std::int64_t, 4> r{1, 1, 1, 1};
    for (std::size_t i = 0; i < s.size(); ++i) r[4 - s.size() + i] = s[i];
    return r;
}

// Two float32 .npy files of one shape, within fp32 tolerance of each other.
inline void expect_same_floats(const fs::path& a, const fs::path& b, Tolerance tolerance = tolerance_for(DType::f32)) {
    const npy::Array x = npy::read(a), y = npy::read(b);
    CHECK(x.shape == y.shape);
    const Comparison c = compare({x.as<float>(), x.as<float>() + x.count()}, {y.as<float>(), y.as<float>() + y.count()},
                                 tolerance);
    INFO(a.filename().string() << ": " << c.message);
    CHECK(c.ok);
}

// A float32 .npy array's values.
inline std::vector<float> floats(const npy::Array& a) { return {a.as<float>(), a.as<float>() + a.count()}; }
inline std::vector<double> doubles(const npy::Array& a) { return {a.as<float>(), a.as<float>() + a.count()}; }

#ifdef VKATTN_MPIEXEC
// vk-attn under mpirun: `ranks` processes, one lavapipe instance each.
inline Result mpi_vk_attn(int ranks, const std::string& args) {
    return vk_attn_with(std::string(VKATTN_MPIEXEC) + " -np " + std::to_string(ranks) +
                            " --allow-run-as-root --oversubscribe --mca btl self,tcp " + VK_ATTN_PATH,
                        args);
}
#endif

}  // namespace vkattn::cli_test
