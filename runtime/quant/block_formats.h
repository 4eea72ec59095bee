// The GGUF / ggml block layouts of every quantized type vkllm reads, as byte offsets inside one
// block, with the math that turns a block into floats. This is the definition the plain C++
// dequantizers (dequantize.cpp), the quantizers (quantize.cpp) and the shaders
// (shaders/include/weights.glsl) are written from. All multi-byte fields are little-endian; f16 is
// IEEE half. Element e of a block is its e-th value in row order.
//
// 32-element blocks
//   Q4_0   18 B  d:f16 @0, qs[16] @2. Byte j: element j in its low nibble, j+16 in its high nibble.
//                x = (q - 8) * d
//   Q4_1   20 B  d:f16 @0, m:f16 @2, qs[16] @4 (nibbles as Q4_0).                x = q * d + m
//   Q5_0   22 B  d:f16 @0, qh:u32 @2, qs[16] @6. Low 4 bits as Q4_0; bit e of qh is bit 4 of
//                element e.                                                        x = (q - 16) * d
//   Q5_1   24 B  d:f16 @0, m:f16 @2, qh:u32 @4, qs[16] @8 (bits as Q5_0).          x = q * d + m
//   Q8_0   34 B  d:f16 @0, qs[32] int8 @2.                                         x = q * d
//   IQ4_NL 18 B  d:f16 @0, qs[16] @2 (nibbles as Q4_0).                            x = d * kIq4Values[q]
//   MXFP4  17 B  e:u8 @0 (E8M0: a power of two), qs[16] @1 (nibbles as Q4_0, each an FP4 E2M1
//                value: sign bit 3, then 0, 0.5, 1, 1.5, 2, 3, 4, 6). ggml stores the levels doubled
//                (kMxfp4Values) and halves the scale:                x = 2^(e - 128) * kMxfp4Values[q]
//                (e = 0 and 1 give the subnormals 2^-128 and 2^-127).
//
// 256-element super-blocks (K-quants, IQ4_XS)
//   Q2_K   84 B  scales[16] @0, qs[64] @16, d:f16 @80, dmin:f16 @82.
//                Sub-block s = e / 16 has scale (scales[s] & 15) and min (scales[s] >> 4).
//                Element e (h = e / 128, j = (e % 128) / 32, l = e % 32): 2 bits at shift 2j of
//                qs[32h + l].                          x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4)
//   Q3_K  110 B  hmask[32] @0, qs[64] @32, scales[12] @96, d:f16 @108.
//                Element e (h, j, l as Q2_K): low 2 bits at shift 2j of qs[32h + l]; bit (4h + j) of
//                hmask[l] set means +0, clear means -4 (q in -4..3).
//                Sub-block s = e / 16 has a 6-bit scale: low 4 bits (scales[s % 8] >> 4 * (s / 8)) & 15,
//                high 2 bits (scales[8 + s % 4] >> 2 * (s / 4)) & 3.       x = d * (scale - 32) * q
//   Q4_K  144 B  d:f16 @0, dmin:f16 @2, scales[12] @4, qs[128] @16.
//                Sub-block s = e / 32 (0..7) has a 6-bit scale sc and min mn (get_scale_min_k4):
//                  s < 4: sc = scales[s] & 63, mn = scales[s + 4] & 63
//                  s >= 4: sc = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4,
//                          mn = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4
//                Element e (c = e / 64, r = e % 64): byte qs[32c + r % 32], low nibble if r < 32,
//                high nibble otherwise.                x = d * sc * q - dmin * mn
//   Q5_K  176 B  d:f16 @0, dmin:f16 @2, scales[12] @4, qh[32] @16, qs[128] @48.
//                As Q4_K, plus bit 4 of element e is bit (e / 32) of qh[e % 32].
//   Q6_K  210 B  ql[128] @0, qh[64] @128, scales[16] int8 @192, d:f16 @208.
//                Element e (h = e / 128, g = (e % 128) / 32, l = e % 32): low 4 bits from
//                ql[64h + 32 (g & 1) + l] (low nibble for g < 2, high nibble otherwise), high 2 bits
//                at shift 2g of qh[32h + l]; q in 0..63.  x = d * scales[e / 16] * (q - 32)
//   IQ4_XS 136 B d:f16 @0, scales_h:u16 @2, scales_l[4] @4, qs[128] @8.
//                Sub-block s = e / 32 has the 6-bit scale ls = ((scales_l[s / 2] >> 4 * (s % 2)) & 15) |
//                ((scales_h >> 2s) & 3) << 4; its 32 elements are nibbles of qs[16s ..] laid out as
//                Q4_0.                                 x = d * (ls - 32) * kIq4Values[q]
//
// Several block sizes (18 for Q4_0 and IQ4_NL, 22, 34, 110, 210) are not multiples of 4: blocks of
// those types are only 2-byte aligned, which the shaders handle by reading aligned words and
// shifting. MXFP4's 17 bytes put its blocks at every byte offset: its readers shift by whole bytes.
// The others (20, 24, 84, 136, 144, 176) keep 4-byte alignment from a 4-aligned row.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace vkllm::quant {

