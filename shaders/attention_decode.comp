#version 450
// attention_decode: one query token against the KV cache, split over the KV length (flash decoding).
//
// Inputs:  q[n_heads][D]                      f32, the query of the one token (n_tokens == 1)
//          k[n_ctx][n_kv_heads][D]             f16, f32 or q8_0 (KV_*, see kv_read.glsl), a ring:
//                                              position j in row j % n_ctx
//          v: DV elements per (row, kv head)   same type; V of row r, kv head g at 4-element group
//                                              r * v_row4 + g * v_head4 + v_off4 of binding 2: a V
//                                              cache [n_ctx][n_kv_heads][DV], or (MLA, absorbed: V is
//                                              the last DV elements of each K row) the K cache itself
//                                              bound again, v_off4 = (D - DV) / 4. DV <= D, from the
//                                              host only where it differs (constant 3; 0 = D).
//          positions[1]                        int32 p, read here so that a recorded command buffer
//                                              follows the position. The query sees positions
//                                              [lo, hi]: lo = max(0, p - window + 1), hi = p with a
//                                              window; lo = 0, hi = min(p, n_ctx - 1) without.
// Output:  direct (n_splits == 1):  dst = out[n_heads][DV], the attention output
//          split  (n_splits  > 1):  dst = scratch: o[n_splits][n_heads][DV] unnormalized partial outputs,
//                                   then ml[n_splits][n_heads][2] = (running max, sum of exp) per split;
//                                   attention_merge.comp reduces them.
// q, positions and dst start at the push constants q_first / pos_first / dst_first inside their
// bindings, so a batch of sequences can bind one token's rows at any offset.
// A batch: one dispatch serves n_tok queries of n_tok sequences (grid z = n_tok x head groups), query
//          t at q row t, positions[t], dst row t (direct) or partial region t (split), its new K/V rows
//          at row t (STORE) and its block table at table row t; every stride follows from the shape.
// Paged (block_shift > 0): the caches are a pool of blocks, query t's logical ring row r at the
//          physical row paged_row(r) of its table row (kv_table.glsl), table rows of
//          ceil(n_ctx / B) entries from table_first in the table binding (6; STORE: 9).
// Math (per query head h, kv head h / G, scores s_t = scale * q_h . k_t over t in the split's range,
//          then s_t <- softcap * tanh(s_t / softcap) when softcap > 0, then with ALiBi
//          s_t <- s_t - slope_h * |p - t|, alibi_slope in kv_read.glsl):
//          m = max_t s_t, l = sum_t exp(s_t - m), o = sum_t exp(s_t - m) v_t; out = o / l.
//          Computed online over tiles of WG keys: m' = max(m, tile max), o and l rescaled by exp(m - m').
//          Attention sinks (gpt-oss): one more logit per head, sinks[h], with no value (below).
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
// So WG >= DV / 4: the host takes 64 (16 on CPU drivers), or the next power of two for V past 256 (MLA's 512: 128).
// STORE (variants attention_decode_store_*, ops::attention_store: a decode step's RoPE, K/V store and
//   attention in one dispatch instead of two): the new token's K (before RoPE, binding 5 from k_first)
//   and V (binding 6 from v_first) rows [n_kv_heads][D] f32 go to cache row p % n_ctx (skipped when
//   p < 0). Every workgroup builds its kv head's new K and V in shared memory exactly as the cache
//   will hold them (K rotated as rope.comp rotates it, then rounded to f16 or
//   quantized to q8_0 by include/kv_write.glsl), and attends to them in place of that row, which
//   it never reads: workgroup (kv head, 0, 0) writes the row while the others run. Q is rotated as
//   it is loaded (rope.comp's rotation; q itself is left as it is). rot_half = 0 means no RoPE.
//   Frequency factors: binding 7, read only when has_ff != 0. Q8_0 needs D % 32 == 0 (whole blocks
//   per head). The new key is taken after the others of its split (online softmax order only).
//   V is a cache of its own as wide as K (DV == D; the host takes STORE for nothing else).

