#version 450
// moe_route: a mixture-of-experts router. For each token, the experts its FFN runs and their weights
// (llama.cpp's build_moe_ffn: gating, top-k, normalisation, scale), left on the device for matvec_id
// and moe_combine.
//
// Input:   L f32 [n][E] router logits (from float pc.l_base, pc.E floats per token)
// Outputs: ids u32 [n][K] (from pc.ids_base): the K experts, best first; W f32 [n][K] (from pc.w_base)
// Math:    experts are ranked by logit, ties to the lower index (softmax and sigmoid are monotonic,
//          so this is the order of their probabilities, without rounding ties); then per chosen e
//            gating 0 softmax over all E:   w_e = exp(L_e - max L) / sum_j exp(L_j - max L)
//            gating 1 sigmoid:              w_e = 1 / (1 + exp(-L_e))
//            gating 2 softmax of the K:     w_e = exp(L_e - L_best) / sum_chosen exp(...)   (gpt-oss)
//          pc.norm != 0: w_e /= max(sum of the K weights, 2^-14) (llama.cpp's clamp); then w_e *= pc.scale.
//          With a selection bias (pc.has_bias, DeepSeek-V3's exp_probs_b, binding 3) or groups
//          (pc.n_group > 1), experts are ranked by sel_e = p_e (+ bias_e) instead, p_e the probability
//          of the gating (the logit itself for gating 2), while the weights stay p_e. Groups
//          (DeepSeek-V2/V3): the experts form n_group groups of E / n_group; group g scores the sum
//          of its two largest sel_e, and only the experts of the group_used best groups (ties to the
//          lower index) may be chosen.
//          With NaN logits the order is unspecified (the reference puts NaN last) but every id is
//          < E and distinct; the NaN weights then reach the logits, where the caller reports them.
// One workgroup per token (gl_WorkGroupID.x); K rounds of a workgroup arg-max over the experts not
// yet chosen (K <= 64, E <= 1024). Shared-memory trees only: the router is a few hundred floats.
// Workgroup size: specialization constant 0, a power of two.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

layout(std430, binding = 0) readonly buffer L { float logits[]; };
layout(std430, binding = 1) writeonly buffer I { uint ids[]; };
layout(std430, binding = 2) writeonly buffer W { float weights[]; };
layout(std430, binding = 3) readonly buffer B { float bias[]; };  // [E]; unread unless has_bias
layout(push_constant) uniform Push {
    uint E;
    uint K;
    uint l_base;
    uint ids_base;
    uint w_base;
    uint gating;
    uint norm;
    float scale;
    uint has_bias;
    uint b_base;
    uint n_group;     // 1: no groups
    uint group_used;
} pc;

const uint MAX_E = 1024u;
const uint MAX_K = 64u;
const uint MAX_GROUPS = 64u;
const uint NONE = 0xffffffffu;
const float NEG_INF_F = -3.0e38;  // finite: no inf - inf = NaN on fast-math drivers

shared float l_[MAX_E];    // the logits
shared float sel_[MAX_E];  // what experts are ranked by: the logits, or p (+ bias) (see above)
shared bool taken_[MAX_E];
shared float group_score_[MAX_GROUPS];
shared bool group_kept_[MAX_GROUPS];
shared float lmax_, lsum_;
shared float red_v_[WG];
shared uint red_i_[WG];
shared uint chosen_[MAX_K];

// (v, i) ranks above (bv, bi): the larger value, ties to the lower index; anything beats NONE.
bool better(float v, uint i, float bv, uint bi) {
    return bi == NONE || (i != NONE && (v > bv || (v == bv && i < bi)));
}

