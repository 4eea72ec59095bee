// SentencePiece Unigram (tokenizer.ggml.model = "t5": T5, and the XLM-RoBERTa vocab of bge-m3,
// multilingual-e5 and bge-reranker-v2-m3).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace vkllm {

// SentencePiece's normaliser as the GGUF stores it (tokenizer.ggml.precompiled_charsmap): a
// little-endian u32 byte count, a Darts-clone double-array trie of that many bytes mapping input
// byte strings to offsets, then the NUL-terminated replacement strings the offsets point into.
class PrecompiledCharsMap {
public:
    PrecompiledCharsMap() = default;
    // Throws std::invalid_argument naming what is wrong with the blob.
    explicit PrecompiledCharsMap(std::span<const uint8_t> blob);

    bool empty() const { return units_.empty(); }
    // The longest prefix of `text` the map has a replacement for: bytes consumed (0: no rule
    // applies) and the replacement. Matching stops at a NUL byte. A trie index outside the array
    // ends the match (a corrupt map never reads out of bounds).
    size_t match(std::string_view text, std::string_view& replacement) const;

private:
    std::vector<uint32_t> units_;
    std::string replacements_;  // ends with a NUL (checked), so every entry is terminated
};

// As llama.cpp's UGM tokenizer. A piece of text is normalised first: each longest charsmap match is
// replaced (nmt_nfkc: NFKC, whitespace and control characters), other valid characters are kept,
// an invalid byte becomes U+FFFD. Then spaces become "▁": with tokenizer.ggml.remove_extra_whitespaces
// (default false) runs of spaces collapse and leading / trailing ones drop, every word getting one
// "▁" in front; with tokenizer.ggml.add_space_prefix (default false) the piece starts with "▁".
// Every piece of text between special tokens is normalised on its own. The normalised bytes are cut
// into the pieces of normal, user-defined and unused tokens with the highest total score (Viterbi,
// in double; user-defined pieces score 0); a character no piece covers is the unknown token,
// scored 10 below the lowest normal piece, and consecutive unknown tokens merge into one.
// add_special: EOS after the text (tokenizer.ggml.add_eos_token, default true), no BOS unless
// tokenizer.ggml.add_bos_token says so. Defaults as llama.cpp: EOS 1, unknown 2, no BOS.
class UnigramTokenizer final : public Tokenizer {
public:
    explicit UnigramTokenizer(const GgufFile& file);

    // The normalised form of a piece of text (exposed for tests).
    std::string normalize(std::string_view text) const;

protected:
    void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
    std::string piece(int32_t id) const override;
    bool strips_first_space() const override { return add_space_prefix_; }

private:
    // Byte trie of the pieces the tokenizer may emit: node 0 is the root; child(node, byte) is -1
    // when absent; values_[node] is the token ending there or -1.
    int32_t child(int32_t node, unsigned char byte) const;

    std::unordered_map<uint64_t, int32_t> edges_;  // node << 8 | byte -> node
    std::vector<int32_t> values_;
    PrecompiledCharsMap charsmap_;
    double unknown_score_ = 0;
    bool add_space_prefix_ = false, remove_extra_whitespaces_ = false;
};

}  // namespace vkllm
