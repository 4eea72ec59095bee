// Every decision of the device forward pass, made once by pure functions: which projections fuse,
// which ops ride in a matvec, how attention ends, which kernel each linear layer runs. The recorder
// (model_gpu.cpp) follows a LayerPlan top to bottom, and the start-up warm-up lists the pipelines of
// the same plans (ModelGpu::pipelines()), so the two cannot drift.
#pragma once

#include <optional>

#include "model/arch/model_config.h"
#include "model/forward/model_weights.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/moe.h"
#include "runtime/ops/rope.h"

#include <vector>

namespace vkllm {

// What one recording computes: a chunk of n tokens of one sequence, or (decode_batch) one token for
// each of n sequences.
struct StepShape {
    uint32_t n = 1;
    bool decode_batch = false;
    // The chunk's input is rows of embeddings the host wrote (an image's encoder output, in the text
    // model's width), not token ids: the embedding step copies them in, unscaled.
    bool rows_in = false;
    // The chunk's tokens also see the ones after them in the chunk (Gemma 3's image tokens, as
    // llama.cpp's mtmd decodes them): not causal, each from its own window where the layer has one.
    bool bidirectional = false;
    // A decode batch in which some sequence has several rows at consecutive positions (its next
    // token and drafted ones to verify): attention runs row by row, each as a lone token's, since
    // the batched kernels would read keys that another row of the same dispatch stores.
    bool repeats = false;
    // CacheBlend's selection (ModelGpu::eval_v): the chunk runs the layers before this one, then
    // only this layer's V projection (into the activations' v), and stops: no attention there, no
    // head. Absent: every layer.
    std::optional<uint32_t> v_of_layer;
    // A lone token or a decode batch: the rows of a batch must compute what a lone token does (batch
    // invariance), so both take the decode forms.
    bool decode() const { return n == 1 || decode_batch; }
    auto operator<=>(const StepShape&) const = default;
};

// KV rows layer `layer` keeps for a context of n_ctx: n_ctx, or for a sliding-window layer a ring of
// window + ubatch - 1 rows (a chunk of ubatch queries needs the window before its first token).
uint32_t kv_cache_rows(const ModelConfig& cfg, uint32_t layer, uint32_t n_ctx, uint32_t ubatch);

// The KV cache is paged: each layer's K (and V) is one pool of blocks of kKvBlockRows rows shared by
// every sequence, and a sequence's rows are found through its block table (ops::KvPages). The
// kernels look a block up per key whatever its size, so small blocks cost only table entries, and
// they bound what a sequence wastes at its end and what sharing a prefix copies on write (at most
// one block per sequence): 8 rows keep 16 slots over a 1,000-token shared prompt near 1.1x of one.
inline constexpr uint32_t kKvBlockRows = 8;
// Blocks that hold `rows` rows of one sequence.
inline constexpr uint32_t kv_blocks(uint32_t rows) { return (rows + kKvBlockRows - 1) / kKvBlockRows; }

// The cache a model's attention reads: sizes it per layer.
struct KvGeometry {
    uint32_t n_ctx = 0;  // rows per sequence of full-attention layers
    uint32_t ubatch = 0;  // sizes the sliding-window rings (kv_cache_rows)
    ops::KvType type = ops::KvType::F16;
};

// Attention of `layer` over its cache for n_tokens queries per sequence; `bidirectional`: a causal
// model's chunk whose tokens see each other (StepShape::bidirectional).
ops::AttentionParams layer_attention_params(const ModelConfig& cfg, uint32_t layer, uint32_t n_tokens,
                                            const KvGeometry& kv, bool bidirectional = false);

// The rotation `layer` applies to n_heads heads of head_dim values, the first rot_dim of each
// turning: its RoPE config (scaling, YaRN) and the model's M-RoPE sections. The device pass and the
// host reference both take it from here.
ops::RopeParams layer_rope_params(const ModelConfig& cfg, uint32_t layer, uint32_t n_heads, uint32_t head_dim,
                                  uint32_t rot_dim);

inline constexpr Role kNoRole = Role::None;

// One projection: y (+)= W · input(x) (+ bias).
struct LinearStep {
    Role w = kNoRole;  // kNoRole: the step does not run
    Role bias = kNoRole;  // kNoRole: no bias in the epilogue
    bool residual = false;  // y += ... (the residual stream), else y = ...
    ops::MatvecInput::Kind input = ops::MatvecInput::Kind::Plain;
    ops::LinearPlan kernel;
    bool runs() const { return w != kNoRole; }
};

// x += post_norm(wo · attention(rope(qk_norm(q)), rope(qk_norm(k)), v)), q|k|v = W · norm(x) (+ b);
// with norm_after (BERT) instead: q|k|v = W · x (+ b), x = norm(x + wo · attention(q, k, v) + bo)
struct AttentionBlockPlan {
    bool fold_norm = false;  // the RMSNorm rides in the q/k/v matvecs (decode steps)
    bool fused_qkv = false;  // one matvec over wqkv into one (q + 2 kv) vector (a lone token)
    LinearStep qkv;  // fused_qkv
    LinearStep q, k, v;  // otherwise
    QkNorm qk_norm = QkNorm::None;  // the norm of q and k (AttentionDesc::qk_norm)
    bool rope = false;  // rotary positions (learned ones are added at the embedding)
    // RoPE of q and k, the K/V store and attention in one kernel (ops::attention_store): decode
    // steps where it takes the shape. Otherwise rope, kv_store_pair and attention.
    bool fused_store = false;
    // A decode batch's attention (and K/V store) in one dispatch for all its sequences, each through
    // its block table (params.batch): every causal decode batch without a position-bias table. Else one
    // call per sequence.
    bool batched = false;
    ops::AttentionParams params;  // per call: n tokens of a chunk; 1 per sequence, or a batch's n with batched
    LinearStep wo;
    bool post_norm = false;  // wo's output is normalized before the residual add (Gemma)
    bool norm_after = false;  // the block's norm follows the residual add (NormPlacement::Post)
    bool norm_2 = false;  // then x = norm_2(x + the layer's input) (NormDesc::attn_norm_2)

