#include "attention/kernels.hpp"

#include <algorithm>

#include "attention/coopmat_tile.hpp"
#include "attention/workgroup_matrices.hpp"
#include "runtime.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

// bmm.comp's constant_ids (bmm_tile.comp shares those it has).
enum BmmConstant : std::uint32_t {
    kWorkgroup = 0, kWgM, kWgN, kTm, kTn4, kBTransposed, kSharedTiles, kKs4, kAdd, kAType, kBType, kATransposed,
    kCoopmatSubgroup,    // bmm_coopmat.comp's CM_SG
    kCoopmatDepth,       // and its K per slice (BK)
    kCoopmatTilesM,      // its accumulators per subgroup down C (TM) and across (TN)
    kCoopmatTilesN,
    kCoopmatSubgroupsM,  // its subgroups down C (WM) and across (WN)
    kCoopmatSubgroupsN,
    kCoopmatStages,      // its slices' buffers
    kCoopmatWide         // its 16-byte loads
};

// An output's storage in a variant's name: "32", "16", "bf16".
std::string out_suffix(DType t) {
    if (t == DType::f32) return "32";
    if (t == DType::f16) return "16";
    if (t == DType::bf16) return "bf16";
    throw Error("internal: no shader writes " + to_string(t) + ".");
}

// Texel variants read float views: only f32 and f16.
void check_texel_inputs(std::initializer_list<DType> inputs) {
    for (const DType t : inputs)
        if (t != DType::f32 && t != DType::f16) throw Error("internal: a texel variant cannot read " + to_string(t) + ".");
}

// The parts build's tile (coopmat_parts) as common/coopmat.glsl's CM_M and CM_N, else nothing.
std::vector<vk::SpecConstant> matrix_tile_constants(bool units, DType operands, vk::MatrixTile tile) {
    if (!coopmat_parts(units, operands, tile)) return {};
    return {{.id = 40, .value = tile.m}, {.id = 41, .value = tile.n}};
}

}  // namespace

std::uint32_t shader_type_code(DType t) {
    switch (t) {  // common/storage_types.glsl
        case DType::f32: return 0;
        case DType::f16: return 1;
        case DType::bf16: return 2;
        case DType::q8_0: return 3;
        case DType::q4_0: return 4;
        case DType::q4_1: return 5;
        case DType::q5_0: return 6;
        case DType::q5_1: return 7;
        case DType::iq4_nl: return 8;
        case DType::fp8_e4m3: return 9;
        case DType::fp8_e5m2: return 10;
        default: break;
    }
    throw Error("internal: no shader reads " + to_string(t) + ".");
}

