#version 450
// probe_int_dot: measures the device's signed 4x8-bit packed dot product rate (the integer-dot
// kernels' arithmetic roofline), as probe_fma does for f32 FMA.
//
// Output:  dst[invocations] u32 (the results, so the arithmetic cannot be optimised away; the
//          host recomputes invocation 0's)
// Each invocation runs `iters` iterations of 8 independent chains a = dot_s8x4(a, M) + a: one
// packed dot with accumulation (4 multiply-adds, 8 integer ops) per chain and iteration, 64 ops per
// iteration as probe_fma's 64 FLOP. Workgroup size: specialization constant 0 (default 256).
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

#include "int_dot.glsl"

layout(std430, binding = 0) writeonly buffer Dst { uint dst[]; };
layout(push_constant) uniform Push { uint iters; uint seed; } pc;

const uint M = 0x01FF02FEu;  // bytes, low first: -2, 2, -1, 1

void main() {
    uint a[8];
    for (uint j = 0; j < 8u; ++j) a[j] = pc.seed + 8u * gl_GlobalInvocationID.x + j;
    for (uint i = 0; i < pc.iters; ++i)
        for (uint j = 0; j < 8u; ++j) a[j] = uint(dot_s8x4(a[j], M)) + a[j];
    uint r = 0;
    for (uint j = 0; j < 8u; ++j) r ^= a[j];
    dst[gl_GlobalInvocationID.x] = r;
}
