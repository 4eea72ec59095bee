#version 450
// matmul_broadcast: the prefill-time linear layer for CPU drivers, Y = X · W^T (+ B) (+ R), with no
// shared memory and no barrier: register tiles fed by subgroup broadcasts.
//
// Inputs, output and math: as matmul.comp (W rows of any weight type, weights.glsl; X f32 [m][k];
// optional bias B and residual R; Y f32 [m][y_stride]; fp32 accumulation).
//
// Why: a CPU driver (lavapipe) runs S invocations as the S lanes of one SIMD register, and every
// memory load whose address differs per lane (global or shared) becomes a loop over the lanes,
// tens of instructions per lane, while arithmetic and a broadcast from a constant lane cost one
// instruction for all S lanes. The tiled matmul spends (TM + TN) shared loads on TM * TN FMAs and
// is bound by them; here each loaded value feeds many FMAs through registers.
//
// One workgroup is one subgroup of S lanes (S = the subgroup size: the host guarantees
// workgroup = subgroup). It computes TT * S rows of X (tokens) by R * S rows of W (columns of Y).
// Lane l holds the W rows n0 + l + r * S (r < R), one weights.glsl unit at a time (W_UNIT
// elements, scaled), and loads the X slice of token m0 + l + t * S (t < TT); each lane's X slice
// is then broadcast to all lanes in turn, so that lane l accumulates Y[token][its rows] for every
// token of the tile. Per unit and lane: R weight units and TT X slices loaded, R * TT * S * W_UNIT
// FMAs. Rows and tokens past the end are clamped to the last one (loaded but never stored), so
// the loop has no divergent branch. F32/F16/BF16 rows with k % W_UNIT != 0 finish with a scalar tail.
// EXPERT_GROUPS (the matmul_broadcast_id_* variants): a mixture of experts' prefill, as matmul.comp's
// EXPERT_GROUPS: workgroup x serves expert e_first + x over its sorted slots, y tiles them, z tiles W.
// Specialization constants: 0 S (workgroup size = subgroup size, <= 16), 1 R, 2 TT, 3 W_ALIGNED.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_ballot : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint S = 8;
layout(constant_id = 1) const uint R = 2;
layout(constant_id = 2) const uint TT = 2;

#define W_BINDING 0
#define W_ALIGNED_ID 3
#include "weights.glsl"

layout(std430, binding = 1) readonly buffer X { vec4 xv[]; };  // the host binds whole vec4s
layout(std430, binding = 2) readonly buffer Rb { float res[]; };
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
    uint x_vec4;     // x_base and k are multiples of 4: X can be read a vec4 at a time
#ifdef EXPERT_GROUPS
    uint g_base;        // uint offset of offsets[0] in the G window
    uint n_expert;      // offsets has n_expert + 1 entries; the sorted slots follow
    uint e_first;       // the experts the W window holds (workgroup x: expert e_first + x)
    uint expert_bytes;  // bytes of one expert's rows
    uint x_div;         // slots per X row
#endif
} pc;

#ifdef EXPERT_GROUPS
layout(std430, binding = 5) readonly buffer G { uint grp[]; };
#endif

float x1(uint i) { return xv[i >> 2][i & 3u]; }

// X[t][c .. c + 3] (c a multiple of 4).
vec4 x4(uint t, uint c) {
    uint i = pc.x_base + t * pc.k + c;
    if (pc.x_vec4 != 0u) return xv[i >> 2];
    return vec4(x1(i), x1(i + 1u), x1(i + 2u), x1(i + 3u));
}

// acc[(r * TT + t) * S + s]: Y[token m0 + t * S + s][row n0 + lane + r * S].
float acc[R * TT * S];

// Lane s's x4 broadcast, FMA'd into every row of this lane: s is a literal so that the broadcast
// is from a constant lane (one instruction on CPU drivers); steps past S fold away.
#define BCAST_STEP(s)                                                                   \
    if (s < S) {                                                                        \
        vec4 xb = subgroupBroadcast(xq, s);                                             \
        for (uint r = 0; r < R; ++r) {                                                  \
            uint a = (r * TT + t) * S + s;                                              \
            acc[a] = fma(wq[r].w, xb.w, fma(wq[r].z, xb.z, fma(wq[r].y, xb.y, fma(wq[r].x, xb.x, acc[a])))); \
        }                                                                               \
    }