const vk::Kernel& bmm_kernel(Runtime& runtime, const BmmConfig& c, BmmForm form, DType a, DType b, DType out,
                             BmmAdd add) {
    if (c.coopmat && c.workgroup_matrices) {  // bmm_cm2.comp: bmm_coopmat.comp's ids for what they share
        check_workgroup_gemm(form, a, b);
        const GemmShape& s = c.coopmat_shape;
        return runtime.kernels().get({.shader = std::string(c.units ? "bmm_cm2_c" : "bmm_cm2_portable_c") + out_suffix(out),
                                      .constants = {{.id = kWorkgroup, .value = c.subgroups() * c.subgroup},
                                                    {.id = kBTransposed, .value = form == BmmForm::a_bt ? 1u : 0u},
                                                    {.id = kAdd, .value = static_cast<std::uint32_t>(add)},
                                                    {.id = kCoopmatSubgroup, .value = c.subgroup},
                                                    {.id = kCoopmatDepth, .value = s.depth},
                                                    {.id = kCoopmatTilesM, .value = s.tiles_m},
                                                    {.id = kCoopmatTilesN, .value = s.tiles_n},
                                                    {.id = kCoopmatSubgroupsM, .value = s.subgroups_m},
                                                    {.id = kCoopmatSubgroupsN, .value = s.subgroups_n}},
                                      .required_subgroup_size = c.require_subgroup ? c.subgroup : 0});
    }
    if (c.coopmat) {
        const DType operands = coopmat_operands(runtime.device().caps(), {a, b}, "a", "the cooperative-matrix GEMM",
                                                "another GemmKernel");
        if (c.coopmat_wide && (form == BmmForm::at_b || a != operands || b != operands))
            throw Error("internal: bmm_coopmat.comp's 16-byte loads read A and B stored as its operands, along K or N "
                        "(coopmat_wide_operands).");
        const GemmShape& s = c.coopmat_shape;
        vk::KernelKey key{
            .shader = "bmm_" + coopmat_build(c.units, operands, runtime.device().caps().matrix_tile) + "_c" + out_suffix(out),
            .constants = {{.id = kWorkgroup, .value = c.subgroups() * c.subgroup},
                          {.id = kBTransposed, .value = form == BmmForm::a_bt ? 1u : 0u},
                          {.id = kATransposed, .value = form == BmmForm::at_b ? 1u : 0u},
                          {.id = kAdd, .value = static_cast<std::uint32_t>(add)},
                          {.id = kAType, .value = shader_type_code(a)},
                          {.id = kBType, .value = shader_type_code(b)},
                          {.id = kCoopmatSubgroup, .value = c.subgroup},
                          {.id = kCoopmatDepth, .value = s.depth},
                          {.id = kCoopmatTilesM, .value = s.tiles_m},
                          {.id = kCoopmatTilesN, .value = s.tiles_n},
                          {.id = kCoopmatSubgroupsM, .value = s.subgroups_m},
                          {.id = kCoopmatSubgroupsN, .value = s.subgroups_n},
                          {.id = kCoopmatStages, .value = s.stages},
                          {.id = kCoopmatWide, .value = c.coopmat_wide ? 1u : 0u}},
            .required_subgroup_size = c.require_subgroup ? c.subgroup : 0};
        for (const vk::SpecConstant& k : matrix_tile_constants(c.units, operands, runtime.device().caps().matrix_tile))
            key.constants.push_back(k);
        return runtime.kernels().get(key);
    }
    if (c.texel) check_texel_inputs({a, b});
    if (c.tile && (c.texel || c.shared_tiles || c.tm != 8 || c.tn4 != 2))
        throw Error("internal: bmm_tile.comp reads words into its own shared slices, 8x8 outputs per invocation.");
    if (!c.tile && form == BmmForm::at_b && (c.shared_tiles || c.tm % 4 != 0))
        throw Error("internal: bmm.comp reads a transposed A without shared tiles, 4·k rows per invocation.");
    const std::string shader = c.tile ? "bmm_tile_c" : c.texel ? "bmm_texel_c" : "bmm_words_c";
    vk::KernelKey key{
        .shader = shader + out_suffix(out),
        .constants = {
            {.id = kWorkgroup, .value = c.wg_m * c.wg_n},
            {.id = kWgM, .value = c.wg_m},
            {.id = kWgN, .value = c.wg_n},
            {.id = kBTransposed, .value = form == BmmForm::a_bt ? 1u : 0u},
            {.id = kATransposed, .value = form == BmmForm::at_b ? 1u : 0u},
            {.id = kKs4, .value = c.ks4},
            {.id = kAdd, .value = static_cast<std::uint32_t>(add)},
        }};
    if (!c.tile)  // bmm_tile.comp's micro-tile is fixed
        key.constants.insert(key.constants.end(), {{.id = kTm, .value = c.tm},
                                                   {.id = kTn4, .value = c.tn4},
                                                   {.id = kSharedTiles, .value = c.shared_tiles ? 1u : 0u}});
    if (!c.texel)
        key.constants.insert(key.constants.end(), {{.id = kAType, .value = shader_type_code(a)},
                                                   {.id = kBType, .value = shader_type_code(b)}});
    return runtime.kernels().get(key);
}

const vk::Kernel& softmax_kernel(Runtime& runtime, const SoftmaxConfig& c) {
    const vk::KernelKey key{
        .shader = c.subgroup_ops ? "softmax_subgroup" : "softmax_shared",
        .constants = {{.id = 0, .value = c.workgroup}},  // WG, also the local size
    };
    return runtime.kernels().get(key);
}

