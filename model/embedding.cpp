#include "model/embedding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace vkllm {

namespace {
void check_pooling(Pooling p) {
    if (p == Pooling::Rank)
        throw std::invalid_argument("pooling 'rank' needs a reranker's classification head (cls.weight), which vkllm "
                                    "does not run yet");
}
}  // namespace

std::vector<std::vector<float>> pool_hidden(std::span<const float> hidden, uint32_t n, uint32_t dim, Pooling pooling) {
    check_pooling(pooling);
    if (n == 0 || hidden.size() != size_t(n) * dim)
        throw std::invalid_argument(fmt::format("pool_hidden: {} values for {} tokens of {}", hidden.size(), n, dim));
    auto row = [&](uint32_t i) { return std::vector<float>(hidden.begin() + size_t(i) * dim, hidden.begin() + size_t(i + 1) * dim); };
    switch (pooling) {
        case Pooling::None: {
            std::vector<std::vector<float>> out;
            for (uint32_t i = 0; i < n; ++i) out.push_back(row(i));
            return out;
        }
        case Pooling::Mean: {
            std::vector<double> sum(dim, 0.0);
            for (uint32_t i = 0; i < n; ++i)
                for (uint32_t d = 0; d < dim; ++d) sum[d] += hidden[size_t(i) * dim + d];
            std::vector<float> v(dim);
            for (uint32_t d = 0; d < dim; ++d) v[d] = float(sum[d] / n);
            return {v};
        }
        case Pooling::Cls: return {row(0)};
        case Pooling::Last: return {row(n - 1)};
        case Pooling::Rank: break;
    }
    return {};
}

void normalize_embedding(std::span<float> v, int norm) {
    double sum = 0;
    if (norm == -1) {
        return;
    } else if (norm == 0) {
        for (float x : v) sum = std::max(sum, double(std::fabs(x)));
        sum /= 32760.0;  // the int16 range
    } else if (norm == 2) {
        for (float x : v) sum += double(x) * x;
        sum = std::sqrt(sum);
    } else if (norm > 0) {
        for (float x : v) sum += std::pow(std::fabs(double(x)), norm);
        sum = std::pow(sum, 1.0 / norm);
    } else {
        throw std::invalid_argument(fmt::format("normalization {}: expected -1 (none), 0 (max-abs, int16), 1 "
                                                "(taxicab), 2 (Euclidean) or a p-norm p > 2", norm));
    }
    const double scale = sum > 0 ? 1.0 / sum : 0.0;
    for (float& x : v) x = float(x * scale);
}

Embedding embed_tokens(ModelGpu& model, std::span<const int32_t> tokens, const EmbedOptions& opts) {
    if (tokens.empty()) throw std::invalid_argument("embed: the input has no tokens");
    const ModelConfig& cfg = model.config();
    if (cfg.arch->lm_head && cfg.pooling == Pooling::None && !opts.pooling)
        throw std::invalid_argument(fmt::format("this {} model is a decoder without a pooling type ({}.pooling_type): "
                                                "give one (--pooling last for most embedding decoders)",
                                                cfg.arch->name, cfg.arch->name));
    const Pooling pooling = opts.pooling.value_or(cfg.pooling);
    check_pooling(pooling);  // refused before the device runs
    if (opts.normalize < -1) normalize_embedding({}, opts.normalize);
    const uint32_t limit = std::min(model.n_ctx(), model.ubatch());
    if (tokens.size() > limit)
        throw ContextFullError(fmt::format("the input has {} tokens, more than the {} this model takes at once ({})",
                                           tokens.size(), limit,
                                           limit == model.n_ctx() ? "its context"
                                                                  : "its ubatch; load it with a larger ubatch"));
    model.reset();
    model.eval(tokens);
    Embedding e;
    e.n_tokens = uint32_t(tokens.size());
    e.vectors = pool_hidden(model.hidden_states(), e.n_tokens, cfg.dim, pooling);
    for (auto& v : e.vectors) normalize_embedding(v, opts.normalize);
    model.reset();
    return e;
}

Embedding embed_text(ModelGpu& model, const Tokenizer& tok, std::string_view text, const EmbedOptions& opts) {
    if (text.empty()) throw std::invalid_argument("embed: the text is empty");
    return embed_tokens(model, tok.encode(text, true), opts);
}

}  // namespace vkllm
