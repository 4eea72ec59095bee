// Weight decoding shared by matmul, matvec and get_rows: rows of any GGUF weight type vkllm reads,
// in the exact GGUF layouts, read from a buffer of 32-bit words so that no 16/8-bit storage
// feature is needed. F32, F16, BF16, Q8_0 and Q4_0 are decoded here; the other block types
// (Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K .. Q6_K, IQ4_XS, MXFP4) in weights_units.glsl.
//
//   F32   4 bytes per element.
//   F16   IEEE half, 2 bytes per element (read as packed bits, unpack_half2: no fp16 feature).
//   BF16  the top 16 bits of an f32, 2 bytes per element.
//   Q8_0  blocks of 32: f16 scale d, then 32 int8 q;                    value = q * d         (34 B)
//   Q4_0  blocks of 32: f16 scale d, then 16 bytes; byte j holds element j in its low nibble and
//         element j + 16 in its high nibble;                             value = (q - 8) * d   (18 B)
//
// The including shader defines W_BINDING (binding index of the weight window) and exactly one of
// W_F32, W_F16, W_BF16, W_Q8_0, W_Q4_0, W_Q4_1, W_Q5_0, W_Q5_1, W_IQ4_NL, W_Q2_K, W_Q3_K, W_Q4_K,
// W_Q5_K, W_Q6_K, W_IQ4_XS, W_MXFP4. W_IS_FLOAT is defined for the per-element types (F32, F16, BF16), the
// only ones whose rows may end in a partial group of 8 (block types have k % 32 == 0). Every position below is a byte offset into the bound window
// (`row_byte`: where a row starts) or a column (element index inside a row).
//
// Alignment: many blocks (Q8_0 34, Q4_0 18, Q5_0 22, Q3_K 110, Q6_K 210 bytes) and F16 rows of odd
// length are not multiples of 4 bytes, so data is only 2-byte aligned (MXFP4's 17: byte aligned, read
// with w_load4_bytes). Reading n words at a 2-aligned byte offset loads n + 1 aligned words and
// funnel-shifts them (shift 0 or 16); the extra word is only needed when misaligned and its index
// is clamped into the array so that the aligned case never reads past the binding. The host binds
// the window rounded up to a whole word, so every word holding a data byte is inside the binding
// (8-byte words and a window rounded to 8 bytes under W_LOAD64, below).
// F32 rows must start 4-byte aligned (the host checks).

#include "half.glsl"

// W_LOAD64 (the CPU-driver matvec variants *_u64_*, Q8_0 and Q4_0 only; the device has shaderInt64
// and the including shader enables GL_EXT_shader_explicit_arithmetic_types_int64): the weights
// are 8-byte words, so that w_block_words reads a block in 5 / 3 loads instead of 9 / 5; lavapipe
// turns every load into per-lane scalar loads whatever its width. The host binds the window
// rounded up to a whole 8-byte word. w_word keeps the 4-byte view for the other readers.
#if defined(W_LOAD64)
layout(std430, binding = W_BINDING) readonly buffer WeightDwords { uint64_t w_dwords[]; };
uint w_word(uint i) { return unpackUint2x32(w_dwords[i >> 1])[i & 1u]; }
uint w_last_word() { return 2u * uint(w_dwords.length()) - 1u; }
#else
layout(std430, binding = W_BINDING) readonly buffer WeightWords { uint w_words[]; };
uint w_word(uint i) { return w_words[i]; }
uint w_last_word() { return uint(w_words.length()) - 1u; }
#endif

// W_ALIGNED: every multi-byte read of the dispatch is 4-byte aligned (rows start 4-aligned and the
// type's fields are at multiples of 4: F32, F16/BF16 with even k, Q4_1, Q5_1, Q2_K, Q4_K, Q5_K,
// IQ4_XS), so the readers below load exactly the words they need instead of one more to shift
// from. A specialization constant where the including shader defines W_ALIGNED_ID (the host
// knows the offsets), else always false.
#ifdef W_ALIGNED_ID
layout(constant_id = W_ALIGNED_ID) const bool W_ALIGNED = false;
#else
const bool W_ALIGNED = false;
#endif

// 16 bits at a 2-aligned byte offset.
uint w_bits16(uint byte_off) { return (w_word(byte_off >> 2) >> ((byte_off & 2u) << 3)) & 0xFFFFu; }
float w_half(uint byte_off) { return unpack_half2(w_bits16(byte_off)).x; }
// One byte at any offset.
uint w_byte(uint byte_off) { return (w_word(byte_off >> 2) >> ((byte_off & 3u) << 3)) & 0xFFu; }

