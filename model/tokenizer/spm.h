// SentencePiece BPE (tokenizer.ggml.model = "llama": LLaMA 1/2, TinyLlama, Mistral, Phi-3).
#pragma once

#include "model/tokenizer/tokenizer.h"

namespace vkllm {

// As llama.cpp's SPM tokenizer: a piece of text gets a "▁" dummy prefix when it starts the text or
// follows a special token (tokenizer.ggml.add_space_prefix, default true) and its spaces become
// "▁"; it is split into UTF-8 characters (an invalid byte is one symbol), then the adjacent pair
// whose concatenation is a vocab piece of the highest score is merged repeatedly (ties: leftmost);
// symbols that are not pieces become byte tokens <0xNN>.
class SpmTokenizer final : public Tokenizer {
public:
    explicit SpmTokenizer(const GgufFile& file);

protected:
    void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
    std::string piece(int32_t id) const override;
    bool strips_first_space() const override { return add_space_prefix_; }

private:
    int32_t mergeable_id(std::string_view piece) const;  // -1 unless a piece merges may form

    int32_t byte_ids_[256];
    bool add_space_prefix_ = true;
};

// The text a SentencePiece vocab entry stands for (SentencePiece BPE and Unigram): "▁" is a space,
// <0xNN> byte tokens their byte, the unknown token " ⁇ ", control tokens nothing.
std::string sentencepiece_piece(std::string_view text, TokenType type);

}  // namespace vkllm
