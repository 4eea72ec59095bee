// Causal multi-head attention over one layer's KV cache, with online softmax (flash attention):
// no n x n score matrix is stored anywhere. GQA / MQA: query head h reads kv head h / (n_heads /
// n_kv_heads), and one workgroup serves all query heads of a kv head so K and V are read once.
//
//   n_tokens == 1 (decode): the KV length is split across workgroups (flash decoding); each split
//       writes (max, sum, partial output) to `scratch` and a merge pass reduces them, so a long
//       context uses the whole device. With one split the kernel writes `out` directly.
//   n_tokens  > 1 (prefill): a block of queries against the cache, online softmax over KV tiles
//       staged in shared memory.
//
// K/V rows are f16 (read as packed words, no 16-bit storage feature needed), f32, or q8_0 blocks
// (op_types.h; n_kv_heads * head_dim a multiple of 32); arithmetic is f32. The KV range comes from `positions` on the device, so a recorded command buffer stays valid
// as positions advance; cache rows outside it are never read.
//
// Multi-head latent attention (DeepSeek-V2/V3, absorbed form): MQA whose key head (576 = 64 RoPE
// dims + 512 latent) is longer than its value head (512), and whose V is no tensor of its own but
// the last 512 elements of each K row, so that the cache holds the latent once. `v_head_dim` gives
// V (and the output) its own width and `v_in_k` reads it from the K cache; both kernels take the V
// row stride, head stride and offset as push constants, so the same pipelines serve both layouts.
// Hence also head_dim up to 576 (kMaxHeadDim): the plans widen the decode workgroup to hold V's
// columns and shrink the prefill tiles to fit shared memory.
//
// Sliding-window attention (Mistral, Gemma 2/3, Phi-3 small): the cache is a ring of n_ctx rows,
// position j living in row j % n_ctx (ops::kv_store writes it there), and a query sees only the last
// `window` positions; a windowed decode reads about `window` keys however long the history.
// Attention-logit soft-capping (Gemma 2): scores pass through softcap * tanh(s / softcap).
// ALiBi (BLOOM, MPT, jina-bert-v2): scores gain a per-head penalty linear in the query-key distance.
#pragma once

#include "runtime/context.h"
#include "runtime/ops/op_types.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vkllm::ops {

struct AttentionParams {
    uint32_t n_tokens;  // queries in this call (1 = decode)
    uint32_t n_heads;  // query heads
    uint32_t n_kv_heads;  // n_heads % n_kv_heads == 0 (GQA/MQA)
    uint32_t head_dim;  // of q and K: any multiple of 4 up to 576
    uint32_t n_ctx;  // rows in the KV cache
    float scale;  // usually 1/sqrt(head_dim)
    KvType kv_type;  // K and V cache element type
    uint32_t window = 0;  // sliding window in positions (the query's own included); 0 = none
    float softcap = 0.0f;  // attention-logit soft cap; 0 = off
    // false: bidirectional (encoders, and a causal model's image chunk): every query sees the positions
    // up to the call's last one, so a whole input evaluated in one call attends to all of itself; with
    // a window, from the start of its own position's window (llama.cpp's mask). One query: the same
    // either way.
    bool causal = true;
    // ALiBi (BLOOM, MPT, jina-bert-v2): the score of the key at position j for the query at position
    // i gains -slope_h * |i - j|, the slopes of query head h from max_alibi_bias as llama.cpp (and the
    // ALiBi paper, for head counts that are powers of two) define them. 0 = off.
    float max_alibi_bias = 0.0f;
    // A learned bias per head and relative position (T5's relative attention buckets): the score of
    // the key at position j for the query at position i gains pos_bias[h][d + R], d = clamp(j - i, -R,
    // R), from the table passed to attention(). 0 = none. Calls with a table run the prefill kernel
    // (also for one token) and not attention_store.
    uint32_t pos_bias_range = 0;
    // Several inputs packed in one bidirectional call (causal false): query t sees the positions
    // [segments[2t], segments[2t + 1]) of the segments buffer passed to attention(), its own input's,
    // instead of all of the call. Runs the prefill kernel (also for one token).
    bool segmented = false;
    // Attention sinks (gpt-oss): head h's softmax has one more logit, AttentionExtras::sinks[h], that
    // takes its share of the weights and contributes no value.
    bool sinks = false;
    // Elements per head of V and of the output; 0 = head_dim. A multiple of 4, at most head_dim
    // (MLA: 512 against K's 576).
    uint32_t v_head_dim = 0;
    // V is no separate cache: each head's V is the last v_dim() elements of that head's K row
    // (element offset head_dim - v_dim() in it; MLA's latent). attention() ignores its v slice
    // (it may be empty). A q8_0 cache needs head_dim - v_dim() a multiple of 32 (whole blocks).
    bool v_in_k = false;

