#version 450
// attention_prefill: a block of query tokens against the KV cache, causal (optionally within a
// sliding window), online softmax over KV tiles held in shared memory (flash attention; no n x n
// score matrix exists anywhere).
//
// Inputs:  q[n_tokens][n_heads][D]            f32
//          k[n_ctx][n_kv_heads][D]             f16, f32 or q8_0 (KV_*, see kv_read.glsl), a ring:
//                                              position j in row j % n_ctx
//          v: DV elements per (row, kv head)   same type; V of row r, kv head g at 4-element group
//                                              r * v_row4 + g * v_head4 + v_off4 of binding 2: a V
//                                              cache [n_ctx][n_kv_heads][DV], or with v_in_k (MLA,
//                                              absorbed: V is the last DV elements of each K row) the
//                                              K cache bound again, v_off4 = (D - DV) / 4; then the V
//                                              tile is not loaded at all: the K tile holds it. DV <= D,
//                                              from the host only where it differs (constant 5; 0 = D).
//          positions[n_tokens]                 int32, read on the device: query t at position p sees
//                                              positions [lo, hi]: lo = max(0, p - window + 1), hi = p
//                                              with a window; lo = 0, hi = min(p, n_ctx - 1) without;
//                                              not causal (encoders): p is the last query's position
//                                              for every query, so the call attends to all of itself;
//                                              segmented (several inputs packed in one call): query t
//                                              sees positions [segs[2t], segs[2t + 1]) instead
// Output:  out[n_tokens][n_heads][DV]         f32
// q, positions and out start at the push constants q_first / pos_first / out_first inside their
// bindings, so one sequence's rows of a multi-sequence batch can be bound at any offset.
// Paged (block_shift > 0): the caches are a pool of blocks and the call's sequence's logical ring row r
// lives at paged_row(r) of its table row (table_first in binding 8; kv_read.glsl).
// Math (query token t at position i_t, head h, kv head h / G, s_j = scale * q_th . k_j for j in
//          [lo_t, hi_t], then s_j <- softcap * tanh(s_j / softcap) when softcap > 0, then with ALiBi
//          s_j <- s_j - slope_h * |i_t - j| (alibi_slope in kv_read.glsl; i_t is the query's own
//          position also when not causal), then with a position-bias table (T5's relative
//          attention buckets, looked up by the host per distance) s_j <- s_j + pos_bias[h][d + R],
//          d = clamp(j - i_t, -R, R), R = bias_range:
//          out = sum_j exp(s_j - m) v_j / sum_j exp(s_j - m), m = max_j s_j, computed online over
//          tiles of BK keys: m' = max(m, tile max), accumulator and sum rescaled by exp(m - m').
//          Attention sinks (gpt-oss): one more logit per head, sinks[h], in the softmax's sum and max
//          and with no value: m and the sum start at sinks[h] and 1 instead of -inf and 0.
// Workgroup: BT consecutive tokens x GW query heads sharing one kv head = M = BT * GW query rows;
// grid (token blocks, n_kv_heads, G / GW). It walks positions from the smallest lo to the largest
// hi of its rows (window + BT - 1 keys for consecutive positions) in tiles of BK, each row masked
// to its own [lo, hi]: the K tile is staged in shared memory (keys past that end are zero-filled,
// never read from memory), scores of all M x BK pairs are computed from shared memory, invocation
// r < M updates row r's running max and sum while the V tile replaces the K tile, then the value
// phase accumulates (row, 4 columns) output slots from shared memory. Each invocation works on several
// rows at once in both phases (S_ROWS, A_ROWS below) so that one shared K or V load feeds several
// dot products. The value phase needs WG >= DV / 4: the host takes 128, more for V past 512.
// No subgroup operations; all sizes are specialization constants chosen by the host to fit shared
// memory (ops/attention.cpp).