namespace {
// The constant_ids the flash kernels (flash.comp, flash_decode.comp, flash_tile.comp) number alike:
// the workgroup size (0), the subgroup size (1), the subgroups (6), the paged pools (10) and the
// operands' storage types (11-13, for the variants that read words). Each kernel adds its own.
vk::KernelKey flash_family_key(std::string shader, const FusedConfig& c, const OperandTypes& types, bool typed,
                               std::uint32_t paged_pools, const char* kernel) {
    enum : std::uint32_t { kWorkgroupSize = 0, kSubgroup = 1, kSubgroups = 6, kPools = 10, kQType, kKType, kVType };
    if (paged_pools > kMaxPagedPools) throw Error(std::string("internal: ") + kernel + " binds at most 4 pools.");
    vk::KernelKey key{.shader = std::move(shader),
                      .constants = {{.id = kWorkgroupSize, .value = c.subgroups * c.subgroup},
                                    {.id = kSubgroup, .value = c.subgroup},
                                    {.id = kSubgroups, .value = c.subgroups},
                                    {.id = kPools, .value = std::max(paged_pools, 1u)}},
                      .required_subgroup_size = c.require_subgroup ? c.subgroup : 0u};
    if (typed)
        key.constants.insert(key.constants.end(), {{.id = kQType, .value = shader_type_code(types.q)},
                                                   {.id = kKType, .value = shader_type_code(types.k)},
                                                   {.id = kVType, .value = shader_type_code(types.v)}});
    return key;
}

// The workgroup-matrix kernels' build (flash_cm2.comp, bwd_cm2_*.comp): the driver's matrices or the
// portable twin, and bf16 operands.
std::string workgroup_build(bool units, DType operands) {
    return std::string(units ? "cm2" : "cm2_portable") + (operands == DType::bf16 ? "_bf16" : "");
}
}  // namespace

const vk::Kernel& flash_kernel(Runtime& runtime, const FusedConfig& c, const OperandTypes& types, bool split,
                               std::uint32_t paged_pools) {
    // flash.comp's own constant_ids.
    enum FlashConstant : std::uint32_t { kRows = 2, kKeysPerLane, kDv4, kSplit, kStage = 7, kKd4, kVw4 };
    const bool float_texels = c.texel && !c.texel_words;
    if (float_texels) check_texel_inputs({types.q, types.k, types.v});
    const DType out = split ? DType::f32 : types.q;  // split partials are fp32
    std::string shader = paged_pools > 0 ? "flash_paged_" : "flash_";
    shader += (c.texel_words ? "texel_words_o" : c.texel ? "texel_o" : "words_o") + out_suffix(out);
    vk::KernelKey key = flash_family_key(std::move(shader), c, types, !float_texels, paged_pools, "flash.comp");
    key.constants.insert(key.constants.end(), {{.id = kRows, .value = c.rows},
                                               {.id = kKeysPerLane, .value = c.keys_per_lane},
                                               {.id = kDv4, .value = c.dv4},
                                               {.id = kSplit, .value = split ? 1u : 0u},
                                               {.id = kStage, .value = c.staged ? 1u : 0u},
                                               {.id = kKd4, .value = c.kd4},
                                               {.id = kVw4, .value = c.v_width4}});
    return runtime.kernels().get(key);
}

const vk::Kernel& flash_decode_kernel(Runtime& runtime, const FusedConfig& c, const OperandTypes& types, bool wide,
                                      std::uint32_t paged_pools) {
    // flash_decode.comp's own constant_ids.
    enum DecodeConstant : std::uint32_t { kRows = 2, kLanesPerKey, kKeysPerLane, kKChunks, kVChunks = 7, kWide };
    if (!c.decode) throw Error("internal: flash_decode_kernel needs a decode config.");
    const DecodeLayout& d = *c.decode;
    vk::KernelKey key = flash_family_key(paged_pools > 0 ? "flash_decode_paged" : "flash_decode", c, types, true,
                                         paged_pools, "flash_decode.comp");
    key.constants.insert(key.constants.end(), {{.id = kRows, .value = c.rows},
                                               {.id = kLanesPerKey, .value = d.lanes_per_key},
                                               {.id = kKeysPerLane, .value = d.keys_per_lane},
                                               {.id = kKChunks, .value = d.k_chunks},
                                               {.id = kVChunks, .value = d.v_chunks},
                                               {.id = kWide, .value = wide ? 1u : 0u}});
    return runtime.kernels().get(key);
}

