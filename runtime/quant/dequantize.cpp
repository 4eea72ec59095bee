// Plain reference dequantizers, one per block type, written element by element from the layouts in
// block_formats.h (not from the shaders): for every element e of a block they compute where its
// bits live and apply the type's formula. Slow and obvious on purpose: the kernel tests compare the
// GPU against these.
#include "runtime/quant/block_formats.h"

#include "runtime/quant/tensor_types.h"

#include <cstring>

namespace vkllm::quant {

namespace {

float half_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}

uint32_t u32_at(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// The 4-bit value of element e (0..31) in the Q4_0-style nibble layout starting at qs.
int nibble32(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

// Runs fn(block_pointer, block_output) over the n / elems blocks of a row.
template <class Fn>
void for_blocks(const uint8_t* src, float* dst, size_t n, size_t elems, size_t bytes, Fn fn) {
    for (size_t b = 0; b < n / elems; ++b) fn(src + b * bytes, dst + b * elems);
}

}  // namespace

void dequantize_q4_1(const uint8_t* src, float* dst, size_t n) {
    for_blocks(src, dst, n, 32, q4_1::kBytes, [](const uint8_t* b, float* y) {
        const float d = half_at(b + q4_1::kD), m = half_at(b + q4_1::kM);
        for (int e = 0; e < 32; ++e) y[e] = float(nibble32(b + q4_1::kQs, e)) * d + m;
    });
}

void dequantize_q5_0(const uint8_t* src, float* dst, size_t n) {
    for_blocks(src, dst, n, 32, q5_0::kBytes, [](const uint8_t* b, float* y) {
        const float d = half_at(b + q5_0::kD);
        const uint32_t qh = u32_at(b + q5_0::kQh);
        for (int e = 0; e < 32; ++e) {
            int q = nibble32(b + q5_0::kQs, e) | int((qh >> e) & 1) << 4;
            y[e] = float(q - 16) * d;
        }
    });
}

void dequantize_q5_1(const uint8_t* src, float* dst, size_t n) {
    for_blocks(src, dst, n, 32, q5_1::kBytes, [](const uint8_t* b, float* y) {
        const float d = half_at(b + q5_1::kD), m = half_at(b + q5_1::kM);
        const uint32_t qh = u32_at(b + q5_1::kQh);
        for (int e = 0; e < 32; ++e) {
            int q = nibble32(b + q5_1::kQs, e) | int((qh >> e) & 1) << 4;
            y[e] = float(q) * d + m;
        }
    });
}

void dequantize_iq4_nl(const uint8_t* src, float* dst, size_t n) {
    for_blocks(src, dst, n, 32, iq4_nl::kBytes, [](const uint8_t* b, float* y) {
        const float d = half_at(b + iq4_nl::kD);
        for (int e = 0; e < 32; ++e) y[e] = d * float(kIq4Values[nibble32(b + iq4_nl::kQs, e)]);
    });
}

void dequantize_mxfp4(const uint8_t* src, float* dst, size_t n) {
    for_blocks(src, dst, n, 32, mxfp4::kBytes, [](const uint8_t* b, float* y) {
        const float d = mxfp4_scale(b[mxfp4::kE]);
        for (int e = 0; e < 32; ++e) y[e] = d * float(kMxfp4Values[nibble32(b + mxfp4::kQs, e)]);
    });
}

void dequantize_q2_k(const uint8_t* src, float* dst, size_t n) {
    for_blocks(src, dst, n, 256, q2_k::kBytes, [](const uint8_t* b, float* y) {
        const float d = half_at(b + q2_k::kD), dmin = half_at(b + q2_k::kDmin);
        for (int e = 0; e < 256; ++e) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32;
            const uint8_t sc = b[q2_k::kScales + e / 16];
            const int q = (b[q2_k::kQs + 32 * h + l] >> (2 * j)) & 3;
            y[e] = d * float(sc & 15) * float(q) - dmin * float(sc >> 4);
        }
    });
}

void dequantize_q3_k(const uint8_t* src, float* dst, size_t n) {
    for_blocks(src, dst, n, 256, q3_k::kBytes, [](const uint8_t* b, float* y) {
        const float d = half_at(b + q3_k::kD);
        for (int e = 0; e < 256; ++e) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32;
            int q = (b[q3_k::kQs + 32 * h + l] >> (2 * j)) & 3;
            if (!((b[q3_k::kHmask + l] >> (4 * h + j)) & 1)) q -= 4;
            y[e] = d * float(scale_q3_k(b + q3_k::kScales, e / 16) - 32) * float(q);
        }
    });
}

