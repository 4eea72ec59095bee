#version 450
// vec_add: the smallest useful kernel, used by runtime tests and as the template for new shaders.
//
// Inputs:  a[n], b[n]   f32
// Output:  c[n]         f32,  c[i] = a[i] + b[i]
// One invocation computes one element; the grid covers n with a bounds check, so any n works.
// Workgroup size: specialization constant 0 (default 64).

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(push_constant) uniform Push { uint n; } pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) c[i] = a[i] + b[i];
}
