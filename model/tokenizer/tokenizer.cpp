#include "model/tokenizer/tokenizer.h"

#include "model/tokenizer/bpe.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/spm.h"
#include "model/tokenizer/unigram.h"
#include "model/tokenizer/wordpiece.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace vkllm {

namespace {

// Texts llama.cpp (llama-vocab.cpp) takes for end-of-turn / end-of-message tokens when the file
// names none, in the order tried here.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>",
};
// Texts of tokens that end generation besides eos / eot / eom (llama.cpp's list).
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "[e~[",
};
// Fill-in-the-middle pad / repo / file-separator tokens, which llama.cpp also stops at.
constexpr std::string_view kFimEogTexts[] = {
    "<|fim_pad|>",   "<fim-pad>",  "<fim_pad>", "<PAD>",      "[PAD]",        "<|fim_repo|>",
    "<|repo_name|>", "<fim-repo>", "<REPO>",    "<reponame>", "<|file_sep|>",
};

// The fill-in-the-middle tokens: the GGUF key (and the older key some converters wrote), then the
// texts llama.cpp (llama-vocab.cpp) looks for when the file names none, in the order tried here.
struct FimSpec {
    int32_t FimTokens::*member;
    std::string_view key, old_key;
    std::vector<std::string_view> texts;
};
const std::vector<FimSpec>& fim_specs() {
    static const std::vector<FimSpec> specs = {
        {&FimTokens::pre,
         "tokenizer.ggml.fim_pre_token_id",
         "tokenizer.ggml.prefix_token_id",
         {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
          "<\xef\xbd\x9c"
          "fim\xe2\x96\x81"
          "begin\xef\xbd\x9c>",
          "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", "[PREFIX]"}},
        {&FimTokens::suf,
         "tokenizer.ggml.fim_suf_token_id",
         "tokenizer.ggml.suffix_token_id",
         {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
          "<\xef\xbd\x9c"
          "fim\xe2\x96\x81"
          "hole\xef\xbd\x9c>",
          "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", "[SUFFIX]"}},
        {&FimTokens::mid,
         "tokenizer.ggml.fim_mid_token_id",
         "tokenizer.ggml.middle_token_id",
         {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
          "<\xef\xbd\x9c"
          "fim\xe2\x96\x81"
          "end\xef\xbd\x9c>",
          "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", "[MIDDLE]"}},
        {&FimTokens::pad, "tokenizer.ggml.fim_pad_token_id", "", {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"}},
        {&FimTokens::rep,
         "tokenizer.ggml.fim_rep_token_id",
         "",
         {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
        {&FimTokens::sep, "tokenizer.ggml.fim_sep_token_id", "", {"<|file_sep|>"}},
    };
    return specs;
}

}  // namespace

// --- Tokenizer ---------------------------------------------------------------------------------

Tokenizer::Tokenizer(const GgufFile& f, std::string_view model, Defaults defaults) : model_(model) {
    const auto& tokens = f.get_string_array("tokenizer.ggml.tokens");
    if (tokens.empty()) f.fail("key 'tokenizer.ggml.tokens'", "vocab is empty");
    if (tokens.size() > size_t(std::numeric_limits<int32_t>::max() / 2))
        f.fail("key 'tokenizer.ggml.tokens'", fmt::format("{} tokens is too many", tokens.size()));
    const size_t n = tokens.size();
    tokens_.assign(tokens.begin(), tokens.end());

    if (f.has("tokenizer.ggml.scores")) {
        scores_ = f.get_f32_array("tokenizer.ggml.scores");
        if (scores_.size() != n)
            f.fail("key 'tokenizer.ggml.scores'", fmt::format("has {} entries for {} tokens", scores_.size(), n));
    } else {
        scores_.assign(n, 0.0f);
    }
    types_.assign(n, TokenType::Normal);
    if (f.has("tokenizer.ggml.token_type")) {
        std::vector<int32_t> types = f.get_i32_array("tokenizer.ggml.token_type");
        if (types.size() != n)
            f.fail("key 'tokenizer.ggml.token_type'", fmt::format("has {} entries for {} tokens", types.size(), n));
        for (size_t i = 0; i < n; ++i) {
            if (types[i] < 0 || types[i] > int32_t(TokenType::Byte))
                f.fail("key 'tokenizer.ggml.token_type'",
                       fmt::format("token {} has type {}; valid types are 0..6", i, types[i]));
            types_[i] = TokenType(types[i]);
        }
    }
    token_ids_.reserve(n);
    for (size_t i = 0; i < n; ++i) token_ids_.emplace(tokens_[i], int32_t(i));  // first occurrence wins

    auto special = [&](std::string_view key, int32_t dflt) -> int32_t {
        const GgufValue* v = f.find(key);
        if (!v) return dflt >= 0 && dflt < int32_t(n) ? dflt : -1;
        auto x = v->as_i64();
        if (!x) f.fail("key " + quote_name(key), fmt::format("has type {}, expected UINT32", v->describe_type()));
        if (*x == -1 || *x == int64_t(std::numeric_limits<uint32_t>::max())) return -1;  // "none"
        if (*x < 0 || *x >= int64_t(n))
            f.fail("key " + quote_name(key), fmt::format("token id {} is outside the vocab of {} tokens", *x, n));
        return int32_t(*x);
    };
    bos_id_ = special("tokenizer.ggml.bos_token_id", defaults.bos);
    eos_id_ = special("tokenizer.ggml.eos_token_id", defaults.eos);
    unk_id_ = special("tokenizer.ggml.unknown_token_id", defaults.unk);
    eot_id_ = special("tokenizer.ggml.eot_token_id", -1);
    eom_id_ = special("tokenizer.ggml.eom_token_id", -1);
    add_bos_ = f.find_bool("tokenizer.ggml.add_bos_token").value_or(defaults.add_bos);
    add_eos_ = f.find_bool("tokenizer.ggml.add_eos_token").value_or(defaults.add_eos);
    // Only reranking reads the separator: a bad id is warned about, not fatal (as llama.cpp).
    int32_t sep = -1;
    if (const GgufValue* v = f.find("tokenizer.ggml.seperator_token_id")) {
        const auto x = v->as_i64();
        if (x && *x >= 0 && *x < int64_t(n))
            sep = int32_t(*x);
        else if (!x || (*x != -1 && *x != int64_t(std::numeric_limits<uint32_t>::max())))
            warnings_.push_back(
                fmt::format("tokenizer.ggml.seperator_token_id {} is not a token id of the vocab of {} "
                            "tokens: ignored",
                            x ? std::to_string(*x) : v->describe_type(), n));
    }
    pair_bos_ = add_bos_ ? bos_id_ : -1;
    pair_eos_ = add_eos_ ? (eos_id_ >= 0 ? eos_id_ : sep) : -1;
    pair_sep_ = f.find_bool("tokenizer.ggml.add_sep_token").value_or(false) ? sep : -1;

    control_.assign(n, false);
    for (size_t i = 0; i < n; ++i) control_[i] = types_[i] == TokenType::Control || types_[i] == TokenType::Unknown;

    // A FIM token found by its text is a control token whatever the file says (as llama.cpp), so
    // "<PRE>" in a user's code stays text and the token prints nothing.
    for (const FimSpec& spec : fim_specs()) {
        int32_t id = special(spec.key, -1);
        if (id < 0 && !spec.old_key.empty()) id = special(spec.old_key, -1);
        for (size_t i = 0; id < 0 && i < spec.texts.size(); ++i)
            if ((id = find_token(spec.texts[i])) >= 0) control_[size_t(id)] = true;
        fim_.*spec.member = id;
    }

    // End of generation. llama.cpp finds end tokens by their text and treats them as control
    // tokens even when the file types them otherwise (so "<|im_end|>" is not matched in text
    // without parse_special).
    std::vector<int32_t> eog;
    for (std::string_view t : kEotTexts) {
        if (int32_t id = find_token(t); eot_id_ < 0 && id >= 0) {
            eot_id_ = id;
            control_[size_t(id)] = true;
        }
    }
    if (eom_id_ < 0 && (eom_id_ = find_token("<|eom_id|>")) >= 0) control_[size_t(eom_id_)] = true;
    for (std::string_view t : kFimEogTexts)
        if (int32_t id = find_token(t); id >= 0) eog.push_back(id);
    for (std::string_view key :
         {"tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"})
        if (int32_t id = special(key, -1); id >= 0) eog.push_back(id);
    for (std::string_view t : kEogTexts) {
        if (int32_t id = find_token(t); id >= 0) {
            eog.push_back(id);
            control_[size_t(id)] = true;
        }
    }
    for (int32_t id : {eos_id_, eot_id_, eom_id_})
        if (id >= 0) eog.push_back(id);
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
    // llama.cpp's exceptions: with gpt-oss' "<|return|>" and "<|call|>" (or solar-open's "<|calls|>"
    // and "<|flush|>"), "<|end|>" only ends a message, not the generation; next to Gemma 4's
    // "<|tool_response>", "</s>" is ordinary text.
    auto has = [&](std::string_view t) {
        int32_t id = find_token(t);
        return id >= 0 && std::binary_search(eog.begin(), eog.end(), id);
    };
    auto drop = [&](std::string_view t) {
        const int32_t id = find_token(t);
        std::erase(eog, id);
        control_[size_t(id)] = false;
        types_[size_t(id)] = t == "</s>" ? TokenType::Normal : TokenType::UserDefined;
    };
    if (has("<|end|>") && ((has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>"))))
        drop("<|end|>");
    if (has("</s>") && has("<|tool_response>")) drop("</s>");
    eog_ids_ = std::move(eog);

    // Special tokens matched inside text. llama.cpp strips the spaces after Phi-3's chat tokens
    // (a rule keyed on the model name, as there).
    std::string name(f.find_string("general.name").value_or(""));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    const bool phi3 = name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;
    std::vector<SpecialTokens::Entry> entries;
    for (size_t i = 0; i < n; ++i) {
        if (!control_[i] && types_[i] != TokenType::UserDefined) continue;
        const std::string_view t = tokens_[i];
        const bool rstrip = phi3 && t != "<unk>" && t != "<s>" && t != "<|endoftext|>";
        entries.push_back({int32_t(i), t, bool(control_[i]), rstrip});
    }
    specials_.build(std::move(entries));
}

void Tokenizer::check_id(int32_t id) const {
    if (id < 0 || size_t(id) >= tokens_.size())
        throw std::out_of_range(fmt::format("token id {} is outside the vocab of {} tokens", id, tokens_.size()));
}

std::string_view Tokenizer::token_text(int32_t id) const {
    check_id(id);
    return tokens_[size_t(id)];
}

TokenType Tokenizer::token_type(int32_t id) const {
    check_id(id);
    return types_[size_t(id)];
}

float Tokenizer::token_score(int32_t id) const {
    check_id(id);
    return scores_[size_t(id)];
}

int32_t Tokenizer::find_token(std::string_view text) const {
    auto it = token_ids_.find(text);
    return it == token_ids_.end() ? -1 : it->second;
}

bool Tokenizer::is_eog(int32_t id) const { return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id); }

std::vector<int32_t> Tokenizer::encode_pair(std::string_view first, std::string_view second) const {
    std::vector<int32_t> out;
    if (pair_bos_ >= 0) out.push_back(pair_bos_);
    const std::vector<int32_t> a = encode(first, false), b = encode(second, false);
    out.insert(out.end(), a.begin(), a.end());
    if (pair_eos_ >= 0) out.push_back(pair_eos_);
    if (pair_sep_ >= 0) out.push_back(pair_sep_);
    out.insert(out.end(), b.begin(), b.end());
    if (pair_eos_ >= 0) out.push_back(pair_eos_);
    return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
    std::vector<int32_t> out;
    if (add_special && add_bos_ && bos_id_ >= 0) out.push_back(bos_id_);
    std::vector<SpecialTokens::Fragment> fragments;
    specials_.partition(text, parse_special, fragments);
    bool after_special = true;
    for (const SpecialTokens::Fragment& f : fragments) {
        if (f.token >= 0) {
            out.push_back(f.token);
            after_special = true;
        } else {
            encode_text(text.substr(f.begin, f.end - f.begin), after_special, out);
            after_special = false;
        }
    }
    if (add_special && add_eos_ && eos_id_ >= 0) out.push_back(eos_id_);
    return out;
}

std::string Tokenizer::decode_piece(int32_t id, int32_t prev_id) const {
    check_id(id);
    std::string out = control_[size_t(id)] && types_[size_t(id)] != TokenType::Unknown ? std::string() : piece(id);
    // A byte token's space is real text, not the dummy prefix.
    if (strips_first_space() && types_[size_t(id)] != TokenType::Byte && (prev_id < 0 || prev_id == bos_id_) &&
        !out.empty() && out[0] == ' ')
        out.erase(0, 1);
    return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
    check_id(id);
    if (control_[size_t(id)]) return special ? tokens_[size_t(id)] : std::string();
    return piece(id);
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) out += decode_piece(ids[i], i ? ids[i - 1] : -1);
    return out;
}

// --- factory -----------------------------------------------------------------------------------

std::unique_ptr<Tokenizer> make_tokenizer(const GgufFile& f) {
    auto model = f.find_string("tokenizer.ggml.model");
    if (!model) f.fail("key 'tokenizer.ggml.model'", "required key is missing: the file has no tokenizer");
    if (*model == "llama") return std::make_unique<SpmTokenizer>(f);
    if (*model == "gpt2") return std::make_unique<BpeTokenizer>(f);
    if (*model == "bert") return std::make_unique<WordPieceTokenizer>(f);
    if (*model == "t5") return std::make_unique<UnigramTokenizer>(f);
    f.fail("key 'tokenizer.ggml.model'",
           fmt::format("tokenizer model {} is not supported; supported: llama (SentencePiece), gpt2 (byte-level BPE), "
                       "bert (WordPiece), t5 (Unigram)",
                       quote_name(*model)));
}

}  // namespace vkllm
