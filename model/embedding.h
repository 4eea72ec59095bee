// Embeddings: what an encoder (BERT, bge, all-MiniLM) or a decoder embedding model makes of a text.
// The model's last hidden states (ModelGpu::hidden_states) are pooled as the file says
// (`<arch>.pooling_type`) or as asked, then normalised with llama.cpp's `--embd-normalize` rule, so
// the vectors equal what llama.cpp's llama-embedding and llama-server --embeddings return.
#pragma once

#include "model/arch/model_config.h"
#include "model/forward/model_gpu.h"
#include "model/tokenizer/tokenizer.h"

#include <span>
#include <string_view>
#include <vector>

namespace vkllm {

// What a model is loaded for: generating text, embeddings, or a reranker's scores. Pooling rank
// scores (require_reranker says whether vkllm can); otherwise an encoder (no LM head) embeds, and a
// decoder embeds when its file names a pooling type (Qwen3-Embedding: `qwen3.pooling_type` last)
// or when asked (`embeddings`, llama-server's --embeddings), else generates.
enum class ModelRole { Generate, Embed, Rerank };
ModelRole model_role(const ModelConfig& cfg, bool embeddings = false);
// Whether that role makes vectors or scores rather than text.
inline bool embeds(ModelRole r) { return r != ModelRole::Generate; }

// Whether an embedding runs through the KV cache in ubatch chunks: a causal model's states do not
// depend on later tokens. A bidirectional one (an encoder, or a decoder whose file sets
// `attention.causal` false) attends over each input at once, which must fit one ubatch.
inline bool runs_in_chunks(const ModelConfig& cfg) { return cfg.causal; }

// The context and ubatch an embedding or rerank model loads with; 0 in `n_ctx` or `ubatch`: the
// default. A bidirectional model's ubatch is its context (by default the trained one, at most
// 8192). A causal one runs an input in chunks (runs_in_chunks), so its context (by default at
// most 2048: its cache grows with it) bounds an input, and its ubatch stays at most 512 (scratch
// grows with it).
struct EmbedSizes {
    uint32_t n_ctx = 0, ubatch = 0;
};
EmbedSizes embedding_sizes(const ModelConfig& cfg, uint32_t n_ctx, uint32_t ubatch);
// The longest input embed_* and rerank take on a loaded model: a bidirectional model's ubatch
// (capped by its context), a causal one's context.
uint32_t embed_limit(const ModelGpu& model);

// hidden: (n, dim), row i the state of token i. Mean: the average of the rows; Cls: row 0; Last:
// row n - 1; None: every row (n vectors). Rank needs the classification head (classify):
// std::invalid_argument.
std::vector<std::vector<float>> pool_hidden(std::span<const float> hidden, uint32_t n, uint32_t dim, Pooling pooling);

// A reranker's classification head (llama.cpp's rank pooling) on the first token's state, on the
// host in double from the file's weights: with cls.weight and cls.bias, y = tanh(cls x + b), then
// cls.output y (+ its bias) when the file has it; with cls.output alone, cls.output x (+ bias). One
// score per label (n_cls_out, or dim without cls.output); a reranker's relevance is score 0.
// Throws std::invalid_argument when the file has no head.
std::vector<float> classify(const GgufFile& file, const ModelConfig& cfg, std::span<const float> state);

// The tokens a reranker scores for (query, document): the file's rerank template
// (tokenizer.chat_template.rerank, "{query}" and "{document}" replaced, special tokens parsed)
// when it has one, else Tokenizer::encode_pair(query, document), as llama.cpp's server builds them.
std::vector<int32_t> rerank_tokens(const GgufFile& file, const Tokenizer& tok, std::string_view query,
                                   std::string_view document);

// std::invalid_argument naming the model's pooling unless it is a reranker (pooling rank) that vkllm
// runs (an encoder with a classification head).
void require_reranker(const ModelConfig& cfg);

struct RerankScore {
    float score = 0;  // the head's first output, unnormalised (llama.cpp's relevance_score)
    uint32_t n_tokens = 0;  // of the joined input
};
// Scores each document against `query` with a reranker (a model whose pooling_type is rank), in
// document order, packed as embed_batch packs. Throws std::invalid_argument for a model that is not
// a reranker or an empty query or document, ContextFullError for a pair longer than the model takes
// at once (before anything runs).
std::vector<RerankScore> rerank(ModelGpu& model, const Tokenizer& tok, std::string_view query,
                                std::span<const std::string> documents);
// The scores of pairs already joined (rerank_tokens), as rerank().
std::vector<RerankScore> score_pairs(ModelGpu& model, std::span<const std::vector<int32_t>> pairs);

// llama.cpp's common_embd_normalize: -1 none; 0 max-abs scaled to the int16 range (v * 32760 /
// max|v|); 1 taxicab; 2 Euclidean (L2); p > 2 the p-norm. An all-zero vector stays zero.
void normalize_embedding(std::span<float> v, int norm);

struct EmbedOptions {
    std::optional<Pooling> pooling;  // unset: the model's (ModelConfig::pooling)
    int normalize = 2;  // as normalize_embedding
};

struct Embedding {
    // One, or one per token with Pooling::None; with Pooling::Rank the classification scores,
    // never normalised (they are logits, not directions).
    std::vector<std::vector<float>> vectors;
    uint32_t n_tokens = 0;  // [CLS] and [SEP] included
};

// Tokenizes `text` with the model's special tokens ([CLS] ... [SEP]), evaluates it as one input from
// position 0 (a decoder in ubatch chunks) and pools it. Throws std::invalid_argument for an empty
// input, a decoder without a pooling type, rank pooling without a classification head or a bad
// normalisation, ContextFullError for an input longer than embed_limit().
Embedding embed_text(ModelGpu& model, const Tokenizer& tok, std::string_view text, const EmbedOptions& opts);
// The same for tokens the caller already has.
Embedding embed_tokens(ModelGpu& model, std::span<const int32_t> tokens, const EmbedOptions& opts);
// Many inputs at once, results in input order, each as embed_tokens gives it. Encoders evaluate as
// many inputs per forward pass as one ubatch holds (ModelGpu::eval_packed: each attends to its own
// tokens only), in input order; decoders one by one. Every input is checked before anything runs.
std::vector<Embedding> embed_batch(ModelGpu& model, std::span<const std::vector<int32_t>> inputs,
                                   const EmbedOptions& opts);

}  // namespace vkllm
