#version 450
// add_rows: a bias row broadcast over the rows of a matrix, in place (GPT-2 / Qwen2 biases).
//
// Inputs:  x[rows][dim] f32 (bound from element x_first; this dispatch covers n consecutive
//          elements of it, the first one in column col0), b[dim] f32 (from b_first)
// Output:  x, in place
// Math:    x[r, c] += b[c]
// One invocation computes one element i of the dispatch's range: column (col0 + i) mod dim. The host
// splits x by elements (not rows) into windows, so a dispatch may start and end inside a row. The
// 2-D grid is flattened: i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + local
// index; i >= n exits.
// Workgroup size: specialization constant 0.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(push_constant) uniform Push {
    uint n;
    uint dim;
    uint col0;  // column of element 0, < dim
    uint x_first;
    uint b_first;
} pc;

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationIndex;
    if (i >= pc.n) return;
    // col0 < dim and i % dim < dim: one conditional subtraction, no overflow while dim < 2^31.
    uint c = i % pc.dim + pc.col0;
    if (c >= pc.dim) c -= pc.dim;
    x[pc.x_first + i] += b[pc.b_first + c];
}
