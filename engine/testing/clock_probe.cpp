#include "vkattn/testing/clock_probe.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "attention/dispatch.hpp"
#include "attention/kernels.hpp"
#include "context_state.hpp"
#include "plan/host_tensors.hpp"
#include "plan/program.hpp"
#include "testing/timed_runs.hpp"
#include "tensor/storage.hpp"
#include "vkattn/context.hpp"

namespace vkattn::testing {

std::optional<double> shader_clock_mhz(Context& context) {
    detail::Runtime& runtime = detail::ContextAccess::runtime(context);
    runtime.ensure_usable();
    const auto& caps = runtime.device().caps();
    if (!caps.subgroup_clock || !caps.timestamps) return std::nullopt;
    const vk::Kernel& kernel = detail::clock_probe_kernel(runtime);
    const DeviceTensor counts = detail::own_dense(runtime, DType::i32, {1, 1, 1, 4}, "the clock probe's cycles");
    const vk::Buffer& buffer = detail::TensorAccess::storage(counts)->buffer;
    // The spins, in trips of 16 FMAs: ~4 clocks each on a GPU, so ~70 and ~280 µs at 2 GHz.
    constexpr std::array<std::uint32_t, 2> kTrips{2048, 8192};
    std::array<detail::Program, 2> programs{detail::Program(runtime), detail::Program(runtime)};
    for (std::size_t i = 0; i < kTrips.size(); ++i)
        programs[i].dispatch({.kernel = &kernel,
                              .params = detail::ClockProbeParams{.trips = kTrips[i]},
                              .bindings = {{1, &buffer, 0, buffer.size()}},
                              .groups = {1, 1, 1}});
    // One run of a program: its GPU milliseconds and the subgroup's cycles.
    auto spin = [&](const detail::Program& program, double& ms, double& cycles) {
        std::array<std::uint32_t, 4> words{};
        const std::vector<double> samples = timing::timed_runs(
            runtime, WarmUp(0), 1, [](detail::BatchState&) {},
            [&](detail::BatchState&, VkCommandBuffer commands) { program.replay(commands); },
            [&](detail::BatchState& state) {
                detail::read_back(state, counts, make_view(static_cast<void*>(words.data()), DType::i32, Layout::bhnd, counts.shape()));
            });
        ms = samples.front();
        cycles = static_cast<double>((std::uint64_t{words[1]} << 32) | words[0]);
    };
    std::vector<double> estimates;
    for (int pair = 0; pair < 3; ++pair) {
        double short_ms = 0, short_cycles = 0, long_ms = 0, long_cycles = 0;
        spin(programs[0], short_ms, short_cycles);
        spin(programs[1], long_ms, long_cycles);
        if (long_ms > short_ms && long_cycles > short_cycles)
            estimates.push_back((long_cycles - short_cycles) / ((long_ms - short_ms) * 1e3));
    }
    if (estimates.empty()) return std::nullopt;
    std::sort(estimates.begin(), estimates.end());
    return estimates[estimates.size() / 2];
}

}  // namespace vkattn::testing
