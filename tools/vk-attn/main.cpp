// vk-attn: benchmark, validate and run attention on any Vulkan device.
// Every failure ends with exit status 1 and one line on stderr.
#include <cstdlib>
#include <iostream>

#include "commands.hpp"
#include "vkattn/errors.hpp"

int main(int argc, char** argv) {
    CLI::App app{"vk-attn: scaled dot-product attention on Vulkan compute"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Show the help of every subcommand");
    vkattn::tool::Action action;
    auto bind = [&](vkattn::tool::Action a, CLI::App* sub) {
        sub->callback([&action, a] { action = a; });
    };
    {
        auto* bench = app.add_subcommand("bench", "Time attention (GPU timestamps) and optionally validate it");
        bind(vkattn::tool::add_bench(*bench), bench);
        auto* run = app.add_subcommand("run", "Run attention on .npy tensors and write the results as .npy");
        bind(vkattn::tool::add_run(*run), run);
        auto* decode = app.add_subcommand("decode", "Time and validate a decode loop over a KV cache on the device");
        bind(vkattn::tool::add_decode(*decode), decode);
        auto* mha = app.add_subcommand("mha", "Run a PyTorch nn.MultiheadAttention layer from its exported weights");
        bind(vkattn::tool::add_mha(*mha), mha);
        auto* check = app.add_subcommand("check", "Self-test every path and dtype against the CPU reference");
        bind(vkattn::tool::add_check(*check), check);
        auto* tune = app.add_subcommand("tune", "Time every kernel variant on this device and keep the fastest for later calls");
        bind(vkattn::tool::add_tune(*tune), tune);
        auto* devices = app.add_subcommand("devices", "List Vulkan devices and the default choice");
        bind(vkattn::tool::add_devices(*devices), devices);
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::cerr << "vk-attn: " << e.what() << '\n';
        return 1;
    }
    try {
        return action();
    } catch (const vkattn::Error& e) {
        std::cerr << "vk-attn: " << e.what() << '\n';
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "vk-attn: unexpected error: " << e.what() << '\n';
        return 1;
    }
}
