#version 450
// copy_cols: a block of columns of a row-major matrix into a block of columns of another (the
// concatenations and splits of latent attention's rows: DeepSeek's [nope | rope] query heads, the
// [rope | latent] cache rows).
//
// Inputs:  src f32, rows of src_stride floats from element src_first; the block starts at column src_col
// Output:  dst f32, rows of dst_stride floats from element dst_first; the block starts at column dst_col
// Math:    dst[r * dst_stride + dst_col + c] = src[r * src_stride + src_col + c] for r < rows, c < width
// One invocation per element of the block: i = r * width + c over a 2-D grid flattened as
// i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + local index; i >= rows * width exits.
// Workgroup size: specialization constant 0.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) writeonly buffer Dst { float dst[]; };
layout(push_constant) uniform Push {
    uint rows;
    uint width;
    uint src_first;  // src_first + src_col, folded by the host
    uint src_stride;
    uint dst_first;  // dst_first + dst_col
    uint dst_stride;
} pc;

void main() {
    const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationIndex;
    if (i >= pc.rows * pc.width) return;
    const uint r = i / pc.width, c = i - r * pc.width;
    dst[pc.dst_first + r * pc.dst_stride + c] = src[pc.src_first + r * pc.src_stride + c];
}
