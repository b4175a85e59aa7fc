// A Context's plans by what they were made for (AttentionSpec::key), least recently used dropped
// first, so the host API and one-off device calls find their plan in microseconds.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "attention/problem.hpp"

namespace vkattn::detail {

class Runtime;
struct PlanState;
struct TuningTable;

class PlanCache {
public:
    static constexpr std::size_t kCapacity = 32;
    // The plan for `spec`, made (outside the lock: making one builds pipelines) when missing, with
    // `tuning`'s winners (null: the heuristics).
    std::shared_ptr<PlanState> get(Runtime& runtime, const TuningTable* tuning, const AttentionSpec& spec);
    // Forgets every plan (plans in use stay alive with their users): the tuner's new table decides
    // the next ones.
    void clear();

private:
    std::mutex mutex_;
    std::list<std::pair<std::string, std::shared_ptr<PlanState>>> order_;  // most recent first
    std::unordered_map<std::string, decltype(order_)::iterator> index_;
};

}  // namespace vkattn::detail
