// A probe of bench/build_glslang.sh (session 28): a bf16 16 × 16 × 16 cooperative-matrix product
// (GL_EXT_bfloat16), which PyPI's glslang 13.1.1 cannot compile. Compiled and validated only.
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_bfloat16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer A { uvec4 a[]; };
layout(std430, binding = 1) buffer C { float c[]; };
shared uvec4 tile[256 / 8];
void main() {
    coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> x;
    coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> y;
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    coopMatLoad(x, a, 0, 2, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(y, a, 0, 2, gl_CooperativeMatrixLayoutRowMajor);
    acc = coopMatMulAdd(x, y, acc);
    coopMatStore(acc, c, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
}
