// The cooperative-matrix prefill kernel's layout (shaders/flash_coopmat.comp, issue #33; the cost
// model is docs/design/GPU_KERNELS.md "Cooperative matrices"): FlashAttention-2's partition with
// S = Q·Kᵀ and O += P·V as 16×16×16 products (common/coopmat.glsl). A workgroup owns 16 query rows
// per subgroup (or two tiles of 16: row_tiles); each subgroup holds its rows' Q as operands (or reads
// them from Q's own tile) and their O as accumulators; K and V pass through one operand tile in shared
// memory (or two: kv_apart), S and P through the subgroup's own. Pure (no Vulkan).
#pragma once

#include <cstdint>
#include <string>

#include "attention/problem.hpp"
#include "vk/device_caps.hpp"

namespace vkattn::detail {

// Bytes of one operand element in the cooperative-matrix kernels' shared tiles: f16 or bf16 on the
// matrix units, fp32 holding such values in the portable implementation (common/coopmat.glsl's CM_ELEM).
inline std::uint32_t coopmat_operand_bytes(bool units) { return units ? 2 : 4; }

// The cooperative-matrix kernels' operand type for operands stored as `stored` (q, k and v; A and
// B): bf16 where one is stored as bf16 (fp32's range, where f16's would overflow past ±65,504),
// else f16 (f32 storage, and the quantized types' values, rounded to it). InvalidArgument(`argument`)
// naming `kernel` (and `instead`, what to use) where f16 and bf16 are mixed (one would be rounded to
// the other's precision or range), and where bf16 would run on matrix units that do not take it
// (DeviceCaps::bf16_matrix_units; DeviceInfo::bf16_matrix_units_off says why).
DType coopmat_operands(const vk::DeviceCaps& caps, std::initializer_list<DType> stored, const std::string& argument,
                       const std::string& kernel, const std::string& instead);
// coopmat_operands' rule without its refusals: bf16 where any of `stored` is bf16, else f16.
DType coopmat_operand_type(std::initializer_list<DType> stored);

// The name of the kernels' build for `units` and `operands` on a device whose units' tile is `tile`
// (shaders/CMakeLists.txt): "coopmat", "coopmat_bf16", "coopmat_units", "coopmat_units_bf16", and
// "coopmat_units_parts" (CM_PARTS) for f16 operands where the tile is in parts (vk::MatrixTile).
std::string coopmat_build(bool units, DType operands, vk::MatrixTile tile = {16, 16});
// Whether that build is the parts one: its kernels then take the tile as CM_M and CM_N
// (common/coopmat.glsl's constant ids 40 and 41; attention/kernels.cpp).
bool coopmat_parts(bool units, DType operands, vk::MatrixTile tile);
// The cooperative-matrix kernels' subgroup where their parts build runs (coopmat_parts, for data
// stored as `stored`; not the workgroup-matrix kernels, `workgroup`): the tile's N lanes, required
// where a pipeline may require it, for such a tile is the matrix unit's width (Intel's DPAS: 8 lanes
// on Arc A-series, whose ANV lists 8 × 8 × 16, 16 on Xe2's 8 × 16 × 16); elsewhere `subgroup` and
// `require` as kernel_subgroup chose them.
void matrix_parts_subgroup(const vk::DeviceCaps& caps, std::initializer_list<DType> stored, bool workgroup, std::uint32_t& subgroup,
                           bool& require);

struct CoopmatLayout {
    std::uint32_t keys = 64;         // Bc: keys per tile, a multiple of 16
    std::uint32_t dk_tiles = 8;      // Q's and K's 16-dimension tiles: ceil(Dk / 16)
    std::uint32_t column_tiles = 8;  // O's 16-column tiles per pass (OC = 16 of them at most 8)
    bool units = false;              // on the matrix units (16-bit operands in shared memory), else portable
    DType operands = DType::f16;     // what the products multiply: f16, or bf16 (coopmat_operands)
    bool named = false;              // O as named matrices (O_NAMED), else an array: named_by_default
    bool ahead = false;              // K/V a phase ahead in registers (AHEAD): ahead_with
    // 16-row tiles per subgroup (RT): 1, or 2 (VariantOverrides::row_tiles), where each K and V
    // operand feeds two products and Q is read from a tile of its own at every product of S
    // rather than held (held, 2·dk_tiles operands beside 8 named accumulators would be the state
    // that computed wrong at D 128 on NVIDIA's driver; Q's own tile validated there, session 26).
    // O's accumulators number column_tiles · row_tiles, at most 8 (named).
    std::uint32_t row_tiles = 1;
    // Q's operands read from a shared tile of their own at every product of S (Q_SHARED), rather
    // than held in registers: always with two row tiles; with one where forced
    // (VariantOverrides::q_in_shared), as session 26's qshared probe (4·dk_tiles registers fewer;
    // named O validated at D 128 so on NVIDIA's driver where held it was wrong).
    bool q_in_shared = false;
    // K and V in shared tiles of their own, staged together a whole tile ahead (KV_APART;
    // VariantOverrides::kv_apart): 2 workgroup barriers per key tile where taking turns in one tile
    // needs 4 (the count's "barriers" lever, docs/design/GPU_KERNELS.md), for V's tile and both
    // tiles' chunks in registers (16 more at D 64 with 4 subgroups).
    bool kv_apart = false;
    // The workgroup-matrix kernel (shaders/flash_cm2.comp) rather than flash_coopmat.comp:
    // VariantOverrides::workgroup_matrices, settled by choose_workgroup_matrices
    // (attention/workgroup_matrices.hpp). Then only keys, dk_tiles, column_tiles and the subgroups
    // (16 rows each) describe it.
    bool workgroup_matrices = false;
    // flash_cm2.comp's row values (maximum, sum, factors) as BR × stat_columns matrices: 16, or the
    // device's N granularity where coarser (choose_workgroup_matrices).
    std::uint32_t stat_columns = 16;
    // flash_cm2.comp's K/V staged as f16 through shared memory by the typed loaders (STAGED; PAGED
    // for a paged cache) rather than read by tensor loads: K/V of any storage type, rows of any
    // alignment, paged caches (choose_workgroup_matrices).
    bool staged = false;
    std::uint32_t rows(std::uint32_t subgroups) const { return 16 * row_tiles * subgroups; }
    std::uint32_t columns() const { return 16 * column_tiles; }
    // flash_coopmat.comp's shared memory: the K/V tile [Bc][max(16·dk_tiles, OC) + 8] (16·dk_tiles +
    // 8 where K and V are apart; a held Q passes through it Bc rows at a time), V's own
    // [Bc][OC + 8] with kv_apart, Q's [Br][16·dk_tiles + 8] with q_in_shared (8 elements each
    // otherwise), and per row S [Bc + 4] (fp32) and P [Bc + 8]; operands f16 or bf16 on the units,
    // 4-byte floats in the portable implementation; and the workgroup's key range.
    std::uint32_t shared_bytes(std::uint32_t subgroups) const;
    // Whether flash_coopmat.comp holds a tile's K or V in registers a phase ahead (AHEAD) and may
    // fetch rows stored as its operands (f16, bf16) on 16 bytes as uvec4s (WIDE) with this layout: up to 6 d-tiles and 6 column
    // tiles (heads ≤ 96, measured 1.4× faster and right on the units). At 7 and 8 the 16-byte loads
    // gave wrong results on NVIDIA's 580 driver (H200, session 23: D 112, 120, 128; 4-element loads
    // passed once, at D 124), not yet understood, so wider heads keep the staging chunk by chunk,
    // validated there at D 128. The same rule in the portable implementation, which so tests both.
    bool staged_ahead() const;
    // Whether the kernel stages ahead (`ahead`) with K/V whose chunks come as 16-byte words or not
    // (`wide_loads`): staged_ahead, and with the typed loaders' chunks up to 8 d-tiles and column
    // tiles in all. Past that, ahead through the typed loaders gave wrong results on NVIDIA's 580
    // driver (H200, session 26: D 92, 0.17 relative, with O named) where D 96's 16-byte loads and
    // D 64's typed ones passed, and 12 tiles staged chunk by chunk passed (Dk 128 with Dv 64).
    bool ahead_with(bool wide_loads) const;
    // Whether flash_coopmat.comp holds O as named accumulators (O_NAMED) rather than an array, unless
    // forced (VariantOverrides::named_accumulators): always where Q is read from shared memory
    // (q_in_shared; validated at D 128 in session 26), else where d-tiles and column tiles number 15
    // at most. NVIDIA's compiler kept the array in local memory (exactly O's size at every head size
    // measured); named, O stayed in registers and the forward ran faster (H200, session 25: 16% at
    // D 64, N 4,096 and 8,192; 1-14% at D 40-112, N 1,000). At 8 d-tiles and 8 column tiles (D 120,
    // 128; 244 registers) the named form gave wrong results there (0.19 relative), as other kernels
    // near the 255-register cap have; Dk 128 with Dv 64 and Dk 64 with Dv 128 passed. So D 120 and
    // 128 keep the array. The same rule in the portable implementation, which so tests both forms.
    bool named_by_default() const;
    std::string describe() const;
};

// The layout, on the matrix units where DeviceCaps::matrix_units says they run: 4 subgroups (64 rows)
// where the device's invocations allow, 64-key tiles, O in passes
// of up to 128 columns; smaller tiles, then fewer subgroups, then narrower passes where shared
// memory is short. overrides.row_tiles sets 16-row tiles per subgroup (2: 2 subgroups, 64 rows, and
// passes of up to 64 columns; InvalidArgument naming it past 2 or where it does not fit);
// overrides.q_in_shared and kv_apart set those fields (InvalidArgument naming q_in_shared where two
// row tiles would hold Q, and each where its tiles do not fit).
// overrides.tile_rows and tile_keys force Br and Bc (InvalidArgument naming them
// where the device cannot take them); overrides.named_accumulators forces O's form
// (InvalidArgument naming it where named on the units goes past named_by_default). Returns the
// subgroups through `subgroups`. Throws InvalidArgument("variant.fused_kernel") where even the
// smallest tiles do not fit, and as coopmat_operands does. `ahead` assumes 16-byte loads wherever K
// and V are stored as the operands' type with rows of a multiple of 8 elements; the run settles it
// on the tensors' strides (ahead_with). `kv_tensor_loads`: as choose_workgroup_matrices takes it.
CoopmatLayout choose_coopmat_layout(const vk::DeviceCaps& caps, std::uint32_t subgroup, std::uint32_t& subgroups,
                                    const Problem& problem, const VariantOverrides& overrides = {}, bool kv_tensor_loads = true);

// Heads past 128 (Dk or Dv) on the matrix units: InvalidArgument("variant.fused_kernel") naming
// `kernel` (and `instead`). check's D = 256 case came out 16% wrong there on NVIDIA's 580 driver
// (H100 and H200, session 23; the forward before and after that session's changes), while the
// portable implementation passes it. Not yet understood, so refused; the backward's, unmeasured
// there, alike. `q_in_shared`: the forward's layout reads Q from a tile of its own (q_in_shared
// forced, or two row tiles), taken: the kernel that failed held Q's 16 operands across the key
// loop, the live state that computed wrong at D 128 too, where Q in its own tile validated
// (session 26). Q so past 128 is unmeasured on the units and never chosen by the heuristics (they
// read Q so only with two row tiles, which they never choose); the tuner may time it, keeping it only
// where it agrees with the heuristics' kernel. For a GPU session to validate
// (bench/points/layouts_check.txt).
void refuse_wide_heads_on_units(const vk::DeviceCaps& caps, const Problem& problem, const std::string& kernel,
                                const std::string& instead, bool q_in_shared = false);

// Whether the tuning's heuristics choose flash_coopmat.comp unforced for the forward: on the
// device's matrix units (never their portable implementation, nor a CPU's: lavapipe's, from Mesa
// 26.1, split every product into 8 × 8 × 8 scalar loops, docs/LAVAPIPE.md), for f16 storage of q, k and v (whose
// products then multiply exactly the stored values; only P rounds to f16, as FlashAttention's
// does), and where the kernels run with maximal reconvergence (vk/spirv_patch.hpp), so that no
// driver's reconvergence rules can reach the units' operations. Measured on an H200 (sessions
// 21-22, docs/PERFORMANCE.md): 5-7x flash_tile.comp, and correct at every mask the bisect tried
// once its softmax chose by selects. The backward's kernels follow the same rule (choose_backward)
// since their causal runs and every [backward][coopmat] case matched the reference on the units
// (session 26). Not bf16 storage, even on units that take bf16 (DeviceCaps::bf16_matrix_units): its
// kernels are the same with bf16 operands but have never run on a GPU, and the f16 ones computed
// wrong on NVIDIA's driver several times before they were validated; forced or tuned (the tuner
// keeps a kernel only where it agrees with the heuristics') until a GPU session validates them.
// Not units whose tile is in parts (DeviceCaps::matrix_tile: Intel's) for the same reason: their
// build has run on lavapipe's units alone.
bool coopmat_by_default(const vk::DeviceCaps& caps, const Problem& problem);

// Loop back-edges one key tile of flash_coopmat.comp may take (lavapipe counts them).
std::int64_t coopmat_loops_per_tile(const CoopmatLayout& layout, std::uint32_t subgroup, std::uint32_t subgroups,
                                    const Problem& problem);

}  // namespace vkattn::detail
