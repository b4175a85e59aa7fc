// Workgroup-scope matrices behind one small interface (issue #33; docs/design/GPU_KERNELS.md
// "Workgroup matrices"), with two implementations, as common/coopmat.glsl is for subgroup scope:
// - CM_KHR (the units' build): VK_NV_cooperative_matrix2's workgroup-scope matrices, tensor loads,
//   row reductions, element operations and conversions; the driver lays the matrices out and stages
//   the loads. Each macro is the one intrinsic it names.
// - otherwise, the portable implementation, on any device (lavapipe): an accumulator is an fp32
//   array in each invocation's registers, element e = r · cols + c held by invocation (e / 2) % WG
//   in slot 2 · (e / (2 · WG)) + e % 2 (pairs together, so that an operand's word is one
//   invocation's); an operand (A or B) is a shared array of f16 (bf16) pairs, one word per two elements;
//   a row reduction passes through the shared `wg_reduce`. Tensor loads compute each element's
//   address by the extension's own formulas (SPV_NV_cooperative_matrix2, "Tensor Layout and View")
//   for the forms the kernels use: two dimensions, unit inner stride, constant clamping to 0, an
//   optional transposed view (permutation 1, 0, no dimensions of its own). So the kernels' tiling,
//   masks and softmax run, and are tested, where no driver offers the matrices; the thin intrinsic
//   layer is a GPU's to test (vkattn/testing/workgroup_matrix_probe.hpp).
// The operations (WG_FILLED, WG_LOAD*, WG_STAGE_PUT4, WG_TO_OPERAND, WG_PRODUCT, WG_MAP*, WG_ROW_REDUCE, WG_SCALE*,
// WG_COPY; WG_ACC, WG_LAYOUT and WG_TRANSPOSED declare) are statements, reached by the whole
// workgroup in uniform control flow (the portable ones meet barriers). WG_HALVES declares a binding.
// The storage macros are whole declarations with their own semicolons (an empty one at global
// scope is an error in GLSL 450): no `;` after them (WG_STAGE_STORAGE too). Requires of the includer: WG (the workgroup's
// invocations, a constant); for the portable build, WG_REDUCE_STORAGE(n) at global scope with
// n ≥ rows × columns of every reduced matrix, and WG_OPERAND_STORAGE(name, rows, cols) for each
// operand matrix.
// Element functions take (row, column, element, extra...) as the extension's do; an extra
// argument is a scalar (WG_MAP1, WG_MAP2) or a matrix of the same shape (WG_MAP_M, WG_MAP_MM,
// WG_MAP_MM1: the element at the same position).
#ifndef VKATTN_WG_MATRIX_GLSL
#define VKATTN_WG_MATRIX_GLSL

#include "common/float_bits.glsl"

// The operands' 16-bit type: f16, or bf16 where CM_BF16 is defined (fp32's range, 8 bits of
// mantissa). A pair of them in a word, rounded to nearest even (bf16 in integers, as the host's
// float_to_bf16), and back.
#ifdef CM_BF16
uint wg_pack2(const vec2 v) { return bf16_bits(v.x) | (bf16_bits(v.y) << 16u); }
vec2 wg_unpack2(const uint w) { return vec2(uintBitsToFloat(w << 16u), uintBitsToFloat(w & 0xffff0000u)); }
#else
uint wg_pack2(const vec2 v) { return packHalf2x16(v); }
vec2 wg_unpack2(const uint w) { return unpackHalf2x16(w); }
#endif

#ifdef CM_KHR
#ifdef CM_BF16
#define WG_ELEM bfloat16_t
#else
#define WG_ELEM float16_t
#endif
#define WG_ACC_TYPE(rows, cols) coopmat<float, gl_ScopeWorkgroup, rows, cols, gl_MatrixUseAccumulator>
#define WG_OPERAND_TYPE(rows, cols, use) coopmat<WG_ELEM, gl_ScopeWorkgroup, rows, cols, use>
// A binding of the operands' elements for the tensor loads (Vulkan lets variables alias a binding).
#define WG_HALVES(block, name, index) layout(std430, set = 0, binding = index) readonly buffer block { WG_ELEM name[]; }
#define WG_OPERAND_STORAGE(name, rows, cols)
#define WG_REDUCE_STORAGE(size)
#define WG_ACC(name, rows, cols) WG_ACC_TYPE(rows, cols) name
#define WG_FILLED(name, rows, cols, value) WG_ACC_TYPE(rows, cols) name = WG_ACC_TYPE(rows, cols)(value)
#define WG_LAYOUT(name, dim0, dim1, stride0)                                                                   \
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> name =                                          \
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);                                      \
    name = setTensorLayoutDimensionNV(name, dim0, dim1);                                                       \
    name = setTensorLayoutStrideNV(name, stride0, 1)
