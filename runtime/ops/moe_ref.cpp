#include "runtime/ops/moe.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace vkllm::ref {

void moe_route(const float* logits, uint32_t n, const ops::MoeRouteParams& p, uint32_t* ids, float* weights) {
    ops::check_route(p);
    const uint32_t E = p.n_expert, K = p.k;
    std::vector<uint32_t> order(E);
    for (uint32_t t = 0; t < n; ++t) {
        const float* l = logits + size_t(t) * E;
        for (uint32_t e = 0; e < E; ++e) order[e] = e;
        // The K largest logits, ties to the lower index, NaN after every number.
        auto before = [&](uint32_t a, uint32_t b) {
            const bool na = std::isnan(l[a]), nb = std::isnan(l[b]);
            if (na != nb) return nb;
            if (!na && l[a] != l[b]) return l[a] > l[b];
            return a < b;
        };
        std::partial_sort(order.begin(), order.begin() + K, order.end(), before);
        const double top = l[order[0]];
        double denom = 1.0;
        if (p.gating == ops::MoeGating::Softmax) {
            denom = 0.0;
            for (uint32_t e = 0; e < E; ++e) denom += std::exp(double(l[e]) - top);
        } else if (p.gating == ops::MoeGating::SoftmaxTopK) {
            denom = 0.0;
            for (uint32_t j = 0; j < K; ++j) denom += std::exp(double(l[order[j]]) - top);
        }
        std::vector<double> w(K);
        double sum = 0.0;
        for (uint32_t j = 0; j < K; ++j) {
            const double v = l[order[j]];
            w[j] = p.gating == ops::MoeGating::Sigmoid ? 1.0 / (1.0 + std::exp(-v)) : std::exp(v - top) / denom;
            sum += w[j];
        }
        const double inv = p.norm ? 1.0 / std::max(sum, 6.103515625e-5) : 1.0;
        for (uint32_t j = 0; j < K; ++j) {
            ids[size_t(t) * K + j] = order[j];
            weights[size_t(t) * K + j] = float(w[j] * inv * p.scale);
        }
    }
}

void moe_combine(const float* y, const float* w, float* x, uint32_t n, uint32_t k, uint32_t dim, const float* shared,
                 const float* shared_gate) {
    for (uint32_t t = 0; t < n; ++t) {
        const double gate = shared_gate ? 1.0 / (1.0 + std::exp(-double(shared_gate[t]))) : 1.0;
        for (uint32_t d = 0; d < dim; ++d) {
            double acc = 0.0;
            for (uint32_t j = 0; j < k; ++j) acc += double(w[size_t(t) * k + j]) * y[(size_t(t) * k + j) * dim + d];
            if (shared) acc += gate * shared[size_t(t) * dim + d];
            x[size_t(t) * dim + d] = float(double(x[size_t(t) * dim + d]) + acc);
        }
    }
}

void moe_group(const uint32_t* ids, uint32_t slots, uint32_t n_expert, uint32_t* groups) {
    uint32_t* offsets = groups;
    uint32_t* order = groups + n_expert + 1;
    std::fill(offsets, offsets + n_expert + 1, 0u);
    for (uint32_t s = 0; s < slots; ++s) ++offsets[ids[s] + 1];
    for (uint32_t e = 0; e < n_expert; ++e) offsets[e + 1] += offsets[e];
    std::vector<uint32_t> at(offsets, offsets + n_expert);
    for (uint32_t s = 0; s < slots; ++s) order[at[ids[s]]++] = s;
}

}  // namespace vkllm::ref
