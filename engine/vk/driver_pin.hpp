#pragma once

namespace vkattn::vk {

// Keeps every shared library loaded so far mapped until the process exits (one more reference each,
// never released), so the Vulkan loader's dlclose of a driver or layer, when the last instance
// goes, no longer unmaps it. Called while an instance lives, after its creation. Two reasons:
// - NVIDIA's Vulkan driver (libGLX_nvidia, libnvidia-glcore, libnvidia-tls) is built with static TLS,
//   which glibc cannot take back on dlclose: each load took more of the process's small surplus, and
//   after a few dozen instance lifetimes (29 raw ones on an H200, driver 580; 6 of vkattn's with the
//   validation layer) the loader could no longer load it and vkCreateInstance returned
//   VK_ERROR_INCOMPATIBLE_DRIVER. docs/RELIABILITY.md has the reproduction
//   (tests/lifecycle/instance_churn.cpp). Kept loaded, the driver is mapped once, as in a process
//   that holds one instance for its life.
// - LeakSanitizer scans a library's globals at exit: a driver unmapped by then leaves a block it
//   keeps for the process's life (lavapipe allocates one in a pthread_once initialiser) reported as
//   a leak from an "<unknown module>" that no suppression can name.
void keep_drivers_loaded();

}  // namespace vkattn::vk