void dequantize_q4_k(const uint8_t* src, float* dst, size_t n) {
    for_blocks(src, dst, n, 256, q4_k::kBytes, [](const uint8_t* b, float* y) {
        const float d = half_at(b + q4_k::kD), dmin = half_at(b + q4_k::kDmin);
        for (int e = 0; e < 256; ++e) {
            uint8_t sc, mn;
            scale_min_k4(b + q4_k::kScales, e / 32, sc, mn);
            const int c = e / 64, r = e % 64;
            const uint8_t byte = b[q4_k::kQs + 32 * c + r % 32];
            const int q = r < 32 ? byte & 15 : byte >> 4;
            y[e] = d * float(sc) * float(q) - dmin * float(mn);
        }
    });
}

void dequantize_q5_k(const uint8_t* src, float* dst, size_t n) {
    for_blocks(src, dst, n, 256, q5_k::kBytes, [](const uint8_t* b, float* y) {
        const float d = half_at(b + q5_k::kD), dmin = half_at(b + q5_k::kDmin);
        for (int e = 0; e < 256; ++e) {
            uint8_t sc, mn;
            scale_min_k4(b + q5_k::kScales, e / 32, sc, mn);
            const int c = e / 64, r = e % 64;
            const uint8_t byte = b[q5_k::kQs + 32 * c + r % 32];
            int q = r < 32 ? byte & 15 : byte >> 4;
            q |= ((b[q5_k::kQh + e % 32] >> (e / 32)) & 1) << 4;
            y[e] = d * float(sc) * float(q) - dmin * float(mn);
        }
    });
}

void dequantize_q6_k(const uint8_t* src, float* dst, size_t n) {
    for_blocks(src, dst, n, 256, q6_k::kBytes, [](const uint8_t* b, float* y) {
        const float d = half_at(b + q6_k::kD);
        for (int e = 0; e < 256; ++e) {
            const int h = e / 128, g = (e % 128) / 32, l = e % 32;
            const uint8_t lo = b[q6_k::kQl + 64 * h + 32 * (g & 1) + l];
            int q = g < 2 ? lo & 15 : lo >> 4;
            q |= ((b[q6_k::kQh + 32 * h + l] >> (2 * g)) & 3) << 4;
            const int8_t sc = int8_t(b[q6_k::kScales + e / 16]);
            y[e] = d * float(sc) * float(q - 32);
        }
    });
}

void dequantize_iq4_xs(const uint8_t* src, float* dst, size_t n) {
    for_blocks(src, dst, n, 256, iq4_xs::kBytes, [](const uint8_t* b, float* y) {
        const float d = half_at(b + iq4_xs::kD);
        uint16_t scales_h;
        std::memcpy(&scales_h, b + iq4_xs::kScalesH, 2);
        for (int e = 0; e < 256; ++e) {
            const int s = e / 32;
            const int ls = ((b[iq4_xs::kScalesL + s / 2] >> (4 * (s % 2))) & 15) | ((scales_h >> (2 * s)) & 3) << 4;
            const int q = nibble32(b + iq4_xs::kQs + 16 * s, e % 32);
            y[e] = d * float(ls - 32) * float(kIq4Values[q]);
        }
    });
}

}  // namespace vkllm::quant