#define WG_TRANSPOSED(name) tensorViewNV<2, false, 1, 0> name = createTensorViewNV(2, false, 1, 0)
// name = the rows × cols region of `buf` from element `at`, sliced [o0, o0 + s0) × [o1, o1 + s1).
#define WG_LOAD(name, rows, cols, use, buf, at, layout, o0, s0, o1, s1) \
    WG_OPERAND_TYPE(rows, cols, use) name;                              \
    coopMatLoadTensorNV(name, buf, at, sliceTensorLayoutNV(layout, o0, s0, o1, s1))
#define WG_LOAD_VIEW(name, rows, cols, use, buf, at, layout, o0, s0, o1, s1, view) \
    WG_OPERAND_TYPE(rows, cols, use) name;                                         \
    coopMatLoadTensorNV(name, buf, at, sliceTensorLayoutNV(layout, o0, s0, o1, s1), view)
// A tile the kernel stages itself in shared memory, as operands (WG_STAGE_STORAGE, a whole declaration;
// `elements` a multiple of 8): uvec4s, so that every row of a multiple of 8 elements starts on 16
// bytes, as the units' loads from shared memory want. WG_STAGE_PUT4 writes elements e..e + 3 (e a
// multiple of 4); WG_LOAD_STAGED loads name (rows × cols) from the tile's element 0, its rows
// (WG_ROW_MAJOR) or columns (WG_COLUMN_MAJOR) `pitch` elements apart (a multiple of 8), by the KHR
// load that workgroup-scope matrices take from shared memory.
#define WG_STAGE_STORAGE(name, elements) shared uvec4 name[(elements) / 8u];
#define WG_STAGE_PUT4(name, e, x)                                                   \
    {                                                                               \
        const uint wg_w = (e) >> 1u;                                                \
        name[wg_w >> 2u][wg_w & 3u] = wg_pack2((x).xy);                         \
        name[wg_w >> 2u][(wg_w & 3u) + 1u] = wg_pack2((x).zw);                  \
    }
#define WG_ROW_MAJOR gl_CooperativeMatrixLayoutRowMajor
#define WG_COLUMN_MAJOR gl_CooperativeMatrixLayoutColumnMajor
#define WG_LOAD_STAGED(name, rows, cols, use, tile, pitch, major) \
    WG_OPERAND_TYPE(rows, cols, use) name;                        \
    coopMatLoad(name, tile, 0u, (pitch) / 8u, major)
