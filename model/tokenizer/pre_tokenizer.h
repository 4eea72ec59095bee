// Pre-tokenizers of byte-level BPE vocabularies: the regexes that cut text into words before the
// merges run, chosen by `tokenizer.ggml.pre`.
//
// The regexes and the order in which they apply are llama.cpp's (src/llama-vocab.cpp), which
// copies them from each model's Hugging Face tokenizer.json. As in llama.cpp, each regex splits
// every piece the previous one left: its matches become pieces, and so does the text between two
// matches. Unicode classes (\p{L}, \p{N}, \p{P}) come from PCRE2 with Unicode properties; \s is
// Unicode's White_Space set, which is what llama.cpp's tables give it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vkllm {

struct PreTokenizerSpec {
    std::string_view name;  // the canonical `tokenizer.ggml.pre` value
    std::vector<std::string_view> aliases;  // other values llama.cpp maps to the same split
    std::vector<std::string_view> regexes;
    bool ignore_merges = false;  // a word that is a vocab entry as a whole is taken as is (Llama 3)
    bool add_bos = false;  // default of tokenizer.ggml.add_bos_token
};

// The spec for a `tokenizer.ggml.pre` value, or nullptr when it is not known.
const PreTokenizerSpec* find_pre_tokenizer(std::string_view pre);
const PreTokenizerSpec& default_pre_tokenizer();
// All known specs (for documentation and tests).
std::span<const PreTokenizerSpec> pre_tokenizers();

class PreTokenizer {
public:
    // Compiles the regexes; throws std::runtime_error naming a regex PCRE2 rejects.
    explicit PreTokenizer(const PreTokenizerSpec& spec);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;

    // Splits `text` into words: byte ranges [first, second) of `canonical`, the text decoded as
    // llama.cpp decodes it (utf8::decode_lenient: an invalid byte becomes U+FFFD) and re-encoded.
    // `canonical` equals `text` when `text` is valid UTF-8.
    void split(std::string_view text, std::string& canonical, std::vector<std::pair<uint32_t, uint32_t>>& words) const;

    const PreTokenizerSpec& spec() const { return spec_; }

private:
    struct Compiled;
    const PreTokenizerSpec& spec_;
    std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace vkllm
