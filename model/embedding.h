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

// hidden: (n, dim), row i the state of token i. Mean: the average of the rows; Cls: row 0; Last:
// row n - 1; None: every row (n vectors). Rank needs the classification head: std::invalid_argument.
std::vector<std::vector<float>> pool_hidden(std::span<const float> hidden, uint32_t n, uint32_t dim, Pooling pooling);

// llama.cpp's common_embd_normalize: -1 none; 0 max-abs scaled to the int16 range (v * 32760 /
// max|v|); 1 taxicab; 2 Euclidean (L2); p > 2 the p-norm. An all-zero vector stays zero.
void normalize_embedding(std::span<float> v, int norm);

struct EmbedOptions {
    std::optional<Pooling> pooling;  // unset: the model's (ModelConfig::pooling)
    int normalize = 2;               // as normalize_embedding
};

struct Embedding {
    std::vector<std::vector<float>> vectors;  // one, or one per token with Pooling::None
    uint32_t n_tokens = 0;                    // [CLS] and [SEP] included
};

// Tokenizes `text` with the model's special tokens ([CLS] ... [SEP]), evaluates it as one input from
// position 0 and pools it. Throws std::invalid_argument for an empty input, a model without pooling
// support (decoders, for now; rank pooling) or a bad normalisation, ContextFullError for an input
// longer than the model's ubatch or context.
Embedding embed_text(ModelGpu& model, const Tokenizer& tok, std::string_view text, const EmbedOptions& opts);
// The same for tokens the caller already has.
Embedding embed_tokens(ModelGpu& model, std::span<const int32_t> tokens, const EmbedOptions& opts);

}  // namespace vkllm
