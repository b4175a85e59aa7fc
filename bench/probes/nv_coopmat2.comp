// A probe of bench/build_glslang.sh (session 28): GL_NV_cooperative_matrix2's row reduction on an
// accumulator and its conversion to an A operand (S to P without shared memory), which PyPI's
// glslang 13.1.1 cannot compile. Compiled and validated only.
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer A { float16_t a[]; };
layout(std430, binding = 1) buffer C { float c[]; };
float maxf(const in float x, const in float y) { return max(x, y); }
void main() {
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> x;
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> y;
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> s = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    coopMatLoad(x, a, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(y, a, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    s = coopMatMulAdd(x, y, s);
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> m;
    coopMatReduceNV(m, s, gl_CooperativeMatrixReduceRowNV, maxf);   // a row's maximum in every column
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> p16 = coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(s - m);
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> p = coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>(p16);  // S's use converted: P without shared memory
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> o = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    o = coopMatMulAdd(p, y, o);
    coopMatStore(o, c, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
}