// The 16 non-uniform levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The 16 MXFP4 levels: FP4 E2M1 values times 2 (ggml's kvalues_mxfp4), so that they are integers.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// MXFP4's block scale from its E8M0 byte, halved to match the doubled levels: 2^(e - 128).
inline float mxfp4_scale(uint8_t e) { return e >= 2 ? std::ldexp(1.0f, int(e) - 128) : (e ? 0x1p-127f : 0x1p-128f); }

// Byte offsets of the fields above, shared by the dequantizers and quantizers.
namespace q4_1 {
inline constexpr size_t kD = 0, kM = 2, kQs = 4, kBytes = 20;
}
namespace q5_0 {
inline constexpr size_t kD = 0, kQh = 2, kQs = 6, kBytes = 22;
}
namespace q5_1 {
inline constexpr size_t kD = 0, kM = 2, kQh = 4, kQs = 8, kBytes = 24;
}
namespace iq4_nl {
inline constexpr size_t kD = 0, kQs = 2, kBytes = 18;
}
namespace mxfp4 {
inline constexpr size_t kE = 0, kQs = 1, kBytes = 17;
}
namespace q2_k {
inline constexpr size_t kScales = 0, kQs = 16, kD = 80, kDmin = 82, kBytes = 84;
}
namespace q3_k {
inline constexpr size_t kHmask = 0, kQs = 32, kScales = 96, kD = 108, kBytes = 110;
}
namespace q4_k {
inline constexpr size_t kD = 0, kDmin = 2, kScales = 4, kQs = 16, kBytes = 144;
}
namespace q5_k {
inline constexpr size_t kD = 0, kDmin = 2, kScales = 4, kQh = 16, kQs = 48, kBytes = 176;
}
namespace q6_k {
inline constexpr size_t kQl = 0, kQh = 128, kScales = 192, kD = 208, kBytes = 210;
}
namespace iq4_xs {
inline constexpr size_t kD = 0, kScalesH = 2, kScalesL = 4, kQs = 8, kBytes = 136;
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block s (0..7) from the 12 packed bytes.
inline void scale_min_k4(const uint8_t* scales, int s, uint8_t& sc, uint8_t& mn) {
    if (s < 4) {
        sc = scales[s] & 63;
        mn = scales[s + 4] & 63;
    } else {
        sc = uint8_t((scales[s + 4] & 15) | ((scales[s - 4] >> 6) << 4));
        mn = uint8_t((scales[s + 4] >> 4) | ((scales[s] >> 6) << 4));
    }
}

// Q3_K: the 6-bit scale (0..63, bias 32 not removed) of sub-block s (0..15).
inline int scale_q3_k(const uint8_t* scales, int s) {
    int lo = (scales[s % 8] >> (4 * (s / 8))) & 15;
    int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    return lo | (hi << 4);
}

// Reference dequantizers: `n` elements (a multiple of the block) from `src` to `dst`.
void dequantize_q4_1(const uint8_t* src, float* dst, size_t n);
void dequantize_q5_0(const uint8_t* src, float* dst, size_t n);
void dequantize_q5_1(const uint8_t* src, float* dst, size_t n);
void dequantize_iq4_nl(const uint8_t* src, float* dst, size_t n);
void dequantize_mxfp4(const uint8_t* src, float* dst, size_t n);
void dequantize_q2_k(const uint8_t* src, float* dst, size_t n);
void dequantize_q3_k(const uint8_t* src, float* dst, size_t n);
void dequantize_q4_k(const uint8_t* src, float* dst, size_t n);
void dequantize_q5_k(const uint8_t* src, float* dst, size_t n);
void dequantize_q6_k(const uint8_t* src, float* dst, size_t n);
void dequantize_iq4_xs(const uint8_t* src, float* dst, size_t n);

// Quantizers (quantize.cpp): `n` elements (a multiple of the block) from `src` into `dst`.
void quantize_q4_1(const float* src, uint8_t* dst, size_t n);
void quantize_q5_0(const float* src, uint8_t* dst, size_t n);
void quantize_q5_1(const float* src, uint8_t* dst, size_t n);
void quantize_iq4_nl(const float* src, uint8_t* dst, size_t n);
void quantize_mxfp4(const float* src, uint8_t* dst, size_t n);
void quantize_q2_k(const float* src, uint8_t* dst, size_t n);
void quantize_q3_k(const float* src, uint8_t* dst, size_t n);
void quantize_q4_k(const float* src, uint8_t* dst, size_t n);
void quantize_q5_k(const float* src, uint8_t* dst, size_t n);
void quantize_q6_k(const float* src, uint8_t* dst, size_t n);
void quantize_iq4_xs(const float* src, uint8_t* dst, size_t n);

}  // namespace vkllm::quant
