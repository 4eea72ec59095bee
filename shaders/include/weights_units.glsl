// Decoders of the block types added after Q8_0 / Q4_0 (included by weights.glsl, which defines the
// word readers used here). The layouts are runtime/quant/block_formats.h; the references are
// runtime/quant/dequantize.cpp.
//
// Every type here is decoded in *units* of 16 elements: two runs of 8 consecutive columns that
// share the bytes loaded for them (the low and high nibbles of 8 bytes, or two bit planes of
// them). For each type:
//   w_unit(row_byte, u, v)  the 16 values of unit u of the row, as v[0], v[1] (first run) and
//                           v[2], v[3] (second run), unscaled; returns the factor they share
//                           (the block scale, or 1.0 where sub-blocks of a unit differ)
//   w_unit_col(u, q)        the column of v[q].x (v[q] covers 4 consecutive columns)
//   w_unit_of(col, half)    the unit holding column col (a multiple of 8) and which run (0 or 1)
// matvec walks units; get_rows and matmul take 8 columns at a time through w_unit_of.
//
// Index names follow block_formats.h: sb super-block, h half (128 elements), c chunk (64), s
// sub-block, p 8-byte part.

const uint W_UNIT = 16u;
const uint W_UNIT4 = 4u;

// Four bytes of v: their nibble (hi = 0 low, 1 high), 2-bit field at `sh`, or bit `b`, as floats.
vec4 w_nib4(uint v, uint hi) { return vec4((uvec4(v) >> (uvec4(0u, 8u, 16u, 24u) + (hi << 2))) & 0xFu); }
vec4 w_crumb4(uint v, uint sh) { return vec4((uvec4(v) >> (uvec4(0u, 8u, 16u, 24u) + sh)) & 3u); }
vec4 w_bit4(uint v, uint b) { return vec4((uvec4(v) >> (uvec4(0u, 8u, 16u, 24u) + b)) & 1u); }
// Bits first .. first + 3 of a 32-bit mask (Q5_0 / Q5_1 high bits), as floats.
vec4 w_maskbits4(uint m, uint first) { return vec4((uvec4(m) >> (uvec4(0u, 1u, 2u, 3u) + first)) & 1u); }
float w_s8(uint b) { return float(int(b << 24) >> 24); }

#if defined(W_IQ4_NL) || defined(W_IQ4_XS)
const float kIq4Values[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                       1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
vec4 w_iq4(vec4 n) { return vec4(kIq4Values[int(n.x)], kIq4Values[int(n.y)], kIq4Values[int(n.z)], kIq4Values[int(n.w)]); }
#endif

#if defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1) || defined(W_IQ4_NL) || defined(W_IQ4_XS)
// Blocks (or IQ4_XS sub-blocks) of 32 in the Q4_0 nibble layout: unit u is the 8-byte half u & 1 of
// 32-element group u >> 1, its low nibbles columns 8 (u & 1) + 0..7, its high nibbles 16 + the same.
uint w_unit_col(uint u, uint q) { return (u >> 1) * 32u + (u & 1u) * 8u + (q & 1u) * 4u + (q >> 1) * 16u; }
uint w_unit_of(uint col, out uint half_) {
    half_ = (col >> 4) & 1u;
    return (col >> 5) * 2u + ((col >> 3) & 1u);
}
#endif

#if defined(W_Q4_1)
const uint W_BLOCK_ELEMS = 32u, W_BLOCK_BYTES = 20u;
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + (u >> 1) * W_BLOCK_BYTES;
    vec2 dm = unpackHalf2x16(w_bits32(bb));
    uvec2 q = w_load2(bb + 4u + 8u * (u & 1u));
    v[0] = w_nib4(q.x, 0u) * dm.x + dm.y;
    v[1] = w_nib4(q.y, 0u) * dm.x + dm.y;
    v[2] = w_nib4(q.x, 1u) * dm.x + dm.y;
    v[3] = w_nib4(q.y, 1u) * dm.x + dm.y;
    return 1.0;
}

