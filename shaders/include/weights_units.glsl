// Decoders of the block types added after Q8_0 / Q4_0 (included by weights.glsl, which defines the
// word readers used here). The layouts are runtime/quant/block_formats.h; the references are
// runtime/quant/dequantize.cpp.
//
// Every type here is decoded in *units* of 32 elements: two runs of 16 consecutive columns that
// share the 16 bytes loaded for them (the low and high nibbles of 16 bytes, or two bit planes of
// them), so that one invocation issues few, wide loads (on CPU drivers every per-lane load is a
// gather; on GPUs wide loads coalesce). For each type:
//   w_unit(row_byte, u, v)  the 32 values of unit u of the row: v[0..3] the first run, v[4..7] the
//                           second; returns the factor they share (the block scale, or 1.0 where
//                           the runs have their own scales and v is already scaled)
//   w_unit_col(u, q)        the column of v[q].x (v[q] covers 4 consecutive columns)
//   w_unit_of(col, grp)     the unit holding column col (a multiple of 8), and which of its
//                           8-column groups it is: values v[2 grp], v[2 grp + 1]
// Q2_K and Q3_K take 64 elements per unit instead: four runs of 16, one per 2-bit plane.
// matvec walks units; get_rows and matmul take 8 columns at a time through w_unit_of.
//
// Index names follow block_formats.h: sb super-block, h half (128 elements), c chunk (64), s
// sub-block, p 16-byte part.

#if defined(W_Q2_K) || defined(W_Q3_K)
// 2-bit quants: 16 bytes hold 64 elements in four bit planes; a unit takes all four.
const uint W_UNIT = 64u;
const uint W_UNIT4 = 16u;
#else
const uint W_UNIT = 32u;
const uint W_UNIT4 = 8u;
#endif

// Four bytes of v: their nibble (hi = 0 low, 1 high), 2-bit field at `sh`, or bit `b`.
uvec4 w_nib4u(uint v, uint hi) { return (uvec4(v) >> (uvec4(0u, 8u, 16u, 24u) + (hi << 2))) & 0xFu; }
vec4 w_nib4(uint v, uint hi) { return vec4(w_nib4u(v, hi)); }
vec4 w_crumb4(uint v, uint sh) { return vec4((uvec4(v) >> (uvec4(0u, 8u, 16u, 24u) + sh)) & 3u); }
vec4 w_bit4(uint v, uint b) { return vec4((uvec4(v) >> (uvec4(0u, 8u, 16u, 24u) + b)) & 1u); }
// Bits first .. first + 3 of a 32-bit mask (Q5_0 / Q5_1 high bits), as floats.
vec4 w_maskbits4(uint m, uint first) { return vec4((uvec4(m) >> (uvec4(0u, 1u, 2u, 3u) + first)) & 1u); }
float w_s8(uint b) { return float(int(b << 24) >> 24); }
// Byte i (0..7) of two words.
uint w_byte_of(uvec2 w, uint i) { return (w[i >> 2] >> ((i & 3u) << 3)) & 0xFFu; }

#if defined(W_IQ4_NL) || defined(W_IQ4_XS)
// The 16 IQ4 levels (block_formats.h kIq4Values).
const uint kIq4Packed0 = 0xBFAD9881u;  // -127 -104 -83 -65
const uint kIq4Packed1 = 0xF6EADDCFu;  //  -49  -35 -22 -10
const uint kIq4Packed2 = 0x26190D01u;  //    1   13  25  38
const uint kIq4Packed3 = 0x71594535u;  //   53   69  89 113
vec4 w_iq4(uvec4 n) { return vec4(w_lut16(n, kIq4Packed0, kIq4Packed1, kIq4Packed2, kIq4Packed3)); }
#endif

#if defined(W_MXFP4)
// The 16 MXFP4 levels, FP4 E2M1 doubled (block_formats.h kMxfp4Values).
const uint kMxfp4Packed0 = 0x03020100u;  //  0  1  2   3
const uint kMxfp4Packed1 = 0x0C080604u;  //  4  6  8  12
const uint kMxfp4Packed2 = 0xFDFEFF00u;  //  0 -1 -2  -3
const uint kMxfp4Packed3 = 0xF4F8FAFCu;  // -4 -6 -8 -12
vec4 w_fp4(uvec4 n) { return vec4(w_lut16(n, kMxfp4Packed0, kMxfp4Packed1, kMxfp4Packed2, kMxfp4Packed3)); }
// The E8M0 block scale, halved for the doubled levels: 2^(e - 128); e < 2 are the subnormals
// 2^-128 and 2^-127 (devices that flush subnormals read them as 0: such a block is 0 to within
// 12 * 2^-127 anyway).
float w_e8m0_half(uint e) { return uintBitsToFloat(e >= 2u ? (e - 1u) << 23 : 0x00200000u << e); }
#endif

