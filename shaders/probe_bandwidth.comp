#version 450
#extension GL_GOOGLE_include_directive : require
// probe_bandwidth: measures how fast the device streams a buffer from memory (the decode roofline).
//
// Inputs:  src[n_vec4]  vec4, n_vec4 = bytes / 16
// Output:  dst[n_groups] f32, one sum per workgroup so the reads cannot be optimised away
// Each invocation reads vec4s in a grid-stride loop (adjacent invocations read adjacent vec4s, the
// pattern every vendor coalesces), then the workgroup's sums are reduced through shared memory.
// Workgroup size: specialization constant 0 (default 256).

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(std430, binding = 0) readonly buffer Src { vec4 src[]; };
layout(std430, binding = 1) writeonly buffer Dst { float dst[]; };
layout(push_constant) uniform Push { uint n_vec4; uint stride; } pc;

#include "reduce.glsl"

void main() {
    vec4 acc = vec4(0.0);
    for (uint i = gl_GlobalInvocationID.x; i < pc.n_vec4; i += pc.stride) acc += src[i];
    float s = wg_sum(acc.x + acc.y + acc.z + acc.w);
    if (gl_LocalInvocationIndex == 0) dst[gl_WorkGroupID.x] = s;
}
