// WordPiece (tokenizer.ggml.model = "bert": BERT, bge, all-MiniLM, e5, nomic-embed, jina-bert).
#pragma once

#include "model/tokenizer/tokenizer.h"

namespace vkllm {

// As llama.cpp's WPM tokenizer, whose vocab layout it reads: llama.cpp's converter stores a
// word-initial piece "the" as "▁the" and a continuation "##ing" as "ing". Text is normalised one code
// point at a time: each becomes the first code point of its canonical decomposition (so accents
// drop: "Äpfel" -> "Apfel"), then its simple lowercase; NUL, U+FFFD, control characters (Unicode
// categories Cc, Cf, Cs, Co) and marks (M*: combining accents, vowel signs) vanish. Whitespace (Unicode White_Space) separates words; punctuation (P*), ASCII
// symbols (S* below U+007F) and CJK ideographs are words of their own. Each word, with "▁" in
// front, is covered left to right by the longest vocab pieces; a word some position of which no
// piece covers becomes [UNK] as a whole. add_special puts [CLS] before the text
// (tokenizer.ggml.cls_token_id, default 101; tokenizer.ggml.add_bos_token, default true) and [SEP]
// after it (seperator_token_id, default 102; add_sep_token, default true).
class WordPieceTokenizer final : public Tokenizer {
public:
    explicit WordPieceTokenizer(const GgufFile& file);

    int32_t sep_id() const { return sep_id_; }

protected:
    void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
    std::string piece(int32_t id) const override;
    bool strips_first_space() const override { return true; }

private:
    int32_t sep_id_ = 102;
    size_t max_piece_bytes_ = 0;
};

// The words WordPiece cuts `text` into after normalisation (exposed for tests).
std::vector<std::string> wordpiece_words(std::string_view text);

}  // namespace vkllm
