#include "model/grammar/token_constraint.h"

#include "model/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>

namespace vkllm::grammar {

TokenPieces::TokenPieces(const Tokenizer& tok, std::span<const int32_t> spoken)
    : bytes_(tok.n_vocab()), eog_(tok.n_vocab(), 0) {
    for (size_t id = 0; id < tok.n_vocab(); ++id) {
        bytes_[id] = tok.token_to_piece(int32_t(id), false);
        eog_[id] = tok.is_eog(int32_t(id)) ? 1 : 0;
    }
    for (const int32_t id : spoken)
        if (id >= 0 && size_t(id) < bytes_.size() && bytes_[size_t(id)].empty())
            bytes_[size_t(id)] = tok.token_to_piece(id, true);
    // An end-of-generation token ends the text (where the grammar may end), even one spoken.
    for (size_t id = 0; id < bytes_.size(); ++id)
        if (eog_[id]) bytes_[id].clear();
    size_t total = 1;
    for (const std::string& b : bytes_) total += b.size();
    trie_.reserve(total);  // an upper bound on the nodes
    trie_.emplace_back();
    for (size_t id = 0; id < bytes_.size(); ++id) {
        uint32_t cur = 0;
        for (const char ch : bytes_[id]) {
            const auto b = uint8_t(ch);
            auto& ch_list = trie_[cur].children;
            auto it = std::lower_bound(ch_list.begin(), ch_list.end(), b,
                                       [](const std::pair<uint8_t, uint32_t>& e, uint8_t v) { return e.first < v; });
            if (it == ch_list.end() || it->first != b) {
                const auto next = uint32_t(trie_.size());
                it = ch_list.insert(it, {b, next});
                trie_.emplace_back();  // invalidates ch_list: not used after this
                cur = next;
            } else {
                cur = it->second;
            }
        }
        if (!bytes_[id].empty()) trie_[cur].tokens.push_back(int32_t(id));
    }
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenPieces> pieces)
    : grammar_(std::move(grammar)), pieces_(std::move(pieces)), matcher_(*grammar_) {}

bool TokenConstraint::allowed(int32_t token) {
    if (token < 0 || size_t(token) >= pieces_->size()) return false;
    if (pieces_->is_eog(token)) return matcher_.can_end();
    if (!mask_ready_) {
        ++asked_;
        if ((asked_ >= kMinAsked && allowed_ * kRare < asked_) || asked_ >= kMaxAsked) decide_all();
    }
    if (mask_ready_) return mask_[size_t(token)] != 0;
    const bool yes = fits(token);
    allowed_ += yes ? 1 : 0;
    return yes;
}

bool TokenConstraint::fits(int32_t token) {
    const std::string& b = pieces_->bytes(token);
    if (b.empty()) return false;
    if (!first_ready_) {
        const Matcher::State& here = matcher_.current();
        for (uint32_t c = 0; c < 256; ++c) first_[c] = matcher_.may_step(here, uint8_t(c)) ? 1 : 0;
        first_ready_ = true;
    }
    if (!first_[uint8_t(b[0])]) return false;
    return b.size() == 1 || matcher_.allows_bytes(b);
}

void TokenConstraint::accept(int32_t token) {
    if (token >= 0 && size_t(token) < pieces_->size() && pieces_->is_eog(token) && matcher_.can_end()) return;
    if (!allowed(token) || !matcher_.accept(pieces_->bytes(token)))
        throw GrammarError(fmt::format("token {} is not allowed by the grammar here", token));
    first_ready_ = false;
    mask_ready_ = false;
    asked_ = allowed_ = 0;
}

bool TokenConstraint::accept_text(std::string_view text) {
    if (!matcher_.accept(text)) return false;
    first_ready_ = false;
    mask_ready_ = false;
    asked_ = allowed_ = 0;
    return true;
}

void TokenConstraint::decide_all() {
    mask_.assign(pieces_->size(), 0);
    const bool can_end = matcher_.can_end();
    for (size_t t = 0; t < mask_.size(); ++t)
        if (pieces_->is_eog(int32_t(t))) mask_[t] = can_end ? 1 : 0;
    const auto& trie = pieces_->trie();
    // Depth first with an explicit stack: (node, the state after its prefix).
    std::vector<std::pair<uint32_t, Matcher::State>> todo;
    todo.emplace_back(0, matcher_.state());
    while (!todo.empty()) {
        auto [node, st] = std::move(todo.back());
        todo.pop_back();
        if (node != 0)
            for (const int32_t t : trie[node].tokens) mask_[size_t(t)] = 1;
        for (const auto& [byte, child] : trie[node].children) {
            if (!matcher_.may_step(st, byte)) continue;  // most bytes: refused without a copy
            Matcher::State next = st;
            if (matcher_.step(next, byte)) todo.emplace_back(child, std::move(next));
        }
    }
    mask_ready_ = true;
}

}  // namespace vkllm::grammar