#elif defined(W_Q5_0) || defined(W_Q5_1)
#if defined(W_Q5_0)
const uint W_BLOCK_ELEMS = 32u, W_BLOCK_BYTES = 22u, W_QH = 2u;
#else
const uint W_BLOCK_ELEMS = 32u, W_BLOCK_BYTES = 24u, W_QH = 4u;
#endif
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + (u >> 1) * W_BLOCK_BYTES, first = 8u * (u & 1u);
    uint qh = w_bits32(bb + W_QH);
    uvec2 q = w_load2(bb + W_QH + 4u + first);
    v[0] = w_nib4(q.x, 0u) + 16.0 * w_maskbits4(qh, first);
    v[1] = w_nib4(q.y, 0u) + 16.0 * w_maskbits4(qh, first + 4u);
    v[2] = w_nib4(q.x, 1u) + 16.0 * w_maskbits4(qh, first + 16u);
    v[3] = w_nib4(q.y, 1u) + 16.0 * w_maskbits4(qh, first + 20u);
#if defined(W_Q5_0)
    for (uint i = 0; i < 4u; ++i) v[i] -= 16.0;
    return w_half(bb);
#else
    vec2 dm = unpackHalf2x16(w_bits32(bb));
    for (uint i = 0; i < 4u; ++i) v[i] = v[i] * dm.x + dm.y;
    return 1.0;
#endif
}

#elif defined(W_IQ4_NL)
const uint W_BLOCK_ELEMS = 32u, W_BLOCK_BYTES = 18u;
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + (u >> 1) * W_BLOCK_BYTES;
    uvec2 q = w_load2(bb + 2u + 8u * (u & 1u));
    v[0] = w_iq4(w_nib4(q.x, 0u));
    v[1] = w_iq4(w_nib4(q.y, 0u));
    v[2] = w_iq4(w_nib4(q.x, 1u));
    v[3] = w_iq4(w_nib4(q.y, 1u));
    return w_half(bb);
}

#elif defined(W_IQ4_XS)
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 136u;
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + (u >> 4) * W_BLOCK_BYTES, s = (u >> 1) & 7u;
    uint ls = ((w_byte(bb + 4u + (s >> 1)) >> ((s & 1u) << 2)) & 0xFu) | (((w_bits16(bb + 2u) >> (2u * s)) & 3u) << 4);
    uvec2 q = w_load2(bb + 8u + 16u * s + 8u * (u & 1u));
    v[0] = w_iq4(w_nib4(q.x, 0u));
    v[1] = w_iq4(w_nib4(q.y, 0u));
    v[2] = w_iq4(w_nib4(q.x, 1u));
    v[3] = w_iq4(w_nib4(q.y, 1u));
    return w_half(bb) * (float(ls) - 32.0);
}

#elif defined(W_Q4_K) || defined(W_Q5_K)
// Unit u: chunk c = (u >> 2) & 3 of super-block u >> 4, bytes 8p .. 8p + 7 of the chunk's 32 (p = u & 3):
// low nibbles are columns 64c + 8p + 0..7 (sub-block 2c), high nibbles 32 further (sub-block 2c + 1).
#if defined(W_Q4_K)
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 144u, W_QS = 16u;
#else
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 176u, W_QS = 48u, W_QH = 16u;
#endif
uint w_unit_col(uint u, uint q) { return (u >> 4) * 256u + ((u >> 2) & 3u) * 64u + (u & 3u) * 8u + (q & 1u) * 4u + (q >> 1) * 32u; }
uint w_unit_of(uint col, out uint half_) {
    half_ = (col >> 5) & 1u;
    return (col >> 8) * 16u + ((col >> 6) & 3u) * 4u + ((col >> 3) & 3u);
}
// 6-bit scale and min of sub-block s from the 12 scale bytes (words s0, s1, s2).
vec2 w_scale_min_k4(uint s0, uint s1, uint s2, uint s) {
    uint sh = (s & 3u) << 3;
    if (s < 4u) return vec2((s0 >> sh) & 63u, (s1 >> sh) & 63u);
    uint b = (s2 >> sh) & 0xFFu;
    return vec2((b & 15u) | (((s0 >> sh) >> 6) & 3u) << 4, (b >> 4) | (((s1 >> sh) >> 6) & 3u) << 4);
}
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + (u >> 4) * W_BLOCK_BYTES, c = (u >> 2) & 3u, p = u & 3u;
    vec2 dm = unpackHalf2x16(w_bits32(bb));
    uint s0 = w_bits32(bb + 4u), s1 = w_bits32(bb + 8u), s2 = w_bits32(bb + 12u);
    vec2 sm1 = w_scale_min_k4(s0, s1, s2, 2u * c), sm2 = w_scale_min_k4(s0, s1, s2, 2u * c + 1u);
    float d1 = dm.x * sm1.x, m1 = dm.y * sm1.y, d2 = dm.x * sm2.x, m2 = dm.y * sm2.y;
    uvec2 q = w_load2(bb + W_QS + 32u * c + 8u * p);
    vec4 a0 = w_nib4(q.x, 0u), a1 = w_nib4(q.y, 0u), b0 = w_nib4(q.x, 1u), b1 = w_nib4(q.y, 1u);