#extension GL_GOOGLE_include_directive : require
#ifdef STORE
#define KV_CACHE_ACCESS
#define KV_TABLE_BINDING 9
#include "kv_write.glsl"
#else
#define KV_TABLE_BINDING 6
#endif
#include "kv_read.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;   // also the KV tile length; WG >= DV / 4
layout(constant_id = 1) const uint D = 128;   // head_dim of q and K, a multiple of 4
layout(constant_id = 2) const uint GW = 1;    // query heads per workgroup, <= GW_MAX
layout(constant_id = 3) const uint DV_SPEC = 0;  // V's and the output's head_dim, a multiple of 4, <= D; 0: D

#define GW_MAX 8
const uint D4 = D / 4;
const uint DV = DV_SPEC == 0u ? D : DV_SPEC;
const uint DV4 = DV / 4;
const uint KP = WG / DV4;  // key partitions of the value phase

layout(std430, binding = 0) readonly buffer Q { vec4 q[]; };
layout(std430, binding = 3) readonly buffer Pos { int positions[]; };
layout(std430, binding = 4) writeonly buffer Dst { float dst[]; };
layout(push_constant) uniform Push {
    uint n_heads;
    uint n_kv_heads;
    uint n_ctx;
    uint n_splits;
    uint min_chunk;
    float scale;
    uint window;    // 0: none
    float softcap;  // 0: off
    uint q_first;   // vec4 offset of q[0] in the Q binding
    uint pos_first; // offset of positions[0] in the Pos binding
    uint dst_first; // float offset of dst[0] in the Dst binding
    float alibi_step; // ALiBi: max_bias / alibi_n_log2 (alibi_slope in kv_read.glsl)
    uint alibi_n_log2;  // 0: no ALiBi
    uint has_sinks;     // 1: head h's softmax has the extra logit sinks[sink_first + h] (split 0 holds it)
    uint sink_first;
    uint v_row4;    // V's 4-element groups between consecutive cache rows of binding 2
    uint v_head4;   // ... between consecutive kv heads of a row
    uint v_off4;    // ... before a head's first V element (V inside K: (D - DV) / 4)
    uint table_first;  // the first table row's offset in the table binding
    uint block_shift;  // log2 of the rows per block; 0: not paged (no table)
#ifdef STORE
    uint k_first;   // float offset of the new K row (kv head 0) in binding 5
    uint v_first;   // likewise of the new V row in binding 6
    uint rot_half;  // rot_dim / 2; 0: no RoPE
    uint layout_id; // 0 Adjacent, 1 HalfSplit
    float log2_step;
    uint ff_first;
    uint has_ff;
    float freq_scale;
    float ext_factor;
    float mscale;
    float corr_low;
    float corr_high;
#endif
} pc;

#ifdef STORE
layout(std430, binding = 5) readonly buffer KNew { float k_new[]; };
layout(std430, binding = 6) readonly buffer VNew { float v_new[]; };
layout(std430, binding = 7) readonly buffer F { float ff[]; };
#include "rope_angle.glsl"
layout(std430, binding = 8) readonly buffer Sinks { float sinks[]; };  // [n_heads]; unread unless has_sinks
#else
layout(std430, binding = 5) readonly buffer Sinks { float sinks[]; };
#endif

shared vec4 q_sh[GW * D4];    // scaled queries of the GW heads
shared float p_sh[GW * WG];   // scores, then exp(score - m) of the current tile
shared float alpha_sh[GW];    // rescale factor of the current tile, per head
shared float ml_sh[2 * GW];   // final (m, l) per head
shared vec4 red_sh[WG];       // partial accumulators of the KP key partitions
#ifdef STORE
shared vec4 raw_sh[2 * D4];   // the new K row of this kv head (rotated), then its V row, in f32
shared vec4 new_sh[2 * D4];   // the same as the cache holds them (rounded or quantized)

float q_elem(uint h, uint e);
#endif

// Per-invocation state of the online softmax, kept across tiles.
float m_run = NEG_BIG, l_run = 0.0;  // meaningful in invocation g < GW only: row g
vec4 acc[GW_MAX];
float slope[GW_MAX];  // ALiBi slope of each of the GW heads (0 without ALiBi)
float qpos;           // the query's position, for ALiBi distances
uint tid, kvh, lo, lo_row;
uint q_base;    // vec4 offset of this query's q row
uint table_at;  // offset of this query's table row (paged)
#ifdef STORE
float q_elem(uint h, uint e) { return q[q_base + h * D4 + e / 4u][e % 4u]; }
#endif

