#include "vk/device_facts.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "vk/device_features.hpp"
#include "vk/newer_extensions.hpp"
#include "vk/pipeline.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::vk {
namespace {

std::string component_name(int type) {
    switch (type) {
        case VK_COMPONENT_TYPE_FLOAT16_KHR: return "f16";
        case VK_COMPONENT_TYPE_FLOAT32_KHR: return "f32";
        case VK_COMPONENT_TYPE_FLOAT64_KHR: return "f64";
        case VK_COMPONENT_TYPE_SINT8_KHR: return "i8";
        case VK_COMPONENT_TYPE_SINT16_KHR: return "i16";
        case VK_COMPONENT_TYPE_SINT32_KHR: return "i32";
        case VK_COMPONENT_TYPE_SINT64_KHR: return "i64";
        case VK_COMPONENT_TYPE_UINT8_KHR: return "u8";
        case VK_COMPONENT_TYPE_UINT16_KHR: return "u16";
        case VK_COMPONENT_TYPE_UINT32_KHR: return "u32";
        case VK_COMPONENT_TYPE_UINT64_KHR: return "u64";
        case kVkComponentTypeBfloat16: return "bf16";
        case kVkComponentTypeSint8PackedNv: return "i8x4";
        case kVkComponentTypeUint8PackedNv: return "u8x4";
        case kVkComponentTypeFloat8E4M3: return "e4m3";
        case kVkComponentTypeFloat8E5M2: return "e5m2";
        default: return "type " + std::to_string(type);
    }
}

std::string scope_name(int scope) {
    switch (scope) {
        case VK_SCOPE_DEVICE_KHR: return "device";
        case VK_SCOPE_WORKGROUP_KHR: return "workgroup";
        case VK_SCOPE_SUBGROUP_KHR: return "subgroup";
        case VK_SCOPE_QUEUE_FAMILY_KHR: return "queue family";
        default: return "scope " + std::to_string(scope);
    }
}

// A shape from a fixed or flexible properties structure (the same fields after the extents).
template <typename Properties>
CooperativeMatrixShape shape_of(std::uint32_t m, std::uint32_t n, std::uint32_t k, const Properties& p) {
    return {.m = m, .n = n, .k = k, .a = component_name(p.AType), .b = component_name(p.BType), .c = component_name(p.CType),
            .result = component_name(p.ResultType), .scope = scope_name(p.scope), .saturating = p.saturatingAccumulation == VK_TRUE};
}

std::vector<CooperativeMatrixShape> cooperative_matrix_shapes(VkInstance instance, VkPhysicalDevice physical) {
    auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR>(
        vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
    if (!get) return {};
    std::uint32_t count = 0;
    if (get(physical, &count, nullptr) != VK_SUCCESS) return {};
    std::vector<VkCooperativeMatrixPropertiesKHR> props(count, {VKATTN_STYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR});
    if (get(physical, &count, props.data()) < VK_SUCCESS) return {};
    std::vector<CooperativeMatrixShape> out;
    for (std::uint32_t i = 0; i < count; ++i) out.push_back(shape_of(props[i].MSize, props[i].NSize, props[i].KSize, props[i]));
    return out;
}

// Whether a (fixed or flexible) shape's extents take a 16 × 16 × 16 matrix.
bool fits_16(const CooperativeMatrixShape& s, bool flexible) {
    if (!s.flexible) return s.m == 16 && s.n == 16 && s.k == 16;
    return flexible && s.m > 0 && s.n > 0 && s.k > 0 && 16 % s.m == 0 && 16 % s.n == 0 && 16 % s.k == 0 &&
           s.max_dimension >= 16;
}

// compute_units with the extensions already read.
ComputeUnits compute_units(VkPhysicalDevice physical, const std::vector<VkExtensionProperties>& exts) {
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    if (offers(exts, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) {
        VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
        props.pNext = &sm;
        vkGetPhysicalDeviceProperties2(physical, &props);
        if (sm.shaderSMCount > 0) return {sm.shaderSMCount, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME};
    }
    if (offers(exts, VK_AMD_SHADER_CORE_PROPERTIES_2_EXTENSION_NAME)) {
        VkPhysicalDeviceShaderCoreProperties2AMD amd{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_2_AMD};
        props.pNext = &amd;
        vkGetPhysicalDeviceProperties2(physical, &props);
        if (amd.activeComputeUnitCount > 0) return {amd.activeComputeUnitCount, VK_AMD_SHADER_CORE_PROPERTIES_2_EXTENSION_NAME};
    }
    if (offers(exts, VK_ARM_SHADER_CORE_BUILTINS_EXTENSION_NAME)) {
        VkPhysicalDeviceShaderCoreBuiltinsPropertiesARM arm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_BUILTINS_PROPERTIES_ARM};
        props.pNext = &arm;
        vkGetPhysicalDeviceProperties2(physical, &props);
        if (arm.shaderCoreCount > 0) return {arm.shaderCoreCount, VK_ARM_SHADER_CORE_BUILTINS_EXTENSION_NAME};
    }
    return {};
}

}  // namespace

ComputeUnits compute_units(VkPhysicalDevice physical) { return compute_units(physical, device_extensions(physical)); }

std::vector<CooperativeMatrixShape> flexible_matrix_shapes(VkInstance instance, VkPhysicalDevice physical) {
    auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV>(
        vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV"));
    if (!get) return {};
    VkPhysicalDeviceCooperativeMatrix2PropertiesNV limits{VKATTN_STYPE_COOPERATIVE_MATRIX_2_PROPERTIES_NV};
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props.pNext = &limits;
    vkGetPhysicalDeviceProperties2(physical, &props);
    std::uint32_t count = 0;
    if (get(physical, &count, nullptr) != VK_SUCCESS) return {};
    std::vector<VkCooperativeMatrixFlexibleDimensionsPropertiesNV> shapes(count, {VKATTN_STYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV});
    if (get(physical, &count, shapes.data()) < VK_SUCCESS) return {};
    std::vector<CooperativeMatrixShape> out;
    for (std::uint32_t i = 0; i < count; ++i) {
        const auto& p = shapes[i];
        CooperativeMatrixShape shape = shape_of(p.MGranularity, p.NGranularity, p.KGranularity, p);
        shape.flexible = true;
        shape.max_dimension = limits.cooperativeMatrixFlexibleDimensionsMaxDimension;
        if (shape.scope == "workgroup") shape.workgroup_invocations = p.workgroupInvocations;
        out.push_back(std::move(shape));
    }
    return out;
}

void describe_tuning_facts(VkInstance instance, VkPhysicalDevice physical, DeviceInfo& info, NewerQueries ask) {
    const auto exts = device_extensions(physical);
    VkPhysicalDeviceIDProperties id{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
    VkPhysicalDeviceSubgroupSizeControlPropertiesEXT size{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT};
    const bool size_ext = offers(exts, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    if (size_ext) id.pNext = &size;
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props.pNext = &id;
    vkGetPhysicalDeviceProperties2(physical, &props);
    info.vendor_id = props.properties.vendorID;
    info.device_id = props.properties.deviceID;
    info.uuid.clear();
    for (std::uint8_t byte : id.deviceUUID) {
        char hex[3];
        std::snprintf(hex, sizeof hex, "%02x", byte);
        info.uuid += hex;
    }
    info.timestamp_period_ns = props.properties.limits.timestampPeriod;
    info.max_workgroup_invocations = props.properties.limits.maxComputeWorkGroupInvocations;

    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT size_features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    if (size_ext) features.pNext = &size_features;
    vkGetPhysicalDeviceFeatures2(physical, &features);
    info.min_subgroup_size = info.max_subgroup_size = info.subgroup_size;
    info.subgroup_size_control = false;
    if (size_ext) {
        info.min_subgroup_size = size.minSubgroupSize;
        info.max_subgroup_size = size.maxSubgroupSize;
        info.subgroup_size_control = size_features.subgroupSizeControl == VK_TRUE &&
                                     (size.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
    }

    // The newer extensions are read without their feature structures (but bf16's and
    // VK_NV_cooperative_matrix2's, where `ask` says no older layer is on): a validation layer older
    // than them (Debian 12's) reports an unknown structure in a pNext chain as an error, and every
    // context is described with the layer on in the tests. The shapes come from
    // vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR, which such a layer passes through (and a
    // device that offers the extension supports its cooperativeMatrix feature), and the flexible
    // ones where the device supports flexible dimensions; bf16 and fp8 in shaders are their
    // extensions offered, on matrix units the shapes that take them.
    info.cooperative_matrix.clear();
    if (offers(exts, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME)) info.cooperative_matrix = cooperative_matrix_shapes(instance, physical);
    const bool flexible = !info.cooperative_matrix.empty() && offers(exts, VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME) &&
                          ask.matrix2 && supports_flexible_matrices(physical);
    if (flexible)
        for (CooperativeMatrixShape& shape : flexible_matrix_shapes(instance, physical)) info.cooperative_matrix.push_back(std::move(shape));
    auto shapes_take = [&](const char* a, const char* b = nullptr) {
        for (const auto& shape : info.cooperative_matrix)
            if (shape.a == a || (b && shape.a == b)) return true;
        return false;
    };
    info.bf16_shader = offers(exts, VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME);
    info.bf16_cooperative_matrix = shapes_take("bf16");
    info.fp8_shader = offers(exts, VK_EXT_SHADER_FLOAT8_EXTENSION_NAME);
    info.fp8_cooperative_matrix = shapes_take("e4m3", "e5m2");

    // What a context's own device gets (no validation layer older than the extension on).
    DeviceFeatures available = available_features(physical);
    available.flexible_matrices = flexible;
    available.workgroup_matrices = flexible && ask.spirv_1_6 && supports_workgroup_matrices(physical);
    DeviceFeatures enabled = available;
    if (ask.bf16 && available.bf16_matrices) enabled.bf16_matrices = supports_bf16_matrices(physical);
    info.maximal_reconvergence = available.maximal_reconvergence;
    describe_matrix_units(info, available, enabled, "", kNoBf16MatrixFeatures);

    const ComputeUnits units = compute_units(physical, exts);
    info.compute_units = units.count;
    info.compute_units_source = units.source;
}

namespace {
bool takes_matrices(const std::vector<CooperativeMatrixShape>& shapes, const char* operand, bool flexible) {
    for (const CooperativeMatrixShape& s : shapes)
        if (fits_16(s, flexible) && s.a == operand && s.b == operand && s.c == "f32" && s.result == "f32" && s.scope == "subgroup" &&
            !s.saturating)
            return true;
    return false;
}
}  // namespace

bool takes_f16_matrices(const std::vector<CooperativeMatrixShape>& shapes, bool flexible) {
    return takes_matrices(shapes, "f16", flexible);
}
bool takes_bf16_matrices(const std::vector<CooperativeMatrixShape>& shapes, bool flexible) {
    return takes_matrices(shapes, "bf16", flexible);
}
bool matrices_need_flexible_dimensions(const std::vector<CooperativeMatrixShape>& shapes, MatrixTile tile) {
    return (tile.found() && !f16_matrix_tile(shapes, false, tile).found()) ||
           (takes_bf16_matrices(shapes) && !takes_bf16_matrices(shapes, false));
}

MatrixTile f16_matrix_tile(const std::vector<CooperativeMatrixShape>& shapes, bool flexible, MatrixTile forced) {
    if (!forced.found() && takes_f16_matrices(shapes, flexible)) return {16, 16};
    MatrixTile best{};
    for (const CooperativeMatrixShape& s : shapes) {
        if (s.a != "f16" || s.b != "f16" || s.c != "f32" || s.result != "f32" || s.scope != "subgroup" || s.saturating) continue;
        for (const std::uint32_t m : {8u, 16u})
            for (const std::uint32_t n : {8u, 16u}) {
                const bool takes = s.flexible ? flexible && s.m > 0 && s.n > 0 && s.k > 0 && m % s.m == 0 && n % s.n == 0 &&
                                                    16 % s.k == 0 && s.max_dimension >= 16
                                              : s.m == m && s.n == n && s.k == 16;
                const MatrixTile tile{m, n};
                if (takes && (forced.found() ? tile == forced : m * n > best.m * best.n)) best = tile;
            }
    }
    return best;
}

MatrixTile forced_matrix_tile() {
    const char* text = std::getenv("VKATTN_MATRIX_TILE");
    if (text == nullptr || *text == '\0') return {};
    for (const MatrixTile tile : {MatrixTile{8, 8}, MatrixTile{8, 16}, MatrixTile{16, 8}, MatrixTile{16, 16}})
        if (std::string(text) == std::to_string(tile.m) + "x" + std::to_string(tile.n)) return tile;
    throw InvalidArgument("VKATTN_MATRIX_TILE", std::string("'") + text + "' is not a tile of the matrix units the kernels take: 8x8, "
                                                "8x16, 16x8 or 16x16 (16 deep).");
}

WorkgroupGranularities workgroup_matrix_granularities(const std::vector<CooperativeMatrixShape>& shapes, const std::string& operands) {
    WorkgroupGranularities granularity{};
    for (const CooperativeMatrixShape& s : shapes) {
        if (!s.flexible || s.scope != "workgroup" || s.a != operands || s.b != operands || s.c != "f32" || s.result != "f32" || s.saturating ||
            s.m == 0 || s.n == 0 || s.k == 0)
            continue;
        for (std::size_t i = 0; i < granularity.size(); ++i) {
            MatrixGranularity& g = granularity[i];
            const std::uint64_t volume = std::uint64_t{s.m} * s.n * s.k;
            if (s.workgroup_invocations == (1u << i) && (!g.offered() || volume < std::uint64_t{g.m} * g.n * g.k))
                g = {s.m, s.n, s.k};
        }
    }
    return granularity;
}

void describe_matrix_units(DeviceInfo& info, const DeviceFeatures& available, const DeviceFeatures& enabled,
                           const std::string& why_not_enabled, const std::string& why_bf16_not_enabled,
                           const std::string& why_workgroup_not_enabled) {
    info.matrix_units = info.bf16_matrix_units = info.workgroup_matrices = info.workgroup_bf16_matrices = false;
    info.matrix_units_off.clear();
    info.bf16_matrix_units_off.clear();
    info.workgroup_matrices_off.clear();
    info.matrix_tile.clear();
    if (info.cooperative_matrix.empty()) return;  // no matrix units to speak of
    const MatrixTile forced = forced_matrix_tile(), tile = f16_matrix_tile(info.cooperative_matrix, enabled.flexible_matrices, forced);
    if (!tile.found())
        info.matrix_units_off = "no f16 x f16 + f32 subgroup shape of 16x16x16, or of 8 or 16 rows and columns 16 deep" +
                                std::string(forced.found() ? " ($VKATTN_MATRIX_TILE's)" : "");
    else if (!available.cooperative_matrix)
        info.matrix_units_off = "vulkanMemoryModel or shaderFloat16 is not offered";
    else if (!enabled.cooperative_matrix)
        info.matrix_units_off = why_not_enabled;
    else if (!matrix_unit_shaders_built() || (tile.parts() && !matrix_part_shaders_built()))
        info.matrix_units_off = "this build has no matrix units' shaders (VKATTN_COOPMAT_UNITS; shaders/toolchain.txt)";
    else
        info.matrix_units = true;
    if (info.matrix_units) info.matrix_tile = std::to_string(tile.m) + "x" + std::to_string(tile.n) + "x16";
    if (!info.matrix_units)
        info.bf16_matrix_units_off = "the matrix units are off";
    else if (!takes_bf16_matrices(info.cooperative_matrix, enabled.flexible_matrices))
        info.bf16_matrix_units_off = "no 16x16x16 bf16 x bf16 + f32 subgroup shape";
    else if (!available.bf16_matrices)
        info.bf16_matrix_units_off = "VK_KHR_shader_bfloat16 is not offered";
    else if (!bf16_unit_shaders_built())
        info.bf16_matrix_units_off = "this build has no bf16 units' shaders (a glslang >= 15.3: VKATTN_BF16_GLSLANG)";
    else if (!enabled.bf16_matrices)
        info.bf16_matrix_units_off = why_bf16_not_enabled;
    else
        info.bf16_matrix_units = true;
    if (!info.matrix_units)
        info.workgroup_matrices_off = "the matrix units are off";
    else if (!offers_workgroup_matrices(workgroup_matrix_granularities(info.cooperative_matrix)))
        info.workgroup_matrices_off = "no flexible f16 x f16 + f32 workgroup-scope shape (VK_NV_cooperative_matrix2; listed only where "
                                      "no validation layer older than it is on)";
    else if (!available.workgroup_matrices)
        info.workgroup_matrices_off = "VK_NV_cooperative_matrix2's workgroup scope, tensor addressing, reductions, conversions or "
                                      "element operations, or Vulkan 1.3 (SPIR-V 1.6) on the device and the instance, are not offered";
    else if (!workgroup_matrix_shaders_built())
        info.workgroup_matrices_off = "this build has no workgroup-matrix kernel (a glslang >= 15: VKATTN_BF16_GLSLANG)";
    else if (!enabled.workgroup_matrices)
        info.workgroup_matrices_off = why_workgroup_not_enabled;
    else
        info.workgroup_matrices = true;
    // bf16 operands on them too: as DeviceCaps::workgroup_bf16_matrices.
    info.workgroup_bf16_matrices = info.workgroup_matrices && info.bf16_matrix_units &&
                                   offers_workgroup_matrices(workgroup_matrix_granularities(info.cooperative_matrix, "bf16")) &&
                                   workgroup_bf16_shaders_built();
}

}  // namespace vkattn::vk
