// Programs recorded for particular tensors' memory, so a loop that reuses its tensors records each
// program once: the plans' binding cache and the KV caches' appends. Entries hold the memory weakly
// (a cached program never keeps a freed tensor's memory alive) and are dropped once any of it dies,
// since they can never match again and their programs hold scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "plan/program.hpp"
#include "tensor/storage.hpp"

namespace vkattn::detail {

struct ProgramKey {
    std::vector<std::shared_ptr<Storage>> storages;  // null where a tensor is absent
    std::vector<std::uint64_t> offsets;              // each tensor's byte offset in its memory
    std::vector<std::int64_t> signature;             // anything else the program depends on
};

class ProgramCache {
public:
    explicit ProgramCache(std::size_t capacity) : capacity_(capacity) {}
    // The program cached for `key` (now the most recently used), or null. Thread-safe.
    std::shared_ptr<Program> find(const ProgramKey& key);
    // Caches `program` for `key`, dropping the least recently used entry beyond the capacity.
    void insert(const ProgramKey& key, std::shared_ptr<Program> program);
    // The program cached for `key`, or a new one `record` fills, cached.
    std::shared_ptr<Program> find_or_record(const ProgramKey& key, Runtime& runtime,
                                            const std::function<void(Program&)>& record);

private:
    struct Entry {
        std::vector<std::weak_ptr<Storage>> storages;
        std::vector<bool> present;
        std::vector<std::uint64_t> offsets;
        std::vector<std::int64_t> signature;
        std::shared_ptr<Program> program;
    };
    std::size_t capacity_;
    std::mutex mutex_;
    std::list<Entry> entries_;  // most recently used first
};

}  // namespace vkattn::detail