// One tile of n keys from logical index t0 (n <= WG), or with fresh the new key alone (n = 1) from
// new_sh: scores, the online-softmax update, and the value accumulation.
void process_tile(uint t0, uint n, bool fresh) {
    const uint d4 = tid % DV4, kp = tid / DV4;
    const uint row_stride4 = pc.n_kv_heads * D4;  // 4-element groups between consecutive cache rows
    const bool capped = pc.softcap > 0.0;
    const float inv_cap = capped ? 1.0 / pc.softcap : 0.0;
    if (tid < n) {
        float s[GW_MAX];
        for (uint g = 0; g < GW_MAX; ++g) s[g] = 0.0;
#ifdef STORE
        if (fresh) {
            for (uint j = 0; j < D4; ++j)
                for (uint g = 0; g < GW; ++g) s[g] += dot(q_sh[g * D4 + j], new_sh[j]);
        } else
#endif
        {
            const uint base = paged_row(ring_row(t0 + tid, lo, lo_row, pc.n_ctx), table_at, pc.block_shift) * row_stride4 + kvh * D4;
            for (uint j = 0; j < D4; ++j) {
                const vec4 kk = load_k4(base + j);
                for (uint g = 0; g < GW; ++g) s[g] += dot(q_sh[g * D4 + j], kk);
            }
        }
        if (capped)
            for (uint g = 0; g < GW; ++g) s[g] = softcap_score(s[g], pc.softcap, inv_cap);
        // Key t0 + tid is at that position (the fresh key: t0 = p).
        const float dist = abs(qpos - float(t0 + tid));
        for (uint g = 0; g < GW; ++g) p_sh[g * WG + tid] = s[g] - slope[g] * dist;
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
#ifdef STORE
        if (fresh) {
            if (kp == 0u)
                for (uint g = 0; g < GW; ++g) acc[g] += p_sh[g * WG] * new_sh[D4 + d4];
        } else
#endif
        {
            // The tile's keys are ring rows tr0.. up to the ring's end, then 0..: two plain loops, so
            // the per-key work stays one address computation (and the block lookup), as without a ring.
            const uint tr0 = ring_row(t0, lo, lo_row, pc.n_ctx);
            const uint n_direct = min(n, pc.n_ctx - tr0);
            const uint col = kvh * pc.v_head4 + pc.v_off4 + d4;
            uint t = kp;
            for (; t < n_direct; t += KP) {
                const vec4 vv = load_v4(paged_row(tr0 + t, table_at, pc.block_shift) * pc.v_row4 + col);
                for (uint g = 0; g < GW; ++g) acc[g] += p_sh[g * WG + t] * vv;
            }
            for (; t < n; t += KP) {
                const vec4 vv = load_v4(paged_row(t - n_direct, table_at, pc.block_shift) * pc.v_row4 + col);
                for (uint g = 0; g < GW; ++g) acc[g] += p_sh[g * WG + t] * vv;
            }
        }
    }
    barrier();
}

