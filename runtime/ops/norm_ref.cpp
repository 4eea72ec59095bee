#include "runtime/ops/norm.h"

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

void layer_norm(const float* x, const float* w, const float* b, float* y, uint32_t rows, uint32_t dim, float eps) {
    for (uint32_t r = 0; r < rows; ++r) {
        const float* xr = x + size_t(r) * dim;
        float* yr = y + size_t(r) * dim;
        // Textbook two-pass in double: mean, then the mean squared deviation from it.
        double sum = 0;
        for (uint32_t i = 0; i < dim; ++i) sum += xr[i];
        const double mean = sum / dim;
        double sq = 0;
        for (uint32_t i = 0; i < dim; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
        const double rstd = 1.0 / std::sqrt(sq / dim + eps);
        for (uint32_t i = 0; i < dim; ++i) {  // y may alias x: element i is read before it is written
            const double v = (xr[i] - mean) * rstd * w[i] + (b ? double(b[i]) : 0.0);
            yr[i] = float(v);
        }
    }
}

}  // namespace vkllm::ref
