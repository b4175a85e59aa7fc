#include "pending_outputs.hpp"

#include <filesystem>

#include "npy.hpp"

namespace vkattn::tool {

void write_all(const std::vector<PendingOutput>& outputs) {
    std::vector<std::string> written;
    try {
        for (const auto& o : outputs) {
            npy::write(o.path + ".tmp", npy::ElementType::f32, o.shape, o.data);
            written.push_back(o.path + ".tmp");
        }
    } catch (...) {
        for (const auto& w : written) std::filesystem::remove(w);
        throw;
    }
    for (const auto& o : outputs) std::filesystem::rename(o.path + ".tmp", o.path);
}

}  // namespace vkattn::tool
