// The architectures vkllm runs (decoders, and BERT-style encoders that produce embeddings), as data: each is a description (norm kind, activation,
// biases, position encoding, sliding windows, soft-caps, fused tensors) that the one forward pass
// (model/forward/model_gpu.cpp) and the one host reference (model/forward/model_cpu.cpp) read.
// Adding an architecture that only recombines these features is one table entry in
// architecture.cpp; a new feature is a field here plus its branch in both forward passes.
//
// The tensors each description implies (names, shapes, which are required) are listed once, in
// model/arch/tensor_schema.h.
#pragma once

#include "runtime/ops/op_types.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace vkllm {

enum class NormKind {
    Rms,    // x / sqrt(mean(x^2) + eps) * w
    Layer,  // (x - mean) / sqrt(var + eps) * w + b
};

enum class FfnKind {
    SwiGlu,  // down(silu(gate(x)) * up(x))
    GeGlu,   // down(gelu(gate(x)) * up(x))          (Gemma)
    Gelu,    // down(gelu(up(x))), no gate            (GPT-2)
    Relu,    // down(relu(up(x))), no gate            (T5 v1.0)
    // down(g * sigmoid(1.702 g) * (u + 1)), g = min(gate(x), 7), u = clamp(up(x), -7, 7)  (gpt-oss's
    // experts; llama.cpp's swiglu_oai with the constants it hard-codes)
    SwiGluOai,
};
// Whether the feed-forward has a gate projection (ffn_gate, or the gated half of a fused ffn_up).
constexpr bool gated(FfnKind k) { return k == FfnKind::SwiGlu || k == FfnKind::GeGlu || k == FfnKind::SwiGluOai; }

// Where a block's norms sit around its residual add.
enum class NormPlacement {
    Pre,         // x += block(norm(x))                     (LLaMA and most decoders)
    PreAndPost,  // x += post_norm(block(norm(x)))          (Gemma 2/3: post_attention_norm, post_ffw_norm)
    Post,        // x = norm(x + block(x))                  (BERT: attn_output_norm, layer_output_norm)
};

enum class PositionKind {
    Rope,     // rotary, applied to q and k per layer
    Learned,  // position_embd rows added to the token embeddings (GPT-2)
    Alibi,    // no position input: attention scores gain -slope_h * |i - j| (BLOOM, MPT, jina-bert-v2)
    RelativeBias,  // attention scores gain a learned bias per head and bucket of j - i (T5: attn_rel_b)
};

enum class T5Stack { None, Encoder, Decoder };

struct ArchDesc {
    std::string_view name;  // general.architecture, also the prefix of its hyperparameter keys
    // "" for the row find_arch(name) gives; else a variant of the same general.architecture that the
    // file's tensors select (arch_for_file): T5 v1.0 ("v1.0": ReLU, no ffn_gate) beside v1.1.
    std::string_view variant;
    NormKind norm = NormKind::Rms;
    FfnKind ffn = FfnKind::SwiGlu;
    PositionKind positions = PositionKind::Rope;
    ops::RopeLayout rope_layout = ops::RopeLayout::Adjacent;

    // Tensors: fused_qkv = one attn_qkv tensor holds the rows of q, then k, then v; fused_gate_up
    // = ffn_up holds the rows of gate, then up (no ffn_gate tensor).
    bool fused_qkv = false;
    bool fused_gate_up = false;
    // Required biases. Biases of q, k, v and attn_output are read when present for every
    // architecture (some LLaMA fine-tunes have them), as llama.cpp does.
    bool qkv_bias = false;   // attn_q/k/v (or attn_qkv) .bias
    bool out_bias = false;   // attn_output.bias (gpt-oss)
    bool all_bias = false;   // every projection and every norm has a bias (GPT-2)
    // attn_q_norm / attn_k_norm: RMSNorm of each head of q and k before RoPE; in a LayerNorm
    // architecture a LayerNorm with its bias (attn_q_norm.bias: jina-bert-v2 qk-post-norm).
    bool qk_norm = false;
    bool qk_norm_full = false;  // with qk_norm: the norm spans all of q (q_dim) and of k (kv_dim) (OLMoE, jina)
    NormPlacement norm_placement = NormPlacement::Pre;
    // NormPlacement::Post: after attn_output_norm the layer's input is added once more and
    // attn_norm_2 normalizes the sum, x = norm_2(norm(x + attention) + x) (jina-bert-v2 qk-post-norm,
    // jina-embeddings-v2-base-code, as llama.cpp computes it).
    bool attn_norm_2 = false;
    bool embed_scale = false;  // token embeddings are multiplied by sqrt(dim)
    // MPT: every bias, the norms' included, is read when present (its no_bias files have none).
    bool optional_biases = false;
    // Reads `<arch>.attention.clamp_kqv`: q, k and v clamped to [-c, c] after their biases (MPT).
    bool clamp_kqv = false;
    // ALiBi's max bias, fixed whatever the file says (llama.cpp hard-codes 8 for BLOOM and
    // jina-bert-v2); 0: read from `<arch>.attention.max_alibi_bias`, which is then required (MPT).
    float default_max_alibi_bias = 0;
    bool rope_factor_tensors = false;  // rope_factors_long / _short (Phi-3 LongRoPE)