const vk::Kernel& flash_tile_kernel(Runtime& runtime, const FusedConfig& c, const OperandTypes& types, bool split,
                                    std::uint32_t paged_pools) {
    // flash_tile.comp's own constant_ids.
    enum TileConstant : std::uint32_t { kRowsPerLane = 2, kKeysPerLane, kKeyGroups, kSplit, kDimsPerChunk = 7, kColumns = 9 };
    if (!c.tile) throw Error("internal: flash_tile_kernel needs a tile config.");
    const TileLayout& t = *c.tile;
    const DType out = split ? DType::f32 : types.q;  // split partials are fp32
    vk::KernelKey key = flash_family_key(std::string(paged_pools > 0 ? "flash_tile_paged_o" : "flash_tile_o") + out_suffix(out),
                                         c, types, true, paged_pools, "flash_tile.comp");
    key.constants.insert(key.constants.end(), {{.id = kRowsPerLane, .value = t.rows_per_lane},
                                               {.id = kKeysPerLane, .value = t.keys_per_lane},
                                               {.id = kKeyGroups, .value = t.key_groups},
                                               {.id = kSplit, .value = split ? 1u : 0u},
                                               {.id = kDimsPerChunk, .value = t.dims_per_chunk},
                                               {.id = kColumns, .value = t.columns}});
    return runtime.kernels().get(key);
}

const vk::Kernel& flash_coopmat_kernel(Runtime& runtime, const FusedConfig& c, const OperandTypes& types, bool split,
                                       std::uint32_t paged_pools, bool wide) {
    // flash_coopmat.comp's own constant_ids.
    enum CoopmatConstant : std::uint32_t { kKeys = 2, kDkTiles, kColumnTiles, kSplit, kStatColumns = 7, kWide = 14, kAhead, kNamedO, kRowTiles,
                                          kQInShared, kKvApart };  // kStatColumns: flash_cm2.comp's alone
    if (!c.coopmat) throw Error("internal: flash_coopmat_kernel needs a coopmat config.");
    const CoopmatLayout& t = *c.coopmat;
    const DType out = split ? DType::f32 : types.q;  // split partials are fp32
    if (t.workgroup_matrices) {  // flash_cm2.comp: the same ids for what it shares with flash_coopmat.comp
        if (paged_pools > 0 && !t.staged) throw Error("internal: flash_cm2.comp reads a paged cache staged only.");
        const std::string kv = paged_pools > 0 ? "_paged" : t.staged ? "_staged" : "";
        const std::string shader = "flash_" + workgroup_build(t.units, t.operands) + kv + "_o" + out_suffix(out);
        vk::KernelKey key = flash_family_key(shader, c, types, true, paged_pools, "flash_cm2.comp");
        key.constants.insert(key.constants.end(), {{.id = kKeys, .value = t.keys},
                                                   {.id = kDkTiles, .value = t.dk_tiles},
                                                   {.id = kColumnTiles, .value = t.column_tiles},
                                                   {.id = kSplit, .value = split ? 1u : 0u},
                                                   {.id = kStatColumns, .value = t.stat_columns},
                                                   {.id = kRowTiles, .value = 1u}});
        return runtime.kernels().get(key);
    }
    const vk::MatrixTile tile = runtime.device().caps().matrix_tile;
    std::string shader = "flash_" + coopmat_build(t.units, t.operands, tile);
    shader += std::string(paged_pools > 0 ? "_paged_o" : "_o") + out_suffix(out);
    vk::KernelKey key = flash_family_key(std::move(shader), c, types, true, paged_pools, "flash_coopmat.comp");
    key.constants.insert(key.constants.end(), {{.id = kKeys, .value = t.keys},
                                               {.id = kDkTiles, .value = t.dk_tiles},
                                               {.id = kColumnTiles, .value = t.column_tiles},
                                               {.id = kSplit, .value = split ? 1u : 0u},
                                               {.id = kWide, .value = wide ? 1u : 0u},
                                               {.id = kAhead, .value = t.ahead ? 1u : 0u},
                                               {.id = kNamedO, .value = t.named ? 1u : 0u},
                                               {.id = kRowTiles, .value = t.row_tiles},
                                               {.id = kQInShared, .value = t.q_in_shared ? 1u : 0u},
                                               {.id = kKvApart, .value = t.kv_apart ? 1u : 0u}});
    for (const vk::SpecConstant& k : matrix_tile_constants(t.units, t.operands, tile)) key.constants.push_back(k);
    return runtime.kernels().get(key);
}

