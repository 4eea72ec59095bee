// CacheBlend in the engine: a request's documents (CompletionRequest::documents) put into its slot
// from the document store (document_store.h) instead of being evaluated, a share of their tokens
// evaluated again together with the rest of the prompt (model/forward/blend.h). A document not in
// the store is evaluated on its own, from position 0, in a sequence the blender keeps for that
// (the model's sequence after the engine's slots), and stored.
#pragma once

#include "model/forward/blend.h"
#include "serving/engine/document_store.h"

#include <memory>
#include <mutex>
#include <span>
#include <string>

namespace vkllm::engine {

struct BlendOptions {
    float ratio = 0.15f;  // share of each document's tokens evaluated again (--blend-ratio)
    DocumentStoreOptions store;
};

// What one blend did.
struct BlendOutcome {
    uint32_t documents = 0, from_store = 0;  // blended, of which the store had
    uint32_t tokens = 0, recomputed = 0;  // the documents' tokens, of which evaluated again
};

struct BlendStats {
    uint64_t documents = 0;  // blended
    uint64_t from_store = 0;  // of which the store had
    uint64_t document_tokens = 0, recomputed_tokens = 0;
    uint64_t fallbacks = 0;  // blends the model refused: the documents were evaluated as text
    DocumentStoreStats store;
};

// Why `model` cannot blend documents ("" when it can): the architectures whose cached K/V cannot be
// moved to another position exactly enough (ModelGpu::import_kv's refusals, decided here once).
std::string blend_refusal(const ModelGpu& model);

class Blender {
public:
    // `scratch`: a sequence of `model` nobody else uses (std::invalid_argument when it does not
    // exist), where documents are evaluated on their own. std::invalid_argument for a model that
    // cannot blend (blend_refusal) or a bad ratio.
    Blender(ModelGpu& model, uint32_t scratch, BlendOptions opts);

    // Appends `docs` and then `then` (not empty) to sequence `seq`: afterwards the last logits are
    // `then`'s last token's. Each document comes from the store or is evaluated and stored first.
    // Throws what the model throws (the pool or the context full, a device error); the sequence
    // then holds what it held before.
    BlendOutcome blend(uint32_t seq, std::span<const std::span<const int32_t>> docs, std::span<const int32_t> then);
    void count_fallback();
    BlendStats stats() const;
    ModelGpu& model() const { return model_; }
    uint32_t scratch() const { return scratch_; }

private:
    ModelGpu& model_;
    uint32_t scratch_;
    float ratio_;
    DocumentStore store_;
    mutable std::mutex m_;  // guards stats_ against stats() from other threads (the store's are atomic)
    BlendStats stats_;
};

}  // namespace vkllm::engine
