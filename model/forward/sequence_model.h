// What the serving engine needs of a model: sequences that grow, shrink, share a prefix and decode
// side by side in one step, and the logits of the last step. ModelGpu is the implementation (one
// device or several); the engine (serving/engine) holds only this interface, so that its scheduling
// depends on nothing else of the forward pass.
#pragma once

#include "model/arch/model_config.h"
#include "model/forward/rope_positions.h"

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace vkllm {

// The last logits hold NaN or Inf (NaN/Inf weights, or an overflow): raised instead of decoding garbage.
class NonFiniteError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};
// Its message: the logit `value` of `token` (token < 0: not known) for the token at `position`
// (the n_past of the evaluation) is NaN or Inf.
std::string non_finite_message(float value, int64_t token, uint32_t position);

// An image's embedding rows in a prompt of token ids: the prompt's tokens [first, first + n_rows)
// stand for them as placeholder ids (negative, from the image's content: image_token_id), so that
// comparing prompts compares images by content (prefix reuse) and an image is never taken for text.
struct PromptEmbeddings {
    uint32_t first = 0;
    uint32_t n_rows = 0;
    std::shared_ptr<const std::vector<float>> rows;  // (n_rows, dim)
    bool bidirectional = false;  // the rows see each other (SequenceModel::eval_embeddings)
    // The image's grid (nx * ny == n_rows) for models whose positions follow it (M-RoPE); {0, 0}:
    // sequential positions. A gridded image is evaluated in one call.
    ImageGrid grid;
};
// The placeholder id of row `i` of an image whose content hashes to `hash`: negative, so never a
// vocabulary token.
inline int32_t image_token_id(uint64_t hash, uint32_t i) {
    uint64_t z = hash + (uint64_t(i) + 1) * 0x9E3779B97F4A7C15ull;  // splitmix64's finalizer: every bit mixes
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return -1 - int32_t(z % 0x7fffffffull);
}

// One token of one sequence, for a multi-sequence decode step.
struct SeqToken {
    uint32_t seq = 0;
    int32_t token = 0;
};

// The paged KV cache's use: blocks held by some sequence (a shared block once) of the pool of a
// full-context layer, and the bytes one block takes over all such layers of the model, K and V.
// Sliding-window rings are fixed per sequence and not counted.
struct KvUsage {
    uint32_t blocks_used = 0, blocks_total = 0, block_rows = 0;
    uint64_t block_bytes = 0;
    uint64_t bytes_used() const { return uint64_t(blocks_used) * block_bytes; }
};

class SequenceModel {
public:
    virtual ~SequenceModel() = default;

    virtual const ModelConfig& config() const = 0;
    virtual uint32_t n_ctx() const = 0;  // rows per sequence
    virtual uint32_t n_seq() const = 0;  // sequences (a server's slots)
    virtual uint32_t ubatch() const = 0;  // prompt tokens per forward chunk
    virtual uint32_t draft_rows() const = 0;  // drafts a decode step may verify per sequence

    virtual uint32_t n_past(uint32_t seq) const = 0;
    virtual void reset(uint32_t seq) = 0;  // the sequence's blocks go back to the pool
    // Keeps the first n tokens of `seq`; false, changing nothing, where that cannot be done exactly
    // (a sliding-window ring already overwrote what the next token needs).
    virtual bool truncate(uint32_t seq, uint32_t n) = 0;
    // `dst` starts from the first n tokens of `src` without evaluating them (copy on write); false,
    // changing nothing, where the model cannot share (sliding-window rings).
    virtual bool share_prefix(uint32_t dst, uint32_t src, uint32_t n) = 0;
    virtual KvUsage kv_usage() const = 0;
    // Free blocks `seq` takes to add n tokens (new blocks and copies of shared ones written into).
    virtual uint32_t kv_blocks_needed(uint32_t seq, uint32_t n) const = 0;

    // `seq`'s tokens at positions n_past(seq)..; the last token's logits are row 0 afterwards.
    virtual void eval(uint32_t seq, std::span<const int32_t> tokens) = 0;
    // Rows of embeddings (n, dim) in place of n tokens' at positions n_past(seq)..: an image's encoder
    // output in the model's width, unscaled. `bidirectional`: they also see each other (Gemma 3's
    // images), so all of them are one chunk (ContextFullError beyond ubatch). `grid`, when not empty, is
    // the whole image's (nx * ny == n, std::invalid_argument otherwise): an M-RoPE model places the rows
    // at its positions (rope_positions.h), any other ignores it. Logits as eval's.
    virtual void eval_embeddings(uint32_t seq, std::span<const float> rows, bool bidirectional, ImageGrid grid) = 0;
    // Tokens of several sequences in one step (a sequence's rows adjacent: its next token, then drafts
    // to verify, at consecutive positions); logits row i is batch[i]'s, what a lone token would get.
    virtual void decode(std::span<const SeqToken> batch) = 0;
    // Rows [0, rows) of the last logits.
    virtual void read_logits(uint32_t rows, float* dst) const = 0;
    // The argmax of each of those rows, -1 where the best logit is NaN or Inf.
    virtual std::vector<int32_t> argmax_rows(uint32_t rows) const = 0;
};

}  // namespace vkllm