// The word that starts `sh` bits (0 or 16) into lo:hi. Two shifts so that sh = 0 never shifts by 32.
uint w_funnel(uint lo, uint hi, uint sh) { return (lo >> sh) | ((hi << 16u) << (16u - sh)); }

// 1 / 2 / 4 words starting at a 2-aligned byte offset.
uint w_bits32(uint byte_off) {
    uint i = byte_off >> 2, sh = (byte_off & 2u) << 3;
    if (W_ALIGNED) return w_word(i);
    return w_funnel(w_word(i), w_word(min(i + 1u, w_last_word())), sh);
}
uvec2 w_load2(uint byte_off) {
    uint i = byte_off >> 2, sh = (byte_off & 2u) << 3;
    if (W_ALIGNED) return uvec2(w_word(i), w_word(i + 1u));
    uint a = w_word(i), b = w_word(i + 1u), c = w_word(min(i + 2u, w_last_word()));
    return uvec2(w_funnel(a, b, sh), w_funnel(b, c, sh));
}
// 4 words at any byte offset (MXFP4's 17-byte blocks): as w_load4, shifting by whole bytes.
uint w_funnel_bytes(uint lo, uint hi, uint sh) { return (lo >> sh) | ((hi << 1u) << (31u - sh)); }
uvec4 w_load4_bytes(uint byte_off) {
    uint i = byte_off >> 2, sh = (byte_off & 3u) << 3;
    uint a = w_word(i), b = w_word(i + 1u), c = w_word(i + 2u), d = w_word(i + 3u);
    uint e = w_word(min(i + 4u, w_last_word()));
    return uvec4(w_funnel_bytes(a, b, sh), w_funnel_bytes(b, c, sh), w_funnel_bytes(c, d, sh), w_funnel_bytes(d, e, sh));
}
uvec4 w_load4(uint byte_off) {
    uint i = byte_off >> 2, sh = (byte_off & 2u) << 3;
    if (W_ALIGNED) return uvec4(w_word(i), w_word(i + 1u), w_word(i + 2u), w_word(i + 3u));
    uint a = w_word(i), b = w_word(i + 1u), c = w_word(i + 2u), d = w_word(i + 3u);
    uint e = w_word(min(i + 4u, w_last_word()));
    return uvec4(w_funnel(a, b, sh), w_funnel(b, c, sh), w_funnel(c, d, sh), w_funnel(d, e, sh));
}

// Four int8 / four nibbles packed in a word, as floats (byte 0 first).
vec4 w_s8x4(uint v) { return vec4(ivec4(uvec4(v << 24, v << 16, v << 8, v)) >> 24); }
vec4 w_lo4x4(uint v) { return vec4((uvec4(v) >> uvec4(0u, 8u, 16u, 24u)) & 0xFu); }
vec4 w_hi4x4(uint v) { return vec4((uvec4(v) >> uvec4(4u, 12u, 20u, 28u)) & 0xFu); }

// 16 int8 levels packed four to a word (p0: levels 0..3, ..., p3: 12..15), looked up with selects and
// a shift: an indexed constant array becomes a per-lane memory gather on CPU drivers (measured 20x
// slower on lavapipe) and local memory on some GPUs.
ivec4 w_lut16(uvec4 n, uint p0, uint p1, uint p2, uint p3) {
    uvec4 lo = mix(uvec4(p0), uvec4(p1), greaterThanEqual(n, uvec4(4u)));
    uvec4 hi = mix(uvec4(p2), uvec4(p3), greaterThanEqual(n, uvec4(12u)));
    uvec4 w = mix(lo, hi, greaterThanEqual(n, uvec4(8u)));
    return ivec4(w << (24u - ((n & 3u) << 3))) >> 24;
}

#if defined(W_F32)
#define W_IS_FLOAT
const uint W_BLOCK_ELEMS = 1u, W_BLOCK_BYTES = 4u;
#elif defined(W_F16) || defined(W_BF16)
#define W_IS_FLOAT
const uint W_BLOCK_ELEMS = 1u, W_BLOCK_BYTES = 2u;
#elif defined(W_Q8_0)
const uint W_BLOCK_ELEMS = 32u, W_BLOCK_BYTES = 34u;
#elif defined(W_Q4_0)
const uint W_BLOCK_ELEMS = 32u, W_BLOCK_BYTES = 18u;
#else
#define W_UNIT_TYPE
#include "weights_units.glsl"
#endif

// Two bf16 values packed in a word, as floats.
vec2 w_bf16x2(uint v) { return uintBitsToFloat(uvec2(v << 16, v & 0xFFFF0000u)); }

#ifndef W_UNIT_TYPE