    // Encoders (BERT): every token attends to every token of its input (`<arch>.attention.causal`
    // overrides), the input's token types add rows of token_types.weight (all type 0, as llama.cpp
    // feeds them), token_embd_norm normalizes the embeddings, and there is no LM head: the output is
    // the last layer's hidden states, pooled (model/embedding.h).
    bool causal = true;
    bool token_types = false;
    bool embed_norm = false;
    bool lm_head = true;
    // A reranker's head is cls.weight (dim -> 1) and its bias alone, tanh'd (jina-reranker-v1), not
    // cls (dim -> dim), tanh, cls.output (dim -> labels).
    bool cls_single = false;
    // An encoder whose hidden states go through output_norm (T5's encoder).
    bool encoder_output_norm = false;
    // T5: tensor names enc.blk.N.* (the encoder) or dec.blk.N.* (the decoder) with attn_o for the
    // output projection, enc.output_norm / dec.output_norm; scores are not scaled by 1/sqrt(head_dim)
    // (T5 folds that into its weights).
    T5Stack t5 = T5Stack::None;
    bool unscaled_scores = false;
    // Encoder-decoder (T5): each decoder layer attends, after its self-attention, over the encoder's
    // output (cross_attn_norm, cross_attn_q/k/v/o); the file also holds the encoder, described by
    // the row `encoder_arch` with its keys under this file's prefix. The decoder's layer count is
    // `<arch>.decoder_block_count` (default block_count), generation starts from
    // `<arch>.decoder_start_token_id`.
    bool cross_attention = false;
    std::string_view encoder_arch;

    // Sliding-window attention: layer l is local when swa_period > 0 and l % swa_period <
    // swa_period - 1 (Gemma 2: every other layer, Gemma 3: five of six). default_window is the
    // window when the file has no `<arch>.attention.sliding_window` key (0: the key is required).
    uint32_t swa_period = 0;
    uint32_t default_window = 0;
    bool local_rope_base = false;  // local layers use rope base 10000 (or rope.freq_base_swa) unscaled (Gemma 3)

    // Mixture of experts (Mixtral, Qwen2/3-MoE): every layer's FFN is `<arch>.expert_count` experts
    // (ffn_{gate,up,down}_exps, stacked along ggml's ne2) of which the router ffn_gate_inp picks
    // `<arch>.expert_used_count` per token, weighted by their gating probabilities, renormalised over
    // the chosen ones where moe_norm_weights (`<arch>.expert_weights_norm` overrides). shared_expert:
    // a dense FFN (ffn_*_shexp) runs beside them, its output scaled by sigmoid(ffn_gate_inp_shexp · x)
    // (Qwen2-MoE). The FFN kind (SwiGlu) is the experts'.
    bool moe = false;
    bool moe_norm_weights = false;
    // The expert stacks may instead be one tensor per expert (ffn_gate.N, ffn_up.N, ffn_down.N), as
    // Mixtral's first conversions wrote them (TensorSpec::per_expert_name); they are uploaded back to
    // back as one stack.
    bool per_expert_tensors = false;
    bool shared_expert = false;
    // A file without `<arch>.expert_feed_forward_length` has experts feed_forward_length /
    // expert_used_count wide (llama.cpp's Qwen-MoE rule: Qwen1.5-MoE conversions); else
    // feed_forward_length wide (Mixtral, OLMoE, whose files never carry the key).
    bool expert_ffn_per_used = false;
    // `<arch>.expert_feed_forward_length` is required (gpt-oss, as llama.cpp reads it).
    bool expert_ffn_required = false;
    // gpt-oss: the router and every expert projection have biases (ffn_gate_inp.bias,
    // ffn_{gate,up,down}_exps.bias), and the gating is a softmax over the chosen logits only,
    // whatever `<arch>.expert_gating_func` says (llama.cpp fixes both for the architecture).
    bool moe_biases = false;
    bool moe_softmax_chosen = false;
    // DeepSeek: the shared expert's output is added as it is (no ffn_gate_inp_shexp); it is
    // `<arch>.expert_shared_count` experts wide. The first `<arch>.leading_dense_block_count` layers
    // have a dense FFN (ffn_gate/up/down, feed_forward_length) instead of experts. Experts may be
    // chosen by probability + blk.N.exp_probs_b.bias (V3) and within groups (expert_group_count,
    // expert_group_used_count); the gating defaults to softmax.
    bool shared_ungated = false;
    bool leading_dense = false;

    // Multi-head latent attention (DeepSeek-V2/V3): q = wq_b · rms_norm(wq_a · x) (or wq · x without
    // attention.q_lora_rank), per head [nope | rope] of key_length_mla; the cache holds per token one
    // row [rope(k_pe) | rms_norm(latent)] of rope_dim + kv_lora_rank (attention.key_length), read by
    // attention as one KV head whose value is the latent (attention.value_length = kv_lora_rank).
    // Absorbed form: each head's query is [rope(q_pe) | wk_b_h · q_nope], its output wv_b_h · att_h
    // (value_length_mla per head) before wo.
    bool mla = false;

    // Attention sinks (gpt-oss): attn_sinks.weight holds one logit per query head that joins its
    // softmax and contributes no value.
    bool attn_sinks = false;
    // The GGUF name of the norm before the FFN (gpt-oss calls it post_attention_norm).
    std::string_view ffn_norm_name = "ffn_norm.weight";

    // Soft-capping, x -> cap * tanh(x / cap): defaults when the file has no key; 0 = off.
    float default_attn_softcap = 0;
    float default_final_softcap = 0;
    // Query scale 1/sqrt(dim / n_heads) instead of 1/sqrt(head_dim) for models with this many
    // layers (Gemma 27B; how llama.cpp tells them apart); 0 = never.
    uint32_t dim_scale_layers = 0;
};

// The description of `general.architecture`; nullptr when vkllm does not run it.
const ArchDesc* find_arch(std::string_view name);
// A variant row of `name` (ArchDesc::variant; "" is find_arch's row); nullptr when there is none.
const ArchDesc* find_arch(std::string_view name, std::string_view variant);
// "llama, qwen2, ..." for error messages and --help.
std::string supported_arch_list();

}  // namespace vkllm
