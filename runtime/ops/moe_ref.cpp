#include "runtime/ops/moe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace vkllm::ref {

void moe_route(const float* logits, uint32_t n, const ops::MoeRouteParams& p, uint32_t* ids, float* weights,
               const float* bias) {
    ops::check_route(p);
    if (p.bias && !bias) throw std::invalid_argument("ref::moe_route: the selection bias is missing");
    const uint32_t E = p.n_expert, K = p.k;
    // Probabilities rank as their logits do; a bias or group scores need the probabilities themselves.
    const bool by_prob = p.bias || p.n_group > 1;
    std::vector<uint32_t> order(E);
    std::vector<double> sel(E);
    for (uint32_t t = 0; t < n; ++t) {
        const float* l = logits + size_t(t) * E;
        double lmax = -INFINITY, lsum = 0.0;
        for (uint32_t e = 0; e < E; ++e) lmax = std::max(lmax, double(l[e]));
        for (uint32_t e = 0; e < E; ++e) lsum += std::exp(double(l[e]) - lmax);
        auto prob = [&](uint32_t e) {
            if (p.gating == ops::MoeGating::Sigmoid) return 1.0 / (1.0 + std::exp(-double(l[e])));
            if (p.gating == ops::MoeGating::Softmax) return std::exp(double(l[e]) - lmax) / lsum;
            return double(l[e]);  // SoftmaxTopK ranks the logits themselves
        };
        for (uint32_t e = 0; e < E; ++e) sel[e] = by_prob ? prob(e) + (p.bias ? double(bias[e]) : 0.0) : double(l[e]);
        std::vector<bool> allowed(E, true);
        if (p.n_group > 1) {
            // Each group's score: the sum of its two best selection values; the group_used best groups
            // (ties to the lower index) keep their experts.
            const uint32_t per = E / p.n_group;
            std::vector<std::pair<double, uint32_t>> score(p.n_group);
            for (uint32_t g = 0; g < p.n_group; ++g) {
                std::vector<double> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
                std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
                score[g] = {v[0] + v[1], g};
            }
            std::partial_sort(score.begin(), score.begin() + p.group_used, score.end(),
                              [](const auto& a, const auto& b) {
                                  return a.first != b.first ? a.first > b.first : a.second < b.second;
                              });
            std::vector<bool> kept(p.n_group, false);
            for (uint32_t i = 0; i < p.group_used; ++i) kept[score[i].second] = true;
            for (uint32_t e = 0; e < E; ++e) allowed[e] = kept[e / per];
        }
        for (uint32_t e = 0; e < E; ++e) order[e] = e;
        // The K largest selection values of the allowed experts, ties to the lower index, NaN after every number.
        auto before = [&](uint32_t a, uint32_t b) {
            if (allowed[a] != allowed[b]) return bool(allowed[a]);
            const bool na = std::isnan(sel[a]), nb = std::isnan(sel[b]);
            if (na != nb) return nb;
            if (!na && sel[a] != sel[b]) return sel[a] > sel[b];
            return a < b;
        };
        std::partial_sort(order.begin(), order.begin() + K, order.end(), before);
        const double top = l[order[0]];
        double denom = 1.0;
        if (p.gating == ops::MoeGating::SoftmaxTopK) {
            denom = 0.0;
            for (uint32_t j = 0; j < K; ++j) denom += std::exp(double(l[order[j]]) - top);
        }
        std::vector<double> w(K);
        double sum = 0.0;
        for (uint32_t j = 0; j < K; ++j) {
            const uint32_t e = order[j];
            w[j] = p.gating == ops::MoeGating::SoftmaxTopK ? std::exp(double(l[e]) - top) / denom : prob(e);
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
