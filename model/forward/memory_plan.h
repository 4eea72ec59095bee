// The device memory a model needs, computed before anything is allocated: weights, the paged KV
// cache, the scratch of one forward step, and the context that fits them (plan_memory). ModelGpu
// allocates exactly what this plan counts; the device split (device_split.h) asks it per range.
#pragma once

#include "model/gguf/gguf.h"
#include "model/arch/model_config.h"
#include "model/forward/model_weights.h"
#include "runtime/caps.h"
#include "runtime/ops/op_types.h"

#include <cstdint>
#include <string>

namespace vkllm {

struct ModelOptions {
    uint32_t n_ctx = 0;  // KV cache rows; 0 = the model's context, capped by device memory
    uint32_t ubatch = 64;  // prompt tokens per forward chunk (scratch is sized by this)
    ops::KvType kv_type = ops::KvType::F16;
    // Also compute the logits of every token of a ubatch into an (ubatch, n_vocab) buffer, for
    // perplexity (eval_all_logits). Off by default: generation needs only the last token's.
    bool all_logits = false;
    // Sequences (a server's slots), each up to n_ctx rows. decode() advances up to n_seq of them by
    // one token in one forward pass.
    uint32_t n_seq = 1;
    // Speculative decoding: besides its next token, decode() may give a sequence up to this many
    // drafted tokens to verify in the same pass (rows of one sequence at consecutive positions).
    uint32_t draft_rows = 0;
    // Rows (tokens) of each full-context layer's KV pool, shared by all sequences: the memory a server
    // is given, whatever its slots and context. 0: n_seq x n_ctx (no sequence ever waits for a block).
    // A sequence still holds at most n_ctx rows; n_ctx defaults to min(the model's, kv_budget).
    uint32_t kv_budget = 0;
    // Of the n_seq sequences, how many the full-context pools are not sized for (CacheBlend's scratch
    // sequence): they hold only blocks the others leave free, so the default pool stays
    // (n_seq - spare_seqs) x n_ctx. Less than n_seq.
    uint32_t spare_seqs = 0;
    // A token embedding already on this model's device (T5's decoder's, for its encoder), read
    // instead of uploading the file's again; it must outlive this model. Null: the model's own.
    const DeviceTensor* shared_token_embd = nullptr;
};

// Rows one decode step may take: a token per sequence, each with up to draft_rows drafts. The
// step's logits, argmax, block tables and attention partials are sized by it.
// Spare sequences (CacheBlend's scratch) take no part in decode batches.
inline uint32_t decode_rows(const ModelOptions& o) { return (o.n_seq - o.spare_seqs) * (1 + o.draft_rows); }

// Device memory a model needs, computed before anything is allocated.
struct MemoryPlan {
    uint32_t n_ctx = 0;
    uint64_t weights = 0, kv_cache = 0, scratch = 0;  // scratch includes attention_scratch
    // What the KV cache would take if sliding-window layers kept every row (the naive cache), for
    // reporting; equal to kv_cache for models without windows.
    uint64_t kv_cache_full = 0;
    uint64_t attention_scratch = 0;  // split-K partials of decode attention at n_ctx
    // (ubatch, n_vocab) f32 with ModelOptions::all_logits, else 0. Counted in scratch, so checked
    // against the device-local heap although it lives in host-readable memory: conservative on
    // discrete GPUs, exact on unified-memory devices (phones, CPU drivers).
    uint64_t all_logits = 0;
    uint64_t available = 0;  // device-local heap bytes
    uint32_t n_seq = 1;  // kv_cache and kv_cache_full cover all sequences
    uint32_t kv_budget =
        0;  // rows of a full-context layer's pool (ModelOptions::kv_budget, or n_seq x n_ctx in blocks)
    uint64_t total() const { return weights + kv_cache + scratch; }
};

// "12.3 MiB": sizes as plan_memory's errors (and the split plan's) name them.
std::string format_mib(uint64_t bytes);

// Resolves the default context and checks the fit; throws DeviceLimitError naming every size when
// the model cannot fit, or when a requested --ctx cannot, or when one ubatch's logits (all_logits)
// would exceed maxStorageBufferRange.
// `layers`: the range one device would hold (its weights, KV cache and scratch; the logits, and
// their check, only with the last layer); the default, all of them.
MemoryPlan plan_memory(const DeviceCaps& caps, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts,
                       LayerRange layers = {});

// Sizes ModelGpu's buffers share with the plan (one formula each, read by both).
// Bytes of one cached K (or V) row of this model at the cache type.
uint64_t kv_row_bytes(const ModelConfig& cfg, ops::KvType t);
// Caches per layer: K and V, or K alone where V is K's latent part (latent attention).
uint64_t kv_caches(const ModelConfig& cfg);
// Rows of the activation scratch: a prompt chunk or one decode token per sequence.
uint32_t scratch_rows(const ModelOptions& o);
// The integer-dot kernels' Q8_1 input, on devices that take them (else 0).
uint64_t q8_scratch_bytes(const DeviceCaps& caps, const ModelConfig& cfg, const ModelOptions& o);
// Rows of layer l's K (V) pool: a full-context layer's is the budget where there is one; a
// sliding-window ring is every sequence's own, whole blocks each.
uint64_t layer_pool_rows(const ModelConfig& cfg, const ModelOptions& o, uint32_t n_ctx, uint32_t l);

}  // namespace vkllm
