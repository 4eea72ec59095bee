#version 450
// matvec: the decode-time linear layer, Y = X · W^T (+ R), for a batch of NB <= 8 x vectors. Its
// speed is the speed of streaming W once through memory, so each weight word is read once per
// dispatch and shared by all NB vectors.
//
// Inputs:  W   rows of k elements of the weight type (weights.glsl; every GGUF weight type vkllm reads,
//              GGUF layouts), the rows of this dispatch starting at byte pc.w_base, pc.row_bytes apart
//          X   f32 [NB][k] from float pc.x_base (read as vec4 where pc.x_vec4 says it is aligned)
//          R   f32, same layout as Y (read only when pc.has_res != 0; may alias Y for in-place add)
//          B   f32 [n] bias of this dispatch's rows from float pc.b_base (read only when pc.has_bias != 0)
// Output:  Y   f32 [NB][y_stride]; this dispatch writes columns 0 .. pc.n of each row, starting at
//              float pc.y_base (R: pc.r_base).
// Math:    Y[b][r] = sum_c W[r][c] * X[b][c]  (+ B[r]) (+ R[b][r]), fp32 accumulation.
// Fused input (decode steps of small models are bound by dispatch count, so the op before the
// matvec rides in it; specialization constants, at most one of them non-zero):
//   NORM 1  X is the raw residual stream and G f32 [k] an RMSNorm weight (from float pc.g_base):
//           Y[b][r] = inversesqrt(mean_c X[b][c]^2 + pc.eps) * sum_c W[r][c] * G[c] * X[b][c] (+ B) (+ R);
//           the sum of squares comes from the same X loads, reduced with the row sums.
//   ACT 1|2 X holds the gate rows and G f32 [NB][k] the up rows (from float pc.g_base); the input
//           of the product is act(X[b][c]) * G[b][c], act = silu (1) or tanh-GELU (2) as in glu.comp.
// One workgroup computes NR consecutive rows of W for all NB vectors. Each invocation walks the
// rows in weights.glsl units (W_UNIT elements: 16 bytes, or one Q8_0 / Q4_0 block), invocation i
// taking units i, i + WG, ... so that a subgroup reads contiguous memory; the NR * NB partial sums
// are then reduced over the workgroup: subgroupAdd + one shared slot per subgroup (USE_SUBGROUP),
// or a shared-memory tree. F32/F16/BF16 rows whose length is not a multiple of the unit finish
// with a scalar tail.
// Specialization constants: 0 WG (power of two), 1 NR rows per workgroup, 2 NB vectors, 3 W_ALIGNED
// (weights.glsl: all weight reads 4-byte aligned), 4 NORM, 5 ACT.
// EXPERT_IDS (the matvec_id_* variants: mixture-of-experts layers, llama.cpp's mul_mat_id): W is a
// stack of experts, each pc.expert_bytes long, and workgroup (s, y) computes rows y * NR .. of slot s:
// Y[s] = W[ids[pc.ids_base + s]] · X[s / pc.x_div] (ACT: G row s / pc.x_div too) (+ B[ids[s]] where the
// experts have biases: B holds n floats per expert), NB = 1. The W window
// holds experts [pc.e_first, pc.e_first + pc.e_count) only (a stack larger than one binding is
// dispatched once per window); a workgroup whose expert lies outside it returns at once, uniformly.
// Slots vary fastest in the grid because lavapipe hands each of its threads one contiguous range of
// workgroup indices: with slots in y, a window holding one of two slots' experts put all its work in
// one thread's half (measured in docs/performance.md, "Lavapipe's thread ranges").
#extension GL_GOOGLE_include_directive : require
#ifdef W_LOAD64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif

#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint NR = 2;
layout(constant_id = 2) const uint NB = 1;
layout(constant_id = 4) const uint NORM = 0;
layout(constant_id = 5) const uint ACT = 0;

#define W_BINDING 0
#define W_ALIGNED_ID 3
#include "weights.glsl"

