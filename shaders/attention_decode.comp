#version 450
// attention_decode: one query token against the KV cache, split over the KV length (flash decoding).
//
// Inputs:  q[n_heads][D]                      f32, the query of the one token (n_tokens == 1)
//          k, v[n_ctx][n_kv_heads][D]          f16, f32 or q8_0 (KV_*, see kv_read.glsl), a ring:
//                                              position j in row j % n_ctx
//          positions[1]                        int32 p, read here so that a recorded command buffer
//                                              follows the position. The query sees positions
//                                              [lo, hi]: lo = max(0, p - window + 1), hi = p with a
//                                              window; lo = 0, hi = min(p, n_ctx - 1) without.
// Output:  direct (n_splits == 1):  dst = out[n_heads][D], the attention output
//          split  (n_splits  > 1):  dst = scratch: o[n_splits][n_heads][D] unnormalized partial outputs,
//                                   then ml[n_splits][n_heads][2] = (running max, sum of exp) per split;
//                                   attention_merge.comp reduces them.
// q, positions and dst start at the push constants q_first / pos_first / dst_first inside their
// bindings, so a batch of sequences can bind one token's rows at any offset.
// Math (per query head h, kv head h / G, scores s_t = scale * q_h . k_t over t in the split's range,
//          then s_t <- softcap * tanh(s_t / softcap) when softcap > 0):
//          m = max_t s_t, l = sum_t exp(s_t - m), o = sum_t exp(s_t - m) v_t; out = o / l.
//          Computed online over tiles of WG keys: m' = max(m, tile max), o and l rescaled by exp(m - m').
// Split s covers positions lo + [s * chunk, min((s + 1) * chunk, kv_len)), kv_len = hi - lo + 1 <= n_ctx,
// chunk = max(ceil(kv_len / n_splits), min_chunk), so a windowed query reads ~window keys however far
// p is; kv_len is known only on the device, so a split may be empty: it writes m = NEG_BIG, l = 0,
// o = 0, which the merge weighs by 0.
// Workgroup (kv head, split, group of GW query heads sharing that kv head): K and V are read from
// memory once for all GW heads. Score phase: invocation t computes the GW scores of key t of the tile
// (one pass over its K row). Softmax phase: invocation g < GW updates row g's running max and sum
// (serial over the tile, no reduction needed). Value phase: invocation (kp, d4) accumulates the 4
// output columns d4 of all GW heads over the tile keys t = kp mod KP (one pass over V); the KP
// partial accumulators are summed through shared memory at the end. No subgroup operations.

#extension GL_GOOGLE_include_directive : require
#include "kv_read.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;   // also the KV tile length; WG >= D / 4
layout(constant_id = 1) const uint D = 128;   // head_dim, a multiple of 4, <= 4 * WG
layout(constant_id = 2) const uint GW = 1;    // query heads per workgroup, <= GW_MAX

#define GW_MAX 8
const uint D4 = D / 4;
const uint KP = WG / D4;  // key partitions of the value phase

layout(std430, binding = 0) readonly buffer Q { vec4 q[]; };
layout(std430, binding = 3) readonly buffer Pos { int positions[]; };
layout(std430, binding = 4) writeonly buffer Dst { float dst[]; };
layout(push_constant) uniform Push {
    uint n_heads;
    uint n_kv_heads;
    uint n_ctx;
    uint n_splits;
    uint min_chunk;
    uint group;  // n_heads / n_kv_heads
    float scale;
    uint window;    // 0: none
    float softcap;  // 0: off
    uint q_first;   // vec4 offset of q[0] in the Q binding
    uint pos_first; // offset of positions[0] in the Pos binding
    uint dst_first; // float offset of dst[0] in the Dst binding
} pc;

