#version 450
// matmul_dot: the prefill-time linear layer on integer dot products, Y = X · W^T (+ B) (+ R), for many
// rows of X already quantized to Q8_1 blocks (quantize_q8_1.comp). Chosen where the device's 4x8-bit
// packed dot is accelerated (or `--caps int-dot`), as matvec_dot is for decode: the weights are
// multiplied as the integers they store, four per instruction, and both shared-memory tiles hold 8-bit
// values, a quarter of the float matmul's bytes per element.
//
// Inputs:  W   rows of k elements of a block type weights_dot.glsl multiplies (GGUF layouts), the
//              rows of this dispatch starting at byte pc.w_base, pc.row_bytes apart
//          XQ  pc.m rows of pc.xq_row_words words from word pc.x_base: k / 4 words of int8 quants
//              (column c in byte c % 4 of word c / 4), then per block of 32 four floats (d, s, ss, 0)
//          R   f32, same layout as Y (read only when pc.has_res != 0; may alias Y)
//          B   f32 [n] bias of this dispatch's columns from float pc.b_base (when pc.has_bias != 0)
// Output:  Y   f32 [m][y_stride] from float pc.y_base (R: pc.r_base); columns 0 .. pc.n.
// Math:    Y[i][j] = sum over blocks b of W[j] block b · (d_ib q_ib) (+ B[j]) (+ R[i][j]): each block's
//          integer sum exact (w_dot_scale applies the block's factors), f32 across blocks.
// One workgroup computes a BM x BN tile of Y, stepping over k in slices of SB blocks of 32 columns
// (SB a multiple of every type's unit span: 4). Per slice, W's units are decoded once into shared
// memory as packed int8 levels with their factors (w_dot_unit_decode), X's quants and (d, s) are
// copied beside them, and each invocation accumulates a TM x TN micro-tile, its rows and columns
// strided by BM/TM and BN/TN. A row's slice is 2 SB uvec4s plus one of padding, so that the 16-byte
// reads of neighbouring rows fall in distinct banks, and every block is read as two uvec4s instead
// of eight words. Rows past m or n and blocks past k / 32 are zeros, so any m, n and k (a multiple
// of the type's block) works. The bias and the residual are added in the epilogue.
// EXPERT_GROUPS (matmul_dot_id_*: a mixture of experts' prefill, ops::moe_matmul), as matmul.comp's:
// W a stack of experts pc.expert_bytes apart (the window holds experts e_first ..), workgroup x serves
// expert e_first + x (y: a tile of its slots, z: a tile of W's rows, outermost as in matmul.comp)
// over the slots moe_group sorted to it (G: offsets[n_expert + 1] from uint
// pc.g_base, then the sorted slots); its i-th slot s reads XQ row s / pc.x_div and writes Y row s
// (+ B[e] where the experts have biases). A tile past the expert's count returns at once. No residual.
// Specialization constants: 0 WG = (BM/TM)*(BN/TN), 1 BM, 2 BN, 3 SB, 4 TM, 5 TN, 6 W_ALIGNED.
// Shared memory: (32 SB + 16) (BN + BM) + 16 (SB + 1) BN + 8 SB BM bytes: 25 KiB at 64 x 64, SB 4.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint SB = 4;
layout(constant_id = 4) const uint TM = 4;
layout(constant_id = 5) const uint TN = 4;
const uint TX = BN / TN;  // invocations along n
const uint TY = BM / TM;  // invocations along m

#define W_BINDING 0
#define W_ALIGNED_ID 6
#include "weights.glsl"
#include "weights_dot.glsl"

