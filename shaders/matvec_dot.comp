#version 450
// matvec_dot: the decode-time linear layer on integer dot products, Y = X · W^T (+ B) (+ R), for
// NB <= 8 vectors of X already quantized to Q8_1 blocks (quantize_q8_1.comp, which also applied any
// fused input op). Chosen where the device's 4x8-bit packed dot is accelerated (or `--caps int-dot`):
// a quantized weight is then multiplied as the integers it stores, four per instruction, instead of
// being converted to floats one by one, and X is read as 1.25 bytes per element instead of 4.
//
// Inputs:  W   rows of k elements of a block type weights_dot.glsl multiplies (GGUF layouts), the
//              rows of this dispatch starting at byte pc.w_base, pc.row_bytes apart
//          XQ  NB rows of pc.xq_row_words words from word pc.x_base: k / 4 words of int8 quants
//              (column c in byte c % 4 of word c / 4), then per block of 32 four floats (d, s, ss, 0)
//          R   f32, same layout as Y (read only when pc.has_res != 0; may alias Y)
//          B   f32 [n] bias of this dispatch's rows from float pc.b_base (when pc.has_bias != 0)
// Output:  Y   f32 [NB][y_stride]; columns 0 .. pc.n of each row from float pc.y_base.
// Math:    Y[b][r] = f_b * sum over X blocks j of W[r] block j · (d_j q_j) (+ B[r]) (+ R[b][r]):
//          integer sums per block, f32 across blocks; f_b = 1, or with NORM (the quantizer left the
//          RMSNorm's row scale out) inversesqrt(sum_j ss_j / k + pc.eps), the blocks' ss reduced
//          with the row sums.
// One workgroup computes NR consecutive rows for all NB vectors; invocation i takes the units
// (weights_dot.glsl: one or two X blocks) i, i + WG, ...; the partial sums are reduced over the
// workgroup as in matvec.comp (subgroupAdd + a shared slot per subgroup, or a shared tree).
// EXPERT_IDS (matvec_dot_id_*: a mixture of experts' decode, ops::moe_matvec), NB = 1: W is a stack
// of experts pc.expert_bytes apart and workgroup (s, y) computes rows y * NR .. of slot s (slots in x
// for CPU drivers' contiguous thread ranges, as matvec.comp's):
// Y[s] = W[ids[pc.ids_base + s]] · XQ row s / pc.x_div (+ B[ids[s]] where the experts have biases:
// B holds n floats per expert). The W window holds experts [pc.e_first, pc.e_first + pc.e_count)
// only; a workgroup whose expert lies outside it returns at once, uniformly.
// Specialization constants: 0 WG (power of two), 1 NR, 2 NB, 3 W_ALIGNED (weights.glsl), 4 NORM.
#extension GL_GOOGLE_include_directive : require
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint NR = 2;
layout(constant_id = 2) const uint NB = 1;
layout(constant_id = 4) const uint NORM = 0;

#define W_BINDING 0
#define W_ALIGNED_ID 3
#include "weights.glsl"
#include "weights_dot.glsl"

