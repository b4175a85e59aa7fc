// vk-attn devices: every Vulkan device, what decides how work is cut for it (compute units, subgroup
// sizes, shared memory, cooperative matrices, bf16/fp8, timestamps, memory), and which one the
// default choice picks; --json gives the same as one JSON object per device, a line each.
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "vkattn/context.hpp"

namespace vkattn::tool {
namespace {

const char* yes(bool b) { return b ? "yes" : "no"; }

std::string shape_text(const CooperativeMatrixShape& s) {
    std::ostringstream out;
    if (s.flexible) out << "multiples of ";
    out << s.m << "x" << s.n << "x" << s.k << " " << s.a << "*" << s.b << "+" << s.c << "->" << s.result;
    if (s.flexible) out << " up to " << s.max_dimension;
    if (s.scope != "subgroup") out << " (" << s.scope;
    if (s.workgroup_invocations) out << ", " << s.workgroup_invocations << " invocations";
    if (s.scope != "subgroup") out << ")";
    if (s.saturating) out << " saturating";
    return out.str();
}

nlohmann::json to_json(const DeviceInfo& d) {
    nlohmann::json heaps = nlohmann::json::array(), shapes = nlohmann::json::array();
    for (const auto& h : d.heaps) heaps.push_back({{"bytes", h.bytes}, {"device_local", h.device_local}});
    for (const auto& s : d.cooperative_matrix)
        shapes.push_back({{"m", s.m}, {"n", s.n}, {"k", s.k}, {"a", s.a}, {"b", s.b}, {"c", s.c}, {"result", s.result},
                          {"scope", s.scope}, {"saturating", s.saturating}, {"flexible", s.flexible},
                          {"max_dimension", s.max_dimension}, {"workgroup_invocations", s.workgroup_invocations}});
    return {{"index", d.index}, {"name", d.name}, {"type", d.type}, {"driver", d.driver}, {"api_version", d.api_version},
            {"vendor_id", d.vendor_id}, {"device_id", d.device_id}, {"uuid", d.uuid},
            {"compute_units", d.compute_units}, {"compute_units_source", d.compute_units_source},
            {"subgroup_size", d.subgroup_size}, {"min_subgroup_size", d.min_subgroup_size},
            {"max_subgroup_size", d.max_subgroup_size}, {"subgroup_size_control", d.subgroup_size_control},
            {"max_workgroup_invocations", d.max_workgroup_invocations}, {"shared_memory_bytes", d.shared_memory_bytes},
            {"max_storage_buffer_range", d.max_storage_buffer_range}, {"fp16_storage", d.fp16_storage},
            {"fp16_arithmetic", d.fp16_arithmetic}, {"int8_arithmetic", d.int8_arithmetic},
            {"bf16_shader", d.bf16_shader}, {"bf16_cooperative_matrix", d.bf16_cooperative_matrix},
            {"fp8_shader", d.fp8_shader}, {"fp8_cooperative_matrix", d.fp8_cooperative_matrix},
            {"cooperative_matrix", shapes}, {"matrix_units", d.matrix_units}, {"matrix_units_off", d.matrix_units_off},
            {"matrix_tile", d.matrix_tile},
            {"bf16_matrix_units", d.bf16_matrix_units}, {"bf16_matrix_units_off", d.bf16_matrix_units_off},
            {"workgroup_matrices", d.workgroup_matrices}, {"workgroup_matrices_off", d.workgroup_matrices_off},
            {"workgroup_bf16_matrices", d.workgroup_bf16_matrices},
            {"inf_nan_preserve", d.inf_nan_preserve}, {"maximal_reconvergence", d.maximal_reconvergence},
            {"timestamp_period_ns", d.timestamp_period_ns}, {"heaps", heaps}, {"default_choice", d.default_choice},
            {"rejected", d.rejected}};
}

void print_text(const DeviceInfo& d) {
    std::cout << (d.default_choice ? "* " : "  ") << d.index << ": " << d.name << "\n"
              << "    type " << d.type << ", driver " << d.driver << ", Vulkan " << d.api_version << "\n"
              << "    compute units ";
    if (d.compute_units) std::cout << d.compute_units << " (" << d.compute_units_source << ")";
    else std::cout << "unknown (no extension tells)";
    std::cout << ", subgroup size " << d.subgroup_size;
    if (d.min_subgroup_size != d.max_subgroup_size || d.subgroup_size_control)
        std::cout << " (" << d.min_subgroup_size << "-" << d.max_subgroup_size
                  << (d.subgroup_size_control ? ", a pipeline may require one" : "") << ")";
    std::cout << ", workgroups up to " << d.max_workgroup_invocations << " invocations\n"
              << "    shared memory " << d.shared_memory_bytes << " B per workgroup, max storage buffer range "
              << d.max_storage_buffer_range << " B, timestamp period " << d.timestamp_period_ns << " ns\n"
              << "    fp16 storage " << yes(d.fp16_storage) << ", fp16 arithmetic " << yes(d.fp16_arithmetic)
              << ", int8 arithmetic " << yes(d.int8_arithmetic) << ", bf16 in shaders " << yes(d.bf16_shader)
              << ", fp8 in shaders " << yes(d.fp8_shader) << ", IEEE NaN/inf kept " << yes(d.inf_nan_preserve)
              << ", maximal reconvergence " << yes(d.maximal_reconvergence) << "\n"
              << "    cooperative matrices: ";
    if (d.cooperative_matrix.empty()) std::cout << "none";
    for (std::size_t i = 0; i < d.cooperative_matrix.size(); ++i)
        std::cout << (i ? ", " : "") << shape_text(d.cooperative_matrix[i]);
    if (!d.cooperative_matrix.empty()) {
        std::cout << " (bf16 " << yes(d.bf16_cooperative_matrix) << ", fp8 " << yes(d.fp8_cooperative_matrix) << ")"
                  << "\n    the cooperative-matrix kernels: ";
        if (d.matrix_units) {
            std::cout << "on the matrix units (" << d.matrix_tile
                      << (d.matrix_tile == "16x16x16" ? "" : ": each 16x16 matrix in parts") << "); bf16 storage ";
            if (d.bf16_matrix_units) std::cout << "on them too";
            else std::cout << "refused (" << d.bf16_matrix_units_off << ")";
            std::cout << "; workgroup matrices (flash_cm2.comp) ";
            if (d.workgroup_matrices) std::cout << "yes" << (d.workgroup_bf16_matrices ? ", bf16 too" : ", f16 only");
            else std::cout << "no, their portable twin (" << d.workgroup_matrices_off << ")";
        } else {
            std::cout << "portable (" << d.matrix_units_off << ")";
        }
    }
    std::cout << "\n    memory heaps:";
    for (const auto& h : d.heaps) std::cout << ' ' << (h.bytes >> 20) << " MiB" << (h.device_local ? " (device-local)" : "");
    std::cout << "\n    uuid " << d.uuid << ", vendor 0x" << std::hex << d.vendor_id << ", device 0x" << d.device_id
              << std::dec << '\n';
    if (!d.rejected.empty()) std::cout << "    unusable: " << d.rejected << '\n';
}

}  // namespace

Action add_devices(CLI::App& app) {
    app.footer("The device list comes from the Vulkan loader; lavapipe appears as a CPU device.");
    auto json = std::make_shared<bool>(false);
    app.add_flag("--json", *json, "One JSON object per device, a line each");
    return [json] {
        const auto devices = list_devices();
        if (devices.empty()) {
            std::cout << (*json ? "" : "no Vulkan device found\n");
            return 1;
        }
        for (const auto& d : devices) {
            if (*json) std::cout << to_json(d).dump() << '\n';
            else print_text(d);
        }
        if (!*json) std::cout << "(* = the default choice; choose another with --device N or $VKATTN_DEVICE)\n";
        return 0;
    };
}

}  // namespace vkattn::tool