#ifdef CM_BF16
// bf16's rounding in integers first, so that the conversion is exact whatever rounding the driver
// uses (Vulkan leaves it to the implementation): the twin's and the subgroup kernels' rounding.
float wg_round_operand(const in uint r, const in uint c, const in float x) { return uintBitsToFloat(bf16_bits(x) << 16u); }
#define WG_TO_OPERAND(name, rows, cols, use, acc)                     \
    WG_ACC_TYPE(rows, cols) name##_rounded;                           \
    coopMatPerElementNV(name##_rounded, acc, wg_round_operand);       \
    const WG_OPERAND_TYPE(rows, cols, use) name = WG_OPERAND_TYPE(rows, cols, use)(name##_rounded)
#else
#define WG_TO_OPERAND(name, rows, cols, use, acc) const WG_OPERAND_TYPE(rows, cols, use) name = WG_OPERAND_TYPE(rows, cols, use)(acc)
#endif
#define WG_PRODUCT(c, a, b, m, k, n) c = coopMatMulAdd(a, b, c)
#define WG_MAP0(dst, src, rows, cols, f) coopMatPerElementNV(dst, src, f)
#define WG_MAP1(dst, src, rows, cols, f, x) coopMatPerElementNV(dst, src, f, x)
#define WG_MAP2(dst, src, rows, cols, f, x, y) coopMatPerElementNV(dst, src, f, x, y)
#define WG_MAP_M(dst, src, rows, cols, f, m) coopMatPerElementNV(dst, src, f, m)
#define WG_MAP_MM(dst, src, rows, cols, f, m, n) coopMatPerElementNV(dst, src, f, m, n)
#define WG_MAP_MM1(dst, src, rows, cols, f, m, n, x) coopMatPerElementNV(dst, src, f, m, n, x)
// dst (rows × dst_cols) = each row of src (rows × src_cols) reduced by f, in every column.
#define WG_ROW_REDUCE(dst, dst_cols, src, rows, src_cols, f) coopMatReduceNV(dst, src, gl_CooperativeMatrixReduceRowNV, f)
#define WG_SCALE(dst, factor, rows, cols) dst = dst * factor
#define WG_SCALE_ADD(dst, factor, addend, rows, cols) dst = factor * dst + addend
#define WG_COPY(dst, src, rows, cols) dst = src

#else  // the portable implementation

// Lavapipe counts every trip of every loop of a shader against a budget (Mesa 22.3: 65,535 in all;
// DeviceCaps::max_loop_iterations) and ends the loops past it, so each loop here does a pair of
// elements (a word of operand) a trip, the products 16 terms, the folds 4 columns; the host counts
// the trips (workgroup_matrix_loops_per_tile) and caps a dispatch's tiles by them.
#define WG_SLOTS(rows, cols) (2u * (((rows) * (cols) + 2u * WG - 1u) / (2u * WG)))
#define WG_ELEMENT(i) ((((i) >> 1u) * WG + gl_LocalInvocationIndex) * 2u + ((i) & 1u))
#define WG_HALVES(block, name, index) layout(std430, set = 0, binding = index) readonly buffer block { uint name[]; }
#define WG_HALF(words, i) wg_half_of(wg_unpack2((words)[(i) >> 1u]), i)
#define WG_OPERAND_STORAGE(name, rows, cols) shared uint name[(rows) * (cols) / 2u];
#define WG_REDUCE_STORAGE(size) shared float wg_reduce[size];
#define WG_ACC(name, rows, cols) float name[WG_SLOTS(rows, cols)]
// A loop over an accumulator's pairs: slot wg_i (element wg_e: row wg_r, column wg_c) and wg_i + 1
// (the next column), where the pair lies within the matrix (rows × cols is even, cols too). `body`
// is statements with no comma outside parentheses (the preprocessor would split it).
#define WG_PAIRS(rows, cols, body)                                      \
    for (uint wg_i = 0u; wg_i < WG_SLOTS(rows, cols); wg_i += 2u) {     \
        const uint wg_e = WG_ELEMENT(wg_i), wg_r = wg_e / (cols), wg_c = wg_e % (cols); \
        if (wg_e < (rows) * (cols)) { body }                            \
    }
#define WG_FILLED(name, rows, cols, value) \
    WG_ACC(name, rows, cols);              \
    WG_PAIRS(rows, cols, name[wg_i] = name[wg_i + 1u] = (value);)

// Element i % 2 of a pair, by a select rather than an index into the vector.
float wg_half_of(const vec2 pair, const uint i) { return (i & 1u) != 0u ? pair.y : pair.x; }

// A 2-dimensional tensor layout with unit inner stride and constant clamping (to 0), sliced.
struct WgLayout {
    uint dim0, dim1, stride0;
    uint offset0, span0, offset1, span1;
};
WgLayout wg_layout(const uint dim0, const uint dim1, const uint stride0) { return WgLayout(dim0, dim1, stride0, 0u, dim0, 0u, dim1); }
// As sliceTensorLayoutNV: the offsets added to the layout's, the spans set.
WgLayout wg_slice(WgLayout t, const uint o0, const uint s0, const uint o1, const uint s1) {
    t.offset0 += o0;
    t.span0 = s0;
    t.offset1 += o1;
    t.span1 = s1;
    return t;
}
// The tensor element of (row, col) of a matrix `cols` wide loaded through `t` (and the transposed
// view): matrixCoordToTensorElement(WithView) of the extension; ~0u where a coordinate falls
// outside the layout's dimensions (the load reads the clamp value, 0).
uint wg_tensor_element(const WgLayout t, const bool transposed, const uint row, const uint col, const uint cols) {
    uint index = row * cols + col;
    if (transposed) {  // linearToViewCoord over the span's dimensions, permuted (1, 0); viewCoordToLinear
        const uint v0 = index % t.span0, v1 = (index / t.span0) % t.span1;
        index = v0 * t.span1 + v1;
    }
    const uint c1 = index % t.span1 + t.offset1, c0 = (index / t.span1) % t.span0 + t.offset0;
    return c0 < t.dim0 && c1 < t.dim1 ? c0 * t.stride0 + c1 : 0xffffffffu;
}
// Word w of an operand `cols` wide (elements 2w and 2w + 1) loaded through `l`.
#define WG_LOAD_WORD(name, cols, buf, at, l, view, w)                                                        \
    {                                                                                                        \
        const uint wg_r = 2u * (w) / (cols), wg_c = 2u * (w) % (cols);                                       \
        const uint wg_t0 = wg_tensor_element(l, view, wg_r, wg_c, cols);                                    \
        const uint wg_t1 = wg_tensor_element(l, view, wg_r, wg_c + 1u, cols);                               \
        name[w] = wg_pack2(vec2(wg_t0 == 0xffffffffu ? 0.0 : WG_HALF(buf, (at) + wg_t0),                \
                                    wg_t1 == 0xffffffffu ? 0.0 : WG_HALF(buf, (at) + wg_t1)));              \
    }
#define WG_LAYOUT(name, dim0, dim1, stride0) WgLayout name = wg_layout(dim0, dim1, stride0)
#define WG_TRANSPOSED(name) const bool name = true
#define WG_LOAD(name, rows, cols, use, buf, at, layout, o0, s0, o1, s1) \
    WG_LOAD_VIEW(name, rows, cols, use, buf, at, layout, o0, s0, o1, s1, false)
// Two words a trip: an operand's words, (rows × cols) / 2, are a multiple of 128.
#define WG_LOAD_VIEW(name, rows, cols, use, buf, at, layout, o0, s0, o1, s1, view)                  \
    barrier();                                                                                  \
    {                                                                                           \
        const WgLayout wg_l = wg_slice(layout, o0, s0, o1, s1);                                 \
        for (uint wg_w = 2u * gl_LocalInvocationIndex; wg_w < (rows) * (cols) / 2u; wg_w += 2u * WG) { \
            WG_LOAD_WORD(name, cols, buf, at, wg_l, view, wg_w)                                 \
            WG_LOAD_WORD(name, cols, buf, at, wg_l, view, wg_w + 1u)                            \
        }                                                                                       \
    }                                                                                           \
    barrier()
// A staged tile: operand pairs, one word each; loaded as a tensor of its own (rows or columns `pitch`
// elements apart, the column-major form through the transposed view), by the loads above.
#define WG_STAGE_STORAGE(name, elements) shared uint name[(elements) / 2u];
#define WG_STAGE_PUT4(name, e, x)                          \
    {                                                      \
        name[(e) >> 1u] = wg_pack2((x).xy);            \
        name[((e) >> 1u) + 1u] = wg_pack2((x).zw);     \
    }
#define WG_ROW_MAJOR false
#define WG_COLUMN_MAJOR true
#define WG_LOAD_STAGED(name, rows, cols, use, tile, pitch, major)                                            \
    WG_LOAD_VIEW(name, rows, cols, use, tile, 0u,                                                         \
                 wg_layout((major) ? (cols) : (rows), (major) ? (rows) : (cols), pitch), 0u,               \
                 (major) ? (cols) : (rows), 0u, (major) ? (rows) : (cols), major)
// The accumulator's values rounded to the operands' type (wg_pack2) into the operand's words.
#define WG_TO_OPERAND(name, rows, cols, use, acc) \
    barrier();                                    \
    WG_PAIRS(rows, cols, name[wg_e >> 1u] = wg_pack2(vec2(acc[wg_i], acc[wg_i + 1u]));) \
    barrier()
// c (m × n) += a (m × k) · b (k × n), k a multiple of 16: fp32 sums of f16 (bf16) products, a pair of
// c's elements (one row of a, two columns of b) 16 terms a trip.
#define WG_PRODUCT(c, a, b, m, k, n)                                                              \
    WG_PAIRS(m, n,                                                                                \
        float wg_s0 = c[wg_i];                                                                    \
        float wg_s1 = c[wg_i + 1u];                                                               \
        for (uint wg_k = 0u; wg_k < (k); wg_k += 16u) {                                           \
            const uint wg_a = (wg_r * (k) + wg_k) >> 1u;                                          \
            const uint wg_b = (wg_k * (n) + wg_c) >> 1u;                                          \
            [[unroll]] for (uint wg_j = 0u; wg_j < 8u; ++wg_j) {                                  \
                const vec2 wg_x = wg_unpack2(a[wg_a + wg_j]);                                 \
                const vec2 wg_y0 = wg_unpack2(b[wg_b + wg_j * (n)]);                          \
                const vec2 wg_y1 = wg_unpack2(b[wg_b + wg_j * (n) + (n) / 2u]);               \
                wg_s0 = fma(wg_x.y, wg_y1.x, fma(wg_x.x, wg_y0.x, wg_s0));                         \
                wg_s1 = fma(wg_x.y, wg_y1.y, fma(wg_x.x, wg_y0.y, wg_s1));                         \
            }                                                                                     \
        }                                                                                         \
        c[wg_i] = wg_s0;                                                                          \
        c[wg_i + 1u] = wg_s1;)
#define WG_MAP_PAIR(dst, rows, cols, call0, call1) WG_PAIRS(rows, cols, dst[wg_i] = call0; dst[wg_i + 1u] = call1;)
#define WG_MAP0(dst, src, rows, cols, f) \
    WG_MAP_PAIR(dst, rows, cols, f(wg_r, wg_c, src[wg_i]), f(wg_r, wg_c + 1u, src[wg_i + 1u]))
#define WG_MAP1(dst, src, rows, cols, f, x) \
    WG_MAP_PAIR(dst, rows, cols, f(wg_r, wg_c, src[wg_i], x), f(wg_r, wg_c + 1u, src[wg_i + 1u], x))
#define WG_MAP2(dst, src, rows, cols, f, x, y) \
    WG_MAP_PAIR(dst, rows, cols, f(wg_r, wg_c, src[wg_i], x, y), f(wg_r, wg_c + 1u, src[wg_i + 1u], x, y))
#define WG_MAP_M(dst, src, rows, cols, f, m) \
    WG_MAP_PAIR(dst, rows, cols, f(wg_r, wg_c, src[wg_i], m[wg_i]), f(wg_r, wg_c + 1u, src[wg_i + 1u], m[wg_i + 1u]))
#define WG_MAP_MM(dst, src, rows, cols, f, m, n)                                         \
    WG_MAP_PAIR(dst, rows, cols, f(wg_r, wg_c, src[wg_i], m[wg_i], n[wg_i]),             \
                f(wg_r, wg_c + 1u, src[wg_i + 1u], m[wg_i + 1u], n[wg_i + 1u]))
#define WG_MAP_MM1(dst, src, rows, cols, f, m, n, x)                                     \
    WG_MAP_PAIR(dst, rows, cols, f(wg_r, wg_c, src[wg_i], m[wg_i], n[wg_i], x),          \
                f(wg_r, wg_c + 1u, src[wg_i + 1u], m[wg_i + 1u], n[wg_i + 1u], x))
// A left fold of each row in column order (the extension leaves the order to the driver), by one
// invocation per row into the row's first element of wg_reduce, 4 columns a trip (src_cols a
// multiple of 4), then read by every element of dst.
#define WG_ROW_REDUCE(dst, dst_cols, src, rows, src_cols, f)                                                     \
    barrier();                                                                                               \
    WG_PAIRS(rows, src_cols, wg_reduce[wg_e] = src[wg_i]; wg_reduce[wg_e + 1u] = src[wg_i + 1u];)            \
    barrier();                                                                                               \
    for (uint wg_row = gl_LocalInvocationIndex; wg_row < (rows); wg_row += WG) {                             \
        const uint wg_at = wg_row * (src_cols);                                                              \
        float wg_v = wg_reduce[wg_at];                                                                       \
        [[unroll]] for (uint wg_j = 1u; wg_j < 4u; ++wg_j) wg_v = f(wg_v, wg_reduce[wg_at + wg_j]);          \
        for (uint wg_c = 4u; wg_c < (src_cols); wg_c += 4u)                                                  \
            [[unroll]] for (uint wg_j = 0u; wg_j < 4u; ++wg_j) wg_v = f(wg_v, wg_reduce[wg_at + wg_c + wg_j]); \
        wg_reduce[wg_at] = wg_v;                                                                             \
    }                                                                                                        \
    barrier();                                                                                               \
    WG_PAIRS(rows, dst_cols, dst[wg_i] = dst[wg_i + 1u] = wg_reduce[wg_r * (src_cols)];)
#define WG_SCALE(dst, factor, rows, cols) \
    WG_PAIRS(rows, cols, dst[wg_i] *= factor[wg_i]; dst[wg_i + 1u] *= factor[wg_i + 1u];)
#define WG_SCALE_ADD(dst, factor, addend, rows, cols)                   \
    WG_PAIRS(rows, cols, dst[wg_i] = factor[wg_i] * dst[wg_i] + addend[wg_i]; \
             dst[wg_i + 1u] = factor[wg_i + 1u] * dst[wg_i + 1u] + addend[wg_i + 1u];)
#define WG_COPY(dst, src, rows, cols) WG_PAIRS(rows, cols, dst[wg_i] = src[wg_i]; dst[wg_i + 1u] = src[wg_i + 1u];)
#endif

#endif
