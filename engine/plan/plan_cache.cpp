#include "plan/plan_cache.hpp"

#include "plan/plan_state.hpp"

namespace vkattn::detail {

std::shared_ptr<PlanState> PlanCache::get(Runtime& runtime, const TuningTable* tuning, const AttentionSpec& spec) {
    std::string key = spec.key();
    {
        std::lock_guard lock(mutex_);
        if (auto found = index_.find(key); found != index_.end()) {
            order_.splice(order_.begin(), order_, found->second);
            return found->second->second;
        }
    }
    auto plan = std::make_shared<PlanState>(runtime, tuning, spec);
    std::lock_guard lock(mutex_);
    if (auto found = index_.find(key); found != index_.end()) return found->second->second;  // made meanwhile
    order_.emplace_front(key, plan);
    index_.emplace(std::move(key), order_.begin());
    if (order_.size() > kCapacity) {
        index_.erase(order_.back().first);
        order_.pop_back();
    }
    return plan;
}

void PlanCache::clear() {
    std::lock_guard lock(mutex_);
    index_.clear();
    order_.clear();
}

}  // namespace vkattn::detail
