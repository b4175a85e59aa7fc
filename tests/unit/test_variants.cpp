// The kernel-variant catalogue (vkattn/variants.hpp): one entry per way to run a call, found by name.
#include "support/catch.hpp"

#include <set>
#include <string>

#include "vkattn/variants.hpp"

using namespace vkattn;

TEST_CASE("variants: the catalogue names every path, fused kernel and gemm kernel once", "[unit][variants]") {
    std::set<std::string> names;
    std::set<Impl> paths;
    std::set<FusedKernel> kernels;
    std::set<GemmKernel> gemm_kernels;
    for (const KernelVariant& v : kernel_variants()) {
        INFO(v.name);
        CHECK(names.insert(v.name).second);  // unique
        CHECK(v.impl != Impl::automatic);    // a variant is a path, forced
        CHECK_FALSE(v.description.empty());
        CHECK(find_kernel_variant(v.name) == &v);
        CHECK_THAT(kernel_variant_names(), Catch::Contains(v.name));
        paths.insert(v.impl);
        if (v.overrides.fused_kernel) {
            CHECK(v.impl != Impl::unfused);  // the fused kernels run on the fused paths
            kernels.insert(*v.overrides.fused_kernel);
        }
        if (v.overrides.fused_kernel == FusedKernel::decode) CHECK(v.impl == Impl::split);
        // Only the cooperative-matrix kernel rounds its operands to f16 (the tuner keeps it to f16 calls).
        CHECK(rounds_operands(v.overrides) == (v.overrides.fused_kernel == FusedKernel::coopmat));
        if (v.overrides.gemm_kernel) {
            CHECK(v.impl == Impl::unfused);  // the products run on the three-stage path
            gemm_kernels.insert(*v.overrides.gemm_kernel);
        }
    }
    CHECK(paths == std::set<Impl>{Impl::unfused, Impl::fused, Impl::split});
    CHECK(kernels == std::set<FusedKernel>{FusedKernel::flash, FusedKernel::decode, FusedKernel::tile, FusedKernel::coopmat});
    CHECK(gemm_kernels == std::set<GemmKernel>{GemmKernel::blocks, GemmKernel::tile});
    CHECK(find_kernel_variant("nope") == nullptr);
}
