#include "runtime/ops/sampling_ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace vkllm::ref {

void argmax(const float* x, uint32_t* out, uint32_t rows, uint32_t n) {
    for (uint32_t r = 0; r < rows; ++r) {
        const float* xr = x + size_t(r) * n;
        int64_t best = -1;
        for (uint32_t i = 0; i < n; ++i)
            if (!std::isnan(xr[i]) && (best < 0 || xr[i] > xr[best])) best = i;
        out[r] = best < 0 ? 0u : uint32_t(best);
    }
}

void softmax(const float* x, float* y, uint32_t rows, uint32_t n, float temperature) {
    std::vector<double> e(n);
    for (uint32_t r = 0; r < rows; ++r) {
        const float* xr = x + size_t(r) * n;
        float* yr = y + size_t(r) * n;
        double m = -INFINITY;
        for (uint32_t i = 0; i < n; ++i) m = std::max(m, double(xr[i]));
        double sum = 0;
        for (uint32_t i = 0; i < n; ++i) sum += e[i] = std::exp((xr[i] - m) / temperature);
        for (uint32_t i = 0; i < n; ++i) yr[i] = float(e[i] / sum);  // y may alias x: x is no longer read
    }
}

void topk(const float* x, uint32_t n, uint32_t k, uint32_t* ids, float* vals) {
    // Descending by value, ties by lower index; NaN below every number.
    auto before = [x](uint32_t a, uint32_t b) {
        const bool na = std::isnan(x[a]), nb = std::isnan(x[b]);
        if (na != nb) return nb;
        if (!na && x[a] != x[b]) return x[a] > x[b];
        return a < b;
    };
    std::vector<uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    k = std::min(k, n);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
    for (uint32_t j = 0; j < k; ++j) {
        ids[j] = idx[j];
        vals[j] = x[idx[j]];
    }
}

}  // namespace vkllm::ref