#if defined(W_Q5_K)
    uvec2 qh = w_load2(bb + W_QH + 8u * p);
    a0 += 16.0 * w_bit4(qh.x, 2u * c);
    a1 += 16.0 * w_bit4(qh.y, 2u * c);
    b0 += 16.0 * w_bit4(qh.x, 2u * c + 1u);
    b1 += 16.0 * w_bit4(qh.y, 2u * c + 1u);
#endif
    v[0] = a0 * d1 - m1;
    v[1] = a1 * d1 - m1;
    v[2] = b0 * d2 - m2;
    v[3] = b1 * d2 - m2;
    return 1.0;
}

#elif defined(W_Q6_K)
// Unit u: half h = (u >> 3) & 1 of super-block u >> 4, group pair gq = (u >> 2) & 1, part p = u & 3:
// ql bytes 64h + 32gq + 8p .. +7 give columns 128h + 32gq + 8p + 0..7 (low nibbles) and 64 further
// (high nibbles); their top 2 bits are at shifts 2gq and 2gq + 4 of qh bytes 32h + 8p .. +7.
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 210u;
uint w_unit_col(uint u, uint q) {
    return (u >> 4) * 256u + ((u >> 3) & 1u) * 128u + ((u >> 2) & 1u) * 32u + (u & 3u) * 8u + (q & 1u) * 4u + (q >> 1) * 64u;
}
uint w_unit_of(uint col, out uint half_) {
    half_ = (col >> 6) & 1u;
    return (col >> 8) * 16u + ((col >> 7) & 1u) * 8u + ((col >> 5) & 1u) * 4u + ((col >> 3) & 3u);
}
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + (u >> 4) * W_BLOCK_BYTES, h = (u >> 3) & 1u, gq = (u >> 2) & 1u, p = u & 3u;
    uvec2 ql = w_load2(bb + 64u * h + 32u * gq + 8u * p);
    uvec2 qh = w_load2(bb + 128u + 32u * h + 8u * p);
    uint si = 8u * h + 2u * gq + (p >> 1);  // scale of the low run; the high run's is si + 4
    float d = w_half(bb + 208u);
    float d1 = d * w_s8(w_byte(bb + 192u + si)), d2 = d * w_s8(w_byte(bb + 196u + si));
    v[0] = (w_nib4(ql.x, 0u) + 16.0 * w_crumb4(qh.x, 2u * gq) - 32.0) * d1;
    v[1] = (w_nib4(ql.y, 0u) + 16.0 * w_crumb4(qh.y, 2u * gq) - 32.0) * d1;
    v[2] = (w_nib4(ql.x, 1u) + 16.0 * w_crumb4(qh.x, 2u * gq + 4u) - 32.0) * d2;
    v[3] = (w_nib4(ql.y, 1u) + 16.0 * w_crumb4(qh.y, 2u * gq + 4u) - 32.0) * d2;
    return 1.0;
}

