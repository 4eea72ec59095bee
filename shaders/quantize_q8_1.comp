#version 450
// quantize_q8_1: X for the integer-dot matvec (matvec_dot.comp): each row of X, after the fused
// input op, as Q8_1 blocks of 32 (ggml's block_q8_1 math, laid out for word reads).
//
// Bindings 0 X, 1 G, 2 XQ.
// Inputs:  X   f32 [NB][k] from float pc.x_base; G as matvec.comp's (matvec_input.glsl: NORM's
//              RMSNorm weight or ACT's up rows)
// Output:  XQ  NB rows of pc.xq_row_words words from word pc.out_base: k / 4 words of int8 q
//              (column c in byte c % 4 of word c / 4), then per block j the floats d_j and s_j.
// Math:    v = the input of the product (matvec.comp's: X, rms_norm(X) * G, or act(X) * G); per
//          block of 32: amax = max |v|, d = amax / 127, q = round(v / d) (half away from zero;
//          all 0 where d = 0), s = d * sum(q). NORM's 1 / rms is applied to v before quantizing.
// One workgroup per row of X (gl_WorkGroupID.x = b); invocation i quantizes blocks i, i + WG, ...
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
    uint xq_row_words;  // k / 4 + k / 16
    float eps;          // NORM
} pc;

#include "matvec_input.glsl"

shared float red_[WG];

void main() {
    const uint tid = gl_LocalInvocationID.x, b = gl_WorkGroupID.x;
    float scale = 1.0;
    if (NORM != 0u) {
        float ss = 0.0;
        for (uint c = 4u * tid; c < pc.k; c += 4u * WG) {
            vec4 v = raw4(pc.x_base + b * pc.k + c);
            ss += dot(v, v);
        }
        red_[tid] = ss;
        barrier();
        for (uint s = WG / 2u; s > 0u; s >>= 1) {
            if (tid < s) red_[tid] += red_[tid + s];
            barrier();
        }
        scale = inversesqrt(red_[0] / float(pc.k) + pc.eps);
    }
    const uint out_row = pc.out_base + b * pc.xq_row_words;
    for (uint j = tid; j < pc.k / 32u; j += WG) {
        vec4 v[8];
        float unused = 0.0, amax = 0.0;
        for (uint i = 0; i < 8u; ++i) {
            v[i] = x4(b, 32u * j + 4u * i, unused) * scale;
            vec4 a = abs(v[i]);
            amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
        }
        const float d = amax / 127.0, id = d > 0.0 ? 1.0 / d : 0.0;
        int sum = 0;
        for (uint i = 0; i < 8u; ++i) {
            ivec4 q = ivec4(sign(v[i]) * floor(abs(v[i]) * id + 0.5));
            q = clamp(q, ivec4(-127), ivec4(127));
            sum += q.x + q.y + q.z + q.w;
            uvec4 u = uvec4(q) & 0xFFu;
            xq_words[out_row + 8u * j + i] = u.x | (u.y << 8) | (u.z << 16) | (u.w << 24);
        }
        const uint dw = out_row + pc.k / 4u + 2u * j;
        xq_words[dw] = floatBitsToUint(d);
        xq_words[dw + 1u] = floatBitsToUint(d * float(sum));
    }
}
