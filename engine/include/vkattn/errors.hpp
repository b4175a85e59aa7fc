// The one family of errors vkattn throws. Every message is a full sentence that names the argument,
// the Vulkan call or the limit involved, so a user can act on it without reading our source.
#pragma once

#include <stdexcept>
#include <string>

namespace vkattn {

// Base of everything vkattn throws.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A caller-supplied shape, option or file that cannot be honoured; thrown before any GPU work.
class InvalidArgument : public Error {
public:
    InvalidArgument(std::string argument, const std::string& message)
        : Error(argument + ": " + message), argument_(std::move(argument)) {}
    const std::string& argument() const noexcept { return argument_; }

private:
    std::string argument_;
};

// A Vulkan call that returned an error: names the call, the VkResult and what we were doing.
class VulkanError : public Error {
public:
    VulkanError(std::string call, int result, std::string result_name, const std::string& context)
        : Error(call + " failed with " + result_name + " while " + context),
          call_(std::move(call)), result_(result) {}
    const std::string& call() const noexcept { return call_; }
    int result() const noexcept { return result_; }

private:
    std::string call_;
    int result_;
};

// The request needs more than the device has (memory, binding range, 64-bit sizes).
class ResourceLimit : public Error {
public:
    using Error::Error;
};

// The device was lost; the context refuses further work.
class DeviceLost : public Error {
public:
    using Error::Error;
};

}  // namespace vkattn