// One element: column `col` of the row at `row_byte` (col < k). For tails and odd shapes.
float w_get(uint row_byte, uint col) {
#if defined(W_F32)
    return uintBitsToFloat(w_word((row_byte >> 2) + col));
#elif defined(W_F16)
    return w_half(row_byte + 2u * col);
#elif defined(W_BF16)
    return uintBitsToFloat(w_bits16(row_byte + 2u * col) << 16);
#elif defined(W_Q8_0)
    uint bb = row_byte + (col >> 5) * W_BLOCK_BYTES, j = col & 31u;
    uint q = (w_bits16(bb + 2u + (j & ~1u)) >> ((j & 1u) << 3)) & 0xFFu;
    return float(int(q << 24) >> 24) * w_half(bb);
#else  // W_Q4_0
    uint bb = row_byte + (col >> 5) * W_BLOCK_BYTES, j = col & 31u, b = j & 15u;
    uint q = (w_bits16(bb + 2u + (b & ~1u)) >> (((b & 1u) << 3) + ((j >> 4) << 2))) & 0xFu;
    return (float(q) - 8.0) * w_half(bb);
#endif
}

// Eight consecutive elements: columns col .. col + 7 of the row at `row_byte` (col a multiple of 8,
// col + 8 <= k). v0 = columns col .. col + 3, v1 = col + 4 .. col + 7.
void w_dequant8(uint row_byte, uint col, out vec4 v0, out vec4 v1) {
#if defined(W_F32)
    uint i = (row_byte >> 2) + col;
    v0 = uintBitsToFloat(uvec4(w_word(i), w_word(i + 1u), w_word(i + 2u), w_word(i + 3u)));
    v1 = uintBitsToFloat(uvec4(w_word(i + 4u), w_word(i + 5u), w_word(i + 6u), w_word(i + 7u)));
#elif defined(W_F16)
    uvec4 h = w_load4(row_byte + 2u * col);
    v0 = vec4(unpack_half2(h.x), unpack_half2(h.y));
    v1 = vec4(unpack_half2(h.z), unpack_half2(h.w));
#elif defined(W_BF16)
    uvec4 h = w_load4(row_byte + 2u * col);
    v0 = vec4(w_bf16x2(h.x), w_bf16x2(h.y));
    v1 = vec4(w_bf16x2(h.z), w_bf16x2(h.w));
#elif defined(W_Q8_0)
    uint bb = row_byte + (col >> 5) * W_BLOCK_BYTES, part = (col >> 3) & 3u;
    float d = w_half(bb);
    uvec2 q = w_load2(bb + 2u + 8u * part);
    v0 = w_s8x4(q.x) * d;
    v1 = w_s8x4(q.y) * d;
#else  // W_Q4_0: parts 0, 1 are low nibbles of bytes 0..7, 8..15; parts 2, 3 the high nibbles
    uint bb = row_byte + (col >> 5) * W_BLOCK_BYTES, part = (col >> 3) & 3u;
    float d = w_half(bb);
    uvec2 q = w_load2(bb + 2u + 8u * (part & 1u));
    uint sh = (part >> 1) << 2;
    v0 = (vec4((uvec4(q.x) >> (uvec4(0u, 8u, 16u, 24u) + sh)) & 0xFu) - 8.0) * d;
    v1 = (vec4((uvec4(q.y) >> (uvec4(0u, 8u, 16u, 24u) + sh)) & 0xFu) - 8.0) * d;
#endif
}

// The unit of the weight stream in matvec and matmul_broadcast (what one invocation decodes per step):
//   F32: 4 elements, F16 / BF16: 8 elements (16 bytes); Q8_0 / Q4_0: one whole block of 32 elements,
//   its 34 / 18 bytes read as 9 / 5 words (w_block_words; 5 / 3 with W_LOAD64) where half-block
//   units took 12 / 8 word loads per block. CPU drivers turn every load into a per-lane loop (Mesa
//   22.3) or per-lane scalar loads (Mesa 25): TinyLlama-shaped Q4_0 decode on lavapipe 2.1-2.4
//   against 1.4-1.7 tokens/s (Mesa 22.3), 2.3-3.3 against 1.8-2.2 (Mesa 25.0).
// w_unit returns the scale (1 for F32 / F16) and the unscaled values v[q]; column of v[q].x is
// w_unit_col(u, q) (v[q] covers 4 consecutive columns).
#if defined(W_F32)
const uint W_UNIT = 4u;
#elif defined(W_F16) || defined(W_BF16)
const uint W_UNIT = 8u;
#else
const uint W_UNIT = 32u;
#endif
const uint W_UNIT4 = W_UNIT / 4u;

