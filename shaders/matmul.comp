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
// EXPERT_GROUPS (the matmul_id_* variants: a mixture of experts' prefill, ops::moe_matmul): W is a
// stack of experts pc.expert_bytes apart (the window holds experts e_first ..), and workgroup x
// serves expert e = e_first + x over the slots moe_group sorted to it: G holds offsets[n_expert + 1]
// from uint pc.g_base, then the sorted slots; the expert's i-th slot s reads X row s / pc.x_div and
// writes Y row s (+ B[e] where the experts have biases: B holds n floats per expert). Workgroup y
// is a tile of the expert's slots; a tile past its count returns at once, uniformly, so experts with
// fewer tokens (or none) cost nothing but that. Workgroup z is the tile of W's rows, outermost
// because lavapipe hands each thread one contiguous range of workgroup indices: so each thread gets
// the same rows of every expert, whatever the routing (matvec.comp's slots likewise). No residual.
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
#ifdef EXPERT_GROUPS
    uint g_base;        // uint offset of offsets[0] in the G window
    uint n_expert;      // offsets has n_expert + 1 entries; the sorted slots follow
    uint e_first;       // the experts the W window holds (workgroup x: expert e_first + x)
    uint expert_bytes;  // bytes of one expert's rows
    uint x_div;         // slots per X row (gate / up: experts per token; down: 1)
#endif
} pc;

#ifdef EXPERT_GROUPS
layout(std430, binding = 5) readonly buffer G { uint grp[]; };
shared uint slot_sh[BM];  // the slot of tile row i
#endif

shared float xs[BK * XS];  // xs[c * XS + i] = X[m0 + i][k0 + c]
shared float ws[BK * WS];  // ws[c * WS + j] = W[n0 + j][k0 + c]

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tx = tid % TX, ty = tid / TX;
#ifdef EXPERT_GROUPS
    const uint n_tile = gl_WorkGroupID.z, e_off = gl_WorkGroupID.x;  // (expert, token tile, row tile)
#else
    const uint n_tile = gl_WorkGroupID.x;
#endif
    const uint m0 = gl_WorkGroupID.y * BM, n0 = n_tile * BN;
#ifdef EXPERT_GROUPS
    const uint e = pc.e_first + e_off;
    const uint first = grp[pc.g_base + e], m = grp[pc.g_base + e + 1u] - first;
    if (m0 >= m) return;  // uniform: the expert has fewer slots
    const uint w_base = pc.w_base + e_off * pc.expert_bytes, b_row = e * pc.n;
    for (uint i = tid; i < BM; i += WG)
        slot_sh[i] = m0 + i < m ? grp[pc.g_base + pc.n_expert + 1u + first + m0 + i] : 0u;
    barrier();
#define X_ROW(gm) (slot_sh[(gm) - m0] / pc.x_div)
#define Y_ROW(gm) slot_sh[(gm) - m0]
#else
    const uint m = pc.m, w_base = pc.w_base, b_row = 0u;
#define X_ROW(gm) (gm)
#define Y_ROW(gm) (gm)
#endif

    float acc[TM * TN];
    for (uint i = 0; i < TM * TN; ++i) acc[i] = 0.0;

    for (uint k0 = 0; k0 < pc.k; k0 += BK) {
        // X slice: consecutive invocations read consecutive columns of one row.
        for (uint e = tid; e < BM * BK; e += WG) {
            uint i = e / BK, c = e % BK;
            uint gm = m0 + i, gk = k0 + c;
            xs[c * XS + i] = (gm < m && gk < pc.k) ? x[pc.x_base + X_ROW(gm) * pc.k + gk] : 0.0;
        }
        // W slice, 8 elements per step.
        for (uint e = tid; e < BN * (BK / 8u); e += WG) {
            uint j = e / (BK / 8u), c = (e % (BK / 8u)) * 8u;
            uint gn = n0 + j, gk = k0 + c;
            vec4 v0 = vec4(0.0), v1 = vec4(0.0);
            if (gn < pc.n && gk < pc.k) {
                uint row_byte = w_base + gn * pc.row_bytes;
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
        if (gm >= m) continue;
        for (uint j = 0; j < TN; ++j) {
            uint gn = n0 + tx + j * TX;
            if (gn >= pc.n) continue;
            float v = acc[i * TN + j];
            if (pc.has_bias != 0u) v += bias[pc.b_base + b_row + gn];
            if (pc.has_res != 0u) v += res[pc.r_base + gm * pc.y_stride + gn];
            y[pc.y_base + Y_ROW(gm) * pc.y_stride + gn] = v;
        }
    }
}
