#include "runtime/ops/linear.h"

#include <cmath>
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

void linear_f16(TensorType wtype, const void* w, const float* x, float* y, uint32_t m, uint32_t n, uint32_t k,
                const float* residual, const float* bias) {
    std::vector<float> xh(size_t(m) * k);
    for (size_t i = 0; i < xh.size(); ++i) xh[i] = f16_to_f32(f32_to_f16(x[i]));
    const size_t rb = row_bytes(wtype, k);
    const auto* bytes = static_cast<const uint8_t*>(w);
    std::vector<float> row(k);
    for (uint32_t j = 0; j < n; ++j) {
        dequantize_row(wtype, bytes + j * rb, row.data(), k);
        for (float& v : row) v = f16_to_f32(f32_to_f16(v));
        for (uint32_t i = 0; i < m; ++i) {
            const float* xi = xh.data() + size_t(i) * k;
            double sum = 0;
            for (uint32_t c = 0; c < k; ++c) sum += double(row[c]) * double(xi[c]);
            if (bias) sum += bias[j];
            if (residual) sum += residual[size_t(i) * n + j];
            y[size_t(i) * n + j] = float(sum);
        }
    }
}

void quantize_q8_1(const float* x, float* xq, uint32_t k, int8_t* q, float* d) {
    for (uint32_t b = 0; b < k / 32; ++b) {
        const float* v = x + 32 * b;
        float amax = 0;
        bool finite = true;
        for (int i = 0; i < 32; ++i) {
            amax = std::max(amax, std::fabs(v[i]));
            finite = finite && std::isfinite(v[i]);
        }
        // A non-finite value has no int8 level: the block's scale is NaN (quantize_q8_1.comp does the same).
        const float scale = finite ? amax / 127.0f : std::nanf(""), inv = scale > 0 ? 1.0f / scale : 0.0f;
        if (d) d[b] = scale;
        for (int i = 0; i < 32; ++i) {
            const int qi = finite ? int(std::round(v[i] * inv)) : 0;  // std::round: half away from zero
            if (q) q[32 * b + i] = int8_t(qi);
            xq[32 * b + i] = scale * float(qi);
        }
    }
}

}  // namespace vkllm::ref
