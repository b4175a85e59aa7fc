#include "vk/driver_pin.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstddef>

namespace vkattn::vk {

void keep_drivers_loaded() {
    // RTLD_NOLOAD opens nothing new: it only takes one more reference on a library already loaded.
    // Libraries pinned by an earlier call gain another reference, which costs nothing.
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void*) {
            if (info->dlpi_name && info->dlpi_name[0] != '\0') dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
            return 0;
        },
        nullptr);
}

}  // namespace vkattn::vk
