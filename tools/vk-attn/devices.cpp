// vk-attn devices: every Vulkan device, its capabilities, and which one the default choice picks.
#include <iostream>

#include "commands.hpp"
#include "vkattn/context.hpp"

namespace vkattn::tool {

Action add_devices(CLI::App& app) {
    app.footer("The device list comes from the Vulkan loader; lavapipe appears as a CPU device.");
    return [] {
        const auto devices = list_devices();
        if (devices.empty()) {
            std::cout << "no Vulkan device found\n";
            return 1;
        }
        for (const auto& d : devices) {
            std::cout << (d.default_choice ? "* " : "  ") << d.index << ": " << d.name << "\n"
                      << "    type " << d.type << ", driver " << d.driver << ", Vulkan " << d.api_version << "\n"
                      << "    subgroup size " << d.subgroup_size << ", shared memory " << d.shared_memory_bytes
                      << " B, max storage buffer range " << d.max_storage_buffer_range << " B\n"
                      << "    fp16 storage " << (d.fp16_storage ? "yes" : "no") << ", fp16 arithmetic "
                      << (d.fp16_arithmetic ? "yes" : "no") << ", int8 arithmetic "
                      << (d.int8_arithmetic ? "yes" : "no") << ", IEEE NaN/inf kept "
                      << (d.inf_nan_preserve ? "yes" : "no") << "\n    memory heaps:";
            for (const auto& h : d.heaps)
                std::cout << ' ' << (h.bytes >> 20) << " MiB" << (h.device_local ? " (device-local)" : "");
            std::cout << '\n';
            if (!d.rejected.empty()) std::cout << "    unusable: " << d.rejected << '\n';
        }
        std::cout << "(* = the default choice; choose another with --device N or $VKATTN_DEVICE)\n";
        return 0;
    };
}

}  // namespace vkattn::tool
