#version 450
// probe_fma: measures the device's peak f32 fused multiply-add rate (the prefill roofline).
//
// Output:  dst[invocations] f32 (the results, so the arithmetic cannot be optimised away)
// Each invocation runs `iters` iterations of 8 independent vec4 FMA chains: 8 * 4 * 2 = 64 FLOP per
// iteration. Independent chains hide FMA latency on every vendor; no memory traffic in the loop.
// Workgroup size: specialization constant 0 (default 256).

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };
layout(push_constant) uniform Push { uint iters; float seed; } pc;

void main() {
    float s = pc.seed + float(gl_GlobalInvocationID.x) * 1e-7;
    vec4 a0 = vec4(s), a1 = vec4(s + 1), a2 = vec4(s + 2), a3 = vec4(s + 3);
    vec4 a4 = vec4(s + 4), a5 = vec4(s + 5), a6 = vec4(s + 6), a7 = vec4(s + 7);
    const vec4 m = vec4(0.999999), c = vec4(1e-6);
    for (uint i = 0; i < pc.iters; ++i) {
        a0 = fma(a0, m, c); a1 = fma(a1, m, c); a2 = fma(a2, m, c); a3 = fma(a3, m, c);
        a4 = fma(a4, m, c); a5 = fma(a5, m, c); a6 = fma(a6, m, c); a7 = fma(a7, m, c);
    }
    vec4 r = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    dst[gl_GlobalInvocationID.x] = r.x + r.y + r.z + r.w;
}
