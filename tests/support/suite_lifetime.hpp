// Objects the suite keeps for all its tests (Contexts: a VkInstance and a VkDevice each) end when the
// tests end, before main returns, not at static destruction. Ended there, a Context's destruction
// calls into the Vulkan layers among their own statics' destruction, in an order nothing fixes:
// Debian 13's validation layer (1.4.309) crashed so at exit, inside ~Context, after every test had
// passed. Every test main calls end_suite_objects() after the run.
#pragma once

#include <functional>
#include <optional>
#include <utility>
#include <vector>

namespace vkattn::test {

inline std::vector<std::function<void()>>& suite_object_ends() {
    static std::vector<std::function<void()>> ends;
    return ends;
}

// Ends the objects suite_object made, the newest first.
inline void end_suite_objects() {
    auto& ends = suite_object_ends();
    while (!ends.empty()) {
        const std::function<void()> end = std::move(ends.back());
        ends.pop_back();
        end();
    }
}

// The object `make()` returns, made on first use (thread-safe, as a function-local static) and ended
// by end_suite_objects(). Each call site passes a lambda of its own type, so each has its object.
template <class Make>
auto& suite_object(Make make) {
    using T = decltype(make());
    static std::optional<T> object;
    static const bool made = [&] {
        object.emplace(make());
        suite_object_ends().push_back([] { object.reset(); });
        return true;
    }();
    (void)made;
    return *object;
}

}  // namespace vkattn::test
