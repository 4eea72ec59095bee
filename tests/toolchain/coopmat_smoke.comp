// Compiled, never run: scripts/glslang15.sh checks that its glslang knows GL_KHR_cooperative_matrix
// (one 16x16x16 f16 multiply into f32 per subgroup, the shape NVIDIA, AMD and Intel all report).
// Debian 12's glslang refuses the extension; no driver here exposes it, so no kernel uses it yet.
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(binding = 0) readonly buffer A { float16_t a[]; };
layout(binding = 1) readonly buffer B { float16_t b[]; };
layout(binding = 2) writeonly buffer C { float c[]; };
void main() {
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> ma;
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> mb;
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> mc =
        coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    coopMatLoad(ma, a, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(mb, b, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    mc = coopMatMulAdd(ma, mb, mc);
    coopMatStore(mc, c, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
}
