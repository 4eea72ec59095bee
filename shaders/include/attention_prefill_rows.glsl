// Shared by attention_prefill.comp and attention_prefill_coopmat.comp: their bindings and push
// constants (the host records both alike), the per-row state of the online softmax, and the steps
// that do not depend on how the two products are computed. The including shader declares WG, GW, BK,
// M and includes kv_read.glsl first.
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
    uint causal;    // 0: every row sees up to the last token's position (a window from its own)
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

// Per query row r (token tok0 + r / GW, head h0 + r % GW) of the workgroup.
shared float p_sh[M * BK];  // the tile's scores, then their weights exp(s - m)
shared float m_sh[M], l_sh[M], alpha_sh[M];  // running max, running sum, this tile's rescale factor
shared uint lo_sh[M], lim_sh[M];  // row r sees positions [lo_sh[r], lim_sh[r])
shared float slope_sh[M], qpos_sh[M];  // ALiBi: row r's head slope (0 without) and query position
shared int bias_sh[M];  // row r's entry of distance 0 in pos_bias

void init_rows(uint tid, uint tok0, uint h0) {
    // Rows past n_tokens see no keys.
    for (uint r = tid; r < M; r += WG) {
        const uint t = tok0 + r / GW;
        slope_sh[r] = alibi_slope(h0 + r % GW, pc.alibi_step, pc.alibi_n_log2);
        qpos_sh[r] = t < pc.n_tokens ? float(max(positions[pc.pos_first + t], 0)) : 0.0;
        bias_sh[r] = int((h0 + r % GW) * (2u * pc.bias_range + 1u) + pc.bias_range);
        if (t < pc.n_tokens && pc.segmented != 0u) {
            lo_sh[r] = uint(max(segs[pc.seg_first + 2u * t], 0));
            lim_sh[r] = min(uint(max(segs[pc.seg_first + 2u * t + 1u], 0)), pc.n_ctx);
        } else if (t < pc.n_tokens) {
            // Not causal: up to the call's last position; a window still starts from the row's own.
            const uint own = uint(max(positions[pc.pos_first + t], 0));
            const uint last = pc.causal != 0u ? own : uint(max(positions[pc.pos_first + pc.n_tokens - 1u], 0));
            lo_sh[r] = pc.window > 0u && own >= pc.window ? own - pc.window + 1u : 0u;
            lim_sh[r] = pc.window > 0u ? last + 1u : min(last + 1u, pc.n_ctx);
        } else {
            lo_sh[r] = 0xffffffffu;
            lim_sh[r] = 0u;
        }
        // An attention sink is a key of logit sinks[h] and value 0: the running max and sum start from it.
        const bool sink = pc.has_sinks != 0u;
        m_sh[r] = sink ? sinks[pc.sink_first + h0 + r % GW] : NEG_BIG;
        l_sh[r] = sink ? 1.0 : 0.0;
    }
}

// Row r's score of key position `key` from its dot product s (already scaled): soft-capped, minus
// the ALiBi distance, plus the position-bias table's entry.
float shaped_score(uint r, uint key, float s) {
    const int range = int(pc.bias_range);
    const float bias = range > 0 ? pos_bias[bias_sh[r] + clamp(int(key) - int(qpos_sh[r]), -range, range)] : 0.0;
    const bool capped = pc.softcap > 0.0;
    return (capped ? softcap_score(s, pc.softcap, 1.0 / pc.softcap) : s) - slope_sh[r] * abs(qpos_sh[r] - float(key)) + bias;
}

// The online softmax's step for row r over the tile of keys t0 .. t0 + n - 1 (scores in p_sh): keys
// outside [lo, lim) are masked (weight 0, no part in the max); p_sh gets the weights, alpha_sh the
// factor that rescales what was accumulated before, m_sh and l_sh the running max and sum.
void online_softmax_row(uint r, uint t0, uint n) {
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
