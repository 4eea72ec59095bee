#include "runtime/ops/get_rows.h"

#include <algorithm>

namespace vkllm::ref {

void get_rows(TensorType type, const void* table, uint32_t n_rows, uint32_t dim, const int32_t* ids, uint32_t n_ids,
              float* out) {
    const size_t rb = row_bytes(type, dim);
    const auto* bytes = static_cast<const uint8_t*>(table);
    for (uint32_t i = 0; i < n_ids; ++i) {
        float* o = out + size_t(i) * dim;
        if (ids[i] < 0 || uint32_t(ids[i]) >= n_rows)
            std::fill(o, o + dim, 0.0f);
        else
            dequantize_row(type, bytes + size_t(ids[i]) * rb, o, dim);
    }
}

}  // namespace vkllm::ref
