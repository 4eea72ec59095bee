// Reading one layer's KV cache, K at binding 1 and V at binding 2, four elements at a time, and
// the score helpers the attention kernels share (ring rows, soft-capping).
//
// The cache is [n_ctx][n_kv_heads][head_dim] of f16, f32 or Q8_0 blocks; head_dim is a multiple of
// 4, so a row of one head is a whole number of 4-element groups and `i4` below indexes those groups
// in the flattened cache.
//   KV_F16: the words are read as uvec2 (4 halves) and widened with unpack_half2 (half.glsl), which needs no
//           16-bit storage or fp16 arithmetic feature, so this path runs on every device.
//   KV_F32: read as vec4.
//   KV_Q8_0: blocks of 32 elements, 9 words each (f32 scale, then 32 int8; runtime/ops/op_types.h).
//           A cache row (n_kv_heads * head_dim elements) is whole blocks, so group i4 is quad i4 % 8
//           of block i4 / 8, whatever the head boundaries; one word of int8 and the block's scale.
// Arithmetic after the load is f32.
// V need not be a cache of its own: for MLA (absorbed form) V is the tail of each K row, and the
// host binds the K cache at binding 2 too; the kernels then address V's groups inside K's rows
// (their v_row4 / v_head4 / v_off4 push constants), which load_v4 reads as it reads any group.

#include "half.glsl"
#include "kv_table.glsl"

// A kernel that also writes the cache (attention_decode's STORE variants) defines KV_CACHE_ACCESS empty.
#ifndef KV_CACHE_ACCESS
#define KV_CACHE_ACCESS readonly
#endif

#if defined(KV_F16)
layout(std430, binding = 1) KV_CACHE_ACCESS buffer KCache { uvec2 k_cache[]; };
layout(std430, binding = 2) KV_CACHE_ACCESS buffer VCache { uvec2 v_cache[]; };
vec4 load_k4(uint i4) {
    uvec2 w = k_cache[i4];
    return vec4(unpack_half2(w.x), unpack_half2(w.y));
}
vec4 load_v4(uint i4) {
    uvec2 w = v_cache[i4];
    return vec4(unpack_half2(w.x), unpack_half2(w.y));
}
#elif defined(KV_F32)
layout(std430, binding = 1) KV_CACHE_ACCESS buffer KCache { vec4 k_cache[]; };
layout(std430, binding = 2) KV_CACHE_ACCESS buffer VCache { vec4 v_cache[]; };
vec4 load_k4(uint i4) { return k_cache[i4]; }
vec4 load_v4(uint i4) { return v_cache[i4]; }
#elif defined(KV_Q8_0)
layout(std430, binding = 1) KV_CACHE_ACCESS buffer KCache { uint k_cache[]; };
layout(std430, binding = 2) KV_CACHE_ACCESS buffer VCache { uint v_cache[]; };
vec4 q8_quad(uint w) {
    const int s = int(w);
    return vec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8), bitfieldExtract(s, 24, 8));
}
vec4 load_k4(uint i4) {
    const uint b = (i4 >> 3) * 9u;
    return uintBitsToFloat(k_cache[b]) * q8_quad(k_cache[b + 1u + (i4 & 7u)]);
}
vec4 load_v4(uint i4) {
    const uint b = (i4 >> 3) * 9u;
    return uintBitsToFloat(v_cache[b]) * q8_quad(v_cache[b + 1u + (i4 & 7u)]);
}
#else
#error "define KV_F16, KV_F32 or KV_Q8_0"
#endif

// Running maximum of nothing yet. Finite on purpose: exp(NEG_BIG - m) is 0 for any real score m and
// exp(NEG_BIG - NEG_BIG) is 1, so no -inf - -inf = NaN can arise, and fast-math drivers that assume
// no infinities stay correct.
const float NEG_BIG = -3.0e38;

// Row of a key in the ring cache, for a key range [lo, ...) no longer than n_ctx: lo_row = lo % n_ctx
// is computed once per range, so each key costs an add and a compare instead of a division.
uint ring_row(uint j, uint lo, uint lo_row, uint n_ctx) {
    uint r = lo_row + (j - lo);
    return r >= n_ctx ? r - n_ctx : r;
}

// cap * tanh(s / cap) (attention-logit soft-capping) for cap > 0; inv_cap = 1 / cap. GLSL's tanh is
// allowed to be (e^x - e^-x) / (e^x + e^-x), which overflows to inf / inf = NaN beyond |x| ~ 44, so:
// for |x| >= 1/8, tanh |x| = (1 - e) / (1 + e) with e = exp(-2|x|) in (0, 0.78], never overflowing
// and losing no relative precision; below, the odd Taylor series to x^7 (truncation < 2e-9
// relative), where 1 - e would cancel.
float softcap_score(float s, float cap, float inv_cap) {
    const float x = s * inv_cap, a = abs(x);
    float t;
    if (a < 0.125) {
        const float x2 = x * x;
        t = a * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))));
    } else {
        const float e = exp(-2.0 * a);
        t = (1.0 - e) / (1.0 + e);
    }
    return cap * (x < 0.0 ? -t : t);
}

// ALiBi slope of query head h (BLOOM, MPT, jina-bert-v2; llama.cpp's rule, which extends the
// paper's geometric sequence to head counts that are not powers of two): with n_log2 the largest
// power of two <= n_heads, m0 = 2^(-max_bias / n_log2) and m1 = 2^(-max_bias / 2 / n_log2), heads
// below n_log2 get m0^(h + 1), the others m1^(2 (h - n_log2) + 1). Computed as exp2 of the exponent
// (step = max_bias / n_log2, from the host) rather than pow(m, e), whose error grows with e. A key j
// then adds -slope * |i - j| to the score of a query at position i. n_log2 == 0: no ALiBi, slope 0.
float alibi_slope(uint h, float step, uint n_log2) {
    if (n_log2 == 0u) return 0.0;
    return h < n_log2 ? exp2(-step * float(h + 1u)) : exp2(-0.5 * step * float(2u * (h - n_log2) + 1u));
}
