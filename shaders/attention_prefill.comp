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
//                                              not causal (encoders, image chunks): hi is the last
//                                              query's position for every query, so the call attends
//                                              to all of itself (lo from the query's own p);
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

#include "attention_prefill_rows.glsl"

shared vec4 q_sh[M * D4];
shared vec4 kv_sh[BK * KS];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tok0 = gl_WorkGroupID.x * BT, kvh = gl_WorkGroupID.y;
    const uint h0 = kvh * pc.group + gl_WorkGroupID.z * GW;

    init_rows(tid, tok0, h0);
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
            for (uint k = 0; k < S_ROWS; ++k) {
                const uint r = g + k * S_GROUPS;
                if (r < M) p_sh[r * BK + c] = shaped_score(r, t0 + c, s[k]);
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
        for (uint r = tid; r < M; r += WG) online_softmax_row(r, t0, n);
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
