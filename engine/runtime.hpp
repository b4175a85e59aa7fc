// What a Context owns: instance, device, kernel cache and command stream, in destruction order.
#pragma once

#include <memory>
#include <mutex>

#include "vk/commands.hpp"
#include "vk/device.hpp"
#include "vk/instance.hpp"
#include "vk/pipeline.hpp"
#include "vkattn/context.hpp"

namespace vkattn::detail {

class Runtime {
public:
    explicit Runtime(const ContextOptions& options);
    ~Runtime();

    const ContextOptions& options() const { return options_; }
    const DeviceInfo& info() const { return info_; }
    vk::Instance& instance() { return *instance_; }
    const vk::Device& device() const { return *device_; }
    vk::KernelCache& kernels() { return *kernels_; }
    vk::CommandStream& commands() { return *commands_; }
    // Serialises submissions: the context may be shared between threads.
    std::mutex& submit_mutex() { return submit_mutex_; }

    // Map device-local memory directly (zero-copy) instead of staging.
    bool zero_copy() const { return device_->caps().host_visible_device_memory && !options_.force_staging; }
    // The largest range one binding may cover.
    std::uint64_t max_binding_bytes() const;
    // Fill outputs with NaN on the device before each run ($VKATTN_POISON=1, tests).
    bool poison_outputs() const { return poison_; }

private:
    ContextOptions options_;
    DeviceInfo info_;
    bool poison_ = false;
    std::unique_ptr<vk::Instance> instance_;
    std::unique_ptr<vk::Device> device_;
    std::unique_ptr<vk::KernelCache> kernels_;
    std::unique_ptr<vk::CommandStream> commands_;
    std::mutex submit_mutex_;
};

}  // namespace vkattn::detail
