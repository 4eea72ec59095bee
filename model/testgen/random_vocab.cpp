#include "model/testgen/random_vocab.h"

#include <iterator>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

namespace vkllm {

RandomVocab make_random_vocab(uint32_t n_vocab) {
    RandomVocab v;
    v.tokens.reserve(n_vocab);
    auto add = [&](std::string text, float score, int32_t type) {
        v.tokens.push_back(std::move(text));
        v.scores.push_back(score);
        v.types.push_back(type);
    };
    add("<unk>", 0, 2);
    add("<s>", 0, 3);
    add("</s>", 0, 3);
    for (int b = 0; b < 256 && v.tokens.size() < n_vocab; ++b) add(fmt::format("<0x{:02X}>", b), 0, 6);

    // Normal pieces, most useful first; scores fall with rank as in SentencePiece vocabs.
    std::unordered_set<std::string> seen;
    float score = 0;
    auto piece = [&](std::string text) {
        if (v.tokens.size() >= n_vocab || !seen.insert(text).second) return;
        add(std::move(text), score, 1);
        score -= 1;
    };
    const std::string space = "\xe2\x96\x81";  // U+2581, SentencePiece's escaped space
    piece(space);
    const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
    for (char c : letters) piece(std::string(1, c));
    for (char c : letters) piece(space + c);
    for (char c = 'A'; c <= 'Z'; ++c) piece(std::string(1, c));
    for (char c = '0'; c <= '9'; ++c) piece(std::string(1, c));
    for (char c : std::string(".,!?'\"-:;()[]{}<>/\\_=+*&%$#@`~^|")) piece(std::string(1, c));
    for (char c = 'A'; c <= 'Z'; ++c) piece(space + c);
    // Letter strings of growing length in frequency order: "e", "t", ..., "ee", "et", ...; each
    // with and without the space prefix, so every longer piece is reachable by pairwise merges.
    for (size_t len = 2; v.tokens.size() < n_vocab; ++len) {
        std::vector<size_t> idx(len, 0);
        while (v.tokens.size() < n_vocab) {
            std::string s;
            for (size_t i : idx) s += letters[i];
            piece(space + s);
            piece(s);
            size_t k = len;  // odometer increment, last position fastest
            while (k > 0 && ++idx[k - 1] == letters.size()) idx[--k] = 0;
            if (k == 0) break;
        }
    }
    return v;
}

RandomVocab make_random_wordpiece_vocab(uint32_t n_vocab) {
    RandomVocab v;
    const char* specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (const char* t : specials) {
        v.tokens.push_back(t);
        v.scores.push_back(0);
        v.types.push_back(t == std::string_view("[UNK]") ? 2 : 3);
    }
    // The SentencePiece vocab's pieces after its <unk> <s> </s> and 256 byte tokens.
    const RandomVocab spm = make_random_vocab(n_vocab - uint32_t(std::size(specials)) + 259);
    for (size_t i = 259; i < spm.tokens.size(); ++i) {
        v.tokens.push_back(spm.tokens[i]);
        v.scores.push_back(0);
        v.types.push_back(1);
    }
    return v;
}

}  // namespace vkllm
