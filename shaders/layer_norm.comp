#version 450
// layer_norm: LayerNorm with weight and optional bias (GPT-2's ln_1 / ln_2 / ln_f).
//
// Inputs:  x[rows][dim] f32 (bound from element x_first), w[dim] f32 (from w_first),
//          b[dim] f32 (from b_first; read only when has_bias != 0, else the host binds w there)
// Output:  y[rows][dim] f32 (from y_first); y may be the same memory as x (in-place).
// Math:    y[r, i] = (x[r, i] - mean) / sqrt(var + eps) * w[i] (+ b[i]),
//          mean = sum_j x[r, j] / dim, var = sum_j (x[r, j] - mean)^2 / dim (biased).
// Numerics: E[x^2] - E[x]^2 in f32 loses everything when |mean| >> stddev (x = 1000 + N(0, 1)), and
//          even a plain two-pass keeps the f32 rounding error of the mean (about ulp(1000) * sqrt(dim)),
//          which shifts every output. So: m0 = the f32 mean (pass 1); pass 2 sums d = x - m0 (exact
//          when x and m0 are close: Sterbenz) and d^2; m1 = mean(d) is the small correction of m0 and
//          var = mean(d^2) - m1^2 (the corrected two-pass algorithm; m1^2 << var, no cancellation);
//          pass 3 writes ((x - m0) - m1) * rstd, so the large offset never enters the rounding.
// One workgroup normalises one row: each invocation handles elements lid, lid + WG, ... in every
// pass and the workgroup adds the partial sums (wg_sum); the invocation that writes y[i] is the
// one that read x[i] last, so in place is safe. Any dim. Rows are flattened from a 2-D grid
// (gl_WorkGroupID.y * gl_NumWorkGroups.x + x).
// Workgroup size: specialization constant 0, a power of two. Compiled with and without USE_SUBGROUP.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

#include "reduce.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) readonly buffer B { float b[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push {
    uint rows;
    uint dim;
    uint x_first;
    uint w_first;
    uint b_first;
    uint y_first;
    uint has_bias;
    float eps;
} pc;

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows) return;  // uniform over the workgroup: no barrier is skipped by part of it
    uint lid = gl_LocalInvocationIndex;
    uint xb = pc.x_first + row * pc.dim, yb = pc.y_first + row * pc.dim;
    float inv_dim = 1.0 / float(pc.dim);

    float s = 0.0;
    for (uint i = lid; i < pc.dim; i += WG) s += x[xb + i];
    float m0 = wg_sum(s) * inv_dim;

    float sd = 0.0, sq = 0.0;
    for (uint i = lid; i < pc.dim; i += WG) {
        float d = x[xb + i] - m0;
        sd += d;
        sq += d * d;
    }
    float m1 = wg_sum(sd) * inv_dim;
    float var = max(wg_sum(sq) * inv_dim - m1 * m1, 0.0);
    float rstd = 1.0 / sqrt(var + pc.eps);

    if (pc.has_bias != 0u) {
        for (uint i = lid; i < pc.dim; i += WG)
            y[yb + i] = ((x[xb + i] - m0) - m1) * rstd * w[pc.w_first + i] + b[pc.b_first + i];
    } else {
        for (uint i = lid; i < pc.dim; i += WG) y[yb + i] = ((x[xb + i] - m0) - m1) * rstd * w[pc.w_first + i];
    }
}