#elif defined(W_Q2_K) || defined(W_Q3_K)
// Unit u: half h = (u >> 3) & 1 of super-block u >> 4, shift pair jq = (u >> 2) & 1, part p = u & 3:
// qs bytes 32h + 8p .. +7 at shift 2j (j = 2jq) give columns 128h + 32j + 8p + 0..7, and at shift
// 2j + 2 the columns 32 further. Each run lies in one 16-element sub-block.
#if defined(W_Q2_K)
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 84u;
#else
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 110u;
#endif
uint w_unit_col(uint u, uint q) {
    return (u >> 4) * 256u + ((u >> 3) & 1u) * 128u + ((u >> 2) & 1u) * 64u + (u & 3u) * 8u + (q & 1u) * 4u + (q >> 1) * 32u;
}
uint w_unit_of(uint col, out uint half_) {
    half_ = (col >> 5) & 1u;
    return (col >> 8) * 16u + ((col >> 7) & 1u) * 8u + ((col >> 6) & 1u) * 4u + ((col >> 3) & 3u);
}
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + (u >> 4) * W_BLOCK_BYTES, h = (u >> 3) & 1u, j = 2u * ((u >> 2) & 1u), p = u & 3u;
    uint s1 = 8u * h + 2u * j + (p >> 1), s2 = s1 + 2u;  // sub-blocks of the two runs
#if defined(W_Q2_K)
    uvec2 q = w_load2(bb + 16u + 32u * h + 8u * p);
    vec2 dm = unpackHalf2x16(w_bits32(bb + 80u));
    uint sc1 = w_byte(bb + s1), sc2 = w_byte(bb + s2);
    float d1 = dm.x * float(sc1 & 15u), m1 = dm.y * float(sc1 >> 4);
    float d2 = dm.x * float(sc2 & 15u), m2 = dm.y * float(sc2 >> 4);
    v[0] = w_crumb4(q.x, 2u * j) * d1 - m1;
    v[1] = w_crumb4(q.y, 2u * j) * d1 - m1;
    v[2] = w_crumb4(q.x, 2u * j + 2u) * d2 - m2;
    v[3] = w_crumb4(q.y, 2u * j + 2u) * d2 - m2;
    return 1.0;
#else
    uvec2 q = w_load2(bb + 32u + 32u * h + 8u * p);
    uvec2 hm = w_load2(bb + 8u * p);
    uint b1 = 4u * h + j;  // hmask bit of the first run
    float d = w_half(bb + 108u);
    // 6-bit scales: low 4 bits in bytes 0..7, high 2 bits in bytes 8..11 (block_formats.h).
    uint lo1 = (w_byte(bb + 96u + (s1 & 7u)) >> ((s1 >> 3) << 2)) & 15u, hi1 = (w_byte(bb + 104u + (s1 & 3u)) >> ((s1 >> 2) << 1)) & 3u;
    uint lo2 = (w_byte(bb + 96u + (s2 & 7u)) >> ((s2 >> 3) << 2)) & 15u, hi2 = (w_byte(bb + 104u + (s2 & 3u)) >> ((s2 >> 2) << 1)) & 3u;
    float d1 = d * (float(lo1 | (hi1 << 4)) - 32.0), d2 = d * (float(lo2 | (hi2 << 4)) - 32.0);
    v[0] = (w_crumb4(q.x, 2u * j) + 4.0 * w_bit4(hm.x, b1) - 4.0) * d1;
    v[1] = (w_crumb4(q.y, 2u * j) + 4.0 * w_bit4(hm.y, b1) - 4.0) * d1;
    v[2] = (w_crumb4(q.x, 2u * j + 2u) + 4.0 * w_bit4(hm.x, b1 + 1u) - 4.0) * d2;
    v[3] = (w_crumb4(q.y, 2u * j + 2u) + 4.0 * w_bit4(hm.y, b1 + 1u) - 4.0) * d2;
    return 1.0;
#endif
}
#endif

// Eight consecutive elements (col a multiple of 8) and one element, through the unit holding them.
void w_dequant8(uint row_byte, uint col, out vec4 v0, out vec4 v1) {
    uint half_;
    uint u = w_unit_of(col, half_);
    vec4 v[W_UNIT4];
    float d = w_unit(row_byte, u, v);
    v0 = v[2u * half_] * d;
    v1 = v[2u * half_ + 1u] * d;
}
float w_get(uint row_byte, uint col) {
    vec4 v0, v1;
    w_dequant8(row_byte, col & ~7u, v0, v1);
    uint i = col & 7u;
    return i < 4u ? v0[i] : v1[i - 4u];
}