const vk::Kernel& combine_kernel(Runtime& runtime, DType dtype) {
    const vk::KernelKey key{
        .shader = "combine_o" + out_suffix(dtype),
        .constants = {{.id = 0, .value = 64}},  // WG, also the local size: columns of one row
    };
    return runtime.kernels().get(key);
}

const vk::Kernel& bwd_delta_kernel(Runtime& runtime, DType o) {
    return runtime.kernels().get({.shader = "bwd_delta", .constants = {{.id = 0, .value = shader_type_code(o)}}});
}

const vk::Kernel& copy_kernel(Runtime& runtime) { return runtime.kernels().get({.shader = "copy"}); }

const vk::Kernel& clock_probe_kernel(Runtime& runtime) { return runtime.kernels().get({.shader = "clock_probe"}); }

const vk::Kernel& workgroup_probe_kernel(Runtime& runtime, std::uint32_t invocations) {
    return runtime.kernels().get({.shader = "cm2_probe", .constants = {{.id = 0, .value = invocations}}});
}

const vk::Kernel& bwd_sinks_kernel(Runtime& runtime) { return runtime.kernels().get({.shader = "bwd_sinks"}); }

const vk::Kernel& bwd_scores_kernel(Runtime& runtime) { return runtime.kernels().get({.shader = "bwd_scores"}); }

const vk::Kernel& bwd_mask_kernel(Runtime& runtime, const OperandTypes& types) {
    return runtime.kernels().get({.shader = "bwd_mask",
                                  .constants = {{.id = 11, .value = shader_type_code(types.q)},
                                                {.id = 12, .value = shader_type_code(types.k)},
                                                {.id = 13, .value = shader_type_code(types.v)}}});
}

