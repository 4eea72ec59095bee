#include "runtime/ops/linear.h"

#include <vector>

namespace vkllm::ref {

void linear(TensorType wtype, const void* w, const float* x, float* y, uint32_t m, uint32_t n, uint32_t k,
            const float* residual, const float* bias) {
    const size_t rb = row_bytes(wtype, k);
    const auto* bytes = static_cast<const uint8_t*>(w);
    std::vector<float> row(k);
    for (uint32_t j = 0; j < n; ++j) {
        dequantize_row(wtype, bytes + j * rb, row.data(), k);
        for (uint32_t i = 0; i < m; ++i) {
            const float* xi = x + size_t(i) * k;
            double sum = 0;
            for (uint32_t c = 0; c < k; ++c) sum += double(row[c]) * double(xi[c]);
            if (bias) sum += bias[j];
            // residual may alias y: the element is read before it is written.
            if (residual) sum += residual[size_t(i) * n + j];
            y[size_t(i) * n + j] = float(sum);
        }
    }
}

}  // namespace vkllm::ref
