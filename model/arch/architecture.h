// The architectures vkllm runs (decoders, and BERT-style encoders that produce embeddings), as data: each is a description (norm kind, activation,
// biases, position encoding, sliding windows, soft-caps, fused tensors) that the one forward pass
// (model/forward/model_gpu.cpp) and the one host reference (model/forward/model_cpu.cpp) read.
// A description is a few small structs, one per block (norms, attention, feed-forward, mixture of
// experts, the stack as a whole), whose choices are enums that name them. Adding an architecture
// that only recombines these features is one row of the table in architecture.cpp; a new feature
// is a field here plus its branch in both forward passes.
//
// The tensors each description implies (names, shapes, which are required) are listed once, in
// model/arch/tensor_schema.h.
#pragma once

#include "runtime/ops/op_types.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace vkllm {

enum class NormKind {
    Rms,  // x / sqrt(mean(x^2) + eps) * w
    Layer,  // (x - mean) / sqrt(var + eps) * w + b
};

enum class FfnKind {
    SwiGlu,  // down(silu(gate(x)) * up(x))
    GeGlu,  // down(gelu(gate(x)) * up(x))          (Gemma)
    Gelu,  // down(gelu(up(x))), no gate            (GPT-2)
    Relu,  // down(relu(up(x))), no gate            (T5 v1.0)
    // down(g * sigmoid(1.702 g) * (u + 1)), g = min(gate(x), 7), u = clamp(up(x), -7, 7)  (gpt-oss's
    // experts; llama.cpp's swiglu_oai with the constants it hard-codes)
    SwiGluOai,
};
// Whether the feed-forward has a gate projection (ffn_gate, or the gated half of a fused ffn_up).
constexpr bool gated(FfnKind k) { return k == FfnKind::SwiGlu || k == FfnKind::GeGlu || k == FfnKind::SwiGluOai; }

// Where a block's norms sit around its residual add.
enum class NormPlacement {
    Pre,  // x += block(norm(x))                     (LLaMA and most decoders)
    PreAndPost,  // x += post_norm(block(norm(x)))          (Gemma 2/3: post_attention_norm, post_ffw_norm)
    Post,  // x = norm(x + block(x))                  (BERT: attn_output_norm, layer_output_norm)
};

enum class PositionKind {
    Rope,  // rotary, applied to q and k per layer
    Learned,  // position_embd rows added to the token embeddings (GPT-2)
    Alibi,  // no position input: attention scores gain -slope_h * |i - j| (BLOOM, MPT, jina-bert-v2)
    RelativeBias,  // attention scores gain a learned bias per head and bucket of j - i (T5: attn_rel_b)
};

// attn_q_norm / attn_k_norm: a norm of q and of k after their projections, before RoPE.
enum class QkNorm {
    None,
    PerHead,  // an RMSNorm of each head of q and k (Qwen3, Gemma 3)
    Whole,  // an RMSNorm spanning all of q (q_dim) and all of k (kv_dim) (OLMoE)
    // a LayerNorm with its bias (attn_q_norm.bias) spanning all of q and all of k (jina-bert-v2
    // qk-post-norm)
    WholeLayerNorm,
};

// The biases a file must have. Biases of q, k, v, attn_output, ffn_up and ffn_down are read when
// present for every architecture (some LLaMA fine-tunes have them), as llama.cpp does; a LayerNorm's
// bias is required, but under AllOptional.
enum class Biases {
    NoneRequired,
    Qkv,  // attn_q/k/v (or attn_qkv) .bias (Qwen2)
    QkvOut,  // those and attn_output.bias (gpt-oss)
    All,  // every projection and every norm has a bias (GPT-2)
    // MPT: every bias, the norms' included, is read when present (its no_bias files have none).
    AllOptional,
};

// T5: tensor names enc.blk.N.* (the encoder) or dec.blk.N.* (the decoder) with attn_o for the
// output projection, enc.output_norm / dec.output_norm.
enum class T5Stack { None, Encoder, Decoder };

// Which layers' FFN is a mixture of experts: `<arch>.expert_count` experts (ffn_{gate,up,down}_exps,
// stacked along ggml's ne2) of which the router ffn_gate_inp picks `<arch>.expert_used_count` per
// token, weighted by their gating probabilities. The FFN kind (FfnDesc::kind) is the experts'.
enum class ExpertLayers {
    None,  // every layer's FFN is dense
    All,  // Mixtral, Qwen2/3-MoE, OLMoE, gpt-oss
    // DeepSeek: the first `<arch>.leading_dense_block_count` layers have a dense FFN (ffn_gate/up/down,
    // feed_forward_length) instead of experts. Experts may be chosen by probability +
    // blk.N.exp_probs_b.bias (V3) and within groups (expert_group_count, expert_group_used_count).
    AfterDense,
};

