// Tokenizers built from the vocabulary stored in a GGUF file.
//
// `Tokenizer` holds what every vocabulary has (token texts, types, scores, the special ids, which
// tokens end generation) and the special-token handling; `make_tokenizer` picks the algorithm from
// `tokenizer.ggml.model`: "llama" is SentencePiece BPE with byte fallback (LLaMA 1/2, TinyLlama,
// Mistral, Phi-3; model/tokenizer/spm.h), "gpt2" byte-level BPE with merges and a pre-tokenizer
// (GPT-2, Llama 3, Qwen2, DeepSeek, Falcon, SmolLM, ...; model/tokenizer/bpe.h), "bert" WordPiece
// (BERT-family encoders; model/tokenizer/wordpiece.h), "t5" SentencePiece Unigram (T5, XLM-RoBERTa;
// model/tokenizer/unigram.h). All follow
// llama.cpp's llama-vocab.cpp, so token ids equal what llama.cpp gives the same text.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/tokenizer/special_tokens.h"

namespace vkllm {

// Fill-in-the-middle tokens (-1: none): prefix, suffix, middle, pad, repository name and file
// separator, from tokenizer.ggml.fim_*_token_id or, as llama.cpp does, found by their text
// (Qwen2.5-Coder's "<|fim_prefix|>", CodeLlama's "▁<PRE>", StarCoder's "<fim_prefix>",
// DeepSeek-Coder's "<｜fim▁begin｜>", ...).
struct FimTokens {
    int32_t pre = -1, suf = -1, mid = -1, pad = -1, rep = -1, sep = -1;
    // Infill needs the three that frame the hole.
    bool usable() const { return pre >= 0 && suf >= 0 && mid >= 0; }
};

// Values of tokenizer.ggml.token_type (SentencePiece piece types).
enum class TokenType : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

class Tokenizer {
public:
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;
    virtual ~Tokenizer() = default;

    // Token ids of `text`. add_special: BOS / EOS around it as the vocab asks (add_bos(),
    // add_eos()). parse_special: the texts of control tokens ("<|eot_id|>", "<|im_start|>") inside
    // `text` become those tokens, as chat prompts need; without it they are plain text. User-defined
    // tokens are always matched whole. Never fails on any input bytes, invalid UTF-8 included.
    std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const;
    // A query and a document for a reranker, joined as llama.cpp's server joins them (its
    // format_prompt_rerank without a rerank template): [BOS] first [EOS] [SEP] second [EOS], each
    // special token only where the vocab adds it (add_bos_token, add_eos_token, add_sep_token; EOS
    // falls back to SEP when the vocab has none). BERT vocabs: [CLS] first [SEP] second.
    std::vector<int32_t> encode_pair(std::string_view first, std::string_view second) const;

    // Text of `id` as it appears when following `prev_id` (-1 at the start of a sequence). Control
    // and unknown-type tokens of a byte-level vocab print nothing; SentencePiece drops its
    // dummy-prefix space from the first piece of a sequence and from the piece right after BOS.
    // Throws std::out_of_range for ids outside the vocab.
    std::string decode_piece(int32_t id, int32_t prev_id) const;
    std::string decode(std::span<const int32_t> ids) const;
    // The bytes `id` stands for, no space dropped; with `special`, control tokens give their text
    // (what llama-tokenize prints beside each id).
    std::string token_to_piece(int32_t id, bool special) const;

    size_t n_vocab() const { return tokens_.size(); }
    std::string_view token_text(int32_t id) const;  // raw vocab entry ("▁the", "Ġthe", "<0x0A>")
    TokenType token_type(int32_t id) const;
    float token_score(int32_t id) const;
    int32_t bos_id() const { return bos_id_; }  // -1 when the vocab has none
    int32_t eos_id() const { return eos_id_; }
    int32_t eot_id() const { return eot_id_; }  // end of turn: tokenizer.ggml.eot_token_id or "<|eot_id|>"-like text
    int32_t eom_id() const { return eom_id_; }  // end of message ("<|eom_id|>")
    int32_t unk_id() const { return unk_id_; }
    bool add_bos() const { return add_bos_; }  // tokenizer.ggml.add_bos_token, default per tokenizer model
    bool add_eos() const { return add_eos_; }  // tokenizer.ggml.add_eos_token, default per tokenizer model
    const FimTokens& fim() const { return fim_; }
    // End of generation: eos, eot, eom and the other end tokens llama.cpp recognises by text.
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
    // Vocab id of a token text, any type; -1 when absent.
    int32_t find_token(std::string_view text) const;
    // "llama", "gpt2", "bert" or "t5", and the pre-tokenizer in use ("" for SentencePiece).
    std::string_view model_name() const { return model_; }
    virtual std::string_view pre_tokenizer_name() const { return {}; }
    // Things about the file worth telling the user (an unknown pre-tokenizer, ...); never fatal.
    const std::vector<std::string>& warnings() const { return warnings_; }

protected:
    struct Defaults {
        int32_t bos = 1, eos = 2, unk = 0;
        bool add_bos = true, add_eos = false;
    };
    // Reads tokens / scores / token types, the special ids and flags, finds the end-of-generation
    // tokens and builds the special-token matcher; errors name the file and key.
    Tokenizer(const GgufFile& file, std::string_view model, Defaults defaults);
    void check_id(int32_t id) const;

    // Appends the ids of a piece of plain text (no special tokens in it). `after_special`: the piece
    // starts the text or follows a special token (SentencePiece then adds its dummy-prefix space).
    virtual void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
    // The text of a non-control token (decode_piece without the leading-space rule).
    virtual std::string piece(int32_t id) const = 0;
    // Whether decode_piece drops a leading space at the start / after BOS (SentencePiece).
    virtual bool strips_first_space() const { return false; }

    std::string model_;
    std::vector<std::string> tokens_;
    std::vector<float> scores_;
    std::vector<TokenType> types_;
    std::unordered_map<std::string_view, int32_t> token_ids_;  // views into tokens_ (never resized)
    int32_t bos_id_ = 1, eos_id_ = 2, unk_id_ = 0, eot_id_ = -1, eom_id_ = -1;
    bool add_bos_ = true, add_eos_ = false;
    FimTokens fim_;
    int32_t pair_bos_ = -1, pair_eos_ = -1, pair_sep_ = -1;  // encode_pair's special tokens; -1: none
    std::vector<int32_t> eog_ids_;  // sorted
    std::vector<bool> control_;  // control or unknown type, or a control-looking end token
    SpecialTokens specials_;
    std::vector<std::string> warnings_;
};

// Throws GgufError naming the file when tokenizer.ggml.model is missing or not supported.
std::unique_ptr<Tokenizer> make_tokenizer(const GgufFile& file);

}  // namespace vkllm