#if defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1) || defined(W_IQ4_NL) || defined(W_IQ4_XS) || defined(W_MXFP4)
// Blocks (IQ4_XS: sub-blocks) of 32 in the Q4_0 nibble layout: unit u is group u of 32 columns;
// the low nibbles of its 16 bytes are columns 0..15, the high nibbles 16..31.
uint w_unit_col(uint u, uint q) { return u * 32u + (q & 3u) * 4u + (q >> 2) * 16u; }
uint w_unit_of(uint col, out uint grp) {
    grp = (col >> 3) & 3u;
    return col >> 5;
}
#endif

#if defined(W_Q4_1)
const uint W_BLOCK_ELEMS = 32u, W_BLOCK_BYTES = 20u;
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + u * W_BLOCK_BYTES;
    vec2 dm = unpack_half2(w_bits32(bb));
    uvec4 q = w_load4(bb + 4u);
    for (uint i = 0; i < 4u; ++i) {
        v[i] = w_nib4(q[i], 0u) * dm.x + dm.y;
        v[4u + i] = w_nib4(q[i], 1u) * dm.x + dm.y;
    }
    return 1.0;
}

#elif defined(W_Q5_0) || defined(W_Q5_1)
#if defined(W_Q5_0)
const uint W_BLOCK_ELEMS = 32u, W_BLOCK_BYTES = 22u, W_QH = 2u;
#else
const uint W_BLOCK_ELEMS = 32u, W_BLOCK_BYTES = 24u, W_QH = 4u;
#endif
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + u * W_BLOCK_BYTES;
    uint qh = w_bits32(bb + W_QH);
    uvec4 q = w_load4(bb + W_QH + 4u);
    for (uint i = 0; i < 4u; ++i) {
        v[i] = w_nib4(q[i], 0u) + 16.0 * w_maskbits4(qh, 4u * i);
        v[4u + i] = w_nib4(q[i], 1u) + 16.0 * w_maskbits4(qh, 16u + 4u * i);
    }
#if defined(W_Q5_0)
    for (uint i = 0; i < W_UNIT4; ++i) v[i] -= 16.0;
    return w_half(bb);
#else
    vec2 dm = unpack_half2(w_bits32(bb));
    for (uint i = 0; i < W_UNIT4; ++i) v[i] = v[i] * dm.x + dm.y;
    return 1.0;
#endif
}

#elif defined(W_IQ4_NL)
const uint W_BLOCK_ELEMS = 32u, W_BLOCK_BYTES = 18u;
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + u * W_BLOCK_BYTES;
    uvec4 q = w_load4(bb + 2u);
    for (uint i = 0; i < 4u; ++i) {
        v[i] = w_iq4(w_nib4u(q[i], 0u));
        v[4u + i] = w_iq4(w_nib4u(q[i], 1u));
    }
    return w_half(bb);
}

#elif defined(W_MXFP4)
// 17-byte blocks: the quants start at any byte offset (w_load4_bytes).
const uint W_BLOCK_ELEMS = 32u, W_BLOCK_BYTES = 17u;
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + u * W_BLOCK_BYTES;
    uvec4 q = w_load4_bytes(bb + 1u);
    for (uint i = 0; i < 4u; ++i) {
        v[i] = w_fp4(w_nib4u(q[i], 0u));
        v[4u + i] = w_fp4(w_nib4u(q[i], 1u));
    }
    return w_e8m0_half(w_byte(bb));
}

#elif defined(W_IQ4_XS)
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 136u;
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + (u >> 3) * W_BLOCK_BYTES, s = u & 7u;
    uint ls = ((w_byte(bb + 4u + (s >> 1)) >> ((s & 1u) << 2)) & 0xFu) | (((w_bits16(bb + 2u) >> (2u * s)) & 3u) << 4);
    uvec4 q = w_load4(bb + 8u + 16u * s);
    for (uint i = 0; i < 4u; ++i) {
        v[i] = w_iq4(w_nib4u(q[i], 0u));
        v[4u + i] = w_iq4(w_nib4u(q[i], 1u));
    }
    return w_half(bb) * (float(ls) - 32.0);
}