shared vec4 q_sh[GW * D4];    // scaled queries of the GW heads
shared float p_sh[GW * WG];   // scores, then exp(score - m) of the current tile
shared float alpha_sh[GW];    // rescale factor of the current tile, per head
shared float ml_sh[2 * GW];   // final (m, l) per head
shared vec4 red_sh[WG];       // partial accumulators of the KP key partitions

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint kvh = gl_WorkGroupID.x, split = gl_WorkGroupID.y;
    const uint h0 = kvh * pc.group + gl_WorkGroupID.z * GW;

    const uint pos = uint(max(positions[pc.pos_first], 0));
    const uint lo = pc.window > 0u && pos >= pc.window ? pos - pc.window + 1u : 0u;
    const uint kv_len = (pc.window > 0u ? pos + 1u : min(pos + 1u, pc.n_ctx)) - lo;
    const uint lo_row = lo % pc.n_ctx;
    const uint chunk = max((kv_len + pc.n_splits - 1u) / pc.n_splits, pc.min_chunk);
    const uint begin = lo + min(split * chunk, kv_len);
    const uint end = lo + min(split * chunk + chunk, kv_len);
    const bool capped = pc.softcap > 0.0;
    const float inv_cap = capped ? 1.0 / pc.softcap : 0.0;

    for (uint i = tid; i < GW * D4; i += WG) q_sh[i] = q[pc.q_first + h0 * D4 + i] * pc.scale;
    barrier();

    float m_run = NEG_BIG, l_run = 0.0;  // meaningful in invocation g < GW only: row g
    vec4 acc[GW_MAX];
    for (uint g = 0; g < GW_MAX; ++g) acc[g] = vec4(0.0);
    const uint d4 = tid % D4, kp = tid / D4;
    const uint row_stride4 = pc.n_kv_heads * D4;  // 4-element groups between consecutive cache rows

    for (uint t0 = begin; t0 < end; t0 += WG) {
        const uint n = min(WG, end - t0);
        if (tid < n) {
            float s[GW_MAX];
            for (uint g = 0; g < GW_MAX; ++g) s[g] = 0.0;
            const uint base = ring_row(t0 + tid, lo, lo_row, pc.n_ctx) * row_stride4 + kvh * D4;
            for (uint j = 0; j < D4; ++j) {
                const vec4 kk = load_k4(base + j);
                for (uint g = 0; g < GW; ++g) s[g] += dot(q_sh[g * D4 + j], kk);
            }
            if (capped)
                for (uint g = 0; g < GW; ++g) s[g] = softcap_score(s[g], pc.softcap, inv_cap);
            for (uint g = 0; g < GW; ++g) p_sh[g * WG + tid] = s[g];
        }
        barrier();
        if (tid < GW) {
            float mx = m_run;
            for (uint t = 0; t < n; ++t) mx = max(mx, p_sh[tid * WG + t]);
            float sum = 0.0;
            for (uint t = 0; t < n; ++t) {
                const float p = exp(p_sh[tid * WG + t] - mx);
                p_sh[tid * WG + t] = p;
                sum += p;
            }
            const float a = exp(m_run - mx);
            l_run = l_run * a + sum;
            m_run = mx;
            alpha_sh[tid] = a;
        }
        barrier();
        if (kp < KP) {
            for (uint g = 0; g < GW; ++g) acc[g] *= alpha_sh[g];
            // The tile's keys are ring rows tr0.. up to the ring's end, then 0..: two plain loops, so
            // the per-key work stays one address computation, as without a ring.
            const uint tr0 = ring_row(t0, lo, lo_row, pc.n_ctx);
            const uint n_direct = min(n, pc.n_ctx - tr0);
            const uint col = kvh * D4 + d4;
            uint t = kp;
            for (; t < n_direct; t += KP) {
                const vec4 vv = load_v4((tr0 + t) * row_stride4 + col);
                for (uint g = 0; g < GW; ++g) acc[g] += p_sh[g * WG + t] * vv;
            }
            for (; t < n; t += KP) {
                const vec4 vv = load_v4((t - n_direct) * row_stride4 + col);
                for (uint g = 0; g < GW; ++g) acc[g] += p_sh[g * WG + t] * vv;
            }
        }
        barrier();
    }

    if (tid < GW) {
        ml_sh[2 * tid] = m_run;
        ml_sh[2 * tid + 1] = l_run;
    }
    const bool direct = pc.n_splits == 1u;
    for (uint g = 0; g < GW; ++g) {
        red_sh[tid] = acc[g];
        barrier();
        if (tid < D4) {
            vec4 o = red_sh[tid];
            for (uint j = 1; j < KP; ++j) o += red_sh[j * D4 + tid];
            const uint h = h0 + g;
            if (direct) {
                const float l = ml_sh[2 * g + 1];
                o = l > 0.0 ? o / l : vec4(0.0);
                const uint at = pc.dst_first + h * D + 4 * tid;
                dst[at] = o.x; dst[at + 1] = o.y; dst[at + 2] = o.z; dst[at + 3] = o.w;
            } else {
                const uint at = pc.dst_first + (split * pc.n_heads + h) * D + 4 * tid;
                dst[at] = o.x; dst[at + 1] = o.y; dst[at + 2] = o.z; dst[at + 3] = o.w;
            }
        }
        barrier();
    }
    if (!direct && tid < GW) {
        const uint at = pc.dst_first + pc.n_splits * pc.n_heads * D + (split * pc.n_heads + h0 + tid) * 2u;
        dst[at] = m_run;
        dst[at + 1] = l_run;
    }
}