namespace {
// flash_bwd_q.comp's and flash_bwd_kv.comp's constant_ids: the same numbers as flash.comp's.
vk::KernelKey backward_key(std::string shader, const BackwardConfig& c, std::uint32_t rows, std::uint32_t per_lane,
                           const OperandTypes& types) {
    enum : std::uint32_t { kWorkgroupSize = 0, kSubgroup = 1, kRows = 2, kPerLane = 3, kSlots = 4, kSubgroups = 6,
                           kQType = 11, kKType = 12, kVType = 13 };
    return {.shader = std::move(shader),
            .constants = {{.id = kWorkgroupSize, .value = c.subgroups * c.subgroup},
                          {.id = kSubgroup, .value = c.subgroup},
                          {.id = kRows, .value = rows},
                          {.id = kPerLane, .value = per_lane},
                          {.id = kSlots, .value = c.slots},
                          {.id = kSubgroups, .value = c.subgroups},
                          {.id = kQType, .value = shader_type_code(types.q)},
                          {.id = kKType, .value = shader_type_code(types.k)},
                          {.id = kVType, .value = shader_type_code(types.v)}},
            .required_subgroup_size = c.require_subgroup ? c.subgroup : 0u};
}
// A backward variant's loads, as its name says them.
std::string backward_loads(const BackwardConfig& c, const OperandTypes& types) {
    if (c.texel && !c.texel_words) check_texel_inputs({types.q, types.k, types.v});
    return c.texel_words ? "texel_words_" : c.texel ? "texel_" : "words_";
}

// flash_bwd_q_coopmat.comp's and flash_bwd_kv_coopmat.comp's constants (the flash family's ids).
vk::KernelKey coopmat_backward_key(std::string shader, const BackwardConfig& c, const OperandTypes& types, vk::MatrixTile tile) {
    enum : std::uint32_t { kWorkgroupSize = 0, kSubgroup = 1, kTile = 2, kDkTiles = 3, kColumnTiles = 4, kDvTiles = 5,
                           kSubgroups = 6, kQType = 11, kKType = 12, kVType = 13 };
    const CoopmatBackwardLayout& t = *c.coopmat;
    // bwd_cm2_*.comp: f16 (or bf16) q, k, v and dO (choose_workgroup_backward), so gradients of that type.
    const std::string build = t.workgroup_matrices ? workgroup_build(t.units, t.operands) : coopmat_build(t.units, t.operands, tile);
    vk::KernelKey key{.shader = "bwd_" + build + "_" + shader,
                      .constants = {{.id = kWorkgroupSize, .value = c.subgroups * c.subgroup},
                          {.id = kSubgroup, .value = c.subgroup},
                          {.id = kTile, .value = t.tile},
                          {.id = kDkTiles, .value = t.dk_tiles},
                          {.id = kColumnTiles, .value = t.column_tiles},
                          {.id = kDvTiles, .value = t.dv_tiles},
                          {.id = kSubgroups, .value = c.subgroups},
                          {.id = kQType, .value = shader_type_code(types.q)},
                          {.id = kKType, .value = shader_type_code(types.k)},
                          {.id = kVType, .value = shader_type_code(types.v)}},
            .required_subgroup_size = c.require_subgroup ? c.subgroup : 0u};
    if (!t.workgroup_matrices)
        for (const vk::SpecConstant& k : matrix_tile_constants(t.units, t.operands, tile)) key.constants.push_back(k);
    return key;
}
}  // namespace

const vk::Kernel& bwd_q_kernel(Runtime& runtime, const BackwardConfig& c, const OperandTypes& types) {
    if (c.coopmat) return runtime.kernels().get(coopmat_backward_key("q_o" + out_suffix(types.q), c, types, runtime.device().caps().matrix_tile));
    return runtime.kernels().get(backward_key("bwd_q_" + backward_loads(c, types) + "o" + out_suffix(types.q), c, c.q_rows,
                                              c.q_keys_per_lane, types));
}

const vk::Kernel& bwd_kv_kernel(Runtime& runtime, const BackwardConfig& c, const OperandTypes& types) {
    if (c.coopmat)
        return runtime.kernels().get(coopmat_backward_key("kv_k" + out_suffix(types.k) + "_v" + out_suffix(types.v), c, types,
                                                               runtime.device().caps().matrix_tile));
    return runtime.kernels().get(backward_key("bwd_kv_" + backward_loads(c, types) + "k" + out_suffix(types.k) + "_v" +
                                                  out_suffix(types.v),
                                              c, c.kv_keys, c.kv_rows_per_lane, types));
}

const vk::Kernel& kv_append_kernel(Runtime& runtime, DType in, DType k_out, DType v_out, bool paged) {
    const bool halves = k_out != DType::f32 || v_out != DType::f32;
    const vk::KernelKey key{
        .shader = std::string(paged ? "kv_append_paged" : "kv_append") + (halves ? "_halves" : ""),
        .constants = {{.id = 0, .value = 64},  // WG, also the local size: features (or blocks) of one row
                      {.id = 1, .value = shader_type_code(in)},
                      {.id = 2, .value = shader_type_code(k_out)},
                      {.id = 3, .value = shader_type_code(v_out)}},
    };
    return runtime.kernels().get(key);
}

const vk::Kernel& kv_advance_kernel(Runtime& runtime) {
    const vk::KernelKey key{.shader = "kv_append_advance", .constants = {{.id = 0, .value = 64}}};
    return runtime.kernels().get(key);
}

}  // namespace vkattn::detail
