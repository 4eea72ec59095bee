#version 450
// matvec_rows: the decode-time linear layer for CPU drivers, Y = X · W^T (+ B) (+ R) for a batch of
// NB <= 8 x vectors, with matvec.comp's inputs, output, math and fused input op (NORM / ACT,
// include/matvec_input.glsl), push constants and bindings.
//
// Why: a CPU driver (lavapipe) runs the invocations of a workgroup as the lanes of SIMD registers
// and a barrier as a switch between register-wide chunks. matvec.comp spreads a row's k over the
// lanes (what a GPU's memory system wants), so the row sums need a cross-lane reduction through
// shared memory and barriers. Here each lane owns whole rows: all lanes walk k together, so there
// is no reduction, no shared memory and no barrier, and X (and the norm weight) is read at one
// address by all lanes (a driver that sees the uniform address loads it once; Mesa 22.3's lavapipe
// still loads storage buffers lane by lane).
//
// One workgroup of WG invocations computes R * WG rows of W for all NB vectors: lane l owns rows
// n0 + l + r * WG (r < R), n0 = workgroup * R * WG. Per weights.glsl unit (W_UNIT elements of every
// row) a lane loads its R rows' units, then the NB X slices of the unit one at a time (NB slices held
// at once spilled a CPU driver's registers), every (row, slice) sum in the same order. Rows past n
// are clamped to the last (computed, never stored), so the loop has no divergent branch.
// F32/F16/BF16 rows with k % W_UNIT != 0 finish with a scalar tail.
// Specialization constants: 0 WG, 1 R rows per lane, 2 NB vectors, 3 W_ALIGNED (weights.glsl),
// 4 NORM, 5 ACT.
#extension GL_GOOGLE_include_directive : require
#ifdef W_LOAD64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 8;
layout(constant_id = 1) const uint R = 4;
layout(constant_id = 2) const uint NB = 1;
layout(constant_id = 4) const uint NORM = 0;
layout(constant_id = 5) const uint ACT = 0;

#define W_BINDING 0
#define W_ALIGNED_ID 3
#include "weights.glsl"

layout(std430, binding = 2) readonly buffer Rb { float res[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer B { float bias[]; };

layout(push_constant) uniform Push {  // as matvec.comp's
    uint n;
    uint k;
    uint row_bytes;
    uint w_base;
    uint x_base;
    uint y_base;
    uint r_base;
    uint y_stride;
    uint has_res;
    uint x_vec4;
    uint b_base;
    uint has_bias;
    uint g_base;
    uint g_vec4;
    float eps;
} pc;

#include "matvec_input.glsl"

void main() {
    const uint lane = gl_LocalInvocationID.x;
    const uint n0 = gl_WorkGroupID.x * (R * WG);
    uint row_byte[R];
    for (uint r = 0; r < R; ++r) row_byte[r] = pc.w_base + min(n0 + lane + r * WG, pc.n - 1u) * pc.row_bytes;

    float acc[R * NB];  // acc[r * NB + b]
    for (uint i = 0; i < R * NB; ++i) acc[i] = 0.0;
    float sq[NB];       // NORM: sums of squares of X[b] (every lane sums all of k)
    for (uint b = 0; b < NB; ++b) sq[b] = 0.0;

    const uint units = pc.k / W_UNIT;
    for (uint u = 0; u < units; ++u) {
        // The R rows' units first, then one X slice at a time against all of them: R + 1 units live
        // at once instead of NB + 1 (NB = 8 slices spill a CPU driver's registers).
        vec4 wr[R][W_UNIT4];
        float d[R];
        for (uint r = 0; r < R; ++r) d[r] = w_unit(row_byte[r], u, wr[r]);
        for (uint b = 0; b < NB; ++b) {
            vec4 xs[W_UNIT4];
            for (uint q = 0; q < W_UNIT4; ++q) xs[q] = x4(b, w_unit_col(u, q), sq[b]);
            for (uint r = 0; r < R; ++r) {
                // fma into a vec4, one horizontal sum per unit (as matvec.comp)
                vec4 s = vec4(0.0);
                for (uint q = 0; q < W_UNIT4; ++q) s = fma(wr[r][q], xs[q], s);
                acc[r * NB + b] += d[r] * ((s.x + s.y) + (s.z + s.w));
            }
        }
    }
#if defined(W_IS_FLOAT)
    for (uint c = units * W_UNIT; c < pc.k; ++c) {
        float xt[NB];
        for (uint b = 0; b < NB; ++b) xt[b] = xs1(b, c, sq[b]);
        for (uint r = 0; r < R; ++r) {
            float w = w_get(row_byte[r], c);
            for (uint b = 0; b < NB; ++b) acc[r * NB + b] += w * xt[b];
        }
    }
#endif

    for (uint r = 0; r < R; ++r) {
        const uint gn = n0 + lane + r * WG;
        if (gn >= pc.n) continue;
        const float bv = pc.has_bias != 0u ? bias[pc.b_base + gn] : 0.0;
        for (uint b = 0; b < NB; ++b) {
            float sum = acc[r * NB + b];
            if (NORM != 0u) sum *= inversesqrt(sq[b] / float(pc.k) + pc.eps);
            sum += bv;
            if (pc.has_res != 0u) sum += res[pc.r_base + b * pc.y_stride + gn];
            y[pc.y_base + b * pc.y_stride + gn] = sum;
        }
    }
}
