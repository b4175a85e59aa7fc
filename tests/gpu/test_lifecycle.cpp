// Creating and destroying a Context releases everything it took. 100 contexts in a row, every tenth
// running a tiny attention call (pipelines built, buffers allocated, the pipeline cache saved):
// - under AddressSanitizer (-DVKATTN_SANITIZE=address,undefined) LeakSanitizer checks the heap right
//   after the loop, so a leak fails this test by name, with tests/sanitizers/lsan.supp (the driver
//   and loader only) applied; it checks again at exit;
// - in every build, the process's threads and file descriptors are back to where they were after
//   the first context (the driver starts its threads and opens its files per device);
// - on NVIDIA's driver, whose static TLS a reload used up, the 7th context failed to find a driver
//   before the engine kept the drivers loaded (vk/driver_pin.hpp; tests/lifecycle/instance_churn.cpp).
#include "support/catch.hpp"

#include <filesystem>
#include <random>
#include <string>

#include "support/gpu_context.hpp"
#include "vkattn/testing/attention_case.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define VKATTN_TEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VKATTN_TEST_LSAN 1
#endif
#endif
#ifdef VKATTN_TEST_LSAN
#include <sanitizer/lsan_interface.h>
#endif

using namespace vkattn;
namespace fs = std::filesystem;

namespace {

std::size_t entries(const char* dir) {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
    return n;
}

struct ProcessResources {
    std::size_t threads = 0, files = 0;
    static ProcessResources now() { return {entries("/proc/self/task"), entries("/proc/self/fd")}; }
};

// One context's life: created, optionally used for one tiny call, destroyed.
void live_once(int iteration, const fs::path& cache_dir) {
    ContextOptions options = test::test_context_options();
    options.pipeline_cache_dir = cache_dir.string();
    Context context(options);
    if (iteration % 10 != 0) return;
    testing::Case c;
    c.Hq = 2;
    c.Hkv = 1;
    c.Nq = 5;
    c.Nkv = 9;
    c.Dk = c.Dv = 8;
    c.impl = iteration % 20 == 0 ? Impl::fused : Impl::unfused;
    c.weights = c.impl == Impl::unfused;
    const testing::CaseResult r = testing::run_case(context, c, static_cast<unsigned>(1000 + iteration));
    INFO("iteration " << iteration << ": " << r.message);
    REQUIRE(r.ok);
    REQUIRE(test::take_validation_messages(context).empty());
}

}  // namespace

TEST_CASE("lifecycle: 100 contexts created and destroyed leak nothing", "[gpu][lifecycle]") {
    const fs::path cache_dir = fs::temp_directory_path() / ("vkattn-lifecycle-" + std::to_string(std::random_device{}()));
    live_once(0, cache_dir);  // the driver's per-process state (its LLVM, its caches) is set up once
    const ProcessResources before = ProcessResources::now();
    for (int i = 1; i < 100; ++i) live_once(i, cache_dir);
    const ProcessResources after = ProcessResources::now();
    fs::remove_all(cache_dir);

    CHECK(after.threads == before.threads);
    CHECK(after.files == before.files);
#ifdef VKATTN_TEST_LSAN
    // Non-zero when LeakSanitizer found an unsuppressed leak; the report is on stderr.
    CHECK(__lsan_do_recoverable_leak_check() == 0);
#endif
}
