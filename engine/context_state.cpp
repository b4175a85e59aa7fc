#include "context_state.hpp"

#include <cstdlib>
#include <string>

#include "vkattn/context.hpp"

namespace vkattn {
namespace detail {

ContextState::ContextState(const ContextOptions& options) : runtime(options) { load_tuning(); }

ContextState::ContextState(const VulkanDevice& caller, const ContextOptions& options) : runtime(caller, options) {
    load_tuning();
}

void ContextState::load_tuning() {
    const std::filesystem::path dir = runtime.cache_directory();
    if (dir.empty()) return;
    tuning_file = tuning_table_file(dir, runtime.info().uuid);
    // VKATTN_TUNING=off: the documented heuristics alone (tests that expect them set it).
    const char* mode = std::getenv("VKATTN_TUNING");
    const std::string m = mode ? mode : "";
    if (m == "off" || m == "0" || m == "false") return;
    if (auto table = load_tuning_table(tuning_file, runtime.info().uuid, runtime.info().driver))
        tuning = std::make_unique<TuningTable>(std::move(*table));
}

ContextState& ContextAccess::state(Context& context) { return *context.state_; }
Runtime& ContextAccess::runtime(Context& context) { return context.state_->runtime; }

}  // namespace detail

Context::Context(const ContextOptions& options) : state_(std::make_unique<detail::ContextState>(options)) {}
Context::Context(const VulkanDevice& device, const ContextOptions& options)
    : state_(std::make_unique<detail::ContextState>(device, options)) {}
Context::~Context() = default;
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;

const DeviceInfo& Context::device() const { return state_->runtime.info(); }
std::vector<std::string> Context::validation_messages() const { return state_->runtime.instance().messages(); }
void Context::clear_validation_messages() { state_->runtime.instance().clear_messages(); }

}  // namespace vkattn
