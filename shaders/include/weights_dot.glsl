// The integer side of the int-dot linear kernels (matvec_dot.comp, matmul_dot.comp): a weight row's block types as
// signed 8-bit integers, four packed in a word, multiplied with X quantized to Q8_1 blocks by
// 4x8-bit packed dot products (int_dot.glsl). Included after weights.glsl (its word readers and
// layouts); the layouts are runtime/quant/block_formats.h.
//
// X's Q8_1 block j (columns 32j .. 32j + 31): xq[i] packs columns 32j + 4i .. + 3 (byte b = column
// 4i + b), xd = (d, s) with X ~ d * q and s = d * sum(q). A weight block of scale dw, offset or min
// m and integer levels w contributes dw * d * sum(w * q) (+ m * s): the integer sum is exact, so
// the only error beyond the float path's is X's quantization (ref::quantize_q8_1).
//
// A unit of this file is W_DOT_BLOCKS (1 or 2) X blocks (w_dot_unit_block names them). Two blocks
// where the type stores two 32-column runs in the nibbles or bit planes of the same bytes (Q4_K,
// Q5_K: a 64-column chunk; Q6_K: the low and high nibbles of 32 ql bytes, columns 64 apart), so that
// each weight byte is loaded once. Per type
//   w_dot_unit_decode(row_byte, u, out w[8 * W_DOT_BLOCKS], out f[W_DOT_BLOCKS])
// gives the unit's levels as packed int8 (block i in w[8i .. 8i + 7]) and per block the factors
// f = (a_lo, a_hi, b): the block contributes
//   X.d * (a_lo * sum(w q over columns 0..15) + a_hi * sum(w q over columns 16..31)) + b * X.s,
// two scales only where the type scales 16-column halves (Q6_K: W_DOT_HALVES; else a_hi = a_lo,
// and the block's sum is taken whole). matvec_dot multiplies a unit at once (w_dot_unit); matmul_dot
// keeps the decoded levels and factors in shared memory for a tile of X rows (w_dot_scale).

#include "int_dot.glsl"

#if defined(W_Q4_K) || defined(W_Q5_K) || defined(W_Q6_K)
const uint W_DOT_BLOCKS = 2u;
#else
const uint W_DOT_BLOCKS = 1u;
#endif

#if defined(W_Q6_K)
#define W_DOT_HALVES 1
#else
#define W_DOT_HALVES 0
#endif

// A block's contribution from its two integer sums over columns 0..15 and 16..31 (see above).
float w_dot_scale(int lo, int hi, vec3 f, vec2 xd) {
#if W_DOT_HALVES
    return xd.x * (f.x * float(lo) + f.y * float(hi)) + f.z * xd.y;
#else
    return xd.x * f.x * float(lo + hi) + f.z * xd.y;
#endif
}

const uint kNibbles = 0x0F0F0F0Fu, kLowBits = 0x01010101u;

// Bits first .. first + 3 of m as bit 4 of bytes 0..3 (Q5_0 / Q5_1 high bits).
uint spread_bits4(uint m, uint first) {
    uint b = (m >> first) & 15u;
    return ((b & 1u) | ((b & 2u) << 7) | ((b & 4u) << 14) | ((b & 8u) << 21)) << 4;
}

// Four nibbles (one per byte of v at shift sh) as their levels in a w_lut16 table, packed int8.
uint lut_levels4(uint v, uint sh, uint p0, uint p1, uint p2, uint p3) {
    uvec4 b = uvec4(w_lut16((uvec4(v) >> (uvec4(0u, 8u, 16u, 24u) + sh)) & 15u, p0, p1, p2, p3)) & 0xFFu;
    return b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
}
#if defined(W_IQ4_NL) || defined(W_IQ4_XS)
uint iq4_levels4(uint v, uint sh) { return lut_levels4(v, sh, kIq4Packed0, kIq4Packed1, kIq4Packed2, kIq4Packed3); }
#endif

