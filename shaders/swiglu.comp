#version 450
// swiglu: the gated activation of LLaMA's feed-forward block.
//
// Inputs:  gate[n] f32 (bound from element g_first), up[n] f32 (from u_first)
// Output:  out[n]  f32 (from o_first); out may be the same memory as gate (in-place).
// Math:    out[i] = silu(gate[i]) * up[i],  silu(g) = g / (1 + exp(-g))
//          (g very negative: exp(-g) = inf and the quotient is -0, the correct limit).
// One invocation computes one element. The 2-D grid is flattened:
// i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + local index; i >= n exits.
// Workgroup size: specialization constant 0.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

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
    float g = gate[pc.g_first + i];
    outv[pc.o_first + i] = g / (1.0 + exp(-g)) * up[pc.u_first + i];
}
