#version 450
// softmax: probabilities from logits at a temperature (sampling), numerically stable.
//
// Input:   x[rows][n] f32 (bound from element x_first)
// Output:  y[rows][n] f32 (from y_first); y may be the same memory as x (in-place).
// Math:    m = max_j x[r, j];  e_i = exp((x[r, i] - m) * inv_temp);  y[r, i] = e_i / sum_j e_j
//          (inv_temp = 1 / temperature from the host; fp32 max and sum).
// One workgroup handles one row in three strided passes (max, sum of exponentials, write); each
// invocation touches the same elements in every pass and the passes are separated by the barriers of
// the reductions, so an element is read for the last time by the invocation that overwrites it.
// Rows are flattened from a 2-D grid.
// Workgroup size: specialization constant 0, a power of two. Compiled with and without USE_SUBGROUP.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

#include "reduce.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push {
    uint rows;
    uint n;
    uint x_first;
    uint y_first;
    float inv_temp;
} pc;

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows) return;  // uniform over the workgroup
    uint lid = gl_LocalInvocationIndex;
    uint xb = pc.x_first + row * pc.n, yb = pc.y_first + row * pc.n;

    float m = uintBitsToFloat(0xff800000u);  // -inf
    for (uint i = lid; i < pc.n; i += WG) m = max(m, x[xb + i]);
    m = wg_max(m);

    float s = 0.0;
    for (uint i = lid; i < pc.n; i += WG) s += exp((x[xb + i] - m) * pc.inv_temp);
    s = wg_sum(s);
    float inv_s = 1.0 / s;

    for (uint i = lid; i < pc.n; i += WG) y[yb + i] = exp((x[xb + i] - m) * pc.inv_temp) * inv_s;
}
