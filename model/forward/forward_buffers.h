// The buffers one device's part of the forward pass works in besides the weights and the KV pools:
// the activation scratch of one step, the small host-written inputs the kernels read (token ids,
// positions, block tables), the outputs the host reads (logits, argmax), and a split's hand-off.
// Recorded command streams bind these once; each step only rewrites the host-visible inputs.
// Sizes follow memory_plan.cpp's scratch_bytes, which counts exactly these.
#pragma once

#include "model/arch/model_config.h"
#include "model/forward/layer_plan.h"
#include "model/forward/memory_plan.h"
#include "model/forward/model_weights.h"
#include "runtime/context.h"

#include <vector>

namespace vkllm {

// U = max(ubatch, decode_rows) rows: a prompt chunk, or the rows of a decode step (a token per
// sequence, and speculative decoding's drafts).
struct ForwardBuffers {
    Buffer x;  // (U, dim)  residual stream
    Buffer xn;  // (U, dim)  normed input of attention / FFN
    Buffer tmp;  // (U, dim)  block output before its post-norm; learned position rows
    Buffer q;  // (U, q_dim = n_heads * head_dim)
    Buffer k;  // (U, kv_dim)
    Buffer v;  // (U, kv_dim)
    Buffer att;  // (U, q_dim)  attention output
    Buffer gate;  // (U, ffn)   ffn: dense_ffn_dim (a mixture of experts' shared expert's)
    Buffer up;  // (U, ffn)
    Buffer last;  // (dim)     last token's hidden state
    Buffer qkv;  // (q_dim + 2 kv_dim)  fused Q|K|V projection of one token (decode)
    Buffer gate_up;  // (2 ffn)           fused gate|up projection of one token (decode)
    Buffer xq;  // (U, q8_1_row_bytes(max k)) where the integer-dot kernels run: their X
    // mixture of experts (K = n_expert_used): router logits (U, n_expert), chosen ids and weights
    // (U, K), the slots grouped per expert, every slot's gate and up (U * K, expert_ffn) and output
    // (U * K, dim), the shared expert's gate logit (U)
    Buffer moe_logits, moe_ids, moe_w, moe_groups, moe_gate, moe_up, moe_out, moe_shared_logit;
    // latent attention (H heads, r = kv_lora_rank): q_a (U, q_lora), q (U, H, qk), kv_a (U, r + rope),
    // per head q_nope (U * H, qk - rope), wk_b · q_nope (U * H, r), wv_b · att (U * H, v_mla); the head of
    // each (token, head) slot (U * H) and those slots grouped per head (a chunk's). The K rows are built
    // in k (U, rope + r), the latent normed in v.
    Buffer mla_qa, mla_q, mla_kva, mla_qn, mla_qabs, mla_o, head_ids, mla_groups;

    Buffer logits;  // (decode_rows, n_vocab), with the head
    Buffer all_logits;  // (U, n_vocab) host-readable, only with ModelOptions::all_logits
    Buffer argmax;  // (decode_rows) uint32
    Buffer positions;  // (U) int32, host-written: each token's cache row (its position in its sequence, or in a pack)
    // (U, pos_width) int32, host-written: each token's position in its input (RoPE, learned positions), with
    // M-RoPE its 4 components (ModelConfig::pos_width)
    Buffer rel_pos;
    Buffer segs;  // (U, 2) int32, host-written: bidirectional models' key range per token
    Buffer ids;  // (U) int32, host-written
    Buffer embed_in;  // (U, dim) host-written rows: embeddings given as such, or of a table too large to bind
    Buffer send;  // (U, dim) readback: a split's stage before the last hands its x rows over in it
    Buffer recv;  // (U, dim) host-written: a stage after the first takes its x rows from it
    Buffer attn_scratch;  // (decode_rows) x attention split-K partials: one region per decode row

    // The block tables a step reads, host-written before each submission: row r (a decode batch's
    // r-th sequence, or a chunk's one sequence at row 0) lists its blocks, kv_blocks(n_ctx) entries per
    // row for full-context layers (kv_tables) and kv_blocks(ring rows) for sliding-window rings
    // (ring_tables: sequence s owns blocks s * that.. of the ring pools, fixed).
    Buffer kv_tables, ring_tables;

    // Encoder-decoder: per layer the encoder output's cross K and V, (n_ctx, kv_dim) of the KV type; the
    // encoder output itself (n_ctx, dim), host-written; the row positions 0..n_ctx-1 the K/V store
    // writes; every query's cross-attention position, n_enc - 1 (it sees all encoder rows); cross-
    // attention's q and output (U, q_dim), apart from self-attention's (the probe keeps those).
    std::vector<Buffer> cross_k, cross_v;
    Buffer enc, enc_rows, cross_pos, cross_q, cross_att;

    // Everything above for the layers `range` of a model planned as `plan` (its context and
    // attention partials); `ring_rows` sizes the ring tables (0: none).
    static ForwardBuffers allocate(Context& ctx, const ModelConfig& cfg, const ModelOptions& opts,
                                   const MemoryPlan& plan, LayerRange range, uint32_t ring_rows);
};

}  // namespace vkllm