    // Latent attention (AttentionDesc::mla) in its absorbed form, from xn = norm(x), H heads:
    //   q (n, H, qk)        = wq_b · rms_norm(wq_a · xn)   (q_lora_rank; else wq · xn: the `q` step)
    //   kva (n, r + rope)   = wkv_a · xn: the latent c, then the rotary key
    //   K row (n, rope + r) = [rope(k_pe) | rms_norm(c)], stored in the cache: the only cached tensor
    //   Q (n, H, rope + r)  = [rope(q_pe_h) | wk_b_h · q_nope_h]  (a head is an expert of moe_matvec)
    //   att (n, H, r)       = attention(Q, K rows, V = their latent part): one KV head
    //   x                  += wo · [wv_b_h · att_h]_h
    bool mla = false;
    LinearStep q_a, q_b, kv_a;
    ops::MoeMatvecPlan k_b, v_b;  // decode steps: a matvec per (token, head) slot
    // Chunks: the slots grouped per head (ops::moe_group, one small dispatch per layer), wk_b and wv_b
    // as matmul tiles per head, each head's matrix read once per tile of tokens instead of once per token.
    bool mla_grouped = false;
    ops::MoeMatmulPlan k_b_mm, v_b_mm;
};

// A mixture-of-experts FFN (ArchDesc::moe()), from xn = norm(x):
//   ids, w (n, K)  = moe_route(router · xn)
//   x             += sum_j w_j · down_e(act(gate_e · xn, up_e · xn))  (+ sigmoid(g · xn) · shared(xn))
// The shared expert (ExpertDesc::shared) is a dense FFN: FfnPlan's gate, up and down steps over
// the *_shexp roles, writing its own output for the combine instead of the residual.
struct MoePlan {
    bool runs = false;
    LinearStep router;  // (dim -> n_expert) logits (+ bias, gpt-oss)
    ops::MoeRouteParams route;
    // Decode steps: a matvec per slot; down's input act(gate, up), formed as it loads them.
    ops::MoeMatvecPlan gate, up, down;
    // Chunks (grouped): the slots sorted per expert (ops::moe_group), matmul tiles per expert, the
    // GLU an element-wise op between up and down.
    bool grouped = false;
    ops::MoeMatmulPlan gate_mm, up_mm, down_mm;
    bool biases = false;  // each expert's bias rows follow gate, up and down (gpt-oss)
    bool shared = false;
    LinearStep shared_gate;  // (dim -> 1) the shared expert's gate logit
};
// The router of a mixture-of-experts model (cfg.n_expert > 0), as its keys configure it.
ops::MoeRouteParams moe_route_params(const ModelConfig& cfg);
// The dense FFN width a model's scratch holds: ffn_dim, or a mixture of experts' shared expert's (0
// without one), or the wider of it and ffn_dim where leading layers are dense (DeepSeek).
uint32_t dense_ffn_dim(const ModelConfig& cfg);

// x += post_norm(w_down · act(w_gate · norm(x), w_up · norm(x) (+ b_up)) (+ b_down)); with norm_after,
// x = norm(x + w_down · act(...(x)...) (+ b_down))
struct FfnPlan {
    bool fold_norm = false;  // the RMSNorm rides in the gate/up matvecs (decode steps)
    bool fused_gate_up = false;  // one matvec over w_gate_up into one (2 ffn) vector (a lone token)
    LinearStep gate_up;  // fused_gate_up
    LinearStep gate, up;  // otherwise; no gate for a plain GELU FFN
    bool up_bias_apart = false;  // fused gate_up and an up bias: the bias is added on its own
    FfnKind act = FfnKind::SwiGlu;
    bool fold_act = false;  // the GLU rides in the down projection's matvec (decode steps)
    LinearStep down;
    bool post_norm = false;
    bool norm_after = false;
    MoePlan moe;  // runs: a mixture of experts (the steps above: its shared expert)
};

// An encoder-decoder's cross-attention (T5's decoder), between self-attention and the FFN:
// x += wo_x · attention(wq_x · norm(x), K_x, V_x) over the encoder output's rows, every query seeing
// all of them (K_x, V_x: a cache per layer that ModelGpu::set_encoder_output fills; plan_cross_kv).
struct CrossPlan {
    bool runs = false;
    bool fold_norm = false;  // the RMSNorm rides in the q matvec (decode steps)
    LinearStep q, o;
    ops::AttentionParams params;
};

// The cross-attention cache of an encoder-decoder model holding up to n_rows encoder rows of the
// KV type (llama.cpp rounds cross K/V to f16 for its flash attention, as vkllm's default cache does),
// bidirectional, scores as the model scales them.
ops::AttentionParams cross_attention_params(const ModelConfig& cfg, uint32_t n_tokens, uint32_t n_rows,
                                            ops::KvType type);
// The projections of `rows` encoder output rows into a layer's cross K and V.
struct CrossKvPlan {
    LinearStep k, v;
};
CrossKvPlan plan_cross_kv(const DeviceCaps& caps, const LayerPlaces& places, uint32_t rows);

struct LayerPlan {
    StepShape shape;
    AttentionBlockPlan attn;
    CrossPlan cross;
    FfnPlan ffn;
    // The pipelines recording this plan uses (the warm-up list).
    std::vector<PipelineDesc> pipelines(const Context& ctx) const;
};

LayerPlan plan_layer(const DeviceCaps& caps, const ModelConfig& cfg, const LayerPlaces& places, uint32_t layer,
                     const StepShape& shape, const KvGeometry& kv);

// The logits of `rows` hidden states (models with an LM head: StackDesc::lm_head): output · norm(x) (+ soft-cap). Decode forms fold the RMSNorm
// into the matvec and keep rows batch invariant.
struct HeadPlan {
    uint32_t rows = 1;
    bool fold_norm = false;
    ops::LinearPlan out;
};
// The head of a recording: a decode batch takes n rows of logits; a chunk takes its last token's,
// or every token's with all_logits (perplexity).
HeadPlan plan_head(const DeviceCaps& caps, const ModelConfig& cfg, const WeightLayout& layout, const StepShape& shape,
                   bool all_logits);

}  // namespace vkllm
