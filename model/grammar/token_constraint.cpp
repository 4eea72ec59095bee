#include "model/grammar/token_constraint.h"

#include "model/tokenizer/tokenizer.h"

#include <fmt/format.h>

namespace vkllm::grammar {

TokenPieces::TokenPieces(const Tokenizer& tok) : bytes_(tok.n_vocab()), eog_(tok.n_vocab(), 0) {
    for (size_t id = 0; id < tok.n_vocab(); ++id) {
        bytes_[id] = tok.token_to_piece(int32_t(id), false);
        eog_[id] = tok.is_eog(int32_t(id)) ? 1 : 0;
        if (eog_[id]) bytes_[id].clear();
    }
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenPieces> pieces)
    : grammar_(std::move(grammar)), pieces_(std::move(pieces)), matcher_(*grammar_) {}

bool TokenConstraint::allowed(int32_t token) {
    if (token < 0 || size_t(token) >= pieces_->size()) return false;
    if (pieces_->is_eog(token)) return matcher_.can_end();
    const std::string& b = pieces_->bytes(token);
    if (b.empty()) return false;
    if (!first_ready_) {
        for (uint32_t c = 0; c < 256; ++c) first_[c] = matcher_.allows_bytes(std::string(1, char(c))) ? 1 : 0;
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
}

}  // namespace vkllm::grammar
