// A grammar applied to tokens: which tokens of a vocabulary may come next, for the sampler.
//
// The grammar sees each token as the bytes it stands for (Tokenizer::token_to_piece without
// special text); a token may end inside a UTF-8 character, the next one finishes it. Control
// tokens and tokens with no bytes are never allowed (they would let generation run on without
// progress), except the end-of-generation tokens, allowed exactly where the grammar may end, and
// the control tokens a request speaks (a tool call's markers, such as Kimi K2's
// <|tool_call_begin|>): those stand for their text, so a grammar that writes the marker may pick the
// token the model was trained to write.
//
// Cost: the sampler asks `allowed` for tokens in descending logit order until it has the
// candidates it needs (one for greedy, top_k otherwise), so most steps test a handful of tokens,
// each from the current state. A table of which first bytes the state accepts (read off the
// state, once per state) refuses most tokens with one lookup. When the state refuses nearly every
// token asked (kRare: fewer than one in kRare of at least kMinAsked; structural JSON between
// values, where a few tokens fit), the whole vocabulary is decided at once by walking a trie of
// the tokens' bytes from the state: a prefix the grammar refuses prunes every token below it, so
// this costs about as many matcher steps as there are trie nodes the grammar lets through. Where
// many tokens fit (inside a string), asking on is cheaper than that walk. Either way the answers
// are the same.
#pragma once

#include "model/grammar/grammar.h"
#include "model/sampler.h"

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace vkllm {
class Tokenizer;
}

namespace vkllm::grammar {

// The vocabulary as grammars see it; built once per model and set of spoken tokens, and shared by
// every request with that set.
class TokenPieces {
public:
    // `spoken`: control tokens that stand for their text (ids; sorted or not).
    explicit TokenPieces(const Tokenizer& tok, std::span<const int32_t> spoken = {});
    size_t size() const { return bytes_.size(); }
    const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
    bool is_eog(int32_t id) const { return eog_[size_t(id)] != 0; }

    // The byte trie of every token that has bytes; node 0 is the root (the empty prefix).
    struct Node {
        std::vector<std::pair<uint8_t, uint32_t>> children;  // byte -> node, ascending
        std::vector<int32_t> tokens;  // tokens whose bytes end here
    };
    const std::vector<Node>& trie() const { return trie_; }

private:
    std::vector<std::string> bytes_;  // empty: never allowed (control, or no text)
    std::vector<uint8_t> eog_;
    std::vector<Node> trie_;
};

class TokenConstraint final : public TokenFilter {
public:
    // Every token is decided once a state has been asked at least kMinAsked times and has allowed
    // fewer than one in kRare of them, or has been asked kMaxAsked times.
    static constexpr uint32_t kMinAsked = 64, kRare = 32, kMaxAsked = 4096;

    // Throws GrammarError when the grammar cannot even start (too ambiguous).
    TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenPieces> pieces);

    bool allowed(int32_t token) override;
    std::span<const uint8_t> decided() const override {
        return mask_ready_ ? std::span<const uint8_t>(mask_) : std::span<const uint8_t>();
    }
    // Follows a sampled token. Throws GrammarError when the grammar does not allow it.
    void accept(int32_t token);
    // Follows text that was generated before the grammar started to hold (a lazy grammar's
    // trigger and what came after it in the same token); false, consuming nothing, when the grammar
    // does not allow it.
    bool accept_text(std::string_view text);
    // The text so far is a whole sentence (an end-of-generation token is allowed).
    bool can_end() const { return matcher_.can_end(); }
    // Nothing but the end can follow: generation is over.
    bool complete() const { return matcher_.complete(); }

private:
    std::shared_ptr<const Grammar> grammar_;
    std::shared_ptr<const TokenPieces> pieces_;
    Matcher matcher_;
    bool fits(int32_t token);  // the answer for a token with bytes, from the current state
    void decide_all();

    // Per first byte, whether the current state accepts it; computed when first needed per state.
    std::array<uint8_t, 256> first_{};
    bool first_ready_ = false;
    uint32_t asked_ = 0, allowed_ = 0;  // questions in the current state, and answers yes
    std::vector<uint8_t> mask_;  // every token's answer in the current state, once decided
    bool mask_ready_ = false;
};

}  // namespace vkllm::grammar
