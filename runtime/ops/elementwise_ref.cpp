#include "runtime/ops/elementwise.h"

#include <cmath>

namespace vkllm::ref {

void rms_norm(const float* x, const float* w, float* y, uint32_t rows, uint32_t dim, float eps) {
    for (uint32_t r = 0; r < rows; ++r) {
        const float* xr = x + size_t(r) * dim;
        float* yr = y + size_t(r) * dim;
        double ss = 0;
        for (uint32_t i = 0; i < dim; ++i) ss += double(xr[i]) * xr[i];
        const double scale = 1.0 / std::sqrt(ss / dim + eps);
        for (uint32_t i = 0; i < dim; ++i) yr[i] = float(xr[i] * scale * w[i]);  // y may alias x
    }
}

void swiglu(const float* gate, const float* up, float* out, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
        const double g = gate[i];
        out[i] = float(g / (1.0 + std::exp(-g)) * up[i]);
    }
}

void add(const float* a, const float* b, float* out, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace vkllm::ref
