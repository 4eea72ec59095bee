#include "model/forward/blend.h"

#include "runtime/ops/kv_store.h"
#include "runtime/quant/tensor_types.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace vkllm {

namespace {

// n rows of one layer's cached V as floats.
std::vector<float> cached_rows(const std::vector<uint8_t>& bytes, ops::KvType type, uint32_t n, uint32_t width) {
    std::vector<float> out(size_t(n) * width);
    if (type == ops::KvType::F32) {
        std::memcpy(out.data(), bytes.data(), out.size() * 4);
    } else if (type == ops::KvType::F16) {
        const auto* h = reinterpret_cast<const uint16_t*>(bytes.data());
        for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(h[i]);
    } else {
        const size_t row_words = ops::kv_row_bytes(type, width) / 4;
        for (uint32_t r = 0; r < n; ++r)
            ref::kv_dequantize_q8_0(reinterpret_cast<const uint32_t*>(bytes.data()) + r * row_words,
                                    out.data() + size_t(r) * width, width);
    }
    return out;
}

// Step 2 (blend.h): the positions of the tokens to evaluate again, ascending, with their tokens.
std::vector<std::pair<uint32_t, int32_t>> select(ModelGpu& g, uint32_t seq, std::span<const BlendDoc> docs,
                                                 const std::vector<uint32_t>& starts, float ratio);

}  // namespace

BlendResult blend_documents(ModelGpu& g, uint32_t seq, std::span<const BlendDoc> docs, float ratio,
                            std::span<const int32_t> then) {
    if (!(ratio >= 0.0f && ratio <= 1.0f))
        throw std::invalid_argument(fmt::format("blend ratio {} must be within 0..1", ratio));
    for (size_t d = 0; d < docs.size(); ++d)
        if (!docs[d].kv || docs[d].tokens.empty() || docs[d].kv->n != docs[d].tokens.size())
            throw std::invalid_argument(fmt::format("blend: document {} has {} tokens and {} cached rows", d,
                                                    docs[d].tokens.size(), docs[d].kv ? docs[d].kv->n : 0));
    BlendResult r;
    std::vector<uint32_t> starts;
    const uint32_t start = g.n_past(seq);
    try {
        for (const BlendDoc& d : docs) {
            starts.push_back(g.n_past(seq));
            g.import_kv(seq, *d.kv);
            r.tokens += uint32_t(d.tokens.size());
        }
        // Step 3, fused with what follows the documents: one evaluation, in position order.
        std::vector<uint32_t> at;
        std::vector<int32_t> tokens;
        for (const auto& [p, t] : select(g, seq, docs, starts, ratio)) {
            at.push_back(p);
            tokens.push_back(t);
        }
        r.recomputed = at;
        for (size_t i = 0; i < then.size(); ++i) at.push_back(g.n_past(seq) + uint32_t(i));
        tokens.insert(tokens.end(), then.begin(), then.end());
        if (!tokens.empty()) g.eval_at(seq, tokens, at);
    } catch (...) {
        // The documents go again: the sequence holds what it held before the call.
        if (!g.truncate(seq, start)) g.reset(seq);
        throw;
    }
    return r;
}

namespace {

std::vector<std::pair<uint32_t, int32_t>> select(ModelGpu& g, uint32_t seq, std::span<const BlendDoc> docs,
                                                 const std::vector<uint32_t>& starts, float ratio) {
    const ModelConfig& cfg = g.config();
    // Layer 1's input is the full prefill's once layer 0 (context-free) is evaluated again.
    const uint32_t probe_layer = std::min(1u, cfg.n_layers - 1);
    // Every document's tokens through layer 0 and layer 1's V in one evaluation: they stand one after
    // another from starts[0].
    std::vector<int32_t> all;
    for (const BlendDoc& doc : docs) all.insert(all.end(), doc.tokens.begin(), doc.tokens.end());
    std::vector<uint32_t> at(all.size());
    std::iota(at.begin(), at.end(), starts.empty() ? 0u : starts[0]);
    const std::vector<float> all_v = all.empty() ? std::vector<float>{} : g.eval_v(seq, all, at, probe_layer);
    std::vector<std::pair<uint32_t, int32_t>> chosen;  // (position, token)
    const uint32_t width = cfg.kv_dim();
    for (size_t d = 0; d < docs.size(); ++d) {
        const BlendDoc& doc = docs[d];
        const uint32_t n = uint32_t(doc.tokens.size());
        const std::vector<float> old_v = cached_rows(doc.kv->v.at(probe_layer), doc.kv->type, n, width);
        const float* new_v = all_v.data() + size_t(starts[d] - starts[0]) * width;
        std::vector<double> deviation(n);
        for (uint32_t i = 0; i < n; ++i) {
            double diff = 0, norm = 0;
            for (uint32_t j = 0; j < width; ++j) {
                const double o = old_v[size_t(i) * width + j], e = new_v[size_t(i) * width + j];
                diff += (e - o) * (e - o);
                norm += o * o;
            }
            deviation[i] = diff / std::max(norm, 1e-30);
            if (std::isnan(deviation[i])) deviation[i] = HUGE_VAL;  // a strict order for the sort
        }
        // The ratio share of the document's tokens that deviate most.
        // At least one token of each document where the ratio is not 0.
        // The float ratio's rounding (0.15f is 0.15000000596) must not add a token: 0.15 of 40 is 6.
        const uint32_t k = std::min(n, uint32_t(std::ceil(double(ratio) * n * (1 - 1e-6))));
        std::vector<uint32_t> order(n);
        std::iota(order.begin(), order.end(), 0u);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](uint32_t a, uint32_t b) {
            return deviation[a] > deviation[b] || (deviation[a] == deviation[b] && a < b);
        });
        for (uint32_t i = 0; i < k; ++i) chosen.emplace_back(starts[d] + order[i], doc.tokens[order[i]]);
    }
    std::sort(chosen.begin(), chosen.end());
    return chosen;
}

}  // namespace

}  // namespace vkllm
