// Hyperparameters of a decoder model read from a GGUF file, for any architecture in
// model/arch/architecture.h, validated against the tensors the file actually holds, so that later
// layers (weight upload, the forward pass) can trust every shape.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/arch/architecture.h"
#include "model/arch/tensor_schema.h"
#include "model/gguf/gguf.h"

namespace vkllm {

// A file that is valid GGUF but not a model vkllm can run (unknown architecture, missing or
// inconsistent hyperparameters, missing tensors, wrong shapes). Derives from GgufError so one
// catch covers everything a bad model file can raise.
class ModelConfigError : public GgufError {
public:
    using GgufError::GgufError;
};

// How RoPE turns a position into angles for one layer (see ops::RopeParams for the math).
struct RopeConfig {
    float base = 10000.0f;
    float freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear and yarn scaling
    float ext_factor = 0.0f;  // yarn: 1
    float attn_factor = 1.0f;
    float beta_fast = 32.0f, beta_slow = 1.0f;
    uint32_t n_ctx_orig = 0;  // rope.scaling.original_context_length (yarn), else the training context
};

enum class RopeFactors {
    None,
    Freqs,  // rope_freqs.weight (Llama 3.x "llama3" scaling, precomputed by the converter)
    Long,  // rope_factors_long.weight (Phi-3, context beyond the original length)
    Short,  // rope_factors_short.weight
};

// How an embedding is made of a model's last hidden states (`<arch>.pooling_type`, llama.cpp's values).
enum class Pooling : uint32_t {
    None = 0,  // one vector per token
    Mean = 1,  // the mean over the input's tokens
    Cls = 2,  // the first token's ([CLS])
    Last = 3,  // the last token's (decoder embedding models)
    Rank = 4,  // a reranker's relevance score from the classification head
};
std::string_view pooling_name(Pooling p);
// "none", "mean", "cls", "last", "rank"; nullopt for anything else.
std::optional<Pooling> parse_pooling(std::string_view name);

struct ModelConfig {
    const ArchDesc* arch = nullptr;
    uint32_t n_vocab = 0;
    uint32_t dim = 0;  // embedding length
    uint32_t n_layers = 0;
    uint32_t n_heads = 0;
    uint32_t n_kv_heads = 0;
    uint32_t head_dim = 0;  // attention.key_length, default dim / n_heads (Gemma, Qwen3: q_dim != dim)
    uint32_t ffn_dim = 0;
    uint32_t n_ctx_train = 0;  // <arch>.context_length
    float norm_eps = 1e-5f;  // RMSNorm or LayerNorm epsilon, as the architecture's norm
    uint32_t rope_dim = 0;  // rotated dims per head; defaults to head_dim
    // M-RoPE (AttentionDesc::mrope): pairs of each head per position component (t, h, w, e), pair i
    // taking component c by i % (their sum), as ops::RopeSections; all zero for one position per token.
    std::array<uint32_t, 4> rope_sections{};
    RopeConfig rope;  // global (full-attention) layers
    RopeConfig rope_local;  // sliding-window layers (the same as rope unless AttentionDesc::local_rope_base)
    std::string rope_scaling = "none";  // none, linear, yarn; "llama3" files are "none" + rope_freqs
    // Frequency factors present in the file; which one a context uses is rope_factors_for().
    bool has_rope_freqs = false, has_rope_long_short = false;
    uint32_t window = 0;  // sliding window of local layers (0 = none)
    std::vector<bool> local;  // per layer: uses the sliding window
    float attn_scale = 0;  // scale of q.k
    float attn_softcap = 0;  // 0 = off
    float final_softcap = 0;  // 0 = off
    bool tied_embeddings = false;  // no output.weight: logits use token_embd.weight
    bool causal = true;  // <arch>.attention.causal, default the architecture's
    Pooling pooling = Pooling::None;  // <arch>.pooling_type
    uint32_t n_token_types = 0;  // rows of token_types.weight (encoders)
    uint32_t n_cls_out = 0;  // labels of a reranker's cls.output.weight; 0: no such tensor
    // A reranker's classification head, as llama.cpp reads one: cls.weight with cls.bias (then
    // cls.output when present), or cls.output alone. Decided here; model/embedding.cpp reads it.
    bool cls_head = false;
    float max_alibi_bias = 0;  // ALiBi (PositionKind::Alibi): the slopes' max bias; 0 = no ALiBi
    uint32_t n_rel_buckets = 0;  // T5 (PositionKind::RelativeBias): relative-position buckets; 0 = none
    int32_t decoder_start_token = -1;  // encoder-decoder: the decoder's first token; -1 = BOS
    float clamp_kqv = 0;  // q, k, v clamped to [-clamp_kqv, clamp_kqv] after their biases; 0 = off
    // Mixture of experts (ArchDesc::moe()): n_expert experts of expert_ffn_dim, n_expert_used per token.
    uint32_t n_expert = 0, n_expert_used = 0;
    uint32_t expert_ffn_dim = 0;  // <arch>.expert_feed_forward_length, default feed_forward_length
    uint32_t shared_ffn_dim = 0;  // the shared expert's (<arch>.expert_shared_feed_forward_length)
    bool expert_norm = false;  // the chosen weights renormalised to sum 1 (<arch>.expert_weights_norm)
    float expert_scale = 1.0f;  // then scaled (<arch>.expert_weights_scale)
    bool expert_sigmoid = false;  // <arch>.expert_gating_func 2: sigmoid gating instead of softmax
    // <arch>.expert_gating_func 3, or ExpertGating::SoftmaxOfChosen: softmax over the chosen logits
    bool expert_softmax_chosen = false;
    uint32_t n_expert_groups = 1, n_group_used = 1;  // group-limited routing (<arch>.expert_group_count, _used_count)
    bool expert_probs_bias = false;  // blk.N.exp_probs_b.bias in the file (DeepSeek-V3's selection bias)
    uint32_t n_dense_lead = 0;  // ExpertLayers::AfterDense: <arch>.leading_dense_block_count
    // ExpertDesc::per_expert_tensors: the file stores every expert stack one tensor per expert (Mixtral's
    // first conversions), decided from the first layer for the whole file.
    bool experts_split = false;
    // Multi-head latent attention (AttentionDesc::mla): head_dim is the cached row, kv_lora_rank + rope_dim
    // (attention.key_length), v_head_dim the latent (kv_lora_rank), n_kv_heads 1; q_lora_rank 0 means
    // q = wq · x; mla_qk / mla_v the per-head q/k and v dims of the uncompressed heads (key_length_mla,
    // value_length_mla; in an older file, mla_joined_kv_b below, its key_length and value_length).
    uint32_t q_lora_rank = 0, kv_lora_rank = 0, mla_qk = 0, mla_v = 0;
    // An older conversion (before 2025): no *_mla keys, attention.key_length / value_length the
    // uncompressed heads', and one attn_kv_b per layer holding each head's k_nope and v rows. It runs
    // as the others do (the cache holds the latent): the loader derives attn_k_b and attn_v_b from it.
    bool mla_joined_kv_b = false;
    uint32_t v_head_dim = 0;  // attention.value_length; head_dim but for latent attention

