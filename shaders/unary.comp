#version 450
// unary: one-input element-wise ops with a scalar parameter.
//
// Inputs:  x[n] f32 (bound from element x_first); pc.param (OP_SCALE: the factor, OP_SOFTCAP: the cap)
// Output:  y[n] f32 (from y_first); y may be the same memory as x (scale and softcap are used in place).
// Math:    OP_GELU:    y[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (GPT-2, Gemma)
//          OP_SCALE:   y[i] = x[i] * param                                      (Gemma embedding scale)
//          OP_SOFTCAP: y[i] = param * tanh(x[i] / param)                        (Gemma 2 logit soft-capping)
//          OP_CLAMP:   y[i] = min(max(x[i], -param), param)                     (MPT's clamp_kqv)
//          OP_RELU:    y[i] = max(x[i], 0)                                      (T5 v1.0's feed-forward)
//          OP_GELU_QUICK: y[i] = x / (1 + exp(-1.702 x))                        (CLIP's quick GELU)
//          gelu and tanh come from include/activations.glsl: finite and correct for any finite x.
// One invocation computes one element. The 2-D grid is flattened:
// i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + local index; i >= n exits.
// Workgroup size: specialization constant 0.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

#include "activations.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push {
    uint n;
    uint x_first;
    uint y_first;
    float param;
} pc;

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationIndex;
    if (i >= pc.n) return;
    float v = x[pc.x_first + i];
#if defined(OP_GELU)
    v = act_gelu(v);
#elif defined(OP_SCALE)
    v *= pc.param;
#elif defined(OP_SOFTCAP)
    v = pc.param * act_tanh(v / pc.param);
#elif defined(OP_CLAMP)
    v = min(max(v, -pc.param), pc.param);
#elif defined(OP_RELU)
    v = max(v, 0.0);
#elif defined(OP_GELU_QUICK)
    v = act_gelu_quick(v);
#else
#error "unary.comp: define OP_GELU, OP_SCALE, OP_SOFTCAP, OP_CLAMP, OP_RELU or OP_GELU_QUICK"
#endif
    y[pc.y_first + i] = v;
}
