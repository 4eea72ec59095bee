#include "model/embedding.h"

#include "runtime/ops/linear.h"
#include "runtime/quant/tensor_types.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace vkllm {

namespace {

// The head's tensors by their schema names (model/arch/tensor_schema.h); absent ones are null.
struct HeadTensors {
    const GgufTensorInfo *w = nullptr, *b = nullptr, *out_w = nullptr, *out_b = nullptr;
};

HeadTensors head_tensors(const GgufFile& file, const ModelConfig& cfg) {
    const ArchDesc& a = *cfg.arch;
    return {find_model_tensor(file, a, Role::Cls), find_model_tensor(file, a, Role::ClsB),
            find_model_tensor(file, a, Role::ClsOut), find_model_tensor(file, a, Role::ClsOutB)};
}

void refuse_decoder_reranker(const ModelConfig& cfg) {
    if (cfg.arch->stack.lm_head)
        throw std::invalid_argument(
            fmt::format("pooling 'rank' on a decoder ({}; Qwen3-Reranker-style rerankers) is not "
                        "supported: vkllm's rerankers are encoders with a classification head",
                        cfg.arch->name));
}

// The head, or std::invalid_argument naming what is missing.
HeadTensors require_head(const GgufFile& file, const ModelConfig& cfg) {
    refuse_decoder_reranker(cfg);
    if (!cfg.cls_head)
        throw std::invalid_argument(
            fmt::format("pooling 'rank' needs a reranker's classification head (cls.weight and "
                        "cls.bias, or cls.output.weight), which this {} model does not have",
                        cfg.arch->name));
    return head_tensors(file, cfg);
}

}  // namespace

std::vector<float> classify(const GgufFile& file, const ModelConfig& cfg, std::span<const float> state) {
    const HeadTensors h = require_head(file, cfg);
    if (state.size() != cfg.dim)
        throw std::invalid_argument(
            fmt::format("classify: a state of {} values for a model of dim {}", state.size(), cfg.dim));
    // y = W x + b for a tensor of ggml shape [k, n] (rows of k)
    auto project = [&](const GgufTensorInfo& w, const GgufTensorInfo* b, const std::vector<float>& x) {
        const uint32_t n = uint32_t(w.ne[1]), k = uint32_t(w.ne[0]);
        std::vector<float> bias;
        if (b) {
            bias.resize(n);
            dequantize_row(b->type, file.tensor_data(*b).data(), bias.data(), n);
        }
        std::vector<float> y(n);
        ref::linear(w.type, file.tensor_data(w).data(), x.data(), y.data(), 1, n, k, nullptr,
                    b ? bias.data() : nullptr);
        return y;
    };
    std::vector<float> x(state.begin(), state.end());
    if (h.w && h.b) {
        x = project(*h.w, h.b, x);
        for (float& v : x) v = float(std::tanh(double(v)));
    }
    if (h.out_w) x = project(*h.out_w, h.out_b, x);
    return x;
}

std::vector<int32_t> rerank_tokens(const GgufFile& file, const Tokenizer& tok, std::string_view query,
                                   std::string_view document) {
    if (auto tmpl = file.find_string("tokenizer.chat_template.rerank")) {
        std::string prompt(*tmpl);
        auto replace_all = [&](std::string_view from, std::string_view to) {
            for (size_t at = prompt.find(from); at != std::string::npos; at = prompt.find(from, at + to.size()))
                prompt.replace(at, from.size(), to);
        };
        replace_all("{query}", query);
        replace_all("{document}", document);
        return tok.encode(prompt, false, true);
    }
    return tok.encode_pair(query, document);
}

