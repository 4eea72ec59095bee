// CacheBlend (Yao et al., EuroSys 2025): documents whose K/V were computed on their own (a RAG
// prompt's retrieved passages, cached once) put into a sequence after whatever it holds, wherever
// they now stand, instead of a prefill of their tokens. The cached K/V never attended to what now
// precedes the document, so a share of its tokens is evaluated again in every layer: those whose
// K/V deviates most from what a full prefill gives, found in the first layers.
//
//   1. each document's rows are appended with ModelGpu::import_kv (K rotated to its new positions);
//   2. every document token is evaluated again in layer 0 and through layer 1's V projection only
//      (ModelGpu::eval_v, one evaluation for all documents): layer 0's K/V is context-free, so
//      layer 1's input is the full prefill's, and layer 1's V beside the imported one gives each
//      token's deviation (V, because it is position-free: no rotation to match);
//   3. per document the `ratio` share of its tokens with the largest relative deviation,
//      ||v_new - v_cached||^2 / ||v_cached||^2, is evaluated again in every layer, in position order,
//      each attending to the keys before it as the cache then holds them, and in the same evaluation
//      (ModelGpu::eval_at) the tokens that follow the documents: the prompt's question.
//
// With ratio 1 every token is evaluated again: the full prefill's result up to rounding. With
// ratio 0 only layer 0 is (and layer 1's attention never runs for the documents).
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

// Appends the documents to sequence `seq` of `g`, evaluates `ratio` (0..1) of each document's
// tokens again (at least one where ratio > 0) and then the tokens `then` after the documents. The
// sequence then holds the documents as if their tokens had been evaluated, approximately, and the
// last logits are those of `then`'s last token: the prompt's next token. With `then` empty the last
// logits are not the sequence's next token's: continue with eval(). Bad documents or ratio: std::
// invalid_argument; the model's refusals (import_kv, eval_v, eval_at) as those throw; after any
// failure the sequence holds what it held before the call.
BlendResult blend_documents(ModelGpu& g, uint32_t seq, std::span<const BlendDoc> docs, float ratio,
                            std::span<const int32_t> then = {});

}  // namespace vkllm
