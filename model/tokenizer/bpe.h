// Byte-level BPE (tokenizer.ggml.model = "gpt2": GPT-2, Llama 3, Qwen2, DeepSeek, Falcon, SmolLM, ...).
#pragma once

#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/tokenizer.h"

#include <memory>
#include <string>
#include <unordered_map>

namespace vkllm {

// As llama.cpp's BPE tokenizer: the pre-tokenizer named by tokenizer.ggml.pre cuts a piece of text
// into words; each word's bytes become the printable characters of GPT-2's byte-to-unicode table
// (the alphabet vocab entries are spelled in), and the adjacent pair with the lowest rank in
// tokenizer.ggml.merges is merged repeatedly (ties: leftmost). Llama 3's pre-tokenizer takes a word
// that is a vocab entry whole without merging.
//
// Internally everything is raw bytes and ids: each vocab entry is indexed by the bytes it stands
// for, and a merge is a pair of ids with its rank and result, so a merge step is one hash lookup.
class BpeTokenizer final : public Tokenizer {
public:
    explicit BpeTokenizer(const GgufFile& file);
    std::string_view pre_tokenizer_name() const override { return pre_->spec().name; }

protected:
    void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
    std::string piece(int32_t id) const override;

private:
    struct Choice;
    BpeTokenizer(const GgufFile& file, const Choice& choice);
    int32_t intern(std::string_view raw);  // id of the entry spelling these bytes, or a new synthetic id
    void bpe_word(std::string_view word, std::vector<int32_t>& out) const;

    struct Merge {
        int32_t rank, result;
    };
    std::unique_ptr<PreTokenizer> pre_;
    std::string raw_arena_;  // the bytes of every entry, back to back
    std::unordered_map<std::string_view, int32_t> raw_ids_;  // bytes -> id; views into raw_arena_
    std::unordered_map<std::string, int32_t> synthetic_ids_;  // bytes of merge parts that are no entry
    std::vector<std::string> synthetic_;  // id - n_vocab -> bytes
    std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
    int32_t byte_sym_[256];  // id of each single byte
};

}  // namespace vkllm
