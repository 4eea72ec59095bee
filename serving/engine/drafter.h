// Speculative decoding's proposals: tokens guessed to follow a slot's text, which the engine's
// decode step verifies in the same forward pass as the slot's next token (SequenceModel::decode
// takes a run of rows per sequence). The engine keeps the drafts the target model would have chosen
// itself and rolls its cache back past the first it would not (SequenceModel::truncate), so the
// output is plain decoding's whatever a drafter proposes; a good drafter only makes it faster.
//
// Drafts are deterministic (a draft model's greedy choice, or text copied from the context). The
// acceptance test for a deterministic proposal d under the target's distribution p (after
// temperature, top-k, penalties, grammar) is the standard rejection scheme with a one-hot draft
// distribution: keep d with probability p(d), else draw from p without d, renormalised. Drawing
// y from p and keeping d where y == d is that same scheme, which is what the engine does: each
// emitted token is one draw of the request's sampler from the target's logits, exactly as plain
// decoding draws it, so even a seeded sampled output is unchanged.
#pragma once

#include "model/forward/sequence_model.h"
#include "model/tokenizer/tokenizer.h"

#include <cstdint>
#include <span>
#include <vector>

namespace vkllm::engine {

struct DraftRequest {
    uint32_t slot = 0;
    // The slot's tokens: those in its cache, then its next token (not yet evaluated) last. Image
    // placeholders (negative ids) may appear; a drafter never proposes one.
    std::span<const int32_t> context;
    uint32_t max = 0;  // tokens to propose at most
    std::vector<int32_t> draft;  // filled by propose(): up to max vocabulary ids, in order
};

class Drafter {
public:
    virtual ~Drafter() = default;
    // Fills each request's draft (possibly empty). Called by the engine's scheduler thread only.
    virtual void propose(std::span<DraftRequest> requests) = 0;
};

// Prompt lookup: the longest n-gram (ngram_max down to ngram_min tokens) ending the context that
// occurred earlier in it; proposes the tokens that followed its latest earlier occurrence. Pays off
// where answers quote their prompt (code edits, extraction, RAG); costs no model.
class LookupDrafter final : public Drafter {
public:
    LookupDrafter(uint32_t ngram_max, uint32_t ngram_min = 1);
    void propose(std::span<DraftRequest> requests) override;

private:
    uint32_t ngram_max_, ngram_min_;
};

// A smaller model of the same vocabulary proposes its greedy continuation. It keeps one sequence
// per slot (a slot beyond its n_seq gets no drafts) and evaluates only what its cache lacks: a new
// prompt a ubatch per call (drafting once it is in, so that it never holds a step up longer than a
// prompt chunk would), then a token or two per step in one decode pass for all slots (up to 1 +
// its draft_rows rows each); drafting k tokens for every slot takes k of its decode steps. Its
// drafts stop at an end-of-generation token of `tok`, at its context's end and where its logits are
// not finite. A context it cannot read (an image's placeholders, ids past its vocabulary) is not
// drafted. When the draft model fails (a device error, a full KV pool), the sequences of the call
// are forgotten (reset) and the error is rethrown: the engine then decodes that step without drafts.
class ModelDrafter final : public Drafter {
public:
    // `draft` must outlive the drafter.
    ModelDrafter(SequenceModel& draft, const Tokenizer& tok);
    void propose(std::span<DraftRequest> requests) override;

private:
    // Brings each request's sequence up to its context (a ubatch at most for a new prompt) and
    // proposes the first draft token where it is; `active` gets the requests it evaluated.
    void catch_up(std::span<DraftRequest> requests, std::vector<DraftRequest*>& active);
    // Adds draft tokens, one decode step each, until every request has its max or stopped.
    void extend(const std::vector<DraftRequest*>& active);

    SequenceModel& model_;
    const Tokenizer& tok_;
    uint32_t catch_up_rows_;  // rows one sequence may take in a decode step
    std::vector<std::vector<int32_t>> held_;  // per sequence: the tokens in the draft model's cache
};

// A draft model must read and write the target's token ids: the same tokenizer model, the same
// BOS and EOS, the same text for every id both have, and vocabularies at most 128 ids apart (a
// padded embedding; llama.cpp allows as much). Throws std::invalid_argument naming the first
// difference.
void check_draft_vocab(const Tokenizer& target, const Tokenizer& draft);

}  // namespace vkllm::engine
