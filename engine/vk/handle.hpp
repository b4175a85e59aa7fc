// A move-only owner of one Vulkan handle: the destroy call is bound at creation, so every object is
// released exactly once, in reverse order of its owner's members.
#pragma once

#include <functional>
#include <utility>

namespace vkattn::vk {

template <class T>
class Handle {
public:
    Handle() = default;
    Handle(T handle, std::function<void(T)> destroy) : handle_(handle), destroy_(std::move(destroy)) {}
    ~Handle() { reset(); }
    Handle(Handle&& other) noexcept
        : handle_(std::exchange(other.handle_, T{})), destroy_(std::move(other.destroy_)) {}
    Handle& operator=(Handle&& other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, T{});
            destroy_ = std::move(other.destroy_);
        }
        return *this;
    }
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;

    T get() const { return handle_; }
    explicit operator bool() const { return handle_ != T{}; }
    void reset() {
        if (handle_ != T{} && destroy_) destroy_(handle_);
        handle_ = T{};
    }

private:
    T handle_{};
    std::function<void(T)> destroy_;
};

}  // namespace vkattn::vk
