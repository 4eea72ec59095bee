#version 450
// attention_merge: reduces the split-K partials of attention_decode into the attention output.
//
// Input:   scratch: o[n_splits][n_heads][D] (unnormalized, each relative to its split's max), then
//          ml[n_splits][n_heads][2] = (m_s, l_s); an empty split has m_s = NEG_BIG, l_s = 0.
//          D is V's head dim (push constant v_dim), which MLA makes shorter than K's (512 against 576).
// Output:  out[n_heads][D] f32
// Math:    M = max_s m_s, w_s = exp(m_s - M), out = sum_s w_s o_s / sum_s w_s l_s
//          (the log-sum-exp merge of flash decoding; an empty split gets weight 0 because l_s = 0
//          and o_s = 0, or w_s = 0 when another split has a real maximum).
// A batch (attention_decode's): workgroup row y merges query y's partials, region y of the scratch
// (each n_splits * n_heads * (D + 2) floats), into its out row y.
// One workgroup per query head: every invocation computes M itself (n_splits reads of one
// broadcast address), the weights go through shared memory, then invocation i produces the
// columns i, i + WG, ... of the head.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

#define MAX_SPLITS 256
const float NEG_BIG = -3.0e38;

layout(std430, binding = 0) readonly buffer Scratch { float scratch[]; };
layout(std430, binding = 1) writeonly buffer Out { float out_[]; };
layout(push_constant) uniform Push {
    uint n_heads;
    uint v_dim;     // elements per head of V and of the output
    uint n_splits;  // <= MAX_SPLITS
    uint out_first; // float offset of out[0] in the Out binding (a token's row at any offset)
} pc;

shared float w_sh[MAX_SPLITS];

void main() {
    const uint tid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, tok = gl_WorkGroupID.y;
    const uint D = pc.v_dim;
    const uint base = tok * pc.n_splits * pc.n_heads * (D + 2u);
    const uint ml0 = base + pc.n_splits * pc.n_heads * D;
    float mx = NEG_BIG;
    for (uint s = 0; s < pc.n_splits; ++s) mx = max(mx, scratch[ml0 + (s * pc.n_heads + h) * 2u]);
    for (uint s = tid; s < pc.n_splits; s += WG) w_sh[s] = exp(scratch[ml0 + (s * pc.n_heads + h) * 2u] - mx);
    barrier();
    float l = 0.0;
    for (uint s = 0; s < pc.n_splits; ++s) l += w_sh[s] * scratch[ml0 + (s * pc.n_heads + h) * 2u + 1u];
    const float inv_l = l > 0.0 ? 1.0 / l : 0.0;
    for (uint d = tid; d < D; d += WG) {
        float o = 0.0;
        for (uint s = 0; s < pc.n_splits; ++s) o += w_sh[s] * scratch[base + (s * pc.n_heads + h) * D + d];
        out_[pc.out_first + (tok * pc.n_heads + h) * D + d] = o * inv_l;
    }
}
