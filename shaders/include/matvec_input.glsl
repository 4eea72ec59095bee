// The X side of the decode matvecs (matvec.comp, matvec_rows.comp, quantize_q8_1.comp): the X
// (binding X_BINDING, default 1) and G (G_BINDING, default 5) buffers, X read as vec4s where aligned, and the fused input op (NORM: RMSNorm weight G
// and the sum of squares; ACT: GLU of a gate row in X and an up row in G), as documented atop
// matvec.comp. The including shader declares the push constants (x_base, k, x_vec4, g_base, g_vec4)
// and the NORM / ACT constants.

#include "activations.glsl"

#ifndef X_BINDING
#define X_BINDING 1
#endif
#ifndef G_BINDING
#define G_BINDING 5
#endif
// Floats from X's (and the ACT up rows') first row to the one this workgroup reads (matvec_id).
#ifndef X_ROW_OFF
#define X_ROW_OFF 0u
#endif

#if defined(X_UNIFORM)
// X and G as uniform buffers (variants *_u_* and *_u64_*, chosen on CPU drivers): Mesa 22.3's
// lavapipe loads a storage buffer in a loop over the lanes, but loads a uniform buffer once when
// all lanes read one address, and gathers it otherwise. The host binds at most X_UNIFORM_VEC4S vec4s (64 KiB), and
// never more than the device's maxUniformBufferRange.
#define X_UNIFORM_VEC4S 4096
layout(std140, binding = X_BINDING) uniform X { vec4 xv[X_UNIFORM_VEC4S]; };
layout(std140, binding = G_BINDING) uniform G { vec4 gv[X_UNIFORM_VEC4S]; };
#else
layout(std430, binding = X_BINDING) readonly buffer X { vec4 xv[]; };  // the host binds whole vec4s
layout(std430, binding = G_BINDING) readonly buffer G { vec4 gv[]; };  // the host binds whole vec4s
#endif

float x1(uint i) { return xv[i >> 2][i & 3u]; }
float g1(uint i) { return gv[i >> 2][i & 3u]; }

vec4 raw4(uint i) {
    if (pc.x_vec4 != 0u) return xv[i >> 2];
    return vec4(x1(i), x1(i + 1u), x1(i + 2u), x1(i + 3u));
}
vec4 g4(uint i) {
    if (pc.g_vec4 != 0u) return gv[i >> 2];
    return vec4(g1(i), g1(i + 1u), g1(i + 2u), g1(i + 3u));
}

// The GLU of gate g and up u: ACT 1 silu(g) u, 2 gelu(g) u, 3 gpt-oss's clamped form (act_swiglu_oai).
vec4 glu4(vec4 g, vec4 u) {
    if (ACT == 3u) return vec4(act_swiglu_oai(g.x, u.x), act_swiglu_oai(g.y, u.y), act_swiglu_oai(g.z, u.z),
                               act_swiglu_oai(g.w, u.w));
    if (ACT == 2u) return vec4(act_gelu(g.x), act_gelu(g.y), act_gelu(g.z), act_gelu(g.w)) * u;
    return vec4(act_silu(g.x), act_silu(g.y), act_silu(g.z), act_silu(g.w)) * u;
}
float glu1(float g, float u) {
    if (ACT == 3u) return act_swiglu_oai(g, u);
    return (ACT == 2u ? act_gelu(g) : act_silu(g)) * u;
}

// The input of the product, X[b][c .. c + 3] (c a multiple of 4), after the fused op; NORM adds the
// raw values' squares to ss.
vec4 x4(uint b, uint c, inout float ss) {
    vec4 v = raw4(pc.x_base + X_ROW_OFF + b * pc.k + c);
    if (ACT != 0u) return glu4(v, g4(pc.g_base + X_ROW_OFF + b * pc.k + c));
    if (NORM != 0u) {
        ss += dot(v, v);
        v *= g4(pc.g_base + c);
    }
    return v;
}

// Scalar form of x4 for the float types' k tail.
float xs1(uint b, uint c, inout float ss) {
    float v = x1(pc.x_base + X_ROW_OFF + b * pc.k + c);
    if (ACT != 0u) return glu1(v, g1(pc.g_base + X_ROW_OFF + b * pc.k + c));
    if (NORM != 0u) {
        ss += v * v;
        v *= g1(pc.g_base + c);
    }
    return v;
}
