#include "device_set.hpp"

#include <sstream>

#include "vkattn/errors.hpp"
#include "vkattn/multi_device.hpp"

namespace vkattn::tool {

DeviceSet::DeviceSet(const std::string& list, Context& single) {
    if (list.empty()) {
        contexts_.push_back(&single);
        return;
    }
    if (list.back() == ',') throw InvalidArgument("--devices", "\"" + list + "\" has an empty entry; give 0,1,...");
    std::stringstream entries(list);
    std::string entry;
    while (std::getline(entries, entry, ',')) {
        if (entry.empty()) throw InvalidArgument("--devices", "\"" + list + "\" has an empty entry; give 0,1,...");
        ContextOptions options;
        options.device = entry;
        try {
            owned_.push_back(std::make_unique<Context>(options));
        } catch (const InvalidArgument& e) {
            throw InvalidArgument("--devices", std::string(e.what()));
        }
        contexts_.push_back(owned_.back().get());
    }
}

std::string DeviceSet::describe() const {
    std::string s = std::to_string(contexts_.size()) + (contexts_.size() == 1 ? " device: " : " devices: ");
    for (std::size_t i = 0; i < contexts_.size(); ++i) s += (i ? ", " : "") + contexts_[i]->device().name;
    return s;
}

AttentionReport DeviceSet::attention(const AttentionInputs& in, const AttentionOutputs& out,
                                     const AttentionOptions& options) const {
    if (contexts_.size() == 1) return vkattn::attention(*contexts_[0], in, out, options);
    return vkattn::attention(std::span<Context* const>(contexts_), in, out, options);
}

}  // namespace vkattn::tool
