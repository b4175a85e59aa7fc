#include "kernel_statistics_output.hpp"

#include <iostream>

#include <nlohmann/json.hpp>

namespace vkattn::tool {

void print_kernel_statistics(Context& context, Format format, std::ostream& out) {
    if (!kernel_statistics_captured(context)) {
        std::cerr << "kernel statistics: " << context.device().name
                  << " does not report them (VK_KHR_pipeline_executable_properties' pipelineExecutableInfo)\n";
        return;
    }
    for (const auto& k : kernel_statistics(context)) {
        if (format == Format::json) {
            nlohmann::ordered_json values = nlohmann::ordered_json::object();
            for (const auto& v : k.values) values[v.name] = v.value;
            out << nlohmann::ordered_json{{"kernel", k.kernel}, {"constants", k.constants}, {"executable", k.executable},
                                          {"subgroup_size", k.subgroup_size}, {"statistics", values}}
                       .dump()
                << '\n';
            continue;
        }
        out << "kernel " << k.kernel << " [" << k.constants << "] " << k.executable << ", subgroup " << k.subgroup_size << ":";
        for (std::size_t i = 0; i < k.values.size(); ++i) out << (i ? ", " : " ") << k.values[i].name << ' ' << k.values[i].value;
        out << '\n';
    }
}

}  // namespace vkattn::tool
