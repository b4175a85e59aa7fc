#include "vk/driver_pin.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <string>
#include <vector>

namespace vkattn::vk {

void keep_drivers_loaded() {
    // The names first, the references after: dl_iterate_phdr holds the dynamic linker's list lock
    // while it calls back, and a dlopen inside the callback would wait for the load lock, which a
    // thread loading a driver (another context's instance) holds while it waits for the list lock.
    // 8 contexts created at once deadlocked so under ThreadSanitizer.
    std::vector<std::string> names;
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* out) {
            if (info->dlpi_name && info->dlpi_name[0] != '\0') static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name);
            return 0;
        },
        &names);
    // RTLD_NOLOAD opens nothing new: it only takes one more reference on a library already loaded.
    // Libraries pinned by an earlier call gain another reference, which costs nothing.
    for (const std::string& name : names) dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
}

}  // namespace vkattn::vk
