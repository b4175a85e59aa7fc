#include "plan/program_cache.hpp"

namespace vkattn::detail {

std::shared_ptr<Program> ProgramCache::find(const ProgramKey& key) {
    std::lock_guard lock(mutex_);
    entries_.remove_if([](const Entry& entry) {
        for (std::size_t i = 0; i < entry.storages.size(); ++i)
            if (entry.present[i] && entry.storages[i].expired()) return true;
        return false;
    });
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        bool same = it->offsets == key.offsets && it->signature == key.signature &&
                    it->storages.size() == key.storages.size();
        for (std::size_t i = 0; same && i < key.storages.size(); ++i)
            same = it->present[i] == (key.storages[i] != nullptr) && it->storages[i].lock() == key.storages[i];
        if (same) {
            entries_.splice(entries_.begin(), entries_, it);
            return it->program;
        }
    }
    return nullptr;
}

void ProgramCache::insert(const ProgramKey& key, std::shared_ptr<Program> program) {
    std::lock_guard lock(mutex_);
    Entry entry{{key.storages.begin(), key.storages.end()}, {}, key.offsets, key.signature, std::move(program)};
    for (const auto& storage : key.storages) entry.present.push_back(storage != nullptr);
    entries_.push_front(std::move(entry));
    if (entries_.size() > capacity_) entries_.pop_back();
}

std::shared_ptr<Program> ProgramCache::find_or_record(const ProgramKey& key, Runtime& runtime,
                                                      const std::function<void(Program&)>& record) {
    std::shared_ptr<Program> program = find(key);
    if (!program) {
        program = std::make_shared<Program>(runtime);
        record(*program);
        insert(key, program);
    }
    return program;
}

}  // namespace vkattn::detail
