#include "attention/workgroup_matrices.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "attention/ceil_div.hpp"
#include "attention/device_rules.hpp"
#include "vkattn/errors.hpp"

namespace vkattn::detail {
namespace {

// The device's workgroup matrices' granularities for `operands` (f16, or bf16).
const vk::WorkgroupGranularities& granularities(const vk::DeviceCaps& caps, DType operands) {
    return operands == DType::bf16 ? caps.workgroup_matrix_bf16_granularity : caps.workgroup_matrix_granularity;
}

// The granularities of the device's workgroup matrices of `operands` at `invocations` within its
// limits on workgroup sizes, or nullptr where it offers none there.
const vk::MatrixGranularity* workgroup_size_offered(const vk::DeviceCaps& caps, std::uint32_t invocations, DType operands = DType::f16) {
    if (invocations > caps.workgroup_matrix_max_invocations || invocations > caps.max_workgroup_invocations) return nullptr;
    return vk::granularity_at(granularities(caps, operands), invocations);
}

// The workgroup sizes the device offers them at, for a message: "128 (32 x 16 x 16), 256 (...)".
std::string offered_sizes(const vk::DeviceCaps& caps, DType operands = DType::f16) {
    std::string sizes;
    const vk::WorkgroupGranularities& offered = granularities(caps, operands);
    for (std::size_t i = 0; i < offered.size(); ++i)
        if (const vk::MatrixGranularity& g = offered[i]; g.offered())
            sizes += (sizes.empty() ? "" : ", ") + std::to_string(1u << i) + " (granularity " + std::to_string(g.m) + " x " +
                     std::to_string(g.n) + " x " + std::to_string(g.k) + ")";
    return sizes.empty() ? "none" : sizes;
}

// 16-wide tiles rounded up until 16 · tiles is a multiple of `multiple`: a kernel's heads and columns
// may grow past the tensor's (its tensor loads clamp to 0 there, its stores stop at the tensor's).
std::uint32_t tiles_to_multiple(std::uint32_t tiles, std::uint32_t multiple) {
    const std::uint32_t step = std::lcm(16u, multiple) / 16u;
    return (tiles + step - 1) / step * step;
}

// InvalidArgument naming variant.workgroup_matrices where `kernel` would multiply bf16 `operands` on
// the driver's matrices and they take f16 alone (DeviceCaps::workgroup_bf16_matrices); `instead`
// names what bf16 storage takes. The portable twin multiplies either.
void refuse_bf16_where_f16_only(const vk::DeviceCaps& caps, DType operands, const std::string& kernel, const char* instead) {
    if (operands == DType::bf16 && caps.workgroup_matrices && !caps.workgroup_bf16_matrices)
        throw InvalidArgument("variant.workgroup_matrices",
                              kernel + " multiplies f16 operands on this device (DeviceInfo::workgroup_bf16_matrices: no flexible bf16 "
                                       "workgroup shape, VK_KHR_shader_bfloat16 or bf16 build); bf16 storage takes " + instead +
                                  " without it.");
}

// The first of a kernel's matrix extents that the granularity `g` does not divide, named, or "":
// `rows` are A's and accumulators' rows (m), `inner` A's columns and B's rows (k), `columns` B's and
// accumulators' columns (n).
std::string granularity_fault(const vk::MatrixGranularity& g, std::initializer_list<std::pair<std::uint32_t, const char*>> rows,
                              std::initializer_list<std::pair<std::uint32_t, const char*>> inner,
                              std::initializer_list<std::pair<std::uint32_t, const char*>> columns) {
    for (const auto& [list, step, role] : {std::tuple{rows, g.m, "rows (M"}, std::tuple{inner, g.k, "inner extent (K"},
                                           std::tuple{columns, g.n, "columns (N"}})
        for (const auto& [extent, what] : list)
            if (extent % step != 0)
                return std::string(what) + " (" + std::to_string(extent) + ") as a matrix's " + role + " granularity " +
                       std::to_string(step) + ")";
    return "";
}

}  // namespace

std::uint32_t workgroup_matrix_shared_bytes(const CoopmatLayout& t, std::uint32_t subgroups) {
    const std::uint32_t rows = t.rows(subgroups), stage = t.staged ? 2 * t.keys * (std::max(16 * t.dk_tiles, t.columns()) + 8) : 0;
    const std::uint32_t facts = 4 * (rows * (8 + 11) + 4) + stage;
    if (t.units) return facts;
    const std::uint32_t dk = 16 * t.dk_tiles, operands = rows * dk + dk * t.keys + rows * t.keys + t.keys * t.columns();
    return facts + 2 * operands + 4 * rows * t.keys;  // f16 pairs; fp32 for the reductions (S's shape)
}

namespace {
// common/wg_matrix.glsl's portable loops, as trips of one invocation of `w` over matrices of `r` rows:
// an accumulator's pairs of elements (WG_PAIRS), an operand's words two a trip, the products 16
// terms a trip, a row reduction's copy, its folds (one invocation a row, 4 columns a trip) and its
// spread.
struct PortableTrips {
    std::int64_t w, r;
    std::int64_t pairs(std::int64_t cols) const { return ceil_div(r * cols, 2 * w); }
    std::int64_t load(std::int64_t rows, std::int64_t cols) const { return ceil_div(rows * cols / 2, 2 * w); }
    std::int64_t product(std::int64_t depth, std::int64_t cols) const { return pairs(cols) * (1 + depth / 16); }
    std::int64_t reduce(std::int64_t from, std::int64_t to) const { return pairs(from) + ceil_div(r, w) * (from / 4) + pairs(to); }
};
}  // namespace

std::int64_t workgroup_matrix_loops_per_tile(const CoopmatLayout& t, std::uint32_t subgroup, std::uint32_t subgroups) {
    const PortableTrips n{std::int64_t{subgroup} * subgroups, t.rows(subgroups)};
    const std::int64_t c = t.keys, k = 16 * t.dk_tiles, o = t.columns();
    // Staged, K's and V's tiles 4 elements a trip first (flash_cm2.comp's STAGE_TILE).
    const std::int64_t staging = t.staged ? ceil_div(c * k / 4, n.w) + ceil_div(c * o / 4, n.w) : 0;
    return 1 + staging + n.load(k, c) + 2 * n.pairs(c) + n.product(k, c)               // K, S = Q·Kᵀ, the logits
           + n.reduce(c, 16) + 2 * n.pairs(16) + n.reduce(16, c) + n.pairs(c) + n.reduce(c, 16)  // m, α, P, the row sums
           + 2 * n.pairs(16) + n.pairs(c) + n.reduce(16, o) + n.pairs(o) + n.pairs(c)  // l, m, dropout, O·α, P as f16
           + n.load(c, o) + n.product(c, o);                                           // V, O += P·V
}

void choose_workgroup_matrices(CoopmatLayout& t, const vk::DeviceCaps& caps, std::uint32_t subgroup, std::uint32_t& subgroups,
                               const Problem& p, const VariantOverrides& o, bool kv_tensor_loads) {
    const char* knob = "variant.workgroup_matrices";
    const std::string kernel = "the workgroup-matrix kernel (flash_cm2.comp)";
    for (const auto& [set, name] : {std::pair{o.row_tiles.has_value(), "variant.row_tiles"},
                                    std::pair{o.q_in_shared.has_value(), "variant.q_in_shared"},
                                    std::pair{o.kv_apart.has_value(), "variant.kv_apart"},
                                    std::pair{o.named_accumulators.has_value(), "variant.named_accumulators"}})
        if (set)
            throw InvalidArgument(name, kernel + " lays its matrices out itself (the driver does): it has no row tiles, "
                                                 "Q tile, K/V tiles or O forms to choose; leave this unset beside workgroup_matrices.");
    refuse_bf16_where_f16_only(caps, t.operands, kernel, "the cooperative-matrix kernel");
    if (p.Dk > 128)
        throw InvalidArgument(knob, kernel + " takes Q and K heads up to 128 wide (Dk = " + std::to_string(p.Dk) +
                                        "); wider ones take the tile kernel.");
    t.workgroup_matrices = true;
    t.units = caps.workgroup_matrices;  // else the portable implementation (DeviceInfo::workgroup_matrices_off says why)
    t.staged = !kv_tensor_loads;
    t.row_tiles = 1;
    t.q_in_shared = t.kv_apart = t.named = t.ahead = false;
    t.column_tiles = static_cast<std::uint32_t>(std::clamp<std::int64_t>(ceil_div(p.Dv, 16), 1, 8));
    subgroups = t.units ? 4 : 1;  // 64 rows, 128 invocations on 32 lanes; portably 16 rows
    if (o.tile_rows) {
        const std::uint32_t br = *o.tile_rows;
        if (br == 0 || br % 16 != 0)
            throw InvalidArgument("variant.tile_rows", std::to_string(br) + " query rows per workgroup; " + kernel +
                                                           " takes a multiple of 16 (one subgroup per 16 rows).");
        subgroups = br / 16;
    }
    if (o.tile_keys) {
        const std::uint32_t bc = *o.tile_keys;
        if (bc == 0 || bc % 16 != 0 || bc > 256)
            throw InvalidArgument("variant.tile_keys", std::to_string(bc) + " keys per tile; " + kernel + " takes a multiple of 16 up to 256.");
        t.keys = bc;
    }
    const std::uint32_t invocations = subgroups * subgroup;
    if (!t.units) {
        if (invocations > caps.max_workgroup_invocations)
            throw InvalidArgument(o.tile_rows ? "variant.tile_rows" : knob, std::to_string(t.rows(subgroups)) + " rows take a workgroup of " +
                                                           std::to_string(invocations) + " invocations (one subgroup of " +
                                                           std::to_string(subgroup) + " per 16 rows); the device allows " +
                                                           std::to_string(caps.max_workgroup_invocations) + ".");
        while (!o.tile_keys && t.keys > 16 && workgroup_matrix_shared_bytes(t, subgroups) > caps.max_shared_bytes) t.keys /= 2;
        const std::uint32_t shared = workgroup_matrix_shared_bytes(t, subgroups);
        if (shared > caps.max_shared_bytes)
            throw InvalidArgument(o.tile_keys ? "variant.tile_keys" : o.tile_rows ? "variant.tile_rows" : knob,
                                  kernel + "'s portable implementation with " + std::to_string(t.rows(subgroups)) + " rows, " +
                                      std::to_string(t.keys) + "-key tiles and heads of " + std::to_string(16 * t.dk_tiles) + " and " +
                                      std::to_string(t.columns()) + " needs " + std::to_string(shared) +
                                      " bytes of shared memory; the device has " + std::to_string(caps.max_shared_bytes) +
                                      " (fewer rows or keys per tile fit).");
        return;
    }
    const vk::MatrixGranularity* g = workgroup_size_offered(caps, invocations, t.operands);
    if (!g)
        throw InvalidArgument(o.tile_rows ? "variant.tile_rows" : knob,
                              std::to_string(t.rows(subgroups)) + " rows take a workgroup of " + std::to_string(invocations) +
                                  " invocations (one subgroup of " + std::to_string(subgroup) + " per 16 rows); the device offers " +
                                  to_string(t.operands) + " workgroup matrices at " + offered_sizes(caps, t.operands) + " invocations, at most " +
                                  std::to_string(caps.workgroup_matrix_max_invocations) + ".");
    // The widths round up to the granularity (Q an accumulator, then A; K's tile B's rows; O's
    // columns), and the row values take N's where it is coarser than 16; the rows and keys are the
    // knobs' (or the defaults'), refused where the granularity does not divide them.
    t.dk_tiles = tiles_to_multiple(t.dk_tiles, std::lcm(g->k, g->n));
    t.column_tiles = tiles_to_multiple(t.column_tiles, g->n);
    t.stat_columns = std::lcm(16u, g->n);
    // Staged K/V take a tile of shared memory beside the driver's own: unforced, the keys halve
    // until it fits, while the granularity still divides them (the checks below say the rest).
    const std::uint32_t key_step = std::lcm(g->k, g->n);
    while (!o.tile_keys && t.staged && t.keys / 2 >= key_step && (t.keys / 2) % key_step == 0 &&
           workgroup_matrix_shared_bytes(t, subgroups) + caps.workgroup_matrix_reserved_shared > caps.max_shared_bytes)
        t.keys /= 2;
    const std::string at = kernel + " at " + std::to_string(invocations) + " invocations takes ";
    if (const std::string fault = granularity_fault(*g, {{t.rows(subgroups), "its rows"}}, {}, {}); !fault.empty())
        throw InvalidArgument(o.tile_rows ? "variant.tile_rows" : knob, at + fault + "; the device offers " + offered_sizes(caps, t.operands) + ".");
    if (const std::string fault = granularity_fault(*g, {}, {{t.keys, "its keys per tile"}}, {{t.keys, "its keys per tile"}}); !fault.empty())
        throw InvalidArgument(o.tile_keys ? "variant.tile_keys" : knob, at + fault + "; the device offers " + offered_sizes(caps, t.operands) + ".");
    if (const std::string fault = granularity_fault(*g, {}, {{16 * t.dk_tiles, "Q's width"}},
                                                    {{16 * t.dk_tiles, "Q's width"}, {t.columns(), "O's columns"}, {t.stat_columns, "its row values"}});
        !fault.empty())
        throw InvalidArgument(knob, at + fault + "; the device offers " + offered_sizes(caps, t.operands) + ".");
    // Each matrix dimension against the device's, named by what set it.
    for (const auto& [extent, name] : {std::pair{t.rows(subgroups), o.tile_rows ? "variant.tile_rows" : knob},
                                       std::pair{t.keys, o.tile_keys ? "variant.tile_keys" : knob},
                                       std::pair{16 * t.dk_tiles, knob}, std::pair{t.columns(), knob}})
        if (extent > caps.workgroup_matrix_max_dimension)
            throw InvalidArgument(name, kernel + " would need a matrix " + std::to_string(extent) + " wide; the device's flexible "
                                                 "matrices reach " + std::to_string(caps.workgroup_matrix_max_dimension) + ".");
    const std::uint32_t shared = workgroup_matrix_shared_bytes(t, subgroups) + caps.workgroup_matrix_reserved_shared;
    if (shared > caps.max_shared_bytes)
        throw InvalidArgument(o.tile_rows ? "variant.tile_rows" : knob,
                              kernel + " with " + std::to_string(t.rows(subgroups)) + " rows needs " + std::to_string(shared) +
                                  " bytes of shared memory (the driver's " + std::to_string(caps.workgroup_matrix_reserved_shared) +
                                  " for the matrices among them); the device has " + std::to_string(caps.max_shared_bytes) + ".");
}

void refuse_workgroup_without_coopmat(const std::optional<bool>& workgroup, bool coopmat, const char* knob) {
    if (workgroup.value_or(false) && !coopmat)
        throw InvalidArgument("variant.workgroup_matrices", std::string("shapes the cooperative-matrix kernels: set ") + knob +
                                                                " = coopmat beside it (the catalogue's coopmat-wg variants do).");
}

bool strides_allow_tensor_loads(const std::array<std::int64_t, 4>& s, std::int64_t row_length) {
    return s[3] == 1 && s[0] % 8 == 0 && s[1] % 8 == 0 && s[2] % 8 == 0 && s[2] >= row_length;
}

bool tensor_loads_aligned(const TensorDesc& d, std::int64_t row_length) {
    const std::array<std::int64_t, 4> strides{d.stride[0], d.stride[1], d.stride[2], d.stride[3]};
    return strides_allow_tensor_loads(strides, row_length) && d.origin[3] % 8 == 0;
}

bool kv_tensor_loads(const Problem& p, const std::array<std::int64_t, 4>& k_strides, const std::array<std::int64_t, 4>& v_strides) {
    const DType operands = coopmat_operand_type({p.dtype, p.k_dtype, p.v_dtype});
    return p.k_dtype == operands && p.v_dtype == operands && !p.paged_kv && strides_allow_tensor_loads(k_strides, p.Dk) &&
           strides_allow_tensor_loads(v_strides, p.Dv);
}

void require_tensor_loads_aligned(const TensorDesc& d, std::int64_t row_length, const char* what) {
    if (!tensor_loads_aligned(d, row_length))
        throw InvalidArgument("variant.workgroup_matrices",
                              std::string("the workgroup-matrix kernels read ") + what + " by tensor loads, whose tiles must start on 16 "
                                  "bytes, from rows at least their length (" + std::to_string(row_length) + ") apart: its rows of unit "
                                  "stride, its strides and offset multiples of 8 elements (16 bytes of f16 or bf16); these are strides " +
                                  std::to_string(d.stride[0]) + ", " + std::to_string(d.stride[1]) + ", " + std::to_string(d.stride[2]) + ", " +
                                  std::to_string(d.stride[3]) + " and offset " + std::to_string(d.origin[3]) +
                                  " (a dense tensor whose head width is a multiple of 8 gives them).");
}

std::uint32_t workgroup_backward_shared_bytes(const CoopmatBackwardLayout& t, std::uint32_t subgroups) {
    const std::uint32_t rows = 16 * subgroups, n = t.tile, k = 16 * t.dk_tiles, v = 16 * t.dv_tiles, o = t.columns();
    const std::uint32_t q_facts = 4 * (rows * (9 + 11) + 4), kv_terms = 4 * (n * (4 + 11) + 4);
    if (t.units) return std::max(q_facts, kv_terms);
    const std::uint32_t q_operands = rows * k + rows * v + k * n + v * n + rows * n + n * o;
    const std::uint32_t kv_operands = rows * k + rows * v + k * n + v * n + 2 * rows * n + 2 * n * o;
    return std::max(q_facts + 2 * q_operands, kv_terms + 2 * kv_operands);  // f16 pairs
}

namespace {
// The backward kernels' trips, which both make per tile of the other side: S and dP (or Sᵀ and dPᵀ),
// each a tensor load of the other side's K (Q) or V (dO) tile, a fill and a product; and one
// gradient product, dS's (or W's) conversion, the other side's column slice and the product.
struct BackwardTrips {
    PortableTrips n;
    std::int64_t c, k, v, o;
    BackwardTrips(const CoopmatBackwardLayout& t, std::uint32_t subgroup, std::uint32_t subgroups)
        : n{std::int64_t{subgroup} * subgroups, 16 * std::int64_t{subgroups}}, c(t.tile), k(16 * t.dk_tiles), v(16 * t.dv_tiles),
          o(t.columns()) {}
    std::int64_t scores() const { return n.load(k, c) + n.pairs(c) + n.product(k, c) + n.load(v, c) + n.pairs(c) + n.product(v, c); }
    std::int64_t gradient() const { return n.pairs(c) + n.load(c, o) + n.product(c, o); }
};
}  // namespace

std::int64_t workgroup_backward_loops_per_key_tile(const CoopmatBackwardLayout& t, std::uint32_t subgroup, std::uint32_t subgroups) {
    const BackwardTrips b(t, subgroup, subgroups);
    return 1 + b.scores() + 2 * b.n.pairs(b.c) + b.gradient();  // S, dP; P, dS; dQ += dS·K
}

std::int64_t workgroup_backward_loops_per_query_tile(const CoopmatBackwardLayout& t, std::uint32_t subgroup, std::uint32_t subgroups) {
    const BackwardTrips b(t, subgroup, subgroups);
    // The terms; Sᵀ, dPᵀ; P, then W, W∘dP and dS under dropout (else a copy and dS: lavapipe runs the
    // branch not taken masked, a trip per loop); dV, dK.
    return 1 + ceil_div(b.c, b.n.w) + b.scores() + 4 * b.n.pairs(b.c) + 2 + 2 * b.gradient();
}

void choose_workgroup_backward(CoopmatBackwardLayout& t, const vk::DeviceCaps& caps, std::uint32_t subgroup, std::uint32_t& subgroups,
                               const Problem& p) {
    const char* knob = "variant.workgroup_matrices";
    const std::string kernel = "the backward on workgroup-scope matrices (bwd_cm2_q.comp, bwd_cm2_kv.comp)";
    // Tensor loads of the operands' own elements: q, k, v (and dO, q's type) all f16 or all bf16.
    const DType operands = p.dtype;
    if ((operands != DType::f16 && operands != DType::bf16) || p.k_dtype != operands || p.v_dtype != operands)
        throw InvalidArgument(knob, kernel + " reads q, k, v and dO by tensor loads of f16 (or bf16) elements, all of one type; these "
                                             "are stored as " + to_string(p.dtype) + ", " + to_string(p.k_dtype) + " and " +
                                        to_string(p.v_dtype) + ".");
    refuse_bf16_where_f16_only(caps, operands, kernel, "the cooperative-matrix backward");
    if (p.Dk > 128 || p.Dv > 128)
        throw InvalidArgument(knob, kernel + " takes heads up to 128 wide (Dk = " + std::to_string(p.Dk) + ", Dv = " +
                                        std::to_string(p.Dv) + "); wider ones take the default kernels.");
    t.operands = operands;
    t.dk_tiles = static_cast<std::uint32_t>(ceil_div(std::max<std::int64_t>(p.Dk, 1), 16));
    t.dv_tiles = static_cast<std::uint32_t>(ceil_div(std::max<std::int64_t>(p.Dv, 1), 16));
    t.column_tiles = std::max(t.dk_tiles, t.dv_tiles);
    t.workgroup_matrices = true;
    t.units = caps.workgroup_matrices;  // else the portable implementation (DeviceInfo::workgroup_matrices_off says why)
    t.tile = 64;
    subgroups = t.units ? 4 : 1;
    if (!t.units) {
        while (t.tile > 16 && workgroup_backward_shared_bytes(t, subgroups) > caps.max_shared_bytes) t.tile /= 2;
        if (workgroup_backward_shared_bytes(t, subgroups) > caps.max_shared_bytes)
            throw InvalidArgument(knob, kernel + ", portably (common/wg_matrix.glsl), at Dk = " + std::to_string(p.Dk) + ", Dv = " +
                                            std::to_string(p.Dv) + " needs " + std::to_string(workgroup_backward_shared_bytes(t, subgroups)) +
                                            " bytes of shared memory at 16-wide tiles; the device has " +
                                            std::to_string(caps.max_shared_bytes) + ".");
        return;
    }
    const std::uint32_t invocations = subgroups * subgroup, rows = 16 * subgroups;
    const vk::MatrixGranularity* g = workgroup_size_offered(caps, invocations, t.operands);
    if (g) {  // the heads' widths and the gradients' columns round up to the granularity, as the forward's
        t.dk_tiles = tiles_to_multiple(t.dk_tiles, std::lcm(g->k, g->n));
        t.dv_tiles = tiles_to_multiple(t.dv_tiles, std::lcm(g->k, g->n));
        t.column_tiles = tiles_to_multiple(std::max(t.dk_tiles, t.dv_tiles), g->n);
    }
    // dQ's kernel: rows of queries, tiles of keys; dK's and dV's: rows of keys, tiles of queries.
    // Each side is an A's and accumulators' rows, and the tiles are B's and S's columns and then
    // an A's columns (dS, W): k and n.
    const std::string fault = g ? granularity_fault(*g, {{rows, "its rows"}},
                                                    {{t.tile, "its tiles"}, {16 * t.dk_tiles, "Q's and K's width"}, {16 * t.dv_tiles, "dO's and V's width"}},
                                                    {{t.tile, "its tiles"}, {16 * t.dk_tiles, "Q's and K's width"},
                                                     {16 * t.dv_tiles, "dO's and V's width"}, {t.columns(), "the gradients' columns"}})
                                : "";
    const std::uint32_t largest = std::max({rows, t.tile, 16 * t.dk_tiles, 16 * t.dv_tiles, t.columns()});
    const std::uint32_t shared = workgroup_backward_shared_bytes(t, subgroups) + caps.workgroup_matrix_reserved_shared;
    if (!g || !fault.empty() || largest > caps.workgroup_matrix_max_dimension || shared > caps.max_shared_bytes)
        throw InvalidArgument(knob, kernel + " takes " + std::to_string(invocations) + " invocations, matrices up to " +
                                        std::to_string(largest) + " wide" + (fault.empty() ? "" : " (" + fault + ")") + " and " +
                                        std::to_string(shared) + " bytes of shared memory; the device's " + to_string(t.operands) +
                                        " workgroup matrices come at " + offered_sizes(caps, t.operands) + " invocations, reach " +
                                        std::to_string(caps.workgroup_matrix_max_dimension) + ", and its shared memory is " +
                                        std::to_string(caps.max_shared_bytes) + " bytes.");
}

std::int64_t workgroup_gemm_loops(const BmmConfig& c, std::int64_t k) {
    const PortableTrips n{std::int64_t{c.subgroups()} * c.subgroup, c.block_rows()};
    const std::int64_t bk = c.coopmat_shape.depth, bn = c.block_cols();
    return 2 * n.pairs(bn) + ceil_div(k, bk) * (1 + n.load(c.block_rows(), bk) + n.load(bk, bn) + n.product(bk, bn));
}

void choose_workgroup_gemm(BmmConfig& c, const vk::DeviceCaps& caps, std::int64_t k) {
    const char* knob = "variant.workgroup_matrices";
    const std::uint32_t invocations = c.subgroups() * c.subgroup;
    c.workgroup_matrices = true;
    c.units = caps.workgroup_matrices;  // else the portable twin: A's and B's slices as f16 pairs in shared memory
    c.coopmat_wide = false;
    if (!c.units) {
        const std::uint32_t bytes = 2 * (c.block_rows() + c.block_cols()) * c.coopmat_shape.depth;
        if (invocations > caps.max_workgroup_invocations || bytes > caps.max_shared_bytes)
            throw InvalidArgument(knob, "the GEMM on workgroup-scope matrices' portable twin with the shape " + to_string(c.coopmat_shape) +
                                            " takes " + std::to_string(invocations) + " invocations and " + std::to_string(bytes) +
                                            " bytes of shared memory; the device has " + std::to_string(caps.max_workgroup_invocations) +
                                            " and " + std::to_string(caps.max_shared_bytes) + ".");
        refuse_gemm_past_loop_budget(caps, workgroup_gemm_loops(c, k), k, "the GEMM's portable twin");
        return;
    }
    const std::uint32_t largest = std::max({c.block_rows(), c.block_cols(), c.coopmat_shape.depth});
    const vk::MatrixGranularity* g = workgroup_size_offered(caps, invocations);
    const std::string fault = g ? granularity_fault(*g, {{c.block_rows(), "its tile's rows"}}, {{c.coopmat_shape.depth, "its slices' depth"}},
                                                    {{c.block_cols(), "its tile's columns"}})
                                : "";
    if (!g || !fault.empty() || largest > caps.workgroup_matrix_max_dimension || caps.workgroup_matrix_reserved_shared > caps.max_shared_bytes)
        throw InvalidArgument(knob, "the GEMM on workgroup-scope matrices with the shape " + to_string(c.coopmat_shape) + " takes " +
                                        std::to_string(invocations) + " invocations and matrices up to " + std::to_string(largest) +
                                        " wide" + (fault.empty() ? "" : " (" + fault + ")") +
                                        "; the device's f16 workgroup matrices come at " + offered_sizes(caps) + " invocations and reach " +
                                        std::to_string(caps.workgroup_matrix_max_dimension) + ".");
}

std::uint32_t workgroup_probe_invocations(const vk::DeviceCaps& caps) {
    if (!caps.workgroup_matrices || kWorkgroupProbeSharedBytes + caps.workgroup_matrix_reserved_shared > caps.max_shared_bytes)
        return 0;
    for (std::uint32_t n = 1; n <= 1024; n <<= 1)
        if (const vk::MatrixGranularity* g = workgroup_size_offered(caps, n);
            g && granularity_fault(*g, {{64, "rows"}}, {{64, "inner"}}, {{64, "columns"}, {16, "row values"}}).empty())
            return n;
    return 0;
}

void check_workgroup_gemm(BmmForm form, DType a, DType b) {
    if (form == BmmForm::at_b)
        throw InvalidArgument("variant.workgroup_matrices", "the GEMM on workgroup-scope matrices (bmm_cm2.comp) reads A as stored, "
                                                            "[M][K]: Aᵀ·B takes the cooperative-matrix GEMM without it.");
    if (a != DType::f16 || b != DType::f16)
        throw InvalidArgument("variant.workgroup_matrices", "the GEMM on workgroup-scope matrices (bmm_cm2.comp) reads A and B by "
                                                            "tensor loads of f16 elements; these are " + to_string(a) + " and " +
                                                            to_string(b) + ".");
}

}  // namespace vkattn::detail
