#version 450
// get_rows: embedding lookup, out[i, :] = dequant(table[ids[i], :]).
//
// Inputs:  T     table, n_rows rows of dim elements of the weight type (weights.glsl; every GGUF
//                weight type vkllm reads), row 0 at byte pc.w_base, pc.row_bytes apart
//          ids   int32 [n_ids] from pc.ids_base
// Output:  out   f32 [n_ids][dim] from float pc.out_base
// Math:    out[i][c] = T[ids[i]][c], or 0 for every c when ids[i] is outside [0, n_rows): a bad id
//          never causes an out-of-bounds read.
// One workgroup writes one output row; invocation t handles the 8-element groups t, t + WG, ...
// (weights.glsl w_dequant8), then F32/F16/BF16 rows with dim % 8 != 0 finish with a scalar tail.
// Specialization constant 0: WG.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

#define W_BINDING 0
#include "weights.glsl"

layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) writeonly buffer Out { float outv[]; };

layout(push_constant) uniform Push {
    uint n_rows;
    uint dim;
    uint row_bytes;
    uint w_base;    // byte offset of table row 0 in the table window
    uint ids_base;  // int offset of this dispatch's first id in the ids window
    uint out_base;  // float offset of this dispatch's first output row in the out window
} pc;

void main() {
    const uint tid = gl_LocalInvocationID.x, i = gl_WorkGroupID.x;
    const int id = ids[pc.ids_base + i];
    const bool valid = id >= 0 && uint(id) < pc.n_rows;
    const uint row_byte = pc.w_base + (valid ? uint(id) : 0u) * pc.row_bytes;
    const uint o = pc.out_base + i * pc.dim;
    const uint groups = pc.dim / 8u;
    for (uint g = tid; g < groups; g += WG) {
        vec4 v0 = vec4(0.0), v1 = vec4(0.0);
        if (valid) w_dequant8(row_byte, 8u * g, v0, v1);
        for (uint q = 0; q < 4u; ++q) {
            outv[o + 8u * g + q] = v0[q];
            outv[o + 8u * g + 4u + q] = v1[q];
        }
    }
    for (uint c = groups * 8u + tid; c < pc.dim; c += WG) outv[o + c] = valid ? w_get(row_byte, c) : 0.0;
}
