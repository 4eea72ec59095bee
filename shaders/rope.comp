#version 450
// rope: rotary position embedding, in place on Q or K, with frequency factors and linear / YaRN
// context scaling (GGML's definitions; runtime/ops/rope.h).
//
// Input/output: x[n_tokens][n_heads][head_dim] f32 (bound from element x_first), rotated in place.
// Input:        positions[n_tokens] int32 (from pos_first), read here so that a recorded command
//               buffer stays valid while the host advances the positions; with sections (sect_dims
//               > 0), positions[n_tokens][4], one per component.
// Input:        ff[rot_dim / 2] f32 frequency factors (from ff_first), read only when has_ff != 0
//               (otherwise binding 2 is any buffer and untouched).
// Math:         for pair i < rot_dim / 2 of a head of token t, with freq_i = base^(-2i / rot_dim) / ff[i]:
//                 theta_extrap = pos[t] * freq_i, theta_interp = freq_scale * theta_extrap
//                 ext_factor == 0: theta = theta_interp
//                 else:  mix = ext_factor * (1 - clamp((i - corr_low) / max(0.001, corr_high - corr_low), 0, 1)),
//                        theta = theta_interp * (1 - mix) + theta_extrap * mix
//                 (x0, x1) <- mscale * (x0 cos theta - x1 sin theta, x0 sin theta + x1 cos theta)
//               where (x0, x1) = (x[2i], x[2i + 1])            layout 0 (Adjacent, GGUF llama)
//                               (x[i], x[i + rot_dim / 2])     layout 1 (HalfSplit, NeoX)
//               mscale (attn_factor, times YaRN's 1 + 0.1 ln(1 / freq_scale) when ext_factor != 0) and
//               the ramp bounds corr_low / corr_high come from the host. Elements rot_dim..head_dim-1
//               are left alone.
//               Sections (ops::RopeSections): pair i's sector j = i % sect_dims picks component c (0
//               below sect_end0, 1 below sect_end1, 2 below sect_end2, else 3); M-RoPE keeps the rate
//               of pair i, the vision mode takes that of pair j - (the section's first sector), with
//               the host's steeper log2_step (and no factors or YaRN).
// Precision:    fp32 throughout. base^(-2i/rot_dim) = exp2(i * log2_step), log2_step = -2 log2(base) / rot_dim
//               computed in double on the host. The scalings fold into one per-pair rate
//               freq_i * (freq_scale * (1 - mix) + mix), so the position is multiplied once, as in
//               plain RoPE (and plain RoPE stays bit for bit what it was: the factor is exactly 1).
//               theta is then reduced to [-pi, pi] with a two-part 2*pi (Cody-Waite; k * TWO_PI_HI is
//               exact for k < 2^16, i.e. theta < 4e5), because Vulkan bounds sin/cos errors only inside
//               [-pi, pi]; what remains is the fp32 rounding of the rate and of pos * rate, a few
//               pos * rate * 2^-24 radians.
// One invocation rotates one pair; the 2-D grid is flattened over n_pairs = n_tokens * n_heads * rot_dim/2.
// Workgroup size: specialization constant 0.

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer P { int positions[]; };
layout(std430, binding = 2) readonly buffer F { float ff[]; };
layout(push_constant) uniform Push {
    uint n_pairs;
    uint n_heads;
    uint head_dim;
    uint rot_half;   // rot_dim / 2
    uint layout_id;  // 0 Adjacent, 1 HalfSplit
    uint x_first;
    uint pos_first;
    float log2_step;
    uint ff_first;
    uint has_ff;     // 0: no frequency factors (all 1)
    float freq_scale;
    float ext_factor;
    float mscale;
    float corr_low;
    float corr_high;
    uint sect_dims;  // 0: one position per token
    uint sect_end0;
    uint sect_end1;
    uint sect_end2;
    uint vision;
} pc;

#include "rope_angle.glsl"

void main() {
    uint p = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationIndex;
    if (p >= pc.n_pairs) return;
    uint i = p % pc.rot_half;
    uint head = p / pc.rot_half;  // token * n_heads + head index
    uint t = head / pc.n_heads;
    const uvec2 ab = rope_pair(pc.x_first + head * pc.head_dim, i);
    const uint a = ab.x, b = ab.y;

    int pos;
    uint rate_pair = i;
    if (pc.sect_dims == 0u) {
        pos = positions[pc.pos_first + t];
    } else {
        const uint j = i % pc.sect_dims;
        const uint c = j < pc.sect_end0 ? 0u : j < pc.sect_end1 ? 1u : j < pc.sect_end2 ? 2u : 3u;
        pos = positions[pc.pos_first + 4u * t + c];
        if (pc.vision != 0u) rate_pair = j - (c == 0u ? 0u : c == 1u ? pc.sect_end0 : c == 2u ? pc.sect_end1 : pc.sect_end2);
    }
    const vec2 cs = rope_cs(rate_pair, pos);
    const float c = cs.x, s = cs.y;

    float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
}
