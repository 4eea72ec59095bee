#include "runtime/ops/attention.h"

#include "runtime/tensor_types.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace vkllm::ref {

void attention(const ops::AttentionParams& p, const float* q, const void* k, const void* v, const int32_t* positions,
               float* out) {
    const uint32_t D = p.head_dim, group = p.n_heads / p.n_kv_heads;
    auto kv_len = [&](uint32_t t) { return std::min<uint32_t>(uint32_t(std::max(positions[t], 0)) + 1, p.n_ctx); };
    uint32_t rows = 0;
    for (uint32_t t = 0; t < p.n_tokens; ++t) rows = std::max(rows, kv_len(t));

    // The cache rows any query can see, as the device reads them (f16 widening is exact).
    const size_t n = size_t(rows) * p.n_kv_heads * D;
    std::vector<float> kf(n), vf(n);
    if (p.kv_type == ops::KvType::F16) {
        for (size_t i = 0; i < n; ++i) {
            kf[i] = f16_to_f32(static_cast<const uint16_t*>(k)[i]);
            vf[i] = f16_to_f32(static_cast<const uint16_t*>(v)[i]);
        }
    } else {
        std::copy_n(static_cast<const float*>(k), n, kf.begin());
        std::copy_n(static_cast<const float*>(v), n, vf.begin());
    }

    std::vector<double> w(rows), o(D);
    for (uint32_t t = 0; t < p.n_tokens; ++t) {
        const uint32_t len = kv_len(t);
        for (uint32_t h = 0; h < p.n_heads; ++h) {
            const float* qh = q + (size_t(t) * p.n_heads + h) * D;
            const size_t kv_head = h / group;
            double mx = -INFINITY;
            for (uint32_t j = 0; j < len; ++j) {
                const float* kr = kf.data() + (size_t(j) * p.n_kv_heads + kv_head) * D;
                double s = 0;
                for (uint32_t d = 0; d < D; ++d) s += double(qh[d]) * kr[d];
                w[j] = s * p.scale;
                mx = std::max(mx, w[j]);
            }
            double sum = 0;
            for (uint32_t j = 0; j < len; ++j) sum += (w[j] = std::exp(w[j] - mx));
            std::fill(o.begin(), o.end(), 0.0);
            for (uint32_t j = 0; j < len; ++j) {
                const float* vr = vf.data() + (size_t(j) * p.n_kv_heads + kv_head) * D;
                for (uint32_t d = 0; d < D; ++d) o[d] += w[j] * vr[d];
            }
            float* oh = out + (size_t(t) * p.n_heads + h) * D;
            for (uint32_t d = 0; d < D; ++d) oh[d] = float(o[d] / sum);
        }
    }
}

}  // namespace vkllm::ref
