#pragma once

namespace vkattn::vk {

// LeakSanitizer builds only (VKATTN_PIN_LOADED_LIBRARIES, set by cmake/VkattnSanitizers.cmake):
// keeps every shared library loaded so far mapped until the process exits. The Vulkan loader
// dlcloses the driver and the layers when the last instance goes; their globals are then unmapped
// before LeakSanitizer scans memory at exit, so a block a driver keeps for the process's lifetime
// (lavapipe allocates one in a pthread_once initialiser) is reported as a leak from an
// "<unknown module>" that no suppression can name. Pinned, such blocks stay reachable, and a real
// leak inside the driver is reported with its library's name. Elsewhere this does nothing.
void pin_loaded_libraries();

}  // namespace vkattn::vk
