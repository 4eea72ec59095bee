#include "runtime/quant/tensor_types.h"

#include "runtime/quant/block_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace vkllm {

namespace {

// name, lower-case name, block elements, block bytes, relative RMS error bound of the quantizer.
// The bound is the quantizer's measured RMS error on N(0,1) rows, divided by the rows' RMS, plus
// about 25% margin, rounded up (tests/runtime/quant/test_quantize.cpp measures it over rows of 256 to
// 16384 elements and checks every row against it). Measured: F16 2.08e-4, BF16 1.66e-3,
// Q8_0 5.36e-3, Q4_0 0.0860, Q4_1 0.0707, Q5_0 0.0403, Q5_1 0.0339, IQ4_NL 0.0743, Q2_K 0.274,
// Q3_K 0.144, Q4_K 0.0719, Q5_K 0.0358, Q6_K 0.0170, IQ4_XS 0.0750, MXFP4 0.1136.
constexpr TypeTraits kF32{"F32", "f32", 1, 4, 0.0};
constexpr TypeTraits kF16{"F16", "f16", 1, 2, 2.6e-4};
constexpr TypeTraits kBF16{"BF16", "bf16", 1, 2, 2.1e-3};
constexpr TypeTraits kQ8_0{"Q8_0", "q8_0", 32, 34, 6.7e-3};
constexpr TypeTraits kQ4_0{"Q4_0", "q4_0", 32, 18, 0.11};
constexpr TypeTraits kQ4_1{"Q4_1", "q4_1", 32, quant::q4_1::kBytes, 0.089};
constexpr TypeTraits kQ5_0{"Q5_0", "q5_0", 32, quant::q5_0::kBytes, 0.051};
constexpr TypeTraits kQ5_1{"Q5_1", "q5_1", 32, quant::q5_1::kBytes, 0.043};
constexpr TypeTraits kIQ4_NL{"IQ4_NL", "iq4_nl", 32, quant::iq4_nl::kBytes, 0.093};
constexpr TypeTraits kQ2_K{"Q2_K", "q2_k", 256, quant::q2_k::kBytes, 0.35};
constexpr TypeTraits kQ3_K{"Q3_K", "q3_k", 256, quant::q3_k::kBytes, 0.19};
constexpr TypeTraits kQ4_K{"Q4_K", "q4_k", 256, quant::q4_k::kBytes, 0.090};
constexpr TypeTraits kQ5_K{"Q5_K", "q5_k", 256, quant::q5_k::kBytes, 0.045};
constexpr TypeTraits kQ6_K{"Q6_K", "q6_k", 256, quant::q6_k::kBytes, 0.022};
constexpr TypeTraits kIQ4_XS{"IQ4_XS", "iq4_xs", 256, quant::iq4_xs::kBytes, 0.094};
constexpr TypeTraits kMXFP4{"MXFP4", "mxfp4", 32, quant::mxfp4::kBytes, 0.14};

const TypeTraits* traits_or_null(uint32_t id) {
    switch (TensorType(id)) {
        case TensorType::F32: return &kF32;
        case TensorType::F16: return &kF16;
        case TensorType::BF16: return &kBF16;
        case TensorType::Q8_0: return &kQ8_0;
        case TensorType::Q4_0: return &kQ4_0;
        case TensorType::Q4_1: return &kQ4_1;
        case TensorType::Q5_0: return &kQ5_0;
        case TensorType::Q5_1: return &kQ5_1;
        case TensorType::IQ4_NL: return &kIQ4_NL;
        case TensorType::Q2_K: return &kQ2_K;
        case TensorType::Q3_K: return &kQ3_K;
        case TensorType::Q4_K: return &kQ4_K;
        case TensorType::Q5_K: return &kQ5_K;
        case TensorType::Q6_K: return &kQ6_K;
        case TensorType::IQ4_XS: return &kIQ4_XS;
        case TensorType::MXFP4: return &kMXFP4;
    }
    return nullptr;
}

}  // namespace

const TypeTraits& type_traits(TensorType t) {
    if (const TypeTraits* tt = traits_or_null(uint32_t(t))) return *tt;
    throw std::invalid_argument("unsupported tensor type id " + std::to_string(uint32_t(t)));
}

bool is_supported_type(uint32_t id) { return traits_or_null(id) != nullptr; }

std::string_view ggml_type_name(uint32_t id) {
    static constexpr std::string_view names[] = {"F32",
                                                 "F16",
                                                 "Q4_0",
                                                 "Q4_1",
                                                 "Q4_2(removed)",
                                                 "Q4_3(removed)",
                                                 "Q5_0",
                                                 "Q5_1",
                                                 "Q8_0",
                                                 "Q8_1",
                                                 "Q2_K",
                                                 "Q3_K",
                                                 "Q4_K",
                                                 "Q5_K",
                                                 "Q6_K",
                                                 "Q8_K",
                                                 "IQ2_XXS",
                                                 "IQ2_XS",
                                                 "IQ3_XXS",
                                                 "IQ1_S",
                                                 "IQ4_NL",
                                                 "IQ3_S",
                                                 "IQ2_S",
                                                 "IQ4_XS",
                                                 "I8",
                                                 "I16",
                                                 "I32",
                                                 "I64",
                                                 "F64",
                                                 "IQ1_M",
                                                 "BF16",
                                                 "Q4_0_4_4(removed)",
                                                 "Q4_0_4_8(removed)",
                                                 "Q4_0_8_8(removed)",
                                                 "TQ1_0",
                                                 "TQ2_0",
                                                 "IQ4_NL_4_4(removed)",
                                                 "IQ4_NL_4_8(removed)",
                                                 "IQ4_NL_8_8(removed)",
                                                 "MXFP4"};
    return id < std::size(names) ? names[id] : std::string_view("unknown");
}

