#include "runtime/tensor_types.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace vkllm {

namespace {
constexpr TypeTraits kF32{"F32", 1, 4};
constexpr TypeTraits kF16{"F16", 1, 2};
constexpr TypeTraits kQ8_0{"Q8_0", kQuantBlock, 2 + kQuantBlock};
constexpr TypeTraits kQ4_0{"Q4_0", kQuantBlock, 2 + kQuantBlock / 2};
}  // namespace

const TypeTraits& type_traits(TensorType t) {
    switch (t) {
    case TensorType::F32: return kF32;
    case TensorType::F16: return kF16;
    case TensorType::Q8_0: return kQ8_0;
    case TensorType::Q4_0: return kQ4_0;
    }
    throw std::invalid_argument("unsupported tensor type id " + std::to_string(uint32_t(t)));
}

bool is_supported_type(uint32_t id) { return id == 0 || id == 1 || id == 2 || id == 8; }

std::string_view ggml_type_name(uint32_t id) {
    static constexpr std::string_view names[] = {
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2(removed)", "Q4_3(removed)", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
        "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
        "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
    return id < std::size(names) ? names[id] : std::string_view("unknown");
}

size_t row_bytes(TensorType t, size_t n) {
    const TypeTraits& tt = type_traits(t);
    if (n % tt.block_elems != 0)
        throw std::invalid_argument(std::string(tt.name) + " row of " + std::to_string(n) +
                                    " elements is not a multiple of the block size " +
                                    std::to_string(tt.block_elems));
    return n / tt.block_elems * tt.block_bytes;
}

uint16_t f32_to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    if (exp == 0xff) return uint16_t(sign | 0x7c00u | (mant ? 0x200u : 0u));  // inf / NaN
    int e = int(exp) - 127 + 15;
    if (e >= 31) return uint16_t(sign | 0x7c00u);  // overflow -> inf
    if (e <= 0) {                                  // subnormal or zero
        if (e < -10) return uint16_t(sign);
        mant |= 0x800000u;
        uint32_t shift = uint32_t(14 - e);
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) ++half;
        return uint16_t(sign | half);
    }
    uint32_t half = sign | (uint32_t(e) << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exponent: correct
    return uint16_t(half);
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (mant == 0) {
            x = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do { mant <<= 1; ++e; } while (!(mant & 0x400u));
            x = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        x = sign | 0x7f800000u | (mant << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

void quantize_row(TensorType t, const float* src, void* dst, size_t n) {
    row_bytes(t, n);  // validates n
    auto* out = static_cast<uint8_t*>(dst);
    switch (t) {
    case TensorType::F32: std::memcpy(dst, src, n * 4); return;
    case TensorType::F16:
        for (size_t i = 0; i < n; ++i) {
            uint16_t h = f32_to_f16(src[i]);
            std::memcpy(out + 2 * i, &h, 2);
        }
        return;
    case TensorType::Q8_0:
        for (size_t b = 0; b < n / kQuantBlock; ++b, out += kQ8_0.block_bytes) {
            const float* x = src + b * kQuantBlock;
            float amax = 0;
            for (size_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
            float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
            uint16_t dh = f32_to_f16(d);
            std::memcpy(out, &dh, 2);
            for (size_t j = 0; j < kQuantBlock; ++j)
                out[2 + j] = uint8_t(int8_t(std::lround(x[j] * id)));
        }
        return;
    case TensorType::Q4_0:
        for (size_t b = 0; b < n / kQuantBlock; ++b, out += kQ4_0.block_bytes) {
            const float* x = src + b * kQuantBlock;
            // Same rule as ggml: the element of largest magnitude maps to -8 exactly.
            float amax = 0, max = 0;
            for (size_t j = 0; j < kQuantBlock; ++j)
                if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
            float d = max / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
            uint16_t dh = f32_to_f16(d);
            std::memcpy(out, &dh, 2);
            for (size_t j = 0; j < kQuantBlock / 2; ++j) {
                auto q = [&](float v) { return uint8_t(std::min(15.0f, std::floor(v * id + 8.5f))); };
                out[2 + j] = uint8_t(q(x[j]) | (q(x[j + 16]) << 4));
            }
        }
        return;
    }
}

void dequantize_row(TensorType t, const void* src, float* dst, size_t n) {
    row_bytes(t, n);
    auto* in = static_cast<const uint8_t*>(src);
    switch (t) {
    case TensorType::F32: std::memcpy(dst, src, n * 4); return;
    case TensorType::F16:
        for (size_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, in + 2 * i, 2);
            dst[i] = f16_to_f32(h);
        }
        return;
    case TensorType::Q8_0:
        for (size_t b = 0; b < n / kQuantBlock; ++b, in += kQ8_0.block_bytes) {
            uint16_t dh;
            std::memcpy(&dh, in, 2);
            float d = f16_to_f32(dh);
            for (size_t j = 0; j < kQuantBlock; ++j) dst[b * kQuantBlock + j] = float(int8_t(in[2 + j])) * d;
        }
        return;
    case TensorType::Q4_0:
        for (size_t b = 0; b < n / kQuantBlock; ++b, in += kQ4_0.block_bytes) {
            uint16_t dh;
            std::memcpy(&dh, in, 2);
            float d = f16_to_f32(dh);
            for (size_t j = 0; j < kQuantBlock / 2; ++j) {
                dst[b * kQuantBlock + j] = float(int(in[2 + j] & 0xf) - 8) * d;
                dst[b * kQuantBlock + j + 16] = float(int(in[2 + j] >> 4) - 8) * d;
            }
        }
        return;
    }
}

void round_trip(TensorType t, std::span<float> values) {
    if (t == TensorType::F32) return;
    std::vector<uint8_t> tmp(row_bytes(t, values.size()));
    quantize_row(t, values.data(), tmp.data(), values.size());
    dequantize_row(t, tmp.data(), values.data(), values.size());
}

}  // namespace vkllm
