// CacheBlend (Yao et al., EuroSys 2025): documents whose K/V were computed on their own (a RAG
// prompt's retrieved passages, cached once) put into a sequence after whatever it holds, wherever
// they now stand, instead of a prefill of their tokens. The cached K/V never attended to what now
// precedes the document, so a share of its tokens is evaluated again in every layer: those whose
// K/V deviates most from what a full prefill gives, found in the first layers.
//
//   1. each document's rows are appended with ModelGpu::import_kv (K rotated to its new positions);
//   2. every document token is evaluated again in layers 0 and 1 only (eval_at with a probe that
//      stops after layer 1): layer 0's K/V is context-free, so layer 1's input is the full
//      prefill's, and layer 1's V beside the imported one gives each token's deviation (V, because it
//      is position-free: no rotation to match; the recomputed layers 0 and 1 stay in the cache);
//   3. per document the `ratio` share of its tokens with the largest relative deviation,
//      ||v_new - v_cached||^2 / ||v_cached||^2, is evaluated again in every layer (eval_at), in
//      position order, each attending to the keys before it as the cache then holds them.
//
// With ratio 1 every token is evaluated again: the full prefill's result up to rounding. With
// ratio 0 only layers 0 and 1 are.
#pragma once

#include "model/forward/model_gpu.h"

#include <span>
#include <vector>

namespace vkllm {

struct BlendDoc {
    std::span<const int32_t> tokens;
    const KvRows* kv = nullptr;  // the tokens' rows (kv->n == tokens.size()), computed at any position
};

struct BlendResult {
    uint32_t tokens = 0;  // document tokens put into the sequence
    std::vector<uint32_t> recomputed;  // the positions evaluated again in every layer, ascending
};

// Appends the documents to sequence `seq` of `g` and evaluates `ratio` (0..1) of each document's
// tokens again (at least one where ratio > 0). The sequence then holds the documents as if their
// tokens had been evaluated, approximately: continue with eval() (the question); the model's last
// logits are not the sequence's next token's until then. Bad documents or ratio: std::
// invalid_argument; the model's refusals (import_kv, eval_at) as those throw; after any failure
// the sequence holds what it held before the call.
BlendResult blend_documents(ModelGpu& g, uint32_t seq, std::span<const BlendDoc> docs, float ratio);

}  // namespace vkllm