std::string supported_types_list() {
    std::string s;
    for (TensorType t : kAllTensorTypes) s += (s.empty() ? "" : ", ") + std::string(type_traits(t).name);
    return s;
}

TensorType parse_tensor_type(std::string_view name) {
    for (TensorType t : kAllTensorTypes) {
        const TypeTraits& tt = type_traits(t);
        if (name == tt.name || name == tt.lower) return t;
    }
    std::string list;
    for (TensorType t : kAllTensorTypes) list += (list.empty() ? "" : ", ") + std::string(type_traits(t).lower);
    throw std::invalid_argument("unknown tensor type '" + std::string(name) + "'; supported: " + list);
}

size_t row_bytes(TensorType t, size_t n) {
    const TypeTraits& tt = type_traits(t);
    if (n % tt.block_elems != 0)
        throw std::invalid_argument(std::string(tt.name) + " row of " + std::to_string(n) +
                                    " elements is not a multiple of the block size " + std::to_string(tt.block_elems));
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
    if (e <= 0) {  // subnormal or zero
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

uint16_t f32_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // NaN stays NaN (quiet)
    x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even; overflow rounds to inf as it should
    return uint16_t(x >> 16);
}

float bf16_to_f32(uint16_t h) {
    uint32_t x = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
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
            do {
                mant <<= 1;
                ++e;
            } while (!(mant & 0x400u));
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

namespace {
// Q8_0 / Q4_0 inputs made safe for the block formulas: NaN becomes 0 and values are clamped so that
// the block scale stays a finite f16 (limit = largest f16 x largest quant), and the quants in range.
void finite_block(const float* src, float* dst, float limit) {
    for (size_t j = 0; j < kQuantBlock; ++j) dst[j] = std::isnan(src[j]) ? 0.0f : std::clamp(src[j], -limit, limit);
}
}  // namespace

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
        case TensorType::BF16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h = f32_to_bf16(src[i]);
                std::memcpy(out + 2 * i, &h, 2);
            }
            return;
        case TensorType::Q4_1: quant::quantize_q4_1(src, out, n); return;
        case TensorType::Q5_0: quant::quantize_q5_0(src, out, n); return;
        case TensorType::Q5_1: quant::quantize_q5_1(src, out, n); return;
        case TensorType::IQ4_NL: quant::quantize_iq4_nl(src, out, n); return;
        case TensorType::Q2_K: quant::quantize_q2_k(src, out, n); return;
        case TensorType::Q3_K: quant::quantize_q3_k(src, out, n); return;
        case TensorType::Q4_K: quant::quantize_q4_k(src, out, n); return;
        case TensorType::Q5_K: quant::quantize_q5_k(src, out, n); return;
        case TensorType::Q6_K: quant::quantize_q6_k(src, out, n); return;
        case TensorType::IQ4_XS: quant::quantize_iq4_xs(src, out, n); return;
        case TensorType::MXFP4: quant::quantize_mxfp4(src, out, n); return;
        case TensorType::Q8_0:
            for (size_t b = 0; b < n / kQuantBlock; ++b, out += kQ8_0.block_bytes) {
                float x[kQuantBlock];
                finite_block(src + b * kQuantBlock, x, 65504.0f * 127.0f);
                float amax = 0;
                for (size_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
                float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
                uint16_t dh = f32_to_f16(d);
                std::memcpy(out, &dh, 2);
                for (size_t j = 0; j < kQuantBlock; ++j) out[2 + j] = uint8_t(int8_t(std::lround(x[j] * id)));
            }
            return;
        case TensorType::Q4_0:
            for (size_t b = 0; b < n / kQuantBlock; ++b, out += kQ4_0.block_bytes) {
                float x[kQuantBlock];
                finite_block(src + b * kQuantBlock, x, 65504.0f * 8.0f);
                // Same rule as ggml: the element of largest magnitude maps to -8 exactly.
                float amax = 0, max = 0;
                for (size_t j = 0; j < kQuantBlock; ++j)
                    if (std::fabs(x[j]) > amax) {
                        amax = std::fabs(x[j]);
                        max = x[j];
                    }
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
        case TensorType::BF16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, in + 2 * i, 2);
                dst[i] = bf16_to_f32(h);
            }
            return;
        case TensorType::Q4_1: quant::dequantize_q4_1(in, dst, n); return;
        case TensorType::Q5_0: quant::dequantize_q5_0(in, dst, n); return;
        case TensorType::Q5_1: quant::dequantize_q5_1(in, dst, n); return;
        case TensorType::IQ4_NL: quant::dequantize_iq4_nl(in, dst, n); return;
        case TensorType::Q2_K: quant::dequantize_q2_k(in, dst, n); return;
        case TensorType::Q3_K: quant::dequantize_q3_k(in, dst, n); return;
        case TensorType::Q4_K: quant::dequantize_q4_k(in, dst, n); return;
        case TensorType::Q5_K: quant::dequantize_q5_k(in, dst, n); return;
        case TensorType::Q6_K: quant::dequantize_q6_k(in, dst, n); return;
        case TensorType::IQ4_XS: quant::dequantize_iq4_xs(in, dst, n); return;
        case TensorType::MXFP4: quant::dequantize_mxfp4(in, dst, n); return;
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