layout(std430, binding = 1) readonly buffer XQ { uint xq_words[]; };
layout(std430, binding = 2) readonly buffer R { float res[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer B { float bias[]; };

layout(push_constant) uniform Push {
    uint n;             // rows of W in this dispatch
    uint k;             // elements per row
    uint row_bytes;
    uint w_base;        // byte offset of row 0 in the W window
    uint x_base;        // word offset of XQ row 0 in the XQ window
    uint xq_row_words;  // words per XQ row: k / 4 + k / 8
    uint y_base;        // float offset of Y[0][0] in the Y window
    uint r_base;        // float offset of R[0][0] in the R window
    uint y_stride;      // floats between two batch rows of Y / R
    uint has_res;
    uint b_base;        // float offset of B[0] (this dispatch's first row) in the B window
    uint has_bias;
    float eps;          // NORM
#ifdef EXPERT_IDS
    uint ids_base;      // uint offset of slot 0's expert id in the Ids window
    uint e_first;       // the experts the W window holds
    uint e_count;
    uint expert_bytes;  // bytes of one expert's rows
    uint x_div;         // slots per X row (gate / up: experts per token; down: 1)
#endif
} pc;

#ifdef EXPERT_IDS
layout(std430, binding = 5) readonly buffer Ids { uint ids[]; };
#endif

const uint NV = NR * NB + (NORM != 0u ? NB : 0u);
shared float red_[NV * WG];

void main() {
    const uint tid = gl_LocalInvocationID.x;
#ifdef EXPERT_IDS
    const uint row0 = gl_WorkGroupID.y * NR;  // slots in x, as matvec.comp's
#else
    const uint row0 = gl_WorkGroupID.x * NR;
#endif
    const uint rows = min(NR, pc.n - row0);  // uniform over the workgroup
#ifdef EXPERT_IDS
    const uint slot = gl_WorkGroupID.x;
    const uint expert = ids[pc.ids_base + slot];
    if (expert < pc.e_first || expert - pc.e_first >= pc.e_count) return;  // another window's
    const uint w_base = pc.w_base + (expert - pc.e_first) * pc.expert_bytes;
    const uint x_base = pc.x_base + (slot / pc.x_div) * pc.xq_row_words;
    const uint y_base = pc.y_base + slot * pc.y_stride, b_base = pc.b_base + expert * pc.n;
#else
    const uint w_base = pc.w_base, x_base = pc.x_base, y_base = pc.y_base, b_base = pc.b_base;
#endif

    float acc[NR * NB];  // acc[r * NB + b]
    for (uint i = 0; i < NR * NB; ++i) acc[i] = 0.0;
    float sq[NB];  // NORM: the sums of squares of the blocks this invocation read
    for (uint b = 0; b < NB; ++b) sq[b] = 0.0;

    const uint units = pc.k / (32u * W_DOT_BLOCKS);
    for (uint u = tid; u < units; u += WG) {
        for (uint b = 0; b < NB; ++b) {
            // X's blocks of this unit for vector b, then every row against them.
            uint xq[8u * W_DOT_BLOCKS];
            vec2 xd[W_DOT_BLOCKS];
            const uint xrow = x_base + b * pc.xq_row_words;
            for (uint i = 0; i < W_DOT_BLOCKS; ++i) {
                const uint j = w_dot_unit_block(u, i), q0 = xrow + 8u * j;
                for (uint t = 0; t < 8u; ++t) xq[8u * i + t] = xq_words[q0 + t];
                const uint dw = xrow + pc.k / 4u + 4u * j;
                xd[i] = vec2(uintBitsToFloat(xq_words[dw]), uintBitsToFloat(xq_words[dw + 1u]));
                if (NORM != 0u) sq[b] += uintBitsToFloat(xq_words[dw + 2u]);
            }
            for (uint r = 0; r < NR; ++r) {
                if (r >= rows) break;
                acc[r * NB + b] += w_dot_unit(w_base + (row0 + r) * pc.row_bytes, u, xq, xd);
            }
        }
    }

#ifdef USE_SUBGROUP
    for (uint v = 0; v < NR * NB; ++v) {
        float s = subgroupAdd(acc[v]);
        if (subgroupElect()) red_[v * WG + gl_SubgroupID] = s;
    }
    for (uint b = 0; b < NV - NR * NB; ++b) {
        float s = subgroupAdd(sq[b]);
        if (subgroupElect()) red_[(NR * NB + b) * WG + gl_SubgroupID] = s;
    }
    barrier();
    const uint parts = gl_NumSubgroups;
#else
    for (uint v = 0; v < NR * NB; ++v) red_[v * WG + tid] = acc[v];
    for (uint b = 0; b < NV - NR * NB; ++b) red_[(NR * NB + b) * WG + tid] = sq[b];
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
        if (pc.has_bias != 0u) sum += bias[b_base + row0 + r];
        if (pc.has_res != 0u) sum += res[pc.r_base + b * pc.y_stride + row0 + r];
        y[y_base + b * pc.y_stride + row0 + r] = sum;
    }
}
