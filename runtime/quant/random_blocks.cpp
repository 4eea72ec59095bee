#include "runtime/quant/random_blocks.h"

#include "runtime/quant/block_formats.h"

#include <cstring>
#include <random>

namespace vkllm::quant {

namespace {

// Where the f16 scales of a block live, and the largest |quant x sub-scale| product of the type,
// so that d = U(0.25, 1) / that product keeps every decoded value within about [-1, 1].
struct ScaleFields {
    size_t offsets[2];
    size_t count;
    float max_product;
};

ScaleFields scale_fields(TensorType t) {
    switch (t) {
        case TensorType::Q8_0: return {{0, 0}, 1, 127.0f};
        case TensorType::Q4_0: return {{0, 0}, 1, 8.0f};
        case TensorType::Q4_1: return {{q4_1::kD, q4_1::kM}, 2, 15.0f};
        case TensorType::Q5_0: return {{q5_0::kD, 0}, 1, 16.0f};
        case TensorType::Q5_1: return {{q5_1::kD, q5_1::kM}, 2, 31.0f};
        case TensorType::IQ4_NL: return {{iq4_nl::kD, 0}, 1, 127.0f};
        case TensorType::Q2_K: return {{q2_k::kD, q2_k::kDmin}, 2, 15.0f * 3.0f};
        case TensorType::Q3_K: return {{q3_k::kD, 0}, 1, 32.0f * 4.0f};
        case TensorType::Q4_K: return {{q4_k::kD, q4_k::kDmin}, 2, 63.0f * 15.0f};
        case TensorType::Q5_K: return {{q5_k::kD, q5_k::kDmin}, 2, 63.0f * 31.0f};
        case TensorType::Q6_K: return {{q6_k::kD, 0}, 1, 128.0f * 32.0f};
        case TensorType::IQ4_XS: return {{iq4_xs::kD, 0}, 1, 32.0f * 127.0f};
        default: return {{0, 0}, 0, 1.0f};
    }
}

}  // namespace

void random_blocks(TensorType t, uint64_t seed, uint8_t* dst, size_t n) {
    const TypeTraits& tt = type_traits(t);
    const size_t bytes = row_bytes(t, n);
    std::mt19937_64 rng(seed);
    if (tt.block_elems == 1) {
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> v(n);
        for (float& x : v) x = u(rng);
        quantize_row(t, v.data(), dst, n);
        return;
    }
    for (size_t i = 0; i < bytes; i += 8) {
        const uint64_t r = rng();
        std::memcpy(dst + i, &r, std::min<size_t>(8, bytes - i));
    }
    if (t == TensorType::MXFP4) {  // E8M0 scales: 2^-9 .. 2^-6 times levels up to 12, within about [-1, 1]
        for (size_t b = 0; b < n / tt.block_elems; ++b) dst[b * tt.block_bytes + mxfp4::kE] = uint8_t(119 + rng() % 4);
        return;
    }
    const ScaleFields f = scale_fields(t);
    std::uniform_real_distribution<float> mag(0.25f, 1.0f);
    for (size_t b = 0; b < n / tt.block_elems; ++b) {
        uint8_t* block = dst + b * tt.block_bytes;
        for (size_t i = 0; i < f.count; ++i) {
            // The first field is the scale (random sign for the symmetric types, as quantizers emit);
            // a second one is a min (Q4_1 / Q5_1 offset, K-quant dmin).
            float v = mag(rng) / f.max_product;
            if (i == 0 && (rng() & 1)) v = -v;
            if (i == 1 && (t == TensorType::Q4_1 || t == TensorType::Q5_1)) v = -mag(rng) * 0.5f;
            const uint16_t h = f32_to_f16(v);
            std::memcpy(block + f.offsets[i], &h, 2);
        }
    }
}

std::vector<uint8_t> random_rows(TensorType t, uint64_t seed, size_t rows, size_t k) {
    const size_t rb = row_bytes(t, k);
    std::vector<uint8_t> out(rows * rb);
    for (size_t j = 0; j < rows; ++j) random_blocks(t, seed * 1000003u + j, out.data() + j * rb, k);
    return out;
}

}  // namespace vkllm::quant
