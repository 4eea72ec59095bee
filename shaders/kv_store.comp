#version 450
// kv_store: appends K or V rows of the current tokens to one layer's cache, at their positions; with
// pc.n_pairs = 2 it also appends the V rows (src2) to the V cache (cache2), in the same dispatch.
//
// Inputs:  src[n_tokens][row_elems] f32, read as raw bits (bound from word src_first); src2 likewise
//          (src2_first), read only when n_pairs = 2
//          positions[n_tokens] int32 (from pos_first), read on the device
// Output:  cache rows [row_base, row_base + row_count) of a cache [n_ctx][row_elems] (bound from word
//          cache_first): f16 pairs packed into uint words when F16 is defined (row_elems even), Q8_0
//          blocks when Q8_0 is defined (row_elems a multiple of 32; layout in runtime/ops/op_types.h),
//          else f32 words. Token t goes to cache row positions[t] % n_ctx (the cache is a ring; below
//          n_ctx that is the position itself); a negative position, or a row in another window of
//          a split dispatch, is skipped, so nothing is ever written out of bounds.
//          Paged (block_shift > 0): the cache is a pool of blocks of 1 << block_shift rows, and token t's
//          ring row r goes to physical row table[tr + (r >> shift)] << shift | r & (B - 1), tr its
//          table row: table_first, plus t * ceil(n_ctx / B) with per_token (a decode batch, one
//          sequence per token; else every token is of one sequence). The windows are of physical rows.
// Math:    include/kv_write.glsl: F16 round-to-nearest-even with integer operations (bit-identical to
//          vkllm::f32_to_f16); Q8_0 per block of 32, d = max|x| / 127, q = x / d rounded half away
//          from zero, NaN -> 0 and +-inf -> +-FLT_MAX.
// One invocation writes one 32-bit word of the cache (two f16 values or one f32), or one Q8_0 block
// (9 words); the 2-D grid is flattened over n_pairs * n_tokens * units per row (the second pair
// after the first). Two tokens with the same position race; callers don't do that.
// Workgroup size: specialization constant 0.
#extension GL_GOOGLE_include_directive : require
#define KV_TABLE_BINDING 5
#include "kv_write.glsl"
#include "kv_table.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;

layout(std430, binding = 0) readonly buffer S { uint src[]; };
layout(std430, binding = 1) writeonly buffer C { uint cache[]; };
layout(std430, binding = 2) readonly buffer P { int positions[]; };
layout(std430, binding = 3) readonly buffer S2 { uint src2[]; };
layout(std430, binding = 4) writeonly buffer C2 { uint cache2[]; };
layout(push_constant) uniform Push {
    uint n_tokens;
    uint row_words;  // words per cache row: row_elems / 2 for F16, row_elems for F32, row_elems / 32 * 9 for Q8_0
    uint src_first;
    uint cache_first;
    uint pos_first;
    uint row_base;   // first cache row in this window
    uint row_count;  // cache rows in this window
    uint n_ctx;      // rows in the whole cache (the ring's length)
    uint n_pairs;    // 1: src -> cache; 2: also src2 -> cache2 (same shapes and window)
    uint src2_first;
    uint cache2_first;
    uint table_first;
    uint block_shift;  // 0: not paged
    uint per_token;    // 1: token t's table is row t
} pc;

// The pair an invocation works on: its source word and its cache word (both buffers of the pair are
// distinct bindings, so every access picks one).
bool second_ = false;
uint load_src(uint i) { return second_ ? src2[pc.src2_first + i] : src[pc.src_first + i]; }
void store_cache(uint i, uint w) {
    if (second_)
        cache2[pc.cache2_first + i] = w;
    else
        cache[pc.cache_first + i] = w;
}

#ifdef Q8_0
const uint BLOCK_WORDS = 9u;
#endif

void main() {
    uint idx = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationIndex;
#ifdef Q8_0
    const uint units = pc.row_words / BLOCK_WORDS;  // blocks per row
#else
    const uint units = pc.row_words;
#endif
    if (idx >= pc.n_pairs * pc.n_tokens * units) return;
    second_ = idx >= pc.n_tokens * units;
    if (second_) idx -= pc.n_tokens * units;
    uint t = idx / units, j = idx % units;
    int pos = positions[pc.pos_first + t];
    if (pos < 0) return;
    const uint table_at = pc.table_first + (pc.per_token != 0u ? t * table_stride(pc.n_ctx, pc.block_shift) : 0u);
    const uint phys = paged_row(uint(pos) % pc.n_ctx, table_at, pc.block_shift);
    uint row = phys - pc.row_base;  // wraps to a huge value below the window
    if (phys < pc.row_base || row >= pc.row_count) return;
#ifdef Q8_0
    const uint s = t * (units * 32u) + 32u * j;
    float x[32];
    float amax = 0.0;
    for (uint i = 0u; i < 32u; ++i) {
        float v = uintBitsToFloat(load_src(s + i));
        v = q8_finite(v);
        x[i] = v;
        amax = max(amax, abs(v));
    }
    const vec2 did = q8_scale(amax);
    const float d = did.x, id = did.y;
    const uint dst = row * pc.row_words + BLOCK_WORDS * j;
    store_cache(dst, floatBitsToUint(d));
    for (uint w = 0u; w < 8u; ++w) {
        uint packed = 0u;
        for (uint b = 0u; b < 4u; ++b) packed |= (uint(q8_round(x[4u * w + b] * id)) & 0xffu) << (8u * b);
        store_cache(dst + 1u + w, packed);
    }
#else
    uint dst = row * pc.row_words + j;
#endif
#ifdef F16
    uint s = t * (2u * pc.row_words) + 2u * j;
    store_cache(dst, f32_to_f16(load_src(s)) | (f32_to_f16(load_src(s + 1u)) << 16));
#elif !defined(Q8_0)
    store_cache(dst, load_src(t * pc.row_words + j));
#endif
}
