#version 450
// add: element-wise sum, the residual connections of the decoder.
//
// Inputs:  a[n], b[n] f32 (bound from elements a_first, b_first)
// Output:  out[n]     f32 (from o_first); out may be the same memory as a or b (in-place).
// Math:    out[i] = a[i] + b[i]
// One invocation computes one element. The 2-D grid is flattened:
// i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + local index; i >= n exits.
// Workgroup size: specialization constant 0.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float outv[]; };
layout(push_constant) uniform Push {
    uint n;
    uint a_first;
    uint b_first;
    uint o_first;
} pc;

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationIndex;
    if (i >= pc.n) return;
    outv[pc.o_first + i] = a[pc.a_first + i] + b[pc.b_first + i];
}
