#include "model/tokenizer.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <stdexcept>

#include <fmt/format.h>

namespace vkllm {

namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's space
constexpr std::string_view kUnknownSurface = " \xe2\x81\x87 ";  // " ⁇ ", what SentencePiece decodes <unk> to

// Length of the UTF-8 character at s[0..n), or 1 when the bytes there are not a valid encoding
// (stray continuation byte, truncated sequence, overlong form, surrogate, > U+10FFFF): an invalid
// byte then becomes a symbol of its own and falls back to a byte token.
size_t utf8_char_len(const unsigned char* s, size_t n) {
    const unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        return 1;
    }
    if (n < len || s[1] < lo || s[1] > hi) return 1;
    for (size_t i = 2; i < len; ++i)
        if ((s[i] & 0xc0) != 0x80) return 1;
    return len;
}

int byte_token_value(std::string_view text) {
    // "<0xNN>", upper- or lower-case hex
    if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
    auto hex = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    int h = hex(text[3]), l = hex(text[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

}  // namespace

// --- Tokenizer ---------------------------------------------------------------------------------

Tokenizer::Tokenizer(const GgufFile& f) {
    const auto& tokens = f.get_string_array("tokenizer.ggml.tokens");
    if (tokens.empty()) f.fail("key 'tokenizer.ggml.tokens'", "vocab is empty");
    if (tokens.size() > size_t(std::numeric_limits<int32_t>::max()))
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
        if (!v) return dflt < int32_t(n) ? dflt : -1;
        auto x = v->as_i64();
        if (!x) f.fail("key " + quote_name(key), fmt::format("has type {}, expected UINT32", v->describe_type()));
        if (*x == -1 || *x == int64_t(std::numeric_limits<uint32_t>::max())) return -1;  // "none"
        if (*x < 0 || *x >= int64_t(n))
            f.fail("key " + quote_name(key), fmt::format("token id {} is outside the vocab of {} tokens", *x, n));
        return int32_t(*x);
    };
    bos_id_ = special("tokenizer.ggml.bos_token_id", 1);
    eos_id_ = special("tokenizer.ggml.eos_token_id", 2);
    unk_id_ = special("tokenizer.ggml.unknown_token_id", 0);
    add_bos_ = f.find_bool("tokenizer.ggml.add_bos_token").value_or(true);
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

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) out += decode_piece(ids[i], i ? ids[i - 1] : -1);
    return out;
}

// --- SpmTokenizer ------------------------------------------------------------------------------

SpmTokenizer::SpmTokenizer(const GgufFile& f) : Tokenizer(f) {
    std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
    for (size_t i = 0; i < tokens_.size(); ++i) {
        if (types_[i] == TokenType::Byte) {
            int b = byte_token_value(tokens_[i]);
            if (b >= 0 && byte_ids_[b] < 0) byte_ids_[b] = int32_t(i);
        } else if (types_[i] == TokenType::UserDefined && !tokens_[i].empty()) {
            user_defined_.push_back(tokens_[i]);
        }
    }
    std::stable_sort(user_defined_.begin(), user_defined_.end(),
                     [](std::string_view a, std::string_view b) { return a.size() > b.size(); });
}

