// LLaMA hyperparameters read from a GGUF file, validated against the tensors the file actually
// holds, so that later layers (weight upload, the forward pass) can trust every shape.
#pragma once

#include <cstdint>
#include <string>

#include "model/gguf.h"

namespace vkllm {

// A file that is valid GGUF but not a LLaMA model vkllm can run (missing or inconsistent
// hyperparameters, missing tensors, wrong shapes). Derives from GgufError so one catch covers
// everything a bad model file can raise.
class LlamaConfigError : public GgufError {
public:
    using GgufError::GgufError;
};

struct LlamaConfig {
    uint32_t n_vocab = 0;
    uint32_t dim = 0;          // embedding length
    uint32_t n_layers = 0;
    uint32_t n_heads = 0;
    uint32_t n_kv_heads = 0;
    uint32_t head_dim = 0;     // dim / n_heads
    uint32_t ffn_dim = 0;
    uint32_t n_ctx_train = 0;  // llama.context_length
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;
    uint32_t rope_dim = 0;     // rotated dims per head; defaults to head_dim
    bool tied_embeddings = false;  // no output.weight: logits use token_embd.weight

    uint32_t kv_dim() const { return n_kv_heads * head_dim; }

    // Reads and validates; throws LlamaConfigError whose message names the file, the key or
    // tensor, and (for shapes) the expected and actual ggml dims.
    static LlamaConfig from_gguf(const GgufFile& file);
};

}  // namespace vkllm
