#include "runtime/ops/kv_store.h"

#include "runtime/quant/tensor_types.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace vkllm::ref {

void kv_quantize_q8_0(const float* src, uint32_t* dst, uint32_t n) {
    constexpr float kMax = std::numeric_limits<float>::max();
    for (uint32_t b = 0; b < n / ops::kKvQ8Block; ++b, src += ops::kKvQ8Block, dst += ops::kKvQ8BlockWords) {
        float x[ops::kKvQ8Block];
        float amax = 0;
        for (uint32_t i = 0; i < ops::kKvQ8Block; ++i) {
            x[i] = std::isnan(src[i]) ? 0.0f : std::clamp(src[i], -kMax, kMax);
            amax = std::max(amax, std::fabs(x[i]));
        }
        // Scales below FLT_MIN become 0, as on the device (1 / d would overflow).
        const float d_raw = amax / 127.0f;
        const bool zero = !(d_raw >= std::numeric_limits<float>::min());
        const float d = zero ? 0.0f : d_raw, id = zero ? 0.0f : 1.0f / d_raw;
        dst[0] = std::bit_cast<uint32_t>(d);
        for (uint32_t w = 0; w < 8; ++w) {
            uint32_t packed = 0;
            for (uint32_t k = 0; k < 4; ++k)
                packed |= uint32_t(uint8_t(int8_t(std::lround(x[4 * w + k] * id)))) << (8 * k);
            dst[1 + w] = packed;
        }
    }
}

void kv_dequantize_q8_0(const uint32_t* words, float* dst, uint32_t n) {
    for (uint32_t b = 0; b < n / ops::kKvQ8Block; ++b, words += ops::kKvQ8BlockWords, dst += ops::kKvQ8Block) {
        const float d = std::bit_cast<float>(words[0]);
        for (uint32_t i = 0; i < ops::kKvQ8Block; ++i)
            dst[i] = d * float(int8_t(uint8_t(words[1 + i / 4] >> (8 * (i % 4)))));
    }
}

void kv_store(const float* src, void* cache, const int32_t* positions, uint32_t n_tokens, uint32_t row_elems,
              uint32_t n_ctx, ops::KvType t) {
    for (uint32_t tok = 0; tok < n_tokens; ++tok) {
        const int32_t pos = positions[tok];
        if (pos < 0) continue;
        const float* row = src + size_t(tok) * row_elems;
        const size_t dst = size_t(uint32_t(pos) % n_ctx) * row_elems;
        if (t == ops::KvType::Q8_0) {
            const size_t row_words = ops::kv_row_bytes(t, row_elems) / 4;
            kv_quantize_q8_0(row, static_cast<uint32_t*>(cache) + size_t(uint32_t(pos) % n_ctx) * row_words, row_elems);
        } else if (t == ops::KvType::F16) {
            uint16_t* c = static_cast<uint16_t*>(cache) + dst;
            for (uint32_t i = 0; i < row_elems; ++i) c[i] = f32_to_f16(row[i]);
        } else {
            std::memcpy(static_cast<float*>(cache) + dst, row, size_t(row_elems) * 4);
        }
    }
}

}  // namespace vkllm::ref