    uint32_t q_dim() const { return n_heads * head_dim; }
    uint32_t v_dim() const { return v_head_dim ? v_head_dim : head_dim; }
    // Latent attention's cache holds K rows only: V is their latent part.
    bool v_in_k() const { return arch->attn.mla; }
    bool is_moe_layer(uint32_t layer) const { return arch->moe() && layer >= n_dense_lead; }
    uint32_t kv_dim() const { return n_kv_heads * head_dim; }
    // Position components per token: 4 with M-RoPE (rope_sections), else 1.
    // An image's rows take the positions of their grid (M-RoPE) rather than consecutive ones, so the
    // image is evaluated in one call (SequenceModel::eval_embeddings with its ImageGrid).
    bool places_images_by_grid() const { return arch->attn.mrope; }
    uint32_t pos_width() const {
        return rope_sections[0] + rope_sections[1] + rope_sections[2] + rope_sections[3] ? 4 : 1;
    }
    bool is_local(uint32_t layer) const { return !local.empty() && local[layer]; }
    const RopeConfig& rope_for(uint32_t layer) const { return is_local(layer) ? rope_local : rope; }
    // Phi-3 LongRoPE: the long factors once the context exceeds the original length.
    RopeFactors rope_factors_for(uint32_t n_ctx) const;

    // Reads and validates; throws ModelConfigError whose message names the file, the key or
    // tensor, and (for shapes) the expected and actual ggml dims. An unknown architecture gets
    // the list of supported ones.
    static ModelConfig from_gguf(const GgufFile& file);
    // The encoder of an encoder-decoder file (StackDesc::encoder_arch: T5's t5encoder, its keys under
    // the file's prefix); ModelConfigError for a file without one.
    static ModelConfig encoder_from_gguf(const GgufFile& file);
};

// The config's sizes for the shapes of model/arch/tensor_schema.h.
SchemaDims schema_dims(const ModelConfig& cfg);

}  // namespace vkllm
