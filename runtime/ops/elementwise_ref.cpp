#include "runtime/ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace vkllm::ref {

namespace {

// The definition of the tanh-approximated GELU, in double.
double gelu_d(double x) {
    const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + std::tanh(u));
}

}  // namespace

void swiglu_oai(const float* gate, const float* up, float* out, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
        const double x = std::min(double(gate[i]), 7.0), y = std::clamp(double(up[i]), -7.0, 7.0);
        out[i] = float(x / (1.0 + std::exp(-1.702 * x)) * (y + 1.0));
    }
}

void swiglu(const float* gate, const float* up, float* out, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
        const double g = gate[i];
        out[i] = float(g / (1.0 + std::exp(-g)) * up[i]);
    }
}

void geglu(const float* gate, const float* up, float* out, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) out[i] = float(gelu_d(gate[i]) * up[i]);
}

void add(const float* a, const float* b, float* out, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void gelu(const float* x, float* y, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) y[i] = float(gelu_d(x[i]));
}

void gelu_quick(const float* x, float* y, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) y[i] = float(double(x[i]) / (1.0 + std::exp(-1.702 * double(x[i]))));
}

void relu(const float* x, float* y, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void scale(float* x, uint32_t n, float factor) {
    for (uint32_t i = 0; i < n; ++i) x[i] = float(double(x[i]) * factor);
}

void softcap(float* x, uint32_t n, float cap) {
    for (uint32_t i = 0; i < n; ++i) x[i] = float(cap * std::tanh(double(x[i]) / cap));
}

void clamp(float* x, uint32_t n, float limit) {
    for (uint32_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], -limit), limit);
}

void add_rows(float* x, const float* b, uint32_t rows, uint32_t dim) {
    for (uint32_t r = 0; r < rows; ++r)
        for (uint32_t c = 0; c < dim; ++c) x[size_t(r) * dim + c] += b[c];
}

void copy_cols(const float* src, uint32_t src_stride, uint32_t src_col, float* dst, uint32_t dst_stride,
               uint32_t dst_col, uint32_t rows, uint32_t width) {
    for (uint32_t r = 0; r < rows; ++r)
        for (uint32_t c = 0; c < width; ++c)
            dst[size_t(r) * dst_stride + dst_col + c] = src[size_t(r) * src_stride + src_col + c];
}

}  // namespace vkllm::ref