#elif defined(W_Q4_K) || defined(W_Q5_K)
// Unit u: chunk c = (u >> 1) & 3 of super-block u >> 3, bytes 16p .. 16p + 15 of the chunk's 32
// (p = u & 1): low nibbles are columns 64c + 16p + 0..15 (sub-block 2c), high nibbles 32 further
// (sub-block 2c + 1).
#if defined(W_Q4_K)
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 144u, W_QS = 16u;
#else
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 176u, W_QS = 48u, W_QH = 16u;
#endif
uint w_unit_col(uint u, uint q) { return (u >> 3) * 256u + ((u >> 1) & 3u) * 64u + (u & 1u) * 16u + (q & 3u) * 4u + (q >> 2) * 32u; }
uint w_unit_of(uint col, out uint grp) {
    grp = ((col >> 5) & 1u) * 2u + ((col >> 3) & 1u);
    return (col >> 8) * 8u + ((col >> 6) & 3u) * 2u + ((col >> 4) & 1u);
}
// 6-bit scale and min of sub-block s from the 12 scale bytes (words s0, s1, s2).
vec2 w_scale_min_k4(uint s0, uint s1, uint s2, uint s) {
    uint sh = (s & 3u) << 3;
    if (s < 4u) return vec2((s0 >> sh) & 63u, (s1 >> sh) & 63u);
    uint b = (s2 >> sh) & 0xFFu;
    return vec2((b & 15u) | (((s0 >> sh) >> 6) & 3u) << 4, (b >> 4) | (((s1 >> sh) >> 6) & 3u) << 4);
}
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + (u >> 3) * W_BLOCK_BYTES, c = (u >> 1) & 3u, p = u & 1u;
    vec2 dm = unpack_half2(w_bits32(bb));
    uvec3 sc = uvec3(w_bits32(bb + 4u), w_bits32(bb + 8u), c < 2u ? 0u : w_bits32(bb + 12u));
    vec2 sm1 = w_scale_min_k4(sc.x, sc.y, sc.z, 2u * c), sm2 = w_scale_min_k4(sc.x, sc.y, sc.z, 2u * c + 1u);
    float d1 = dm.x * sm1.x, m1 = dm.y * sm1.y, d2 = dm.x * sm2.x, m2 = dm.y * sm2.y;
    uvec4 q = w_load4(bb + W_QS + 32u * c + 16u * p);
#if defined(W_Q5_K)
    uvec4 qh = w_load4(bb + W_QH + 16u * p);
#endif
    for (uint i = 0; i < 4u; ++i) {
        vec4 a = w_nib4(q[i], 0u), b = w_nib4(q[i], 1u);
#if defined(W_Q5_K)
        a += 16.0 * w_bit4(qh[i], 2u * c);
        b += 16.0 * w_bit4(qh[i], 2u * c + 1u);
#endif
        v[i] = a * d1 - m1;
        v[4u + i] = b * d2 - m2;
    }
    return 1.0;
}

#elif defined(W_Q6_K)
// Unit u: half h = (u >> 2) & 1 of super-block u >> 3, group pair gq = (u >> 1) & 1, part p = u & 1:
// ql bytes 64h + 32gq + 16p .. +15 give columns 128h + 32gq + 16p + 0..15 (low nibbles, scale
// 8h + 2gq + p) and 64 further (high nibbles, scale + 4); their top 2 bits are at shifts 2gq and
// 2gq + 4 of qh bytes 32h + 16p .. +15.
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 210u;
uint w_unit_col(uint u, uint q) {
    return (u >> 3) * 256u + ((u >> 2) & 1u) * 128u + ((u >> 1) & 1u) * 32u + (u & 1u) * 16u + (q & 3u) * 4u + (q >> 2) * 64u;
}
uint w_unit_of(uint col, out uint grp) {
    grp = ((col >> 6) & 1u) * 2u + ((col >> 3) & 1u);
    return (col >> 8) * 8u + ((col >> 7) & 1u) * 4u + ((col >> 5) & 1u) * 2u + ((col >> 4) & 1u);
}
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + (u >> 3) * W_BLOCK_BYTES, h = (u >> 2) & 1u, gq = (u >> 1) & 1u, p = u & 1u;
    uvec4 ql = w_load4(bb + 64u * h + 32u * gq + 16u * p);
    uvec4 qh = w_load4(bb + 128u + 32u * h + 16u * p);
    uint si = 8u * h + 2u * gq + p;
    float d = w_half(bb + 208u);
    float d1 = d * w_s8(w_byte(bb + 192u + si)), d2 = d * w_s8(w_byte(bb + 196u + si));
    for (uint i = 0; i < 4u; ++i) {
        v[i] = (w_nib4(ql[i], 0u) + 16.0 * w_crumb4(qh[i], 2u * gq) - 32.0) * d1;
        v[4u + i] = (w_nib4(ql[i], 1u) + 16.0 * w_crumb4(qh[i], 2u * gq + 4u) - 32.0) * d2;
    }
    return 1.0;
}

