#include "model/tokenizer/wordpiece.h"

#include "model/tokenizer/utf8.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>

namespace vkllm {

namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581: the converter's word-start mark

// The first code point of cp's canonical decomposition (cp itself when it has none).
uint32_t first_of_nfd(uint32_t cp) {
    utf8proc_int32_t buf[8];
    int last = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(utf8proc_int32_t(cp), buf, 8, UTF8PROC_DECOMPOSE, &last);
    return n >= 1 ? uint32_t(buf[0]) : cp;
}

// Unicode's White_Space property (utf8proc has categories, not this property).
bool is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

// The CJK blocks BERT's tokenizer isolates (its _is_chinese_char).
bool is_cjk(uint32_t cp) {
    return (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) || (cp >= 0x20000 && cp <= 0x2a6df) ||
           (cp >= 0x2a700 && cp <= 0x2b73f) || (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b820 && cp <= 0x2ceaf) ||
           (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
}

bool is_control(utf8proc_category_t c) {
    return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CS ||
           c == UTF8PROC_CATEGORY_CO;
}

bool is_mark(utf8proc_category_t c) { return c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME; }

bool is_punctuation(utf8proc_category_t c) { return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO; }

bool is_symbol(utf8proc_category_t c) { return c >= UTF8PROC_CATEGORY_SM && c <= UTF8PROC_CATEGORY_SO; }

}  // namespace

std::vector<std::string> wordpiece_words(std::string_view text) {
    std::vector<uint32_t> cps;
    utf8::decode_lenient(text, cps);
    std::vector<std::string> words(1);
    for (uint32_t raw : cps) {
        if (is_white_space(raw)) {
            if (!words.back().empty()) words.emplace_back();
            continue;
        }
        const uint32_t cp = first_of_nfd(raw);
        const auto cat = utf8proc_category(utf8proc_int32_t(cp));
        if (cp == 0 || cp == utf8::kReplacement || is_control(cat) || is_mark(cat)) continue;
        std::string s;
        utf8::append(s, uint32_t(utf8proc_tolower(utf8proc_int32_t(cp))));
        if (is_punctuation(cat) || (cp < 0x7f && is_symbol(cat)) || is_cjk(cp)) {
            if (!words.back().empty()) words.emplace_back();
            words.back() = std::move(s);
            words.emplace_back();
        } else {
            words.back() += s;
        }
    }
    if (words.back().empty()) words.pop_back();
    return words;
}

WordPieceTokenizer::WordPieceTokenizer(const GgufFile& f)
    : Tokenizer(f, "bert", Defaults{.bos = 101, .eos = 102, .unk = 100, .add_bos = true}) {
    auto id_key = [&](std::string_view key, int32_t current) {
        const GgufValue* v = f.find(key);
        if (!v) return current;
        const auto x = v->as_i64();
        if (!x || *x < 0 || *x >= int64_t(tokens_.size()))
            f.fail("key " + quote_name(key),
                   fmt::format("is not a token id of the vocab of {} tokens", tokens_.size()));
        return int32_t(*x);
    };
    // llama.cpp's WordPiece vocab has an EOS only when the file names one (read by the base class).
    const bool has_eos = f.has("tokenizer.ggml.eos_token_id");
    const int32_t file_eos = eos_id_;
    // The converter writes [CLS] and [SEP] under these keys, not as BOS / EOS.
    bos_id_ = id_key("tokenizer.ggml.cls_token_id", bos_id_);
    sep_id_ = eos_id_ = id_key("tokenizer.ggml.seperator_token_id", eos_id_);
    // [SEP] closes the text as llama.cpp's add_sep says (default true); the base class appends it
    // as its end token.
    add_eos_ = f.find_bool("tokenizer.ggml.add_sep_token").value_or(true);
    // A pair: [CLS] a [SEP] b, and EOS (or [SEP]) after each only where add_eos_token says.
    pair_bos_ = add_bos_ ? bos_id_ : -1;
    pair_sep_ = add_eos_ ? sep_id_ : -1;
    pair_eos_ = f.find_bool("tokenizer.ggml.add_eos_token").value_or(false)
                    ? (has_eos && file_eos >= 0 ? file_eos : sep_id_)
                    : -1;
    if (unk_id_ < 0)
        f.fail("key 'tokenizer.ggml.unknown_token_id'",
               "a WordPiece vocab needs an unknown token ([UNK]) for words it "
               "cannot cover");
    for (const std::string& t : tokens_) max_piece_bytes_ = std::max(max_piece_bytes_, t.size());
}

void WordPieceTokenizer::encode_text(std::string_view text, bool, std::vector<int32_t>& out) const {
    for (const std::string& w : wordpiece_words(text)) {
        const std::string word = std::string(kSpace) + w;
        const size_t n = word.size(), start = out.size();
        for (size_t i = 0; i < n;) {
            // The longest piece at i; pieces may end inside a UTF-8 character, as in llama.cpp.
            size_t j = std::min(n, i + max_piece_bytes_);
            int32_t id = -1;
            for (; j > i; --j)
                if ((id = find_token(std::string_view(word).substr(i, j - i))) >= 0) break;
            if (id < 0) {
                out.resize(start);
                break;
            }
            out.push_back(id);
            i = j;
        }
        if (out.size() == start) out.push_back(unk_id_);
    }
}

std::string WordPieceTokenizer::piece(int32_t id) const {
    // "▁the" reads " the"; a continuation piece is glued to the word before it.
    const std::string_view t = tokens_[size_t(id)];
    std::string s;
    for (size_t p = 0; p < t.size();) {
        if (t.substr(p, kSpace.size()) == kSpace) {
            s += ' ';
            p += kSpace.size();
        } else {
            s += t[p++];
        }
    }
    return s;
}

}  // namespace vkllm