void w_dot_unit_decode(uint row_byte, uint u, out uint w[8 * W_DOT_BLOCKS], out vec3 f[W_DOT_BLOCKS]) {
#if defined(W_Q8_0)
    uint q[8];
    float d = w_block_words(row_byte + u * W_BLOCK_BYTES, q);
    for (uint i = 0; i < 8u; ++i) w[i] = q[i];
    f[0] = vec3(d, d, 0.0);
#elif defined(W_Q4_0)
    uint q[W_BLOCK_WORDS - 1u];
    float d = w_block_words(row_byte + u * W_BLOCK_BYTES, q);
    for (uint i = 0; i < 4u; ++i) {
        w[i] = q[i] & kNibbles;
        w[4u + i] = (q[i] >> 4) & kNibbles;
    }
    // levels q - 8: sum((q - 8) x) = sum(q x) - 8 sum(x)
    f[0] = vec3(d, d, -8.0 * d);
#elif defined(W_Q4_1)
    uint bb = row_byte + u * W_BLOCK_BYTES;
    vec2 dm = unpack_half2(w_bits32(bb));
    uvec4 q = w_load4(bb + 4u);
    for (uint i = 0; i < 4u; ++i) {
        w[i] = q[i] & kNibbles;
        w[4u + i] = (q[i] >> 4) & kNibbles;
    }
    f[0] = vec3(dm.x, dm.x, dm.y);
#elif defined(W_Q5_0) || defined(W_Q5_1)
    uint bb = row_byte + u * W_BLOCK_BYTES;
    uint qh = w_bits32(bb + W_QH);
    uvec4 q = w_load4(bb + W_QH + 4u);
    for (uint i = 0; i < 4u; ++i) {
        w[i] = (q[i] & kNibbles) | spread_bits4(qh, 4u * i);
        w[4u + i] = ((q[i] >> 4) & kNibbles) | spread_bits4(qh, 16u + 4u * i);
    }
#if defined(W_Q5_0)
    float d = w_half(bb);
    f[0] = vec3(d, d, -16.0 * d);
#else
    vec2 dm = unpack_half2(w_bits32(bb));
    f[0] = vec3(dm.x, dm.x, dm.y);
#endif
#elif defined(W_IQ4_NL)
    uint bb = row_byte + u * W_BLOCK_BYTES;
    uvec4 q = w_load4(bb + 2u);
    for (uint i = 0; i < 4u; ++i) {
        w[i] = iq4_levels4(q[i], 0u);
        w[4u + i] = iq4_levels4(q[i], 4u);
    }
    float d = w_half(bb);
    f[0] = vec3(d, d, 0.0);
#elif defined(W_MXFP4)
    uint bb = row_byte + u * W_BLOCK_BYTES;
    uvec4 q = w_load4_bytes(bb + 1u);
    for (uint i = 0; i < 4u; ++i) {
        w[i] = lut_levels4(q[i], 0u, kMxfp4Packed0, kMxfp4Packed1, kMxfp4Packed2, kMxfp4Packed3);
        w[4u + i] = lut_levels4(q[i], 4u, kMxfp4Packed0, kMxfp4Packed1, kMxfp4Packed2, kMxfp4Packed3);
    }
    float d = w_e8m0_half(w_byte(bb));
    f[0] = vec3(d, d, 0.0);
#elif defined(W_IQ4_XS)
    // Unit u: sub-block s = u & 7 of super-block u >> 3.
    uint bb = row_byte + (u >> 3) * W_BLOCK_BYTES, s = u & 7u;
    uint ls = ((w_byte(bb + 4u + (s >> 1)) >> ((s & 1u) << 2)) & 0xFu) | (((w_bits16(bb + 2u) >> (2u * s)) & 3u) << 4);
    uvec4 q = w_load4(bb + 8u + 16u * s);
    for (uint i = 0; i < 4u; ++i) {
        w[i] = iq4_levels4(q[i], 0u);
        w[4u + i] = iq4_levels4(q[i], 4u);
    }
    float d = w_half(bb) * (float(ls) - 32.0);
    f[0] = vec3(d, d, 0.0);
#elif defined(W_Q4_K) || defined(W_Q5_K)
    // Unit u: chunk c = u & 3 of super-block u >> 2, 32 bytes whose low nibbles are sub-block 2c
    // (X block 2u) and high nibbles sub-block 2c + 1 (X block 2u + 1).
    uint bb = row_byte + (u >> 2) * W_BLOCK_BYTES, c = u & 3u;
    vec2 dm = unpack_half2(w_bits32(bb));
    uvec3 sc = uvec3(w_bits32(bb + 4u), w_bits32(bb + 8u), c < 2u ? 0u : w_bits32(bb + 12u));
    vec2 sm1 = w_scale_min_k4(sc.x, sc.y, sc.z, 2u * c), sm2 = w_scale_min_k4(sc.x, sc.y, sc.z, 2u * c + 1u);
    uvec4 qa = w_load4(bb + W_QS + 32u * c), qb = w_load4(bb + W_QS + 32u * c + 16u);
    uint q[8] = uint[8](qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w);
#if defined(W_Q5_K)
    uvec4 ha = w_load4(bb + W_QH), hb = w_load4(bb + W_QH + 16u);
    uint qh[8] = uint[8](ha.x, ha.y, ha.z, ha.w, hb.x, hb.y, hb.z, hb.w);
#endif
    for (uint i = 0; i < 8u; ++i) {
        w[i] = q[i] & kNibbles;
        w[8u + i] = (q[i] >> 4) & kNibbles;
#if defined(W_Q5_K)
        w[i] |= ((qh[i] >> (2u * c)) & kLowBits) << 4;
        w[8u + i] |= ((qh[i] >> (2u * c + 1u)) & kLowBits) << 4;
#endif
    }
    // levels times the sub-block's scale, minus its min: d sc sum(w q) - dmin m sum(x)
    f[0] = vec3(dm.x * sm1.x, dm.x * sm1.x, -dm.y * sm1.y);
    f[1] = vec3(dm.x * sm2.x, dm.x * sm2.x, -dm.y * sm2.y);
#elif defined(W_Q6_K)
    // Unit u: super-block u >> 2, half h = (u >> 1) & 1, ql run r = u & 1: the 32 ql bytes
    // 64h + 32r .. + 31 hold group g = r (low nibbles, X block 8sb + 4h + r) and g = r + 2 (high
    // nibbles, X block + 2); their top bits are at shifts 2g of qh bytes 32h .. 32h + 31. The
    // unit's X blocks are thus 2 apart (w_dot_unit_block).
    uint bb = row_byte + (u >> 2) * W_BLOCK_BYTES, h = (u >> 1) & 1u, r = u & 1u;
    uvec4 la = w_load4(bb + 64u * h + 32u * r), lb = w_load4(bb + 64u * h + 32u * r + 16u);
    uvec4 ha = w_load4(bb + 128u + 32u * h), hb = w_load4(bb + 128u + 32u * h + 16u);
    uint ql[8] = uint[8](la.x, la.y, la.z, la.w, lb.x, lb.y, lb.z, lb.w);
    uint qh[8] = uint[8](ha.x, ha.y, ha.z, ha.w, hb.x, hb.y, hb.z, hb.w);
    float d = w_half(bb + 208u);
    // int8 scales of the four 16-column sub-blocks: 8h + 2g + (0, 1) for g = r and g = r + 2
    uint si = 8u * h + 2u * r;
    uint sw = w_bits32(bb + 192u + (si & ~3u));  // si % 4 is 0 or 2: both scales of g in one word
    uint sw2 = w_bits32(bb + 196u + (si & ~3u));
    uint sh = (si & 3u) << 3;
    f[0] = d * vec3(w_s8(sw >> sh), w_s8(sw >> (sh + 8u)), 0.0);
    f[1] = d * vec3(w_s8(sw2 >> sh), w_s8(sw2 >> (sh + 8u)), 0.0);
    for (uint i = 0; i < 8u; ++i) {
        uint lo = (ql[i] & kNibbles) | (((qh[i] >> (2u * r)) & 0x03030303u) << 4);
        uint hi = ((ql[i] >> 4) & kNibbles) | (((qh[i] >> (2u * r + 4u)) & 0x03030303u) << 4);
        // q - 32 per byte (0..63 to -32..31 in two's complement): with bit 7 set first no byte
        // borrows from the next, and flipping bit 7 back gives (q - 32) mod 256.
        w[i] = ((lo | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
        w[8u + i] = ((hi | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
    }
#else
#error "weights_dot.glsl: no integer-dot form for this weight type"
#endif
}

// Sum over unit u's columns of W * X, X's blocks of the unit in xq / xd.
float w_dot_unit(uint row_byte, uint u, const uint xq[8 * W_DOT_BLOCKS], const vec2 xd[W_DOT_BLOCKS]) {
    uint w[8u * W_DOT_BLOCKS];
    vec3 f[W_DOT_BLOCKS];
    w_dot_unit_decode(row_byte, u, w, f);
    float s = 0.0;
    for (uint b = 0; b < W_DOT_BLOCKS; ++b) {
        int lo = 0, hi = 0;
        for (uint i = 0; i < 4u; ++i) {
            lo += dot_s8x4(w[8u * b + i], xq[8u * b + i]);
            hi += dot_s8x4(w[8u * b + 4u + i], xq[8u * b + 4u + i]);
        }
        s += w_dot_scale(lo, hi, f[b], xd[b]);
    }
    return s;
}

// The X blocks of unit u (indices into the row's Q8_1 blocks): 2u (and 2u + 1), except Q6_K, whose
// unit pairs groups g and g + 2 of a half (see above).
uint w_dot_unit_block(uint u, uint i) {
#if defined(W_Q6_K)
    return (u >> 2) * 8u + ((u >> 1) & 1u) * 4u + (u & 1u) + 2u * i;
#else
    return u * W_DOT_BLOCKS + i;
#endif
}
