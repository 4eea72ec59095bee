#version 450
// moe_combine: the residual add of a mixture-of-experts FFN, the chosen experts' outputs weighted by
// the router and the shared expert (Qwen2-MoE, DeepSeek) folded in.
//
// Inputs:  Y  f32 [n * K][dim] expert outputs, slot t * K + j for token t's j-th expert (from pc.y_base)
//          W  f32 [n][K] router weights (moe_route; from pc.w_base)
//          S  f32 [n][dim] the shared expert's output (pc.has_shared; from pc.s_base)
//          G  f32 [n] the shared expert's gate logit (pc.has_gate; from pc.g_base)
// Output:  X  f32 [n][dim], in place (from pc.x_base)
// Math:    X[t][d] += sum_{j = 0..K-1} W[t][j] * Y[t*K + j][d]   (j in order, f32)
//                   (+ (has_gate ? 1 / (1 + exp(-G[t])) : 1) * S[t][d], after the sum)
// One invocation per element; workgroups x over dim, y over tokens. Each token's sum is the same
// whatever the batch (decode batches stay batch invariant).
// Workgroup size: specialization constant 0.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

layout(std430, binding = 0) readonly buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer X { float x[]; };
layout(std430, binding = 3) readonly buffer S { float sh[]; };
layout(std430, binding = 4) readonly buffer G { float g[]; };
layout(push_constant) uniform Push {
    uint dim;
    uint K;
    uint y_base;
    uint w_base;
    uint x_base;
    uint s_base;
    uint g_base;
    uint has_shared;
    uint has_gate;
} pc;

void main() {
    const uint d = gl_WorkGroupID.x * WG + gl_LocalInvocationID.x;
    const uint t = gl_WorkGroupID.y;
    if (d >= pc.dim) return;
    float acc = 0.0;
    for (uint j = 0; j < pc.K; ++j) acc += w[pc.w_base + t * pc.K + j] * y[pc.y_base + (t * pc.K + j) * pc.dim + d];
    if (pc.has_shared != 0u) {
        const float gate = pc.has_gate != 0u ? 1.0 / (1.0 + exp(-g[pc.g_base + t])) : 1.0;
        acc += gate * sh[pc.s_base + t * pc.dim + d];
    }
    x[pc.x_base + t * pc.dim + d] += acc;
}
