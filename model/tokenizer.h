// Tokenizers built from the vocabulary stored in a GGUF file.
//
// `Tokenizer` is the interface the runtime uses; `make_tokenizer` picks the implementation from
// `tokenizer.ggml.model`. Today that is "llama" (SentencePiece BPE with byte fallback, as used by
// LLaMA 1/2 and TinyLlama); byte-level BPE ("gpt2": GPT-2 / Llama-3 merges plus a pre-tokenizer
// regex) would be a second subclass sharing the vocab and special-token handling here.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/gguf.h"

namespace vkllm {

// Values of tokenizer.ggml.token_type (SentencePiece piece types).
enum class TokenType : int32_t {
    Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

class Tokenizer {
public:
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;
    virtual ~Tokenizer() = default;

    // Never fails on any input bytes, invalid UTF-8 included.
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
    // Text of `id` as it appears when following `prev_id` (-1 at the start of a sequence):
    // the SentencePiece dummy-prefix space is dropped from the first piece of a sequence and
    // from the piece right after BOS. Throws std::out_of_range for ids outside the vocab.
    virtual std::string decode_piece(int32_t id, int32_t prev_id) const = 0;
    std::string decode(std::span<const int32_t> ids) const;

    size_t n_vocab() const { return tokens_.size(); }
    std::string_view token_text(int32_t id) const;  // raw vocab entry ("▁the", "<0x0A>")
    TokenType token_type(int32_t id) const;
    float token_score(int32_t id) const;
    int32_t bos_id() const { return bos_id_; }  // -1 when the vocab has none
    int32_t eos_id() const { return eos_id_; }
    int32_t unk_id() const { return unk_id_; }
    bool add_bos() const { return add_bos_; }   // tokenizer.ggml.add_bos_token, default true
    // Vocab id of a token text, any type; -1 when absent.
    int32_t find_token(std::string_view text) const;

protected:
    // Reads tokens / scores / token types and the special ids; errors name the file and key.
    explicit Tokenizer(const GgufFile& file);
    void check_id(int32_t id) const;

    std::vector<std::string> tokens_;
    std::vector<float> scores_;
    std::vector<TokenType> types_;
    std::unordered_map<std::string_view, int32_t> token_ids_;  // views into tokens_ (never resized)
    int32_t bos_id_ = 1, eos_id_ = 2, unk_id_ = 0;
    bool add_bos_ = true;
};

// SentencePiece BPE as in llama.cpp's SPM tokenizer: the text gets a "▁" dummy prefix and its
// spaces become "▁"; it is split into UTF-8 characters (an invalid byte is one symbol), then the
// adjacent pair whose concatenation is a vocab piece of the highest score is merged repeatedly
// (ties: leftmost); symbols that are not pieces become byte tokens <0xNN>.
class SpmTokenizer final : public Tokenizer {
public:
    explicit SpmTokenizer(const GgufFile& file);
    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
    std::string decode_piece(int32_t id, int32_t prev_id) const override;

private:
    int32_t mergeable_id(std::string_view piece) const;  // -1 unless a piece merges may form

    int32_t byte_ids_[256];
    std::vector<std::string_view> user_defined_;  // matched whole before merging, longest first
};

// Throws GgufError naming the file when tokenizer.ggml.model is missing or not supported.
std::unique_ptr<Tokenizer> make_tokenizer(const GgufFile& file);

}  // namespace vkllm