layout(std430, binding = 2) readonly buffer R { float res[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer B { float bias[]; };

layout(push_constant) uniform Push {
    uint n;          // rows of W in this dispatch
    uint k;          // elements per row
    uint row_bytes;
    uint w_base;     // byte offset of row 0 in the W window
    uint x_base;     // float offset of X[0][0] in the X window
    uint y_base;     // float offset of Y[0][0] in the Y window
    uint r_base;     // float offset of R[0][0] in the R window
    uint y_stride;   // floats between two batch rows of Y / R
    uint has_res;
    uint x_vec4;     // x_base and k are multiples of 4: X can be read a vec4 at a time
    uint b_base;     // float offset of B[0] (this dispatch's first row) in the B window
    uint has_bias;
    uint g_base;     // NORM / ACT: float offset of G[0] in the G window
    uint g_vec4;     // NORM / ACT: g_base and k are multiples of 4
    float eps;       // NORM
#ifdef EXPERT_IDS
    uint ids_base;      // uint offset of slot 0's expert id in the Ids window
    uint e_first;       // the experts the W window holds
    uint e_count;
    uint expert_bytes;  // bytes of one expert's rows
    uint x_div;         // slots per X row (an expert's input is its token's row: k_used; or 1)
#endif
} pc;

#ifdef EXPERT_IDS
layout(std430, binding = 6) readonly buffer Ids { uint ids[]; };
uint x_row_off_ = 0u;  // floats from X's first row to this slot's (matvec_input.glsl)
#define X_ROW_OFF x_row_off_
#endif

// One slot per (value, invocation): enough for any subgroup size. The host keeps NR * NB <= 8 on
// GPUs (2 KiB at WG = 64) and <= 256 with WG <= 16 on CPU drivers (16 KiB; lavapipe's subgroups
// are 4 to 16 lanes). NORM adds NB sums of squares.
const uint NV = NR * NB + (NORM != 0u ? NB : 0u);
shared float red_[NV * WG];

#include "matvec_input.glsl"

void main() {
    const uint tid = gl_LocalInvocationID.x;
#ifdef EXPERT_IDS
    const uint row0 = gl_WorkGroupID.y * NR;  // slots in x: see the header
#else
    const uint row0 = gl_WorkGroupID.x * NR;
#endif
    const uint rows = min(NR, pc.n - row0);  // uniform over the workgroup
#ifdef EXPERT_IDS
    const uint slot = gl_WorkGroupID.x;
    const uint expert = ids[pc.ids_base + slot];
    if (expert < pc.e_first || expert - pc.e_first >= pc.e_count) return;  // another window's
    const uint w_base = pc.w_base + (expert - pc.e_first) * pc.expert_bytes;
    const uint y_slot = slot * pc.y_stride;
    x_row_off_ = (slot / pc.x_div) * pc.k;
    const uint b_row = expert * pc.n;  // the expert's bias row (gpt-oss), B holding [n_expert][n]
#else
    const uint w_base = pc.w_base;
    const uint y_slot = 0u;
    const uint b_row = 0u;
#endif

    float acc[NR * NB];  // acc[r * NB + b]
    for (uint i = 0; i < NR * NB; ++i) acc[i] = 0.0;
    float sq[NB];        // NORM: sums of squares of X[b]
    for (uint b = 0; b < NB; ++b) sq[b] = 0.0;

    const uint units = pc.k / W_UNIT;
    for (uint u = tid; u < units; u += WG) {
        if (NB < NR) {
            // Few vectors (decode): the x slices first, then one row's weights at a time, so that
            // NB + 1 units are live instead of NR (a 32-element unit is 8 vec4).
            vec4 xs[NB][W_UNIT4];
            for (uint b = 0; b < NB; ++b)
                for (uint q = 0; q < W_UNIT4; ++q) xs[b][q] = x4(b, w_unit_col(u, q), sq[b]);
            for (uint r = 0; r < NR; ++r) {
                if (r >= rows) break;
                vec4 wr[W_UNIT4];
                float d = w_unit(w_base + (row0 + r) * pc.row_bytes, u, wr);
                for (uint b = 0; b < NB; ++b) {
                    // fma into a vec4, one horizontal sum per unit: half the ALU of dot + add per vec4
                    // (CPU drivers run each vec4 op as four SIMD instructions).
                    vec4 s = vec4(0.0);
                    for (uint q = 0; q < W_UNIT4; ++q) s = fma(wr[q], xs[b][q], s);
                    acc[r * NB + b] += d * ((s.x + s.y) + (s.z + s.w));
                }
            }
            continue;
        }
        // Many vectors: all rows' weights first, then each x vector once: NR units live, not NB * NR.
        vec4 wv[NR][W_UNIT4];
        float d[NR];
        for (uint r = 0; r < NR; ++r) {
            if (r < rows) {
                d[r] = w_unit(w_base + (row0 + r) * pc.row_bytes, u, wv[r]);
            } else {
                d[r] = 0.0;
                for (uint q = 0; q < W_UNIT4; ++q) wv[r][q] = vec4(0.0);
            }
        }
        for (uint b = 0; b < NB; ++b) {
            vec4 xv[W_UNIT4];
            for (uint q = 0; q < W_UNIT4; ++q) xv[q] = x4(b, w_unit_col(u, q), sq[b]);
            for (uint r = 0; r < NR; ++r) {
                vec4 s = vec4(0.0);
                for (uint q = 0; q < W_UNIT4; ++q) s = fma(wv[r][q], xv[q], s);
                acc[r * NB + b] += d[r] * ((s.x + s.y) + (s.z + s.w));
            }
        }
    }
#if defined(W_IS_FLOAT)
    for (uint c = units * W_UNIT + tid; c < pc.k; c += WG) {
        float xt[NB];
        for (uint b = 0; b < NB; ++b) xt[b] = xs1(b, c, sq[b]);
        for (uint r = 0; r < rows; ++r) {
            float w = w_get(w_base + (row0 + r) * pc.row_bytes, c);
            for (uint b = 0; b < NB; ++b) acc[r * NB + b] += w * xt[b];
        }
    }
#endif

    // Workgroup reduction of the NV partial sums; afterwards red_[v * WG] holds value v (tree)
    // or red_[v * WG + s] the sum of subgroup s (subgroups).
#ifdef USE_SUBGROUP
    for (uint v = 0; v < NR * NB; ++v) {
        float s = subgroupAdd(acc[v]);
        if (subgroupElect()) red_[v * WG + gl_SubgroupID] = s;
    }
    for (uint b = 0; b < NV - NR * NB; ++b) {  // NORM's sums of squares
        float s = subgroupAdd(sq[b]);
        if (subgroupElect()) red_[(NR * NB + b) * WG + gl_SubgroupID] = s;
    }
    barrier();
    const uint parts = gl_NumSubgroups;
#else
    for (uint v = 0; v < NR * NB; ++v) red_[v * WG + tid] = acc[v];
    for (uint b = 0; b < NV - NR * NB; ++b) red_[(NR * NB + b) * WG + tid] = sq[b];  // NORM's sums of squares
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (tid < s)
            for (uint v = 0; v < NV; ++v) red_[v * WG + tid] += red_[v * WG + tid + s];
        barrier();
    }
    const uint parts = 1;
#endif
    for (uint v = tid; v < NR * NB; v += WG) {
        uint r = v / NB, b = v % NB;
        if (r >= rows) continue;
        float sum = 0.0;
        for (uint p = 0; p < parts; ++p) sum += red_[v * WG + p];
        if (NORM != 0u) {
            float ss = 0.0;
            for (uint p = 0; p < parts; ++p) ss += red_[(NR * NB + b) * WG + p];
            sum *= inversesqrt(ss / float(pc.k) + pc.eps);
        }
        uint o = pc.y_base + y_slot + b * pc.y_stride + row0 + r;
        if (pc.has_bias != 0u) sum += bias[pc.b_base + b_row + row0 + r];
        if (pc.has_res != 0u) sum += res[pc.r_base + b * pc.y_stride + row0 + r];
        y[o] = sum;
    }
}