std::vector<std::vector<float>> pool_hidden(std::span<const float> hidden, uint32_t n, uint32_t dim, Pooling pooling) {
    if (pooling == Pooling::Rank)
        throw std::invalid_argument("pool_hidden: rank pooling needs the classification head (classify)");
    if (n == 0 || hidden.size() != size_t(n) * dim)
        throw std::invalid_argument(fmt::format("pool_hidden: {} values for {} tokens of {}", hidden.size(), n, dim));
    auto row = [&](uint32_t i) {
        return std::vector<float>(hidden.begin() + size_t(i) * dim, hidden.begin() + size_t(i + 1) * dim);
    };
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
        throw std::invalid_argument(
            fmt::format("normalization {}: expected -1 (none), 0 (max-abs, int16), 1 "
                        "(taxicab), 2 (Euclidean) or a p-norm p > 2",
                        norm));
    }
    const double scale = sum > 0 ? 1.0 / sum : 0.0;
    for (float& x : v) x = float(x * scale);
}

namespace {

// The pooling an embedding of `n_tokens` tokens takes, after checking the request and the size.
Pooling check_embedding(const ModelGpu& model, size_t n_tokens, const EmbedOptions& opts) {
    if (n_tokens == 0) throw std::invalid_argument("embed: the input has no tokens");
    const ModelConfig& cfg = model.config();
    if (cfg.arch->stack.lm_head && cfg.pooling == Pooling::None && !opts.pooling)
        throw std::invalid_argument(
            fmt::format("this {} model is a decoder without a pooling type ({}.pooling_type): "
                        "give one (--pooling last for most embedding decoders)",
                        cfg.arch->name, cfg.arch->name));
    const Pooling pooling = opts.pooling.value_or(cfg.pooling);
    if (pooling == Pooling::Rank) require_head(model.file(), cfg);  // refused before the device runs
    if (opts.normalize < -1) normalize_embedding({}, opts.normalize);
    const uint32_t limit = embed_limit(model);
    if (n_tokens > limit)
        throw ContextFullError(
            fmt::format("the input has {} tokens, more than the {} this model takes at once ({})", n_tokens, limit,
                        limit == model.n_ctx() ? "its context" : "its ubatch; load it with a larger ubatch"));
    return pooling;
}

// Pools (or classifies) the (n_tokens, dim) rows of one input.
Embedding make_embedding(const ModelGpu& model, std::span<const float> rows, uint32_t n_tokens, Pooling pooling,
                         const EmbedOptions& opts) {
    const ModelConfig& cfg = model.config();
    Embedding e;
    e.n_tokens = n_tokens;
    if (pooling == Pooling::Rank) {
        e.vectors = {classify(model.file(), cfg, rows.first(cfg.dim))};
    } else {
        e.vectors = pool_hidden(std::vector<float>(rows.begin(), rows.end()), n_tokens, cfg.dim, pooling);
        for (auto& v : e.vectors) normalize_embedding(v, opts.normalize);
    }
    return e;
}

}  // namespace

ModelRole model_role(const ModelConfig& cfg, bool embeddings) {
    if (cfg.pooling == Pooling::Rank) return ModelRole::Rerank;
    return !cfg.arch->stack.lm_head || embeddings || cfg.pooling != Pooling::None ? ModelRole::Embed
                                                                                  : ModelRole::Generate;
}

EmbedSizes embedding_sizes(const ModelConfig& cfg, uint32_t n_ctx, uint32_t ubatch) {
    EmbedSizes s;
    const bool chunks = runs_in_chunks(cfg);
    s.n_ctx = n_ctx ? n_ctx : std::min(cfg.n_ctx_train, chunks ? 2048u : 8192u);
    s.ubatch = ubatch ? ubatch : chunks ? std::min(s.n_ctx, 512u) : s.n_ctx;
    return s;
}

uint32_t embed_limit(const ModelGpu& model) {
    return runs_in_chunks(model.config()) ? model.n_ctx() : std::min(model.n_ctx(), model.ubatch());
}

