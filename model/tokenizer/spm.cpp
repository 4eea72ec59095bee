#include "model/tokenizer/spm.h"

#include "model/tokenizer/utf8.h"

#include <algorithm>
#include <queue>

namespace vkllm {

namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's space
constexpr std::string_view kUnknownSurface = " \xe2\x81\x87 ";  // " ⁇ ", what SentencePiece decodes <unk> to

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

SpmTokenizer::SpmTokenizer(const GgufFile& f) : Tokenizer(f, "llama", Defaults{}) {
    std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
    for (size_t i = 0; i < tokens_.size(); ++i) {
        if (types_[i] == TokenType::Byte) {
            int b = byte_token_value(tokens_[i]);
            if (b >= 0 && byte_ids_[b] < 0) byte_ids_[b] = int32_t(i);
        }
    }
    add_space_prefix_ = f.find_bool("tokenizer.ggml.add_space_prefix").value_or(true);
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

void SpmTokenizer::encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const {
    std::string norm;
    norm.reserve(text.size() + text.size() / 4 + kSpace.size());
    if (add_space_prefix_ && after_special) norm += kSpace;  // "Hello" and " Hello" mid-sentence tokenize alike
    for (char c : text) {
        if (c == ' ')
            norm += kSpace;
        else
            norm += c;
    }
    if (norm.empty()) return;

    struct Symbol {
        int prev, next;
        uint32_t off, len;
    };
    std::vector<Symbol> sym;
    sym.reserve(norm.size());
    for (size_t pos = 0; pos < norm.size();) {
        const size_t len = utf8::char_len(norm, pos);
        const int idx = int(sym.size());
        sym.push_back({idx - 1, pos + len == norm.size() ? -1 : idx + 1, uint32_t(pos), uint32_t(len)});
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
        if (l < 0 || r < 0) return;
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
}

std::string sentencepiece_piece(std::string_view text, TokenType type) {
    switch (type) {
        // Unused pieces have no text (llama.cpp's token_to_piece prints only special, user-defined,
        // normal and byte pieces), nor have control pieces here (token_to_piece names them on request).
        case TokenType::Control:
        case TokenType::Unused: return {};
        case TokenType::Unknown: return std::string(kUnknownSurface);
        case TokenType::UserDefined: return std::string(text);
        case TokenType::Byte: {
            int b = byte_token_value(text);
            if (b >= 0) return std::string(1, char(b));
            return std::string(text);
        }
        default: break;
    }
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        if (text.substr(i, kSpace.size()) == kSpace) {
            out += ' ';
            i += kSpace.size();
        } else {
            out += text[i++];
        }
    }
    return out;
}

std::string SpmTokenizer::piece(int32_t id) const {
    return sentencepiece_piece(tokens_[size_t(id)], types_[size_t(id)]);
}

}  // namespace vkllm