int32_t SpmTokenizer::mergeable_id(std::string_view piece) const {
    // As in SentencePiece, control, unknown and byte entries are never the result of a merge:
    // text that spells "<s>" or "<0x41>" stays text.
    int32_t id = find_token(piece);
    if (id < 0) return -1;
    switch (types_[size_t(id)]) {
    case TokenType::Undefined:
    case TokenType::Normal:
    case TokenType::UserDefined:
    case TokenType::Unused: return id;
    default: return -1;
    }
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_bos) const {
    std::vector<int32_t> out;
    if (add_bos && bos_id_ >= 0) out.push_back(bos_id_);
    if (text.empty()) return out;

    std::string norm;
    norm.reserve(text.size() + text.size() / 4 + kSpace.size());
    norm += kSpace;  // dummy prefix: "Hello" and " Hello" inside a sentence tokenize alike
    for (char c : text) {
        if (c == ' ')
            norm += kSpace;
        else
            norm += c;
    }

    struct Symbol {
        int prev, next;
        uint32_t off, len;
        bool frozen;  // a user-defined piece: never merged further
    };
    std::vector<Symbol> sym;
    sym.reserve(norm.size());
    const auto* bytes = reinterpret_cast<const unsigned char*>(norm.data());
    for (size_t pos = 0; pos < norm.size();) {
        size_t len = 0;
        bool frozen = false;
        for (std::string_view ud : user_defined_) {
            if (std::string_view(norm).substr(pos, ud.size()) == ud) {
                len = ud.size();
                frozen = true;
                break;
            }
        }
        if (!len) len = utf8_char_len(bytes + pos, norm.size() - pos);
        const int idx = int(sym.size());
        sym.push_back({idx - 1, pos + len == norm.size() ? -1 : idx + 1, uint32_t(pos), uint32_t(len), frozen});
        pos += len;
    }
    auto view = [&](const Symbol& s) { return std::string_view(norm).substr(s.off, s.len); };

    struct Bigram {
        float score;
        int left, right;
        uint32_t size;
    };
    auto lower_priority = [](const Bigram& a, const Bigram& b) {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower_priority)> queue(lower_priority);
    // Unused pieces may be formed as intermediate merges but are never emitted: they are split
    // back into the two pieces they were made of (SentencePiece's resegmentation).
    std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> rev_merge;

    auto try_add = [&](int l, int r) {
        if (l < 0 || r < 0 || sym[size_t(l)].frozen || sym[size_t(r)].frozen) return;
        const Symbol& a = sym[size_t(l)];
        const Symbol& b = sym[size_t(r)];
        std::string_view piece = std::string_view(norm).substr(a.off, size_t(a.len) + b.len);
        int32_t id = mergeable_id(piece);
        if (id < 0) return;
        queue.push({scores_[size_t(id)], l, r, a.len + b.len});
        if (types_[size_t(id)] == TokenType::Unused) rev_merge[piece] = {view(a), view(b)};
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add(int(i - 1), int(i));

    while (!queue.empty()) {
        Bigram bg = queue.top();
        queue.pop();
        Symbol& l = sym[size_t(bg.left)];
        Symbol& r = sym[size_t(bg.right)];
        if (l.len == 0 || r.len == 0 || l.len + r.len != bg.size) continue;  // stale: a side was merged
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) sym[size_t(r.next)].prev = bg.left;
        try_add(l.prev, bg.left);
        try_add(bg.left, l.next);
    }

    auto emit = [&](auto&& self, std::string_view piece) -> void {
        if (int32_t id = mergeable_id(piece); id >= 0) {
            auto it = types_[size_t(id)] == TokenType::Unused ? rev_merge.find(piece) : rev_merge.end();
            if (it == rev_merge.end()) {
                out.push_back(id);
            } else {
                self(self, it->second.first);
                self(self, it->second.second);
            }
            return;
        }
        for (unsigned char b : piece) {
            int32_t id = byte_ids_[b] >= 0 ? byte_ids_[b] : unk_id_;
            if (id >= 0) out.push_back(id);
        }
    };
    for (int i = 0; i != -1; i = sym[size_t(i)].next) emit(emit, view(sym[size_t(i)]));
    return out;
}

std::string SpmTokenizer::decode_piece(int32_t id, int32_t prev_id) const {
    check_id(id);
    const std::string& text = tokens_[size_t(id)];
    switch (types_[size_t(id)]) {
    case TokenType::Control: return {};
    case TokenType::Unknown: return std::string(kUnknownSurface);
    case TokenType::Byte: {
        int b = byte_token_value(text);
        if (b >= 0) return std::string(1, char(b));
        return text;
    }
    default: break;
    }
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        if (std::string_view(text).substr(i, kSpace.size()) == kSpace) {
            out += ' ';
            i += kSpace.size();
        } else {
            out += text[i++];
        }
    }
    if ((prev_id < 0 || prev_id == bos_id_) && !out.empty() && out[0] == ' ') out.erase(0, 1);
    return out;
}

// --- factory -----------------------------------------------------------------------------------

std::unique_ptr<Tokenizer> make_tokenizer(const GgufFile& f) {
    const std::string_view key = "tokenizer.ggml.model";
    auto model = f.find_string(key);
    if (!model) f.fail("key 'tokenizer.ggml.model'", "required key is missing: the file has no tokenizer");
    if (*model == "llama") return std::make_unique<SpmTokenizer>(f);
    if (*model == "gpt2")
        f.fail("key 'tokenizer.ggml.model'",
               "tokenizer model 'gpt2' (byte-level BPE) is not supported yet; supported: llama (SentencePiece)");
    f.fail("key 'tokenizer.ggml.model'",
           fmt::format("tokenizer model {} is not supported; supported: llama (SentencePiece)", quote_name(*model)));
}

}  // namespace vkllm
