// The vk-attn subcommands: each registers its flags on the parser and returns the action to run.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace vkattn::tool {

using Action = std::function<int()>;  // returns the exit status

Action add_bench(CLI::App& app);
Action add_devices(CLI::App& app);
Action add_run(CLI::App& app);
Action add_check(CLI::App& app);
Action add_mha(CLI::App& app);
Action add_decode(CLI::App& app);
Action add_tune(CLI::App& app);

}  // namespace vkattn::tool
