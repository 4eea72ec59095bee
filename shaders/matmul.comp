#version 450
// matmul: the prefill-time linear layer, Y = X · W^T (+ R), for many rows of X.
//
// Inputs:  W   rows of k elements of the weight type (weights.glsl; every GGUF weight type vkllm reads,
//              GGUF layouts), the rows of this dispatch starting at byte pc.w_base, pc.row_bytes apart
//          X   f32 [m][k] row-major from float pc.x_base
//          R   f32, same layout as Y (read only when pc.has_res != 0; may alias Y for in-place add)
//          B   f32 [n] bias of this dispatch's columns from float pc.b_base (read only when pc.has_bias != 0)
// Output:  Y   f32 [m][y_stride] from float pc.y_base (R: pc.r_base); this dispatch writes columns 0 .. pc.n.
// Math:    Y[i][j] = sum_c X[i][c] * W[j][c]  (+ B[j]) (+ R[i][j]), fp32 accumulation.
// One workgroup computes a BM x BN tile of Y, stepping over k in slices of BK: the X slice
// (BM x BK) is copied and the W slice (BN x BK) dequantized into shared memory (8 elements per
// load, weights.glsl), then each invocation accumulates a TM x TN micro-tile from them, its rows
// and columns strided by BM/TM and BN/TN so that neighbouring invocations read neighbouring
// shared-memory words. Out-of-range rows, columns and the k tail (F32/F16 with k % 8 != 0) are
// loaded as zeros, so any m, n, k works. The bias and the residual are added in the epilogue.
// Specialization constants: 0 WG = (BM/TM)*(BN/TN), 1 BM, 2 BN, 3 BK (multiple of 8), 4 TM, 5 TN.
// Shared memory: BK*(BM+1) + BK*(BN+1) floats (the +1 breaks bank conflicts of the transposed stores).
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const uint TM = 4;
layout(constant_id = 5) const uint TN = 4;
const uint TX = BN / TN;  // invocations along n
const uint TY = BM / TM;  // invocations along m
const uint XS = BM + 1;   // row pitch of xs (one row per k)
const uint WS = BN + 1;   // row pitch of ws

#define W_BINDING 0
#include "weights.glsl"

layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer R { float res[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer B { float bias[]; };

layout(push_constant) uniform Push {
    uint m;          // rows of X / Y in this dispatch
    uint n;          // rows of W (columns of Y) in this dispatch
    uint k;
    uint row_bytes;
    uint w_base;     // byte offset of W row 0 in the W window
    uint x_base;     // float offset of X[0][0] in the X window
    uint y_base;     // float offset of Y[0][0] in the Y window
    uint r_base;     // float offset of R[0][0] in the R window
    uint y_stride;   // floats between two rows of Y / R
    uint has_res;
    uint b_base;     // float offset of B[0] (this dispatch's first column) in the B window
    uint has_bias;
    uint x_vec4;     // unused here (the push block is shared with matmul_broadcast.comp)
} pc;

shared float xs[BK * XS];  // xs[c * XS + i] = X[m0 + i][k0 + c]
shared float ws[BK * WS];  // ws[c * WS + j] = W[n0 + j][k0 + c]

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tx = tid % TX, ty = tid / TX;
    const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;

    float acc[TM * TN];
    for (uint i = 0; i < TM * TN; ++i) acc[i] = 0.0;

    for (uint k0 = 0; k0 < pc.k; k0 += BK) {
        // X slice: consecutive invocations read consecutive columns of one row.
        for (uint e = tid; e < BM * BK; e += WG) {
            uint i = e / BK, c = e % BK;
            uint gm = m0 + i, gk = k0 + c;
            xs[c * XS + i] = (gm < pc.m && gk < pc.k) ? x[pc.x_base + gm * pc.k + gk] : 0.0;
        }
        // W slice, 8 elements per step.
        for (uint e = tid; e < BN * (BK / 8u); e += WG) {
            uint j = e / (BK / 8u), c = (e % (BK / 8u)) * 8u;
            uint gn = n0 + j, gk = k0 + c;
            vec4 v0 = vec4(0.0), v1 = vec4(0.0);
            if (gn < pc.n && gk < pc.k) {
                uint row_byte = pc.w_base + gn * pc.row_bytes;
                if (gk + 8u <= pc.k) {
                    w_dequant8(row_byte, gk, v0, v1);
                } else {  // F32/F16 tail only: block types have k % 32 == 0
                    float t[8];
                    for (uint q = 0; q < 8u; ++q) t[q] = gk + q < pc.k ? w_get(row_byte, gk + q) : 0.0;
                    v0 = vec4(t[0], t[1], t[2], t[3]);
                    v1 = vec4(t[4], t[5], t[6], t[7]);
                }
            }
            for (uint q = 0; q < 4u; ++q) {
                ws[(c + q) * WS + j] = v0[q];
                ws[(c + 4u + q) * WS + j] = v1[q];
            }
        }
        barrier();
        for (uint c = 0; c < BK; ++c) {
            float a[TM], b[TN];
            for (uint i = 0; i < TM; ++i) a[i] = xs[c * XS + ty + i * TY];
            for (uint j = 0; j < TN; ++j) b[j] = ws[c * WS + tx + j * TX];
            for (uint i = 0; i < TM; ++i)
                for (uint j = 0; j < TN; ++j) acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]);
        }
        barrier();
    }

    for (uint i = 0; i < TM; ++i) {
        uint gm = m0 + ty + i * TY;
        if (gm >= pc.m) continue;
        for (uint j = 0; j < TN; ++j) {
            uint gn = n0 + tx + j * TX;
            if (gn >= pc.n) continue;
            float v = acc[i * TN + j];
            if (pc.has_bias != 0u) v += bias[pc.b_base + gn];
            if (pc.has_res != 0u) v += res[pc.r_base + gm * pc.y_stride + gn];
            y[pc.y_base + gm * pc.y_stride + gn] = v;
        }
    }
}
