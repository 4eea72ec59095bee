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
layout(push_constant) uniform Push {
    uint E;
    uint K;
    uint l_base;
    uint ids_base;
    uint w_base;
    uint gating;
    uint norm;
    float scale;
} pc;

const uint MAX_E = 1024u;
const uint MAX_K = 64u;
const uint NONE = 0xffffffffu;

shared float l_[MAX_E];
shared bool taken_[MAX_E];
shared float red_v_[WG];
shared uint red_i_[WG];
shared uint chosen_[MAX_K];

// (v, i) ranks above (bv, bi): the larger value, ties to the lower index; anything beats NONE.
bool better(float v, uint i, float bv, uint bi) {
    return bi == NONE || (i != NONE && (v > bv || (v == bv && i < bi)));
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

    for (uint j = 0; j < pc.K; ++j) {
        float bv = 0.0;
        uint bi = NONE;
        for (uint e = tid; e < pc.E; e += WG)
            if (!taken_[e] && better(l_[e], e, bv, bi)) {
                bv = l_[e];
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
    // The best logit is chosen_[0]'s; softmax over all E needs the sum of every exp.
    const float top = l_[chosen_[0]];
    float denom = 1.0;
    if (pc.gating == 0u) {
        denom = 0.0;
        for (uint e = 0; e < pc.E; ++e) denom += exp(l_[e] - top);
    } else if (pc.gating == 2u) {
        denom = 0.0;
        for (uint j = 0; j < pc.K; ++j) denom += exp(l_[chosen_[j]] - top);
    }
    float w[MAX_K];
    float sum = 0.0;
    for (uint j = 0; j < pc.K; ++j) {
        const float x = l_[chosen_[j]];
        w[j] = pc.gating == 1u ? 1.0 / (1.0 + exp(-x)) : exp(x - top) / denom;
        sum += w[j];
    }
    const float inv = pc.norm != 0u ? 1.0 / max(sum, 6.103515625e-5) : 1.0;
    for (uint j = 0; j < pc.K; ++j) {
        ids[pc.ids_base + t * pc.K + j] = chosen_[j];
        weights[pc.w_base + t * pc.K + j] = w[j] * inv * pc.scale;
    }
}
