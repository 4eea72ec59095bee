// The shape of a random model: architecture, sizes, weight types and the options each
// architecture's files carry, and the checks a shape must pass before a model is written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/testgen/quant_mix.h"
#include "runtime/quant/tensor_types.h"

namespace vkllm {

struct ArchDesc;

struct ModelShape {
    std::string arch = "llama";  // general.architecture: any of supported_arch_list()
    std::string variant;  // a variant row of it (ArchDesc::variant: t5 / t5encoder "v1.0"); "": the main one
    uint32_t dim = 64;
    uint32_t n_layers = 2;
    uint32_t n_heads = 4;
    uint32_t n_kv_heads = 4;
    uint32_t ffn_dim = 128;
    uint32_t n_vocab = 512;
    uint32_t n_ctx = 256;
    uint32_t head_dim = 0;  // 0: dim / n_heads; else written as attention.key_length (Gemma, Qwen3 shapes)
    uint32_t window = 0;  // sliding window of the architectures that have one; 0: the architecture's default (32)
    // SentencePiece vocabs: the last six pieces become Qwen2.5-Coder's fill-in-the-middle control tokens;
    // prefix, suffix and middle named by tokenizer.ggml.fim_*_token_id, the others found by text.
    bool fim_tokens = false;
    // SentencePiece vocabs: control tokens with these texts, in the pieces just before the FIM ones
    // (gen-model --mmproj: the vision projector's layout tokens, image_layout_tokens, which llama.cpp's
    // mtmd and vkllm look up by text).
    std::vector<std::string> control_tokens;
    bool rope_freqs = false;  // llama: a rope_freqs.weight of frequency factors (Llama 3.x scaling)
    // RoPE scaling written as <arch>.rope.scaling.*: "none", "linear" or "yarn" with this factor;
    // the original context is n_ctx / factor.
    std::string rope_scaling = "none";
    float rope_factor = 1.0f;
    TensorType weight_type = TensorType::F32;  // 2D matrices incl. token_embd; norms are always F32
    std::optional<QuantMix> mix;  // set: each matrix gets its type from the mix instead
    uint64_t seed = 1;
    float rms_eps = 1e-5f;  // the norm epsilon (LayerNorm's for gpt2)
    float rope_base = 10000.0f;
    bool tied_embeddings = false;  // true: no output.weight (always for gemma2 / gemma3, as the real ones)
    // <arch>.pooling_type (ModelConfig's Pooling values): encoders always have one (unset: 1, mean);
    // a decoder gets the key only when set (an embedding decoder such as Qwen3-Embedding: 3, last).
    std::optional<uint32_t> pooling;
    float clamp_kqv = 0;  // mpt: <arch>.attention.clamp_kqv (0: not written)
    bool optional_biases = false;  // also write the biases the architecture reads only when present
    uint32_t n_token_types = 2;  // rows of token_types.weight (encoders): BERT 2, XLM-RoBERTa 1
    // Mixture of experts: n_expert experts of expert_ffn (0: ffn_dim) per layer, n_expert_used per token,
    // a shared expert of shared_ffn (0: ffn_dim) where the architecture has one. A llama with
    // n_expert > 0 is written as Mixtral is (its "moe" row); qwen2moe / qwen3moe need n_expert > 0.
    uint32_t n_expert = 0, n_expert_used = 0, expert_ffn = 0, shared_ffn = 0;
    // Each expert of a stack as its own tensor (ffn_gate.N, ...), as Mixtral's first conversions
    // wrote them; the bytes are the stacked file's, expert by expert (ExpertDesc::per_expert_tensors).
    bool split_experts = false;
    // deepseek2: latent attention with head_dim the per-head q/k dims (key_length_mla) of which rope_dim
    // rotate (0: 32), values of v_head_dim per head (0: head_dim - rope_dim), a latent of kv_lora
    // (0: 128) and q through a q_lora rank (0: wq directly, as V2-Lite). The first n_dense_lead layers
    // dense (ffn_dim), n_shared experts of expert_ffn beside the routed ones, groups for the routing;
    // sigmoid_gating writes V3's sigmoid router with its selection bias (exp_probs_b), else V2's softmax.
    uint32_t kv_lora = 0, q_lora = 0, rope_dim = 0, v_head_dim = 0;
    // deepseek2 as converted before 2025: no *_mla keys, key_length / value_length the uncompressed
    // heads', a KV head per query head, and one attn_kv_b per layer instead of attn_k_b / attn_v_b.
    bool mla_kv_b = false;
    uint32_t n_dense_lead = 0, n_shared_experts = 1, expert_groups = 1, groups_used = 1;
    bool sigmoid_gating = false, expert_norm = false;
    float expert_scale = 1.0f;
    // The row of the architecture table this shape writes (variant, or experts on a llama).
    const ArchDesc& arch_desc() const;
    uint32_t q_dim() const { return n_heads * (head_dim ? head_dim : dim / n_heads); }
    std::string name = "vkllm-random";
};

// The small shape a row of the architecture table gives its tests (ArchDesc::test) over ModelShape's
// defaults: the row's name and variant, its KV heads, layers, head size, window, clamp, biases,
// experts and latent attention's sizes.
ModelShape test_shape(const ArchDesc& a);

// deepseek2's latent attention sizes of a shape, its defaults filled in.
struct MlaDims {
    uint32_t rope = 0, kv_lora = 0, q_lora = 0, v = 0;
};
MlaDims mla_dims(const ModelShape& s);

// Throws std::invalid_argument naming the offending field: zero sizes, heads not dividing dim,
// kv heads not dividing heads, odd head_dim, a row length (dim or ffn, naming the tensors that
// have it) that is not a whole number of the weight type's blocks (of 32 for a mix, whose
// 256-element types fall back per tensor), a vocab too small for the 259 special and byte tokens.
void validate_model_shape(const ModelShape& shape);

}  // namespace vkllm