    // A decode batch (needs a paged cache): the n_tokens queries are of n_tokens sequences, one
    // each, query t at its row of q, positions and out, with its own table row t and its own region
    // of the scratch, all in one dispatch (and one merge). Decode only: no table or segments.
    bool batch = false;

    uint32_t v_dim() const { return v_head_dim ? v_head_dim : head_dim; }
    // Queries that share one sequence's keys: all of them, or one in a batch.
    uint32_t seq_tokens() const { return batch ? 1 : n_tokens; }
};

// The optional inputs of attention(): the position-bias table (pos_bias_range > 0) and the
// per-query key ranges (segmented); each may be empty when its parameter is off.
struct AttentionExtras {
    BufferSlice pos_bias;  // f32 [n_heads][2 * pos_bias_range + 1], at a storage-buffer-aligned offset
    BufferSlice segments;  // int32 [n_tokens][2], at any 4-byte offset
    BufferSlice sinks;  // f32 [n_heads], at any 4-byte offset (sinks)
    // A paged cache: k and v are the pools (pages.pool_rows rows each; n_ctx stays the rows a
    // sequence addresses, its ring), the call's sequence's table at row 0 of pages.table (a batch:
    // query t's at row t). pages.per_token is not looked at (AttentionParams::batch says it).
    KvPages pages;
};

// q:   f32 [n_tokens][n_heads][head_dim]
// k, v: one layer's cache, k [n_ctx][n_kv_heads][head_dim] and v [n_ctx][n_kv_heads][v_dim()] of kv_type
//   (already holding this step's rows; with v_in_k no v: V is read from k), position j in row j % n_ctx
//   (a ring; for an ordinary cache, positions < n_ctx, the identity).
// positions: int32 [n_tokens]: absolute position of each query token (read on the device). Query t
//   at position p attends keys at positions lo(p)..p inclusive (causal), lo(p) = max(0, p - window + 1)
//   with a window, else 0 (not causal: up to positions[n_tokens - 1] for every query, from lo(p) of its own p;
//   Gemma 3's image tokens in a causal model); without a window positions must be < n_ctx (p is clamped to n_ctx - 1).
//   A window needs n_ctx >= window + n_tokens - 1: every row of the chunk is stored before attention
//   runs, and a smaller ring would already have overwritten keys that the chunk's first query needs.
// Each score s = scale * q . k becomes softcap * tanh(s / softcap) when softcap > 0, gains the ALiBi
// bias with max_alibi_bias > 0 and the table's bias with pos_bias_range > 0, then softmax (with the
// head's sink logit in its sum when p.sinks), and the output is the softmax-weighted sum of the V rows.
// out: f32 [n_tokens][n_heads][v_dim()]
// scratch: at least attention_scratch_bytes(ctx, p) bytes (split-K partials); unused, and may be an
//   empty slice, when that is 0.
// q, positions and out may start at any offset inside their buffers (q and out on 16 bytes): the rows
// of one sequence inside a multi-sequence batch. Slices may be larger than needed; only the needed
// bytes are bound. Throws std::invalid_argument
// for bad parameters (including a ring too short for the window, a negative or non-finite softcap)
// or too small buffers, DeviceLimitError when the K/V cache of one layer exceeds the device's
// maxStorageBufferRange.
void attention(Context& ctx, CommandStream& s, const AttentionParams& p, const BufferSlice& q, const BufferSlice& k,
               const BufferSlice& v, const BufferSlice& positions, const BufferSlice& out, const BufferSlice& scratch,
               const AttentionExtras& extras = {});

struct RopeParams;

// A decode step's new K and V rows, for attention_store.
struct NewKv {
    BufferSlice k, v;  // f32 [n_kv_heads * head_dim] each: the token's K (before RoPE) and V
    const RopeParams* rope = nullptr;  // null: no RoPE; else rope->n_heads == n_heads, rope->head_dim == head_dim
    const BufferSlice* freq_factors = nullptr;  // RoPE frequency factors f32 [rot_dim / 2], or null
};

