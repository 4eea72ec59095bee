#version 450
// rms_norm: LLaMA's RMSNorm with its weight.
//
// Inputs:  x[rows][dim] f32 (bound from element x_first), w[dim] f32 (from w_first)
// Output:  y[rows][dim] f32 (from y_first); y may be the same memory as x (in-place).
// Math:    y[r, i] = x[r, i] / sqrt(mean_j(x[r, j]^2) + eps) * w[i]   (fp32 sum of squares)
// One workgroup normalises one row: each invocation sums the squares of elements lid, lid + WG, ...,
// the workgroup adds the partial sums (wg_sum), then the same invocation scales the same elements,
// so an element is read for the last time by the invocation that overwrites it (safe in place).
// Any dim. Rows are flattened from a 2-D grid (gl_WorkGroupID.y * gl_NumWorkGroups.x + x).
// Workgroup size: specialization constant 0, a power of two. Compiled with and without USE_SUBGROUP.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

#include "reduce.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push {
    uint rows;
    uint dim;
    uint x_first;
    uint w_first;
    uint y_first;
    float eps;
} pc;

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows) return;  // uniform over the workgroup: no barrier is skipped by part of it
    uint lid = gl_LocalInvocationIndex;
    uint xb = pc.x_first + row * pc.dim, yb = pc.y_first + row * pc.dim;

    float ss = 0.0;
    for (uint i = lid; i < pc.dim; i += WG) {
        float v = x[xb + i];
        ss += v * v;
    }
    ss = wg_sum(ss);
    float scale = 1.0 / sqrt(ss / float(pc.dim) + pc.eps);

    for (uint i = lid; i < pc.dim; i += WG) y[yb + i] = x[xb + i] * scale * w[pc.w_first + i];
}