// How the router's logits become the chosen experts' weights where the file does not say
// (`<arch>.expert_gating_func`: 1 softmax, 2 sigmoid, 3 softmax of the chosen logits;
// `<arch>.expert_weights_norm` overrides the renormalisation).
enum class ExpertGating {
    Softmax,  // a softmax over all experts, the chosen weights as they are (Qwen2-MoE, OLMoE, DeepSeek)
    SoftmaxNormed,  // the chosen experts' softmax probabilities renormalised over them (Mixtral, Qwen3-MoE, as llama.cpp)
    // gpt-oss: a softmax over the chosen logits only, whatever `<arch>.expert_gating_func` says
    // (llama.cpp fixes it for the architecture)
    SoftmaxOfChosen,
};

// The experts' width when the file has no `<arch>.expert_feed_forward_length`.
enum class ExpertWidth {
    Ffn,  // feed_forward_length (Mixtral, OLMoE, whose files never carry the key)
    // feed_forward_length / expert_used_count (llama.cpp's Qwen-MoE rule: Qwen1.5-MoE conversions)
    FfnPerUsed,
    Required,  // the key is required (gpt-oss, DeepSeek, as llama.cpp reads it)
};

// A dense FFN (ffn_*_shexp) that runs beside the chosen experts.
enum class SharedExpert {
    None,
    Gated,  // its output scaled by sigmoid(ffn_gate_inp_shexp · x) (Qwen2-MoE)
    // DeepSeek: its output added as it is (no ffn_gate_inp_shexp); it is `<arch>.expert_shared_count`
    // experts wide.
    Ungated,
};

struct NormDesc {
    NormKind kind = NormKind::Rms;
    NormPlacement placement = NormPlacement::Pre;
    // NormPlacement::Post: after attn_output_norm the layer's input is added once more and
    // attn_norm_2 normalizes the sum, x = norm_2(norm(x + attention) + x) (jina-bert-v2 qk-post-norm,
    // jina-embeddings-v2-base-code, as llama.cpp computes it).
    bool attn_norm_2 = false;
    // The GGUF name of the norm before the FFN (gpt-oss calls it post_attention_norm).
    std::string_view ffn_norm_name = "ffn_norm.weight";
    bool embed_norm = false;  // token_embd_norm normalizes the token embeddings (BERT, BLOOM)
    bool embed_scale = false;  // token embeddings are multiplied by sqrt(dim)
};

struct AttentionDesc {
    PositionKind positions = PositionKind::Rope;
    ops::RopeLayout rope_layout = ops::RopeLayout::Adjacent;
    bool rope_factor_tensors = false;  // rope_factors_long / _short (Phi-3 LongRoPE)
    // M-RoPE (Qwen2-VL's text model): `<arch>.rope.dimension_sections` (required) splits each head's
    // pairs among 4 position components per token (t, h, w, e); text has all three of t, h, w at its
    // position, an image's rows their grid's (ModelConfig::rope_sections, ImageGrid).
    bool mrope = false;
    // ALiBi's max bias, fixed whatever the file says (llama.cpp hard-codes 8 for BLOOM and
    // jina-bert-v2); 0: read from `<arch>.attention.max_alibi_bias`, which is then required (MPT).
    float default_max_alibi_bias = 0;
    // One attn_qkv tensor holds the rows of q, then k, then v.
    bool fused_qkv = false;
    QkNorm qk_norm = QkNorm::None;
    // Reads `<arch>.attention.clamp_kqv`: q, k and v clamped to [-c, c] after their biases (MPT).
    bool clamp_kqv = false;
    // Attention sinks (gpt-oss): attn_sinks.weight holds one logit per query head that joins its
    // softmax and contributes no value.
    bool sinks = false;
    // Multi-head latent attention (DeepSeek-V2/V3): q = wq_b · rms_norm(wq_a · x) (or wq · x without
    // attention.q_lora_rank), per head [nope | rope] of key_length_mla; the cache holds per token one
    // row [rope(k_pe) | rms_norm(latent)] of rope_dim + kv_lora_rank (attention.key_length), read by
    // attention as one KV head whose value is the latent (attention.value_length = kv_lora_rank).
    // Absorbed form: each head's query is [rope(q_pe) | wk_b_h · q_nope], its output wv_b_h · att_h
    // (value_length_mla per head) before wo.
    bool mla = false;
    // Encoder-decoder (T5): each decoder layer attends, after its self-attention, over the encoder's
    // output (cross_attn_norm, cross_attn_q/k/v/o); generation starts from
    // `<arch>.decoder_start_token_id`.
    bool cross_attention = false;
    // Scores are not scaled by 1/sqrt(head_dim) (T5 folds that into its weights).
    bool unscaled_scores = false;
    // Query scale 1/sqrt(dim / n_heads) instead of 1/sqrt(head_dim) for models with this many
    // layers (Gemma 27B; how llama.cpp tells them apart); 0 = never.
    uint32_t dim_scale_layers = 0;
    // Soft-capping of the scores, x -> cap * tanh(x / cap): the default when the file has no key; 0 = off.
    float default_softcap = 0;
    // Sliding-window attention: layer l is local when swa_period > 0 and l % swa_period <
    // swa_period - 1 (Gemma 2: every other layer, Gemma 3: five of six). default_window is the
    // window when the file has no `<arch>.attention.sliding_window` key (0: the key is required).
    uint32_t swa_period = 0;
    uint32_t default_window = 0;
    bool local_rope_base = false;  // local layers use rope base 10000 (or rope.freq_base_swa) unscaled (Gemma 3)
};