void main() {
    tid = gl_LocalInvocationID.x;
    kvh = gl_WorkGroupID.x;
    const uint split = gl_WorkGroupID.y;
    const uint group = pc.n_heads / pc.n_kv_heads, n_hgroups = group / GW;
    const uint tok = gl_WorkGroupID.z / n_hgroups, hgroup = gl_WorkGroupID.z % n_hgroups;
    const uint h0 = kvh * group + hgroup * GW;
    q_base = pc.q_first + tok * pc.n_heads * D4;
    table_at = pc.table_first + tok * table_stride(pc.n_ctx, pc.block_shift);
    // This query's output: its row of out, or its region of the split partials.
    const uint dst_base = pc.dst_first + tok * (pc.n_splits == 1u ? pc.n_heads * DV : pc.n_splits * pc.n_heads * (DV + 2u));

    const int pos_raw = positions[pc.pos_first + tok];
    const uint pos = uint(max(pos_raw, 0));
    qpos = float(pos);
    for (uint g = 0; g < GW_MAX; ++g) slope[g] = alibi_slope(h0 + g, pc.alibi_step, pc.alibi_n_log2);
    lo = pc.window > 0u && pos >= pc.window ? pos - pc.window + 1u : 0u;
    const uint kv_len = (pc.window > 0u ? pos + 1u : min(pos + 1u, pc.n_ctx)) - lo;
    lo_row = lo % pc.n_ctx;
    const uint chunk = max((kv_len + pc.n_splits - 1u) / pc.n_splits, pc.min_chunk);
    const uint begin = lo + min(split * chunk, kv_len);
    const uint end = lo + min(split * chunk + chunk, kv_len);
    // A split past the keys (short histories under a plan sized for n_ctx) has nothing to attend and,
    // as split > 0, neither the sink nor the new row to write: its partial is the empty one at once,
    // without the query loads and rotations. The whole workgroup leaves together, before any barrier.
    if (begin >= end) {
        for (uint i = tid; i < GW * DV; i += WG) dst[dst_base + (split * pc.n_heads + h0 + i / DV) * DV + i % DV] = 0.0;
        if (tid < GW) {
            const uint at = dst_base + pc.n_splits * pc.n_heads * DV + (split * pc.n_heads + h0 + tid) * 2u;
            dst[at] = NEG_BIG;
            dst[at + 1] = 0.0;
        }
        return;
    }
    // An attention sink is one more key, of logit sinks[h] and value 0, in split 0: its running max
    // and sum start from it, and the merge weighs it like any key.
    if (pc.has_sinks != 0u && split == 0u && tid < GW) {
        m_run = sinks[pc.sink_first + h0 + tid];
        l_run = 1.0;
    }

#ifdef STORE
    // The GW query heads (rotated, scaled) into q_sh, and the new rows, rotated but not yet
    // rounded, into raw_sh: K in [0, D4), V in [D4, 2 D4). One loop, so that the rotation (cos, sin)
    // is compiled once: rows 0..GW-1 are the query heads, row GW the new K, row GW + 1 the new V.
    const uint kv_at = kvh * D;
    const uint row_elems = pc.n_kv_heads * D;  // the new K and V rows of query tok start at row tok
    const uint k_at = pc.k_first + tok * row_elems, v_at = pc.v_first + tok * row_elems;
    for (uint i = tid; i < (GW + 2u) * D; i += WG) {
        const uint g = i / D, e = i % D, ep = rope_partner(e);
        float x, xp;
        if (g < GW) {
            x = q_elem(h0 + g, e), xp = q_elem(h0 + g, ep);
        } else if (g == GW) {
            x = k_new[k_at + kv_at + e], xp = k_new[k_at + kv_at + ep];
        } else {
            raw_sh[D4 + e / 4u][e % 4u] = v_new[v_at + kv_at + e];
            continue;
        }
        const float r = rope_rotate(x, xp, e, pos_raw);
        if (g < GW)
            q_sh[g * D4 + e / 4u][e % 4u] = r * pc.scale;
        else
            raw_sh[e / 4u][e % 4u] = r;
    }
    barrier();
    // Rounded as the cache stores them into new_sh; workgroup (kvh, 0, 0) also writes them to the cache.
    const bool has_new = pos_raw >= 0;
    const uint new_row = pos % pc.n_ctx;
    const uint new_phys = paged_row(new_row, table_at, pc.block_shift);
    const bool writer = has_new && split == 0u && hgroup == 0u;
    for (uint i = tid; i < 2u * D4; i += WG) {
        const bool is_v = i >= D4;
        const uint u = is_v ? i - D4 : i;  // quad of the head's row
        vec4 x = raw_sh[i];
#if defined(KV_Q8_0)
        // A block is 8 quads; D % 32 == 0, so a head's row is whole blocks.
        float amax = 0.0;
        for (uint w = 0; w < 8u; ++w) {
            const vec4 y = raw_sh[(i & ~7u) + w];
            amax = max(amax, max(max(abs(q8_finite(y.x)), abs(q8_finite(y.y))),
                                 max(abs(q8_finite(y.z)), abs(q8_finite(y.w)))));
        }
        const vec2 did = q8_scale(amax);
        uint word = 0u;
        for (uint b = 0u; b < 4u; ++b) word |= (uint(q8_round(q8_finite(x[b]) * did.y)) & 0xffu) << (8u * b);
        x = did.x * q8_quad(word);  // load_k4 / load_v4's dequantization
        if (writer) {
            const uint at = new_phys * (pc.n_kv_heads * D / 32u * 9u) + (kv_at / 32u + u / 8u) * 9u;
            if (is_v) {
                if ((u & 7u) == 0u) v_cache[at] = floatBitsToUint(did.x);
                v_cache[at + 1u + (u & 7u)] = word;
            } else {
                if ((u & 7u) == 0u) k_cache[at] = floatBitsToUint(did.x);
                k_cache[at + 1u + (u & 7u)] = word;
            }
        }
#else
        const uint at = (new_phys * pc.n_kv_heads + kvh) * D4 + u;
#if defined(KV_F16)
        const uvec2 word = uvec2(f32_to_f16(floatBitsToUint(x.x)) | (f32_to_f16(floatBitsToUint(x.y)) << 16),
                                 f32_to_f16(floatBitsToUint(x.z)) | (f32_to_f16(floatBitsToUint(x.w)) << 16));
        x = vec4(unpack_half2(word.x), unpack_half2(word.y));
        if (writer) {
            if (is_v) v_cache[at] = word; else k_cache[at] = word;
        }
#else
        if (writer) {
            if (is_v) v_cache[at] = x; else k_cache[at] = x;
        }
#endif
#endif
        new_sh[i] = x;
    }
    barrier();
    // The new row's logical key index: p itself, the last key, in every case ops::attention allows.
    // (Past n_ctx without a window, outside that contract, the clamped range holds the new row
    // somewhere inside: the keys after it are the second run below, so the row being written is
    // still never read.)
    const uint new_key = lo + (new_row >= lo_row ? new_row - lo_row : new_row + pc.n_ctx - lo_row);
    const uint cut = has_new ? new_key : end;
#else
    for (uint i = tid; i < GW * D4; i += WG) q_sh[i] = q[q_base + h0 * D4 + i] * pc.scale;
    barrier();
    const uint cut = end;
#endif

    // The tiles: keys [begin, cut) (run 0), then (cut, end) (run 1), then with STORE the new key
    // alone from shared memory (run 2). One call site keeps the shader (and its compile time) small.
    for (uint g = 0; g < GW_MAX; ++g) acc[g] = vec4(0.0);
    uint run = 0u, t0 = begin, stop = min(end, cut);
    for (;;) {
        if (t0 >= stop) {
            if (run == 0u) {
                run = 1u, t0 = max(begin, cut + 1u), stop = end;
                continue;
            }
#ifdef STORE
            if (run == 1u && has_new && cut >= begin && cut < end) {
                run = 2u, t0 = cut, stop = cut + 1u;
                continue;
            }
#endif
            break;
        }
        const uint n = min(WG, stop - t0);
        process_tile(t0, n, run == 2u);
        t0 += n;
    }

    if (tid < GW) {
        ml_sh[2 * tid] = m_run;
        ml_sh[2 * tid + 1] = l_run;
    }
    const bool direct = pc.n_splits == 1u;
    for (uint g = 0; g < GW; ++g) {
        red_sh[tid] = acc[g];
        barrier();
        if (tid < DV4) {
            vec4 o = red_sh[tid];
            for (uint j = 1; j < KP; ++j) o += red_sh[j * DV4 + tid];
            const uint h = h0 + g;
            if (direct) {
                const float l = ml_sh[2 * g + 1];
                o = l > 0.0 ? o / l : vec4(0.0);
                const uint at = dst_base + h * DV + 4 * tid;
                dst[at] = o.x; dst[at + 1] = o.y; dst[at + 2] = o.z; dst[at + 3] = o.w;
            } else {
                const uint at = dst_base + (split * pc.n_heads + h) * DV + 4 * tid;
                dst[at] = o.x; dst[at + 1] = o.y; dst[at + 2] = o.z; dst[at + 3] = o.w;
            }
        }
        barrier();
    }
    if (!direct && tid < GW) {
        const uint at = dst_base + pc.n_splits * pc.n_heads * DV + (split * pc.n_heads + h0 + tid) * 2u;
        dst[at] = m_run;
        dst[at + 1] = l_run;
    }
}
