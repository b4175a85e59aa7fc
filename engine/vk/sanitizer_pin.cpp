#include "vk/sanitizer_pin.hpp"

#ifdef VKATTN_PIN_LOADED_LIBRARIES
#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#endif

namespace vkattn::vk {

void pin_loaded_libraries() {
#ifdef VKATTN_PIN_LOADED_LIBRARIES
    // RTLD_NOLOAD opens nothing new: it only takes one more reference on a library already loaded,
    // which is never released, so the loader's dlclose no longer unmaps it.
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void*) {
            if (info->dlpi_name && info->dlpi_name[0] != '\0') dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
            return 0;
        },
        nullptr);
#endif
}

}  // namespace vkattn::vk
