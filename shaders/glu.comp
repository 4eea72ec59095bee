#version 450
// glu: the gated activations of the feed-forward block, out = act(gate) * up.
//
// Inputs:  gate[n] f32 (bound from element g_first), up[n] f32 (from u_first)
// Output:  out[n]  f32 (from o_first); out may be the same memory as gate or up (in-place).
// Math:    ACT_SILU (swiglu, LLaMA / Qwen2): out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g))
//          ACT_GELU (geglu, Gemma):         out[i] = gelu(gate[i]) * up[i], gelu = tanh approximation
//          ACT_SWIGLU_OAI (gpt-oss):        out[i] = act_swiglu_oai(gate[i], up[i]), the clamped form
//          (include/activations.glsl: both finite and correct for any finite gate).
// One invocation computes one element. The 2-D grid is flattened:
// i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + local index; i >= n exits.
// Workgroup size: specialization constant 0.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

#include "activations.glsl"

#if defined(ACT_SILU)
#define ACT act_silu
#elif defined(ACT_GELU)
#define ACT act_gelu
#elif !defined(ACT_SWIGLU_OAI)
#error "glu.comp: define ACT_SILU, ACT_GELU or ACT_SWIGLU_OAI"
#endif

layout(std430, binding = 0) readonly buffer G { float gate[]; };
layout(std430, binding = 1) readonly buffer U { float up[]; };
layout(std430, binding = 2) writeonly buffer O { float outv[]; };
layout(push_constant) uniform Push {
    uint n;
    uint g_first;
    uint u_first;
    uint o_first;
} pc;

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationIndex;
    if (i >= pc.n) return;
#if defined(ACT_SWIGLU_OAI)
    outv[pc.o_first + i] = act_swiglu_oai(gate[pc.g_first + i], up[pc.u_first + i]);
#else
    outv[pc.o_first + i] = ACT(gate[pc.g_first + i]) * up[pc.u_first + i];
#endif
}