layout(std430, binding = 1) readonly buffer XQ { uint xq_words[]; };
layout(std430, binding = 2) readonly buffer R { float res[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer B { float bias[]; };

layout(push_constant) uniform Push {
    uint m;             // rows of X / Y in this dispatch
    uint n;             // rows of W (columns of Y) in this dispatch
    uint k;
    uint row_bytes;
    uint w_base;        // byte offset of W row 0 in the W window
    uint x_base;        // word offset of XQ row 0 in the XQ window
    uint xq_row_words;  // words per XQ row: k / 4 + k / 8
    uint y_base;        // float offset of Y[0][0] in the Y window
    uint r_base;        // float offset of R[0][0] in the R window
    uint y_stride;      // floats between two rows of Y / R
    uint has_res;
    uint b_base;        // float offset of B[0] (this dispatch's first column) in the B window
    uint has_bias;
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

const uint UPS = SB / W_DOT_BLOCKS;  // weight units per row and slice
const uint QS = 2u * SB + 1u;        // uvec4s per row and slice, one of them padding
const uint FS = SB + 1u;             // factor vec4s per row and slice, one of them padding

shared uvec4 wq_[BN * QS];  // wq_[j * QS + 2b + h]: words 4h .. 4h + 3 of W row n0 + j, block b of the slice
shared vec4 wf_[BN * FS];   // wf_[j * FS + b]: that block's factors (a_lo, a_hi, b, 0)
shared uvec4 xq_[BM * QS];  // xq_[i * QS + 2b + h]: words 4h .. 4h + 3 of X row m0 + i, block b
shared vec2 xd_[BM * SB];   // xd_[i * SB + b]: that block's (d, s)

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tx = tid % TX, ty = tid / TX;
#ifdef EXPERT_GROUPS
    const uint n_tile = gl_WorkGroupID.z, e_off = gl_WorkGroupID.x;  // (expert, token tile, row tile)
#else
    const uint n_tile = gl_WorkGroupID.x;
#endif
    const uint m0 = gl_WorkGroupID.y * BM, n0 = n_tile * BN;
    const uint blocks = pc.k / 32u;
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

    for (uint s0 = 0; s0 < blocks; s0 += SB) {
        // W: a unit per step, consecutive invocations on consecutive units of a row.
        for (uint e = tid; e < BN * UPS; e += WG) {
            const uint j = e / UPS, uu = e % UPS, gn = n0 + j;
            const uint u = s0 / W_DOT_BLOCKS + uu;
            uint w[8u * W_DOT_BLOCKS];
            vec3 f[W_DOT_BLOCKS];
            const bool live = gn < pc.n && u * W_DOT_BLOCKS < blocks;
            if (live) w_dot_unit_decode(w_base + gn * pc.row_bytes, u, w, f);
            for (uint i = 0; i < W_DOT_BLOCKS; ++i) {
                const uint b = w_dot_unit_block(u, i) - s0;
                wq_[j * QS + 2u * b] = live ? uvec4(w[8u * i], w[8u * i + 1u], w[8u * i + 2u], w[8u * i + 3u]) : uvec4(0u);
                wq_[j * QS + 2u * b + 1u] =
                    live ? uvec4(w[8u * i + 4u], w[8u * i + 5u], w[8u * i + 6u], w[8u * i + 7u]) : uvec4(0u);
                wf_[j * FS + b] = live ? vec4(f[i], 0.0) : vec4(0.0);
            }
        }
        // X: consecutive invocations read consecutive words of a row.
        for (uint e = tid; e < BM * SB * 2u; e += WG) {
            const uint i = e / (SB * 2u), c = e % (SB * 2u), gm = m0 + i, blk = s0 + c / 2u;
            uvec4 v = uvec4(0u);
            if (gm < m && blk < blocks) {
                const uint o = pc.x_base + X_ROW(gm) * pc.xq_row_words + 8u * s0 + 4u * c;
                v = uvec4(xq_words[o], xq_words[o + 1u], xq_words[o + 2u], xq_words[o + 3u]);
            }
            xq_[i * QS + c] = v;
        }
        for (uint e = tid; e < BM * SB; e += WG) {
            const uint i = e / SB, b = e % SB, gm = m0 + i, blk = s0 + b;
            vec2 d = vec2(0.0);
            if (gm < m && blk < blocks) {
                const uint dw = pc.x_base + X_ROW(gm) * pc.xq_row_words + pc.k / 4u + 4u * blk;
                d = vec2(uintBitsToFloat(xq_words[dw]), uintBitsToFloat(xq_words[dw + 1u]));
            }
            xd_[i * SB + b] = d;
        }
        barrier();
        for (uint b = 0; b < SB; ++b) {
            uvec4 xw[2u * TM];
            vec2 xd[TM];
            for (uint i = 0; i < TM; ++i) {
                const uint r = ty + i * TY;
                xw[2u * i] = xq_[r * QS + 2u * b];
                xw[2u * i + 1u] = xq_[r * QS + 2u * b + 1u];
                xd[i] = xd_[r * SB + b];
            }
            for (uint j = 0; j < TN; ++j) {
                const uint r = tx + j * TX;
                const uvec4 lo4 = wq_[r * QS + 2u * b], hi4 = wq_[r * QS + 2u * b + 1u];
                const vec3 f = wf_[r * FS + b].xyz;
                for (uint i = 0; i < TM; ++i) {
                    const uvec4 a = xw[2u * i], c = xw[2u * i + 1u];
                    const int lo = dot_s8x4(lo4.x, a.x) + dot_s8x4(lo4.y, a.y) + dot_s8x4(lo4.z, a.z) + dot_s8x4(lo4.w, a.w);
                    const int hi = dot_s8x4(hi4.x, c.x) + dot_s8x4(hi4.y, c.y) + dot_s8x4(hi4.z, c.z) + dot_s8x4(hi4.w, c.w);
                    acc[i * TN + j] += w_dot_scale(lo, hi, f, xd[i]);
                }
            }
        }
        barrier();
    }
    for (uint i = 0; i < TM; ++i) {
        const uint gm = m0 + ty + i * TY;
        if (gm >= m) continue;
        for (uint j = 0; j < TN; ++j) {
            const uint gn = n0 + tx + j * TX;
            if (gn >= pc.n) continue;
            float v = acc[i * TN + j];
            if (pc.has_bias != 0u) v += bias[pc.b_base + b_row + gn];
            if (pc.has_res != 0u) v += res[pc.r_base + gm * pc.y_stride + gn];
            y[pc.y_base + Y_ROW(gm) * pc.y_stride + gn] = v;
        }
    }
}
