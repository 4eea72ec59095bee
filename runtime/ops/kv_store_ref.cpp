#include "runtime/ops/kv_store.h"

#include "runtime/tensor_types.h"

#include <cstring>

namespace vkllm::ref {

void kv_store(const float* src, void* cache, const int32_t* positions, uint32_t n_tokens, uint32_t row_elems,
              uint32_t n_ctx, ops::KvType t) {
    for (uint32_t tok = 0; tok < n_tokens; ++tok) {
        const int32_t pos = positions[tok];
        if (pos < 0) continue;
        const float* row = src + size_t(tok) * row_elems;
        const size_t dst = size_t(uint32_t(pos) % n_ctx) * row_elems;
        if (t == ops::KvType::F16) {
            uint16_t* c = static_cast<uint16_t*>(cache) + dst;
            for (uint32_t i = 0; i < row_elems; ++i) c[i] = f32_to_f16(row[i]);
        } else {
            std::memcpy(static_cast<float*>(cache) + dst, row, size_t(row_elems) * 4);
        }
    }
}

}  // namespace vkllm::ref