// A decode step (n_tokens == 1) of RoPE, K/V store and attention in one kernel (plus the merge when
// the KV length is split): the result of rope(q), rope(k), kv_store_pair(k, v) at positions[0], then
// attention(), in one dispatch where rope, kv_store_pair and attention() take three. The cache row
// p % n_ctx is written as kv_store_pair writes it (nothing when p < 0) and the query attends to
// exactly those rounded values; q itself is left unrotated. Needs attention_store_supported(p); the
// slices as attention() and kv_store_pair() take them (scratch: attention_scratch_bytes(ctx, p)),
// and no written range (the caches, out or the scratch) may overlap another (std::invalid_argument).
// A batch (p.batch, a paged cache) does this for n_tokens queries of as many sequences in one
// dispatch: kv.k and kv.v then hold one new row per query. extras: the sinks and the pages (no
// position-bias table or segments).
void attention_store(Context& ctx, CommandStream& s, const AttentionParams& p, const BufferSlice& q, const NewKv& kv,
                     const BufferSlice& k_cache, const BufferSlice& v_cache, const BufferSlice& positions,
                     const BufferSlice& out, const BufferSlice& scratch, const AttentionExtras& extras = {});
// Whether attention_store takes p: one token (or a batch of one per sequence), no position-bias table, V a cache of its own as wide as
// K (v_dim() == head_dim, no v_in_k: the fused kernel builds one new row of each), head_dim <= 256
// (the limit it was written and tested for), and for
// a q8_0 cache whole blocks per head (head_dim a multiple of 32: each workgroup quantizes one head's row).
bool attention_store_supported(const AttentionParams& p);
std::vector<PipelineDesc> attention_store_pipelines(const Context& ctx, const AttentionParams& p);

size_t attention_scratch_bytes(const Context& ctx, const AttentionParams& p);
// The same from the caps alone, so memory can be planned before anything is allocated.
size_t attention_scratch_bytes(const DeviceCaps& caps, const AttentionParams& p);
std::vector<PipelineDesc> attention_pipelines(const Context& ctx, const AttentionParams& p);

namespace detail {

// How attention() runs a given call on a device: exposed for tests and for reporting.
struct AttentionPlan {
    bool decode = false;
    uint32_t wg = 0;  // invocations per workgroup
    uint32_t heads_per_wg = 0;  // query heads sharing one kv head handled together (GW)
    uint32_t tokens_per_wg = 0;  // prefill: query tokens per workgroup (BT)
    uint32_t kv_tile = 0;  // prefill: keys per shared-memory tile (BK); decode: keys per pass (= wg)
    uint32_t n_splits = 1;  // decode: split-K workgroups per (kv head, head group)
    uint32_t min_chunk = 0;  // decode: smallest split length in keys
    size_t shared_bytes = 0;  // shared memory of the main kernel
    // prefill: attention_prefill_coopmat.comp, its products on the matrix units in the device's f16
    // shape cm x cn x ck, subgroups of sg required (caps.coopmat_kernels, where the sizes allow)
    bool coopmat = false;
    uint32_t cm = 0, cn = 0, ck = 0, sg = 0;
};
// store: the plan of attention_store (the decode kernel with its new-row buffers in shared memory).
AttentionPlan attention_plan(const DeviceCaps& caps, const AttentionParams& p, bool store = false);

}  // namespace detail
}  // namespace vkllm::ops

namespace vkllm::ref {

// Plain reference: for each query, scores in double over head_dim (soft-capped, ALiBi- and table-biased when
// asked), softmax (the sink of each head one more logit when p.sinks),
// weighted sum of V (v_dim() wide; with v_in_k the tail of each K row, v unused and may be null) over the
// query's window; K/V read as the device stores them (f16 -> f32 via f16_to_f32),
// from ring row j % n_ctx for position j. pos_bias and segments as attention() takes them.
void attention(const ops::AttentionParams& p, const float* q, const void* k, const void* v, const int32_t* positions,
               float* out, const float* pos_bias = nullptr, const int32_t* segments = nullptr,
               const float* sinks = nullptr);

}  // namespace vkllm::ref