#extension GL_GOOGLE_include_directive : require
#define KV_TABLE_BINDING 8
#include "kv_read.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;
layout(constant_id = 1) const uint D = 128;  // head_dim, multiple of 4
layout(constant_id = 2) const uint GW = 1;   // query heads per workgroup
layout(constant_id = 3) const uint BT = 16;  // tokens per workgroup
layout(constant_id = 4) const uint BK = 16;  // keys per tile
layout(constant_id = 5) const uint DV_SPEC = 0;  // V's and the output's head_dim, a multiple of 4, <= D; 0: D

#define MAX_ROWS 8
const uint D4 = D / 4;
const uint DV = DV_SPEC == 0u ? D : DV_SPEC;
const uint DV4 = DV / 4;
const uint M = BT * GW;
const uint KS = (D4 > DV4 ? D4 : DV4) + 1;  // padded row stride of the K/V tile (spreads shared-memory banks)
// Score phase: invocation (key c = tid % BK, row group tid / BK) computes rows g, g + S_GROUPS, ...
// of key c, so one K load serves S_ROWS rows. Needs WG % BK == 0.
const uint S_GROUPS = WG / BK;
const uint S_ROWS = (M + S_GROUPS - 1) / S_GROUPS;  // <= MAX_ROWS (host-checked)
// Value phase: invocation (column group j = tid % DV4, row group tid / DV4) owns rows g, g + A_GROUPS,
// ... of columns 4j..4j+3, so one V load serves A_ROWS rows. Needs WG >= DV4; invocations past
// A_GROUPS * DV4 idle there.
const uint A_GROUPS = WG / DV4;
const uint A_ROWS = (M + A_GROUPS - 1) / A_GROUPS;  // <= MAX_ROWS (host-checked)

layout(std430, binding = 0) readonly buffer Q { vec4 q[]; };
layout(std430, binding = 3) readonly buffer Pos { int positions[]; };
layout(std430, binding = 4) writeonly buffer Out { vec4 out_[]; };
layout(std430, binding = 5) readonly buffer PosBias { float pos_bias[]; };  // [n_heads][2R + 1]; unread when R = 0
layout(std430, binding = 6) readonly buffer Segs { int segs[]; };  // [n_tokens][2]; unread unless segmented
layout(std430, binding = 7) readonly buffer Sinks { float sinks[]; };  // [n_heads]; unread unless has_sinks
layout(push_constant) uniform Push {
    uint n_tokens;
    uint n_heads;
    uint n_kv_heads;
    uint n_ctx;
    uint group;  // n_heads / n_kv_heads
    float scale;
    uint window;    // 0: none
    float softcap;  // 0: off
    uint q_first;   // vec4 offset of q[0] in the Q binding
    uint pos_first; // offset of positions[0] in the Pos binding
    uint out_first; // vec4 offset of out[0] in the Out binding
    uint causal;    // 0: every row sees up to the last token's position (no window then)
    float alibi_step; // ALiBi: max_bias / alibi_n_log2 (alibi_slope in kv_read.glsl)
    uint alibi_n_log2;  // 0: no ALiBi
    uint bias_range;    // R of the position-bias table; 0: none
    uint seg_first;     // offset of segs[0] in the Segs binding
    uint segmented;     // 1: each query's key range comes from segs (not causal)
    uint has_sinks;     // 1: head h's softmax has the extra logit sinks[sink_first + h]
    uint sink_first;
    uint v_row4;    // V's 4-element groups between consecutive cache rows of binding 2
    uint v_head4;   // ... between consecutive kv heads of a row
    uint v_off4;    // ... before a head's first V element (V inside K: (D - DV) / 4)
    uint v_in_k;    // 1: V is inside the K rows (binding 2 is the K cache): read it from the K tile
    uint table_first;  // paged: the sequence's table row in binding 8 (every query is of one sequence)
    uint block_shift;  // log2 of the rows per block; 0: not paged
} pc;