// Q8_0 / Q4_0: v[q] holds columns 4q .. 4q + 3 of the block (Q4_0: v[0..3] the low nibbles of
// bytes 0..15, v[4..7] the high nibbles).
uint w_unit_col(uint u, uint q) { return u * W_UNIT + 4u * q; }

#if defined(W_Q8_0) || defined(W_Q4_0)
// A block of N * 4 - 2 bytes at the 2-aligned byte offset bb: returns its f16 scale and sets q to
// its quant bytes as N - 1 words. The block lies in exactly N words: starting at a word boundary
// the scale is the low half of word 0 and each quant word straddles two words; starting 2 bytes
// in, the scale is the high half and the quant words are words 1 .. N - 1 as they are. With
// W_LOAD64 it lies in ND 8-byte words (5 / 3) wherever it starts, shifted into place first. Every
// word loaded holds block bytes, so none lies past the binding.
const uint W_BLOCK_WORDS = W_BLOCK_BYTES / 4u + 1u;
float w_block_words(uint bb, out uint q[W_BLOCK_WORDS - 1u]) {
#if defined(W_LOAD64)
    const uint i = bb >> 3, sh = (bb & 6u) << 3;  // the block starts sh bits into dword i
    const uint ND = (W_BLOCK_BYTES + 13u) / 8u;  // dwords holding the block wherever it starts: 5 / 3
    uint64_t d[ND];
    for (uint j = 0; j < ND; ++j) d[j] = w_dwords[i + j];
    uint64_t e[ND];  // e[j]: block bytes 8j .. 8j + 7
    for (uint j = 0; j + 1u < ND; ++j) e[j] = (d[j] >> sh) | ((d[j + 1u] << 1) << (63u - sh));
    e[ND - 1u] = d[ND - 1u] >> sh;
    for (uint j = 0; j + 1u < W_BLOCK_WORDS; ++j) {
        const uint bit = 16u + 32u * j, a = bit >> 6;  // bytes 2 + 4j .. 5 + 4j
        q[j] = (bit & 63u) == 16u ? uint(e[a] >> 16) : uint(e[a] >> 48) | (uint(e[a + 1u]) << 16);
    }
    return unpack_half2(uint(e[0]) & 0xFFFFu).x;
#else
    const uint i = bb >> 2, odd = (bb >> 1) & 1u;  // odd: the block starts 2 bytes into word i
    uint w[W_BLOCK_WORDS];
    for (uint j = 0; j < W_BLOCK_WORDS; ++j) w[j] = w_word(i + j);
    // Quant word j: bytes 2 .. 5 of the pair (w[j], w[j + 1]) when even, w[j + 1] when odd (the low
    // word is shifted twice so that no shift reaches 32).
    const uint lo_sh = 16u * odd, hi_sh = 16u - lo_sh;
    for (uint j = 0; j + 1u < W_BLOCK_WORDS; ++j) q[j] = ((w[j] >> 16) >> lo_sh) | (w[j + 1u] << hi_sh);
    return unpack_half2((w[0] >> (16u * odd)) & 0xFFFFu).x;
#endif
}
#endif

float w_unit(uint row_byte, uint u, out vec4 v[W_UNIT4]) {
#if defined(W_F32)
    uint i = (row_byte >> 2) + 4u * u;
    v[0] = uintBitsToFloat(uvec4(w_word(i), w_word(i + 1u), w_word(i + 2u), w_word(i + 3u)));
    return 1.0;
#elif defined(W_F16)
    uvec4 h = w_load4(row_byte + 16u * u);
    v[0] = vec4(unpack_half2(h.x), unpack_half2(h.y));
    v[1] = vec4(unpack_half2(h.z), unpack_half2(h.w));
    return 1.0;
#elif defined(W_BF16)
    uvec4 h = w_load4(row_byte + 16u * u);
    v[0] = vec4(w_bf16x2(h.x), w_bf16x2(h.y));
    v[1] = vec4(w_bf16x2(h.z), w_bf16x2(h.w));
    return 1.0;
#elif defined(W_Q8_0)
    uint q[W_BLOCK_WORDS - 1u];
    float d = w_block_words(row_byte + u * W_BLOCK_BYTES, q);
    for (uint j = 0; j < 8u; ++j) v[j] = w_s8x4(q[j]);
    return d;
#else  // W_Q4_0
    uint q[W_BLOCK_WORDS - 1u];
    float d = w_block_words(row_byte + u * W_BLOCK_BYTES, q);
    for (uint j = 0; j < 4u; ++j) {
        v[j] = w_lo4x4(q[j]) - 8.0;
        v[4u + j] = w_hi4x4(q[j]) - 8.0;
    }
    return d;
#endif
}
#endif  // !W_UNIT_TYPE
