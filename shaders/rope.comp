#version 450
// rope: rotary position embedding, in place on Q or K.
//
// Input/output: x[n_tokens][n_heads][head_dim] f32 (bound from element x_first), rotated in place.
// Input:        positions[n_tokens] int32 (from pos_first), read here so that a recorded command
//               buffer stays valid while the host advances the positions.
// Math:         for pair i < rot_dim / 2 of a head of token t, with theta = pos[t] * base^(-2i / rot_dim):
//                 (x0, x1) <- (x0 cos theta - x1 sin theta, x0 sin theta + x1 cos theta)
//               where (x0, x1) = (x[2i], x[2i + 1])            layout 0 (Adjacent, GGUF llama)
//                               (x[i], x[i + rot_dim / 2])     layout 1 (HalfSplit, NeoX)
//               Elements rot_dim..head_dim-1 are left alone.
// Precision:    fp32 throughout. base^(-2i/rot_dim) = exp2(i * log2_step), log2_step = -2 log2(base) / rot_dim
//               computed in double on the host. theta is then reduced to [-pi, pi] with a two-part
//               2*pi (Cody-Waite; k * TWO_PI_HI is exact for k < 2^16, i.e. theta < 4e5), because Vulkan
//               bounds sin/cos errors only inside [-pi, pi]; what remains is the fp32 rounding of the
//               frequency and of pos * freq, about pos * freq * 2^-23 radians.
// One invocation rotates one pair; the 2-D grid is flattened over n_pairs = n_tokens * n_heads * rot_dim/2.
// Workgroup size: specialization constant 0.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer P { int positions[]; };
layout(push_constant) uniform Push {
    uint n_pairs;
    uint n_heads;
    uint head_dim;
    uint rot_half;   // rot_dim / 2
    uint layout_id;  // 0 Adjacent, 1 HalfSplit
    uint x_first;
    uint pos_first;
    float log2_step;
} pc;

const float INV_2PI = 0.15915494309189535;
const float TWO_PI_HI = 6.28125;                // 201/32: 8 significant bits
const float TWO_PI_LO = 0.0019353071795864769;  // 2*pi - TWO_PI_HI

void main() {
    uint p = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationIndex;
    if (p >= pc.n_pairs) return;
    uint i = p % pc.rot_half;
    uint head = p / pc.rot_half;  // token * n_heads + head index
    uint t = head / pc.n_heads;
    uint base = pc.x_first + head * pc.head_dim;
    uint a, b;
    if (pc.layout_id == 0u) {
        a = base + 2u * i;
        b = a + 1u;
    } else {
        a = base + i;
        b = a + pc.rot_half;
    }

    float freq = exp2(float(i) * pc.log2_step);
    float theta = float(positions[pc.pos_first + t]) * freq;
    float k = floor(theta * INV_2PI + 0.5);
    precise float r = (theta - k * TWO_PI_HI) - k * TWO_PI_LO;
    float c = cos(r), s = sin(r);

    float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
}