shared vec4 q_sh[M * D4];
shared vec4 kv_sh[BK * KS];
shared float p_sh[M * BK];
shared float m_sh[M], l_sh[M], alpha_sh[M];
shared uint lo_sh[M], lim_sh[M];  // row r sees positions [lo_sh[r], lim_sh[r])
shared float slope_sh[M], qpos_sh[M];  // ALiBi: row r's head slope (0 without) and query position
shared int bias_sh[M];  // row r's entry of distance 0 in pos_bias

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tok0 = gl_WorkGroupID.x * BT, kvh = gl_WorkGroupID.y;
    const uint h0 = kvh * pc.group + gl_WorkGroupID.z * GW;

    // Row r is token tok0 + r / GW, head h0 + r % GW; rows past n_tokens see no keys.
    for (uint r = tid; r < M; r += WG) {
        const uint t = tok0 + r / GW;
        slope_sh[r] = alibi_slope(h0 + r % GW, pc.alibi_step, pc.alibi_n_log2);
        qpos_sh[r] = t < pc.n_tokens ? float(max(positions[pc.pos_first + t], 0)) : 0.0;
        bias_sh[r] = int((h0 + r % GW) * (2u * pc.bias_range + 1u) + pc.bias_range);
        if (t < pc.n_tokens && pc.segmented != 0u) {
            lo_sh[r] = uint(max(segs[pc.seg_first + 2u * t], 0));
            lim_sh[r] = min(uint(max(segs[pc.seg_first + 2u * t + 1u], 0)), pc.n_ctx);
        } else if (t < pc.n_tokens) {
            const uint pos = uint(max(positions[pc.pos_first + (pc.causal != 0u ? t : pc.n_tokens - 1u)], 0));
            lo_sh[r] = pc.window > 0u && pos >= pc.window ? pos - pc.window + 1u : 0u;
            lim_sh[r] = pc.window > 0u ? pos + 1u : min(pos + 1u, pc.n_ctx);
        } else {
            lo_sh[r] = 0xffffffffu;
            lim_sh[r] = 0u;
        }
        // An attention sink is a key of logit sinks[h] and value 0: the running max and sum start from it.
        const bool sink = pc.has_sinks != 0u;
        m_sh[r] = sink ? sinks[pc.sink_first + h0 + r % GW] : NEG_BIG;
        l_sh[r] = sink ? 1.0 : 0.0;
    }
    for (uint i = tid; i < M * D4; i += WG) {
        const uint r = i / D4, j = i % D4, t = tok0 + r / GW;
        q_sh[i] = t < pc.n_tokens ? q[pc.q_first + (t * pc.n_heads + h0 + r % GW) * D4 + j] * pc.scale : vec4(0.0);
    }
    barrier();
    uint kv_begin = 0xffffffffu, kv_end = 0;
    for (uint r = 0; r < M; ++r) {
        kv_begin = min(kv_begin, lo_sh[r]);
        kv_end = max(kv_end, lim_sh[r]);
    }
    const bool capped = pc.softcap > 0.0;
    const float inv_cap = capped ? 1.0 / pc.softcap : 0.0;

    vec4 acc[MAX_ROWS];
    for (uint k = 0; k < MAX_ROWS; ++k) acc[k] = vec4(0.0);
    const uint a_col = tid % DV4, a_group = tid / DV4;
    const uint row_stride4 = pc.n_kv_heads * D4;
    const bool v_in_k = pc.v_in_k != 0u;
    // Where the value phase finds V's column groups in a tile row: the K tile's V part, or the V tile.
    const uint v_at = v_in_k ? pc.v_off4 + a_col : a_col;
    const uint v_col = kvh * pc.v_head4 + pc.v_off4;

    for (uint t0 = kv_begin; t0 < kv_end; t0 += BK) {
        const uint n = min(BK, kv_end - t0);
        // Ring rows of the tile: (t0 + c) % n_ctx, as t0 % n_ctx + c wrapped; the modulo (not a
        // subtraction) because with n_ctx < BK a tile can wrap more than once. Only wrapped keys pay it.
        const uint r0 = t0 % pc.n_ctx;
        for (uint i = tid; i < BK * D4; i += WG) {
            const uint c = i / D4, j = i % D4;
            uint row = r0 + c;
            if (row >= pc.n_ctx) row %= pc.n_ctx;
            kv_sh[c * KS + j] = c < n ? load_k4(paged_row(row, pc.table_first, pc.block_shift) * row_stride4 + kvh * D4 + j) : vec4(0.0);
        }
        barrier();
        {
            const uint c = tid % BK, g = tid / BK;
            float s[MAX_ROWS];
            for (uint k = 0; k < MAX_ROWS; ++k) s[k] = 0.0;
            for (uint j = 0; j < D4; ++j) {
                const vec4 kk = kv_sh[c * KS + j];
                for (uint k = 0; k < S_ROWS; ++k) {
                    const uint r = g + k * S_GROUPS;
                    if (r < M) s[k] += dot(q_sh[r * D4 + j], kk);
                }
            }
            const int range = int(pc.bias_range);
            for (uint k = 0; k < S_ROWS; ++k) {
                const uint r = g + k * S_GROUPS;
                if (r < M) {
                    const float bias = range > 0 ? pos_bias[bias_sh[r] + clamp(int(t0 + c) - int(qpos_sh[r]), -range, range)] : 0.0;
                    p_sh[r * BK + c] = (capped ? softcap_score(s[k], pc.softcap, inv_cap) : s[k]) -
                                       slope_sh[r] * abs(qpos_sh[r] - float(t0 + c)) + bias;
                }
            }
        }
        barrier();
        // The V tile replaces the K tile, unless V is part of K: then the K tile already holds it.
        if (!v_in_k) {
            for (uint i = tid; i < BK * DV4; i += WG) {
                const uint c = i / DV4, j = i % DV4;
                uint row = r0 + c;
                if (row >= pc.n_ctx) row %= pc.n_ctx;
                kv_sh[c * KS + j] = c < n ? load_v4(paged_row(row, pc.table_first, pc.block_shift) * pc.v_row4 + v_col + j) : vec4(0.0);
            }
        }
        for (uint r = tid; r < M; r += WG) {
            // Keys t0 + c outside [lo, lim) are masked: they get weight 0 and take no part in the max.
            const uint lo = lo_sh[r], lim = lim_sh[r];
            const uint c_lo = lo > t0 ? min(lo - t0, n) : 0u;
            const uint c_hi = lim > t0 ? min(lim - t0, n) : 0u;
            const float m_old = m_sh[r];
            float mx = m_old;
            for (uint c = c_lo; c < c_hi; ++c) mx = max(mx, p_sh[r * BK + c]);
            float sum = 0.0;
            for (uint c = 0; c < n; ++c) {
                const float p = c >= c_lo && c < c_hi ? exp(p_sh[r * BK + c] - mx) : 0.0;
                p_sh[r * BK + c] = p;
                sum += p;
            }
            const float a = exp(m_old - mx);
            alpha_sh[r] = a;
            l_sh[r] = l_sh[r] * a + sum;
            m_sh[r] = mx;
        }
        barrier();
        if (a_group < A_GROUPS) {
            for (uint k = 0; k < A_ROWS; ++k) {
                const uint r = a_group + k * A_GROUPS;
                if (r < M) acc[k] *= alpha_sh[r];
            }
            for (uint c = 0; c < n; ++c) {
                const vec4 vv = kv_sh[c * KS + v_at];
                for (uint k = 0; k < A_ROWS; ++k) {
                    const uint r = a_group + k * A_GROUPS;
                    if (r < M) acc[k] += p_sh[r * BK + c] * vv;
                }
            }
        }
        barrier();
    }

    if (a_group < A_GROUPS) {
        for (uint k = 0; k < A_ROWS; ++k) {
            const uint r = a_group + k * A_GROUPS, t = tok0 + r / GW;
            if (r < M && t < pc.n_tokens) {
                const float l = l_sh[r];
                out_[pc.out_first + (t * pc.n_heads + h0 + r % GW) * DV4 + a_col] = l > 0.0 ? acc[k] / l : vec4(0.0);
            }
        }
    }
}