struct FfnDesc {
    FfnKind kind = FfnKind::SwiGlu;
    // ffn_up holds the rows of gate, then up (no ffn_gate tensor).
    bool fused_gate_up = false;
};

// Mixture of experts (Mixtral, Qwen2/3-MoE, OLMoE, gpt-oss, DeepSeek).
struct ExpertDesc {
    ExpertLayers layers = ExpertLayers::None;
    ExpertGating gating = ExpertGating::Softmax;
    ExpertWidth width = ExpertWidth::Ffn;
    SharedExpert shared = SharedExpert::None;
    // gpt-oss: the router and every expert projection have biases (ffn_gate_inp.bias,
    // ffn_{gate,up,down}_exps.bias).
    bool biases = false;
    // The expert stacks may instead be one tensor per expert (ffn_gate.N, ffn_up.N, ffn_down.N), as
    // Mixtral's first conversions wrote them (TensorSpec::per_expert_name); they are uploaded back to
    // back as one stack.
    bool per_expert_tensors = false;
};

// The stack as a whole: a decoder with an LM head, an encoder whose output is its hidden states
// (BERT, T5's encoder), or T5's decoder over its encoder.
struct StackDesc {
    // Encoders (BERT): every token attends to every token of its input (`<arch>.attention.causal`
    // overrides), the input's token types add rows of token_types.weight (all type 0, as llama.cpp
    // feeds them), and there is no LM head: the output is the last layer's hidden states, pooled
    // (model/embedding.h).
    bool causal = true;
    bool token_types = false;
    bool lm_head = true;
    // A reranker's head is cls.weight (dim -> 1) and its bias alone, tanh'd (jina-reranker-v1), not
    // cls (dim -> dim), tanh, cls.output (dim -> labels).
    bool cls_single = false;
    // An encoder whose hidden states go through output_norm (T5's encoder).
    bool encoder_output_norm = false;
    // Soft-capping of the logits, x -> cap * tanh(x / cap): the default when the file has no key; 0 = off.
    float default_final_softcap = 0;
    T5Stack t5 = T5Stack::None;
    // Encoder-decoder (T5): the file also holds the encoder, described by the row `encoder_arch` with
    // its keys under this file's prefix. The decoder's layer count is `<arch>.decoder_block_count`
    // (default block_count).
    std::string_view encoder_arch;
};

// The small shape the tests give this row (model/testgen's test_shape() reads it, over ModelShape's
// defaults: dim 64, 4 heads): what its files need to be valid at that size, and the features its
// tests stress. 0: the generator's default.
struct TestShape {
    uint32_t n_kv_heads = 2;  // of 4 query heads (GQA); 4 for the architectures whose models have none
    uint32_t n_layers = 2;
    uint32_t head_dim = 0;  // at dim 64 (a K-quant test scales it with dim); 0: dim / heads
    uint32_t window = 0;  // the sliding window; 0: gen-model's 32
    float clamp_kqv = 0;  // `<arch>.attention.clamp_kqv` (AttentionDesc::clamp_kqv)
    bool optional_biases = false;  // also write the biases the architecture reads when present
    // A mixture of experts: experts, chosen per token, their width and the shared expert's (0: ffn).
    uint32_t n_expert = 0, n_expert_used = 0, expert_ffn = 0, shared_ffn = 0;
    // Latent attention: head_dim above is the per-head q/k dims of which rope_dim rotate; the latent
    // and q ranks, the values' width; the leading dense layers (ExpertLayers::AfterDense).
    uint32_t rope_dim = 0, kv_lora = 0, q_lora = 0, v_head_dim = 0, n_dense_lead = 0;
};

struct ArchDesc {
    std::string_view name;  // general.architecture, also the prefix of its hyperparameter keys
    // "" for the row find_arch(name) gives; else a variant of the same general.architecture that the
    // file's tensors select (arch_for_file): T5 v1.0 ("v1.0": ReLU, no ffn_gate) beside v1.1.
    std::string_view variant;
    NormDesc norm;
    AttentionDesc attn;
    FfnDesc ffn;
    ExpertDesc experts;
    Biases biases = Biases::NoneRequired;
    StackDesc stack;
    TestShape test;

    // Whether any layer's FFN is a mixture of experts.
    constexpr bool moe() const { return experts.layers != ExpertLayers::None; }
};

// Every row of the table, each variant after its main row, the main rows in supported_arch_list()'s
// order: for the tests and tools that go over every architecture.
std::span<const ArchDesc> all_archs();
// The description of `general.architecture`; nullptr when vkllm does not run it.
const ArchDesc* find_arch(std::string_view name);
// A variant row of `name` (ArchDesc::variant; "" is find_arch's row); nullptr when there is none.
const ArchDesc* find_arch(std::string_view name, std::string_view variant);
// "llama, qwen2, ..." for error messages and --help.
std::string supported_arch_list();

}  // namespace vkllm