Embedding embed_tokens(ModelGpu& model, std::span<const int32_t> tokens, const EmbedOptions& opts) {
    const Pooling pooling = check_embedding(model, tokens.size(), opts);
    model.reset();
    // A causal model's states do not change with what comes later, so an input longer than one
    // ubatch runs chunk by chunk through the KV cache; each chunk's rows are read before the next.
    std::vector<float> hidden;
    const size_t chunk = runs_in_chunks(model.config()) ? model.ubatch() : tokens.size();
    for (size_t first = 0; first < tokens.size(); first += chunk) {
        const size_t n = std::min(chunk, tokens.size() - first);
        model.eval(tokens.subspan(first, n));
        // Last and CLS pooling read one row: the other chunks' rows need not come back (zeros).
        const bool read = pooling == Pooling::Mean || pooling == Pooling::None || first + n == tokens.size() ||
                          (pooling == Pooling::Cls && first == 0);
        if (read) {
            const std::vector<float> rows = model.hidden_states();
            hidden.insert(hidden.end(), rows.begin(), rows.end());
        } else {
            hidden.resize(hidden.size() + n * model.config().dim);
        }
    }
    model.reset();
    return make_embedding(model, hidden, uint32_t(tokens.size()), pooling, opts);
}

std::vector<Embedding> embed_batch(ModelGpu& model, std::span<const std::vector<int32_t>> inputs,
                                   const EmbedOptions& opts) {
    Pooling pooling = Pooling::None;
    for (const auto& in : inputs) pooling = check_embedding(model, in.size(), opts);
    std::vector<Embedding> out;
    out.reserve(inputs.size());
    if (runs_in_chunks(model.config())) {  // a causal decoder: one input per pass
        for (const auto& in : inputs) out.push_back(embed_tokens(model, in, opts));
        return out;
    }
    const uint32_t limit = embed_limit(model), dim = model.config().dim;
    for (size_t first = 0; first < inputs.size();) {
        // As many inputs as one ubatch holds, in order.
        size_t last = first, total = 0;
        std::vector<std::span<const int32_t>> pack;
        while (last < inputs.size() && total + inputs[last].size() <= limit) {
            total += inputs[last].size();
            pack.emplace_back(inputs[last++]);
        }
        model.eval_packed(pack);
        const std::vector<float> hidden = model.hidden_states();
        size_t row = 0;
        for (const auto& in : pack) {
            out.push_back(make_embedding(model, std::span<const float>(hidden).subspan(row * dim, in.size() * dim),
                                         uint32_t(in.size()), pooling, opts));
            row += in.size();
        }
        first = last;
    }
    model.reset();
    return out;
}

Embedding embed_text(ModelGpu& model, const Tokenizer& tok, std::string_view text, const EmbedOptions& opts) {
    if (text.empty()) throw std::invalid_argument("embed: the text is empty");
    return embed_tokens(model, tok.encode(text, true), opts);
}

void require_reranker(const ModelConfig& cfg) {
    if (cfg.pooling != Pooling::Rank)
        throw std::invalid_argument(
            fmt::format("this {} model is not a reranker: its pooling is '{}', reranking needs "
                        "'rank' (a classification head)",
                        cfg.arch->name, pooling_name(cfg.pooling)));
    refuse_decoder_reranker(cfg);
}

std::vector<RerankScore> score_pairs(ModelGpu& model, std::span<const std::vector<int32_t>> pairs) {
    require_reranker(model.config());
    std::vector<RerankScore> out;
    for (const Embedding& e : embed_batch(model, pairs, {.pooling = Pooling::Rank, .normalize = -1}))
        out.push_back({e.vectors.at(0).at(0), e.n_tokens});
    return out;
}

std::vector<RerankScore> rerank(ModelGpu& model, const Tokenizer& tok, std::string_view query,
                                std::span<const std::string> documents) {
    require_reranker(model.config());
    if (query.empty()) throw std::invalid_argument("rerank: the query is empty");
    std::vector<std::vector<int32_t>> pairs;
    for (const std::string& d : documents) {
        if (d.empty()) throw std::invalid_argument("rerank: the document is empty");
        pairs.push_back(rerank_tokens(model.file(), tok, query, d));
    }
    return score_pairs(model, pairs);
}

}  // namespace vkllm