#elif defined(W_Q2_K) || defined(W_Q3_K)
// Unit u: half h = (u >> 1) & 1 of super-block u >> 2, part p = u & 1: qs bytes 32h + 16p .. +15
// at shift 2j (j = 0..3) give columns 128h + 32j + 16p + 0..15 (sub-block 8h + 2j + p) as
// v[4j .. 4j + 3].
#if defined(W_Q2_K)
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 84u;
#else
const uint W_BLOCK_ELEMS = 256u, W_BLOCK_BYTES = 110u;
#endif
uint w_unit_col(uint u, uint q) {
    return (u >> 2) * 256u + ((u >> 1) & 1u) * 128u + (u & 1u) * 16u + (q >> 2) * 32u + (q & 3u) * 4u;
}
uint w_unit_of(uint col, out uint grp) {
    grp = ((col >> 5) & 3u) * 2u + ((col >> 3) & 1u);
    return (col >> 8) * 4u + ((col >> 7) & 1u) * 2u + ((col >> 4) & 1u);
}
float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
    uint bb = row_byte + (u >> 2) * W_BLOCK_BYTES, h = (u >> 1) & 1u, p = u & 1u;
#if defined(W_Q2_K)
    uvec4 q = w_load4(bb + 16u + 32u * h + 16u * p);
    vec2 dm = unpack_half2(w_bits32(bb + 80u));
    uvec2 sc = w_load2(bb + 8u * h);  // scale bytes of half h; run j uses byte 2j + p
    for (uint j = 0; j < 4u; ++j) {
        uint b = w_byte_of(sc, 2u * j + p);
        float d = dm.x * float(b & 15u), m = dm.y * float(b >> 4);
        for (uint i = 0; i < 4u; ++i) v[4u * j + i] = w_crumb4(q[i], 2u * j) * d - m;
    }
#else
    uvec4 q = w_load4(bb + 32u + 32u * h + 16u * p);
    uvec4 hm = w_load4(bb + 16u * p);
    float d = w_half(bb + 108u);
    // 6-bit scale of sub-block s = 8h + 2j + p: low 4 bits at shift 4h of byte 2j + p, high 2 bits
    // at shift 2 (2h + j / 2) of byte 8 + (2j + p) % 4 (block_formats.h).
    uvec2 lo = w_load2(bb + 96u);
    uint hi = w_bits32(bb + 104u);
    for (uint j = 0; j < 4u; ++j) {
        uint i2 = 2u * j + p;
        uint sc = ((w_byte_of(lo, i2) >> (4u * h)) & 15u) | (((hi >> (8u * (i2 & 3u) + 2u * (2u * h + (j >> 1)))) & 3u) << 4);
        float dj = d * (float(sc) - 32.0);
        for (uint i = 0; i < 4u; ++i)
            v[4u * j + i] = (w_crumb4(q[i], 2u * j) + 4.0 * w_bit4(hm[i], 4u * h + j) - 4.0) * dj;
    }
#endif
    return 1.0;
}
#else
#error "weights.glsl: define exactly one weight type W_F32, W_F16, W_BF16, W_Q8_0, W_Q4_0, W_Q4_1, W_Q5_0, W_Q5_1, W_IQ4_NL, W_Q2_K, W_Q3_K, W_Q4_K, W_Q5_K, W_Q6_K, W_IQ4_XS or W_MXFP4"
#endif

// Eight consecutive elements (col a multiple of 8) and one element, through the unit holding them.
void w_dequant8(uint row_byte, uint col, out vec4 v0, out vec4 v1) {
    uint grp;
    uint u = w_unit_of(col, grp);
    vec4 v[W_UNIT4];
    float d = w_unit(row_byte, u, v);
    v0 = v[2u * grp] * d;
    v1 = v[2u * grp + 1u] * d;
}
float w_get(uint row_byte, uint col) {
    vec4 v0, v1;
    w_dequant8(row_byte, col & ~7u, v0, v1);
    uint i = col & 7u;
    return i < 4u ? v0[i] : v1[i - 4u];
}