void main() {
    const uint lane = gl_SubgroupInvocationID;
#ifdef EXPERT_GROUPS
    const uint n_tile = gl_WorkGroupID.z, e_off = gl_WorkGroupID.x;  // (expert, token tile, row tile)
#else
    const uint n_tile = gl_WorkGroupID.x;
#endif
    const uint n0 = n_tile * (R * S), m0 = gl_WorkGroupID.y * (TT * S);
#ifdef EXPERT_GROUPS
    const uint e = pc.e_first + e_off;
    const uint first = grp[pc.g_base + e], m = grp[pc.g_base + e + 1u] - first;
    if (m0 >= m) return;  // uniform: the expert has fewer slots
    const uint w_base = pc.w_base + e_off * pc.expert_bytes, b_row = e * pc.n;
    const uint order = pc.g_base + pc.n_expert + 1u + first;  // the expert's slots: grp[order + i]
#else
    const uint m = pc.m, w_base = pc.w_base, b_row = 0u;
#endif
    for (uint i = 0; i < R * TT * S; ++i) acc[i] = 0.0;

    uint row_byte[R];
    for (uint r = 0; r < R; ++r) row_byte[r] = w_base + min(n0 + lane + r * S, pc.n - 1u) * pc.row_bytes;
    uint tok[TT];  // the X row of each token this lane loads
    for (uint t = 0; t < TT; ++t) {
        tok[t] = min(m0 + lane + t * S, m - 1u);
#ifdef EXPERT_GROUPS
        tok[t] = grp[order + tok[t]] / pc.x_div;
#endif
    }

    const uint units = pc.k / W_UNIT;
    for (uint u = 0; u < units; ++u) {
        vec4 w[R][W_UNIT4];
        for (uint r = 0; r < R; ++r) {
            float d = w_unit(row_byte[r], u, w[r]);
            for (uint q = 0; q < W_UNIT4; ++q) w[r][q] *= d;
        }
        for (uint q = 0; q < W_UNIT4; ++q) {
            const uint c = w_unit_col(u, q);
            vec4 wq[R];
            for (uint r = 0; r < R; ++r) wq[r] = w[r][q];
            for (uint t = 0; t < TT; ++t) {
                vec4 xq = x4(tok[t], c);
                BCAST_STEP(0u) BCAST_STEP(1u) BCAST_STEP(2u) BCAST_STEP(3u)
                BCAST_STEP(4u) BCAST_STEP(5u) BCAST_STEP(6u) BCAST_STEP(7u)
                BCAST_STEP(8u) BCAST_STEP(9u) BCAST_STEP(10u) BCAST_STEP(11u)
                BCAST_STEP(12u) BCAST_STEP(13u) BCAST_STEP(14u) BCAST_STEP(15u)
            }
        }
    }
#if defined(W_IS_FLOAT)
    // Columns past the last whole unit, one at a time (as a vec4 with three zero lanes).
    for (uint c = units * W_UNIT; c < pc.k; ++c) {
        vec4 wq[R];
        for (uint r = 0; r < R; ++r) wq[r] = vec4(w_get(row_byte[r], c), 0.0, 0.0, 0.0);
        for (uint t = 0; t < TT; ++t) {
            vec4 xq = vec4(x1(pc.x_base + tok[t] * pc.k + c), 0.0, 0.0, 0.0);
            BCAST_STEP(0u) BCAST_STEP(1u) BCAST_STEP(2u) BCAST_STEP(3u)
            BCAST_STEP(4u) BCAST_STEP(5u) BCAST_STEP(6u) BCAST_STEP(7u)
            BCAST_STEP(8u) BCAST_STEP(9u) BCAST_STEP(10u) BCAST_STEP(11u)
            BCAST_STEP(12u) BCAST_STEP(13u) BCAST_STEP(14u) BCAST_STEP(15u)
        }
    }
#endif

    for (uint r = 0; r < R; ++r) {
        const uint gn = n0 + lane + r * S;
        if (gn >= pc.n) continue;
        const float b = pc.has_bias != 0u ? bias[pc.b_base + b_row + gn] : 0.0;
        for (uint t = 0; t < TT; ++t) {
            for (uint s = 0; s < S; ++s) {
                const uint gm = m0 + t * S + s;
                if (gm >= m) break;
                float v = acc[(r * TT + t) * S + s] + b;
                if (pc.has_res != 0u) v += res[pc.r_base + gm * pc.y_stride + gn];
#ifdef EXPERT_GROUPS
                y[pc.y_base + grp[order + gm] * pc.y_stride + gn] = v;
#else
                y[pc.y_base + gm * pc.y_stride + gn] = v;
#endif
            }
        }
    }
}