// Tree reduction over the workgroup of red_v_: the maximum (want_max) or the sum.
float reduce(float v, bool want_max) {
    const uint tid = gl_LocalInvocationID.x;
    red_v_[tid] = v;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (tid < s) red_v_[tid] = want_max ? max(red_v_[tid], red_v_[tid + s]) : red_v_[tid] + red_v_[tid + s];
        barrier();
    }
    const float r = red_v_[0];
    barrier();
    return r;
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint t = gl_WorkGroupID.x;
    const uint base = pc.l_base + t * pc.E;
    for (uint e = tid; e < pc.E; e += WG) {
        l_[e] = logits[base + e];
        taken_[e] = false;
    }
    barrier();
    // Softmax's max and denominator over all E (the weights of gating 0 and the probabilities a bias
    // or the groups rank by).
    float m = NEG_INF_F;
    for (uint e = tid; e < pc.E; e += WG) m = max(m, l_[e]);
    m = reduce(m, true);
    float sm = 0.0;
    for (uint e = tid; e < pc.E; e += WG) sm += exp(l_[e] - m);
    sm = reduce(sm, false);
    const bool by_prob = pc.has_bias != 0u || pc.n_group > 1u;
    for (uint e = tid; e < pc.E; e += WG) {
        const float x = l_[e];
        const float p = pc.gating == 1u ? 1.0 / (1.0 + exp(-x)) : pc.gating == 0u ? exp(x - m) / sm : x;
        sel_[e] = by_prob ? p + (pc.has_bias != 0u ? bias[pc.b_base + e] : 0.0) : x;
    }
    if (tid == 0) {
        lmax_ = m;
        lsum_ = sm;
    }
    barrier();
    if (pc.n_group > 1u) {
        const uint per = pc.E / pc.n_group;
        for (uint g = tid; g < pc.n_group; g += WG) {
            float b1 = NEG_INF_F, b2 = NEG_INF_F;  // the two largest of the group
            for (uint e = g * per; e < g * per + per; ++e) {
                const float v = sel_[e];
                if (v > b1) {
                    b2 = b1;
                    b1 = v;
                } else if (v > b2) {
                    b2 = v;
                }
            }
            group_score_[g] = b1 + b2;
            group_kept_[g] = false;
        }
        barrier();
        if (tid == 0)
            for (uint i = 0; i < pc.group_used; ++i) {
                uint best = NONE;
                for (uint g = 0; g < pc.n_group; ++g)
                    if (!group_kept_[g] && (best == NONE || group_score_[g] > group_score_[best])) best = g;
                group_kept_[best] = true;
            }
        barrier();
        // Experts outside the kept groups count as taken: never chosen.
        for (uint e = tid; e < pc.E; e += WG) taken_[e] = !group_kept_[e / per];
        barrier();
    }

    for (uint j = 0; j < pc.K; ++j) {
        float bv = 0.0;
        uint bi = NONE;
        for (uint e = tid; e < pc.E; e += WG)
            if (!taken_[e] && better(sel_[e], e, bv, bi)) {
                bv = sel_[e];
                bi = e;
            }
        red_v_[tid] = bv;
        red_i_[tid] = bi;
        barrier();
        for (uint s = WG / 2; s > 0; s >>= 1) {
            if (tid < s && better(red_v_[tid + s], red_i_[tid + s], red_v_[tid], red_i_[tid])) {
                red_v_[tid] = red_v_[tid + s];
                red_i_[tid] = red_i_[tid + s];
            }
            barrier();
        }
        if (tid == 0) {
            chosen_[j] = red_i_[0];
            taken_[red_i_[0]] = true;
        }
        barrier();
    }

    if (tid != 0) return;
    // Softmax of the chosen logits (gating 2) is relative to the best chosen one.
    const float top = l_[chosen_[0]];
    float denom = 0.0;
    if (pc.gating == 2u)
        for (uint j = 0; j < pc.K; ++j) denom += exp(l_[chosen_[j]] - top);
    float w[MAX_K];
    float sum = 0.0;
    for (uint j = 0; j < pc.K; ++j) {
        const float x = l_[chosen_[j]];
        w[j] = pc.gating == 1u ? 1.0 / (1.0 + exp(-x)) : pc.gating == 0u ? exp(x - lmax_) / lsum_ : exp(x - top) / denom;
        sum += w[j];
    }
    const float inv = pc.norm != 0u ? 1.0 / max(sum, 6.103515625e-5) : 1.0;
    for (uint j = 0; j < pc.K; ++j) {
        ids[pc.ids_base + t * pc.K + j] = chosen_[j];
        weights[pc.w_base + t * pc.K + j] = w[j] * inv * pc.scale;
    }
}
