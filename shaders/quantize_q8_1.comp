#version 450
// quantize_q8_1: X for the integer-dot matvec (matvec_dot.comp): each row of X, after the fused
// input op, as Q8_1 blocks of 32 (ggml's block_q8_1 math, laid out for word reads).
//
// Bindings 0 X, 1 G, 2 XQ.
// Inputs:  X   f32 [NB][k] from float pc.x_base; G as matvec.comp's (matvec_input.glsl: NORM's
//              RMSNorm weight or ACT's up rows)
// Output:  XQ  NB rows of pc.xq_row_words words from word pc.out_base: k / 4 words of int8 q
//              (column c in byte c % 4 of word c / 4), then per block j four floats (d, s, ss, 0).
// Math:    v = the input of the product without NORM's row scale (X, X * G, or act(X) * G); per
//          block of 32: amax = max |v|, d = amax / 127, q = round(v / d) (half away from zero;
//          all 0 where d = 0), s = d * sum(q), ss = the sum of the block's raw X^2 (NORM, else 0);
//          a block holding NaN or Inf gets d = NaN (and s NaN, q 0).
//          NORM's 1 / rms(X) is a factor of the whole row: matvec_dot applies it to its sums,
//          from the blocks' ss, so that no pass over the whole row precedes the quantization.
// One invocation per block: workgroups (x) over a row's blocks, gl_WorkGroupID.y = b.
// Specialization constants: 0 WG, 4 NORM, 5 ACT (ids as matvec.comp's, for matvec_input.glsl).
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 4) const uint NORM = 0;
layout(constant_id = 5) const uint ACT = 0;

#define X_BINDING 0
#define G_BINDING 1
layout(std430, binding = 2) writeonly buffer XQ { uint xq_words[]; };

layout(push_constant) uniform Push {
    uint k;
    uint x_base;        // float offset of X[0][0] in the X window
    uint x_vec4;        // x_base and k are multiples of 4
    uint g_base;        // NORM / ACT: float offset of G[0]
    uint g_vec4;
    uint out_base;      // word offset of XQ row 0
    uint xq_row_words;  // k / 4 + k / 8
} pc;

#include "matvec_input.glsl"

void main() {
    const uint j = gl_GlobalInvocationID.x, b = gl_WorkGroupID.y;
    if (j >= pc.k / 32u) return;
    vec4 v[8];
    float ss = 0.0, amax = 0.0;
    bool finite = true;
    for (uint i = 0; i < 8u; ++i) {
        v[i] = x4(b, 32u * j + 4u * i, ss);
        vec4 a = abs(v[i]);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
        finite = finite && !any(isnan(v[i])) && !any(isinf(v[i]));
    }
    // max() drops a NaN operand and a NaN has no int8 level: a block holding NaN or Inf gets a NaN
    // scale, so that the matvec's output is non-finite as the float path's (NonFiniteError).
    const float d = finite ? amax / 127.0 : uintBitsToFloat(0x7FC00000u), id = d > 0.0 ? 1.0 / d : 0.0;
    const uint out_row = pc.out_base + b * pc.xq_row_words;
    int sum = 0;
    for (uint i = 0; i < 8u; ++i) {
        ivec4 q = clamp(ivec4(sign(v[i]) * floor(abs(v[i]) * id + 0.5)), ivec4(-127), ivec4(127));
        sum += q.x + q.y + q.z + q.w;
        uvec4 u = uvec4(q) & 0xFFu;
        xq_words[out_row + 8u * j + i] = u.x | (u.y << 8) | (u.z << 16) | (u.w << 24);
    }
    const uint dw = out_row + pc.k / 4u + 4u * j;
    xq_words[dw] = floatBitsToUint(d);
    xq_words[dw + 1u] = floatBitsToUint(d * float(sum));
    xq_words[dw + 2u] = floatBitsToUint(ss);
    xq_words[dw + 3u] = 0u;
}
