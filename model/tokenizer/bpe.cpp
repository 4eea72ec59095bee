#include "model/tokenizer/bpe.h"

#include "model/tokenizer/utf8.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace vkllm {

namespace {

// GPT-2's byte-to-unicode table: printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100.. in byte order, so every byte string is spelled in printable characters.
struct ByteMap {
    std::array<uint16_t, 256> to_cp;
    std::array<int16_t, 324> to_byte;  // code point -> byte, -1 outside the table
    ByteMap() {
        to_byte.fill(-1);
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
            to_cp[size_t(b)] = uint16_t(printable ? b : 256 + n++);
            to_byte[to_cp[size_t(b)]] = int16_t(b);
        }
    }
};
const ByteMap& byte_map() {
    static const ByteMap m;
    return m;
}

// The bytes a vocab spelling stands for; false when a character is outside the byte alphabet
// (such an entry can never be the result of splitting text).
bool to_raw(std::string_view mapped, std::string& raw) {
    raw.clear();
    const ByteMap& m = byte_map();
    for (size_t i = 0; i < mapped.size();) {
        const auto c = static_cast<unsigned char>(mapped[i]);
        uint32_t cp;
        if (c < 0x80) {
            cp = c;
            i += 1;
        } else if ((c & 0xe0) == 0xc0 && i + 1 < mapped.size()) {
            cp = (c & 0x1fu) << 6 | (static_cast<unsigned char>(mapped[i + 1]) & 0x3fu);
            i += 2;
        } else {
            return false;  // all of the alphabet is below U+0800
        }
        if (cp >= m.to_byte.size() || m.to_byte[cp] < 0) return false;
        raw += char(m.to_byte[cp]);
    }
    return true;
}

}  // namespace

struct BpeTokenizer::Choice {
    const PreTokenizerSpec* spec;
    std::string warning;
};

BpeTokenizer::BpeTokenizer(const GgufFile& f)
    : BpeTokenizer(f, [&] {
          Choice c{&default_pre_tokenizer(), {}};
          auto pre = f.find_string("tokenizer.ggml.pre");
          if (!pre) {
              c.warning = fmt::format(
                  "{}: key 'tokenizer.ggml.pre' is missing; using the default pre-tokenizer "
                  "(tokens may differ from the ones the model was trained on)",
                  f.name());
          } else if (const PreTokenizerSpec* s = find_pre_tokenizer(*pre)) {
              c.spec = s;
          } else {
              c.warning = fmt::format(
                  "{}: pre-tokenizer {} (key 'tokenizer.ggml.pre') is not known; using the default "
                  "pre-tokenizer (tokens may differ from the ones the model was trained on)",
                  f.name(), quote_name(*pre));
          }
          return c;
      }()) {}

BpeTokenizer::BpeTokenizer(const GgufFile& f, const Choice& choice)
    : Tokenizer(f, "gpt2", Defaults{11, 11, -1, choice.spec->add_bos}),
      pre_(std::make_unique<PreTokenizer>(*choice.spec)) {
    if (!choice.warning.empty()) warnings_.push_back(choice.warning);
    const size_t n = tokens_.size();
    size_t total = 0;
    for (const std::string& t : tokens_) total += t.size();
    raw_arena_.reserve(total);  // never reallocated: raw_ids_ views into it
    raw_ids_.reserve(n);
    std::string raw;
    for (size_t i = 0; i < n; ++i) {
        if (!to_raw(tokens_[i], raw)) continue;
        const size_t at = raw_arena_.size();
        raw_arena_ += raw;
        raw_ids_.emplace(std::string_view(raw_arena_).substr(at, raw.size()), int32_t(i));  // first wins
    }
    for (int b = 0; b < 256; ++b) {
        const char c = char(b);
        byte_sym_[b] = intern(std::string_view(&c, 1));
    }

    if (!f.has("tokenizer.ggml.merges"))
        f.fail("key 'tokenizer.ggml.merges'", "required key is missing for a gpt2 (BPE) vocab");
    const auto& merges = f.get_string_array("tokenizer.ggml.merges");
    merges_.reserve(merges.size());
    std::string left, right, both;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string_view m = merges[rank];
        const size_t sp = m.find(' ', 1);  // a part may itself be a space character, never the first
        if (sp == std::string_view::npos || !to_raw(m.substr(0, sp), left) || !to_raw(m.substr(sp + 1), right))
            continue;  // cannot apply to any text
        both = left + right;
        const int32_t l = intern(left), r = intern(right), res = intern(both);
        merges_.emplace(uint64_t(uint32_t(l)) << 32 | uint32_t(r), Merge{int32_t(rank), res});  // first wins
    }
}

int32_t BpeTokenizer::intern(std::string_view raw) {
    if (auto it = raw_ids_.find(raw); it != raw_ids_.end()) return it->second;
    auto [it, added] = synthetic_ids_.try_emplace(std::string(raw), int32_t(tokens_.size() + synthetic_.size()));
    if (added) synthetic_.emplace_back(raw);
    return it->second;
}

void BpeTokenizer::encode_text(std::string_view text, bool, std::vector<int32_t>& out) const {
    std::string canonical;
    std::vector<std::pair<uint32_t, uint32_t>> words;
    pre_->split(text, canonical, words);
    for (auto [b, e] : words) {
        const std::string_view word = std::string_view(canonical).substr(b, e - b);
        if (pre_->spec().ignore_merges) {
            if (auto it = raw_ids_.find(word); it != raw_ids_.end()) {
                out.push_back(it->second);
                continue;
            }
        }
        bpe_word(word, out);
    }
}

void BpeTokenizer::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
    struct Symbol {
        int32_t id;
        int32_t prev, next;
        bool alive;
    };
    struct Pair {
        int32_t rank, left, right, left_id, right_id, result;
    };
    // A max-heap on "later": the top is the lowest rank, then the leftmost.
    auto later = [](const Pair& a, const Pair& b) { return a.rank != b.rank ? a.rank > b.rank : a.left > b.left; };
    std::vector<Symbol> sym(word.size());
    for (size_t i = 0; i < word.size(); ++i)
        sym[i] = {byte_sym_[static_cast<unsigned char>(word[i])], int32_t(i) - 1,
                  i + 1 < word.size() ? int32_t(i + 1) : -1, true};
    std::vector<Pair> heap;
    auto add = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        const uint64_t key = uint64_t(uint32_t(sym[size_t(l)].id)) << 32 | uint32_t(sym[size_t(r)].id);
        auto it = merges_.find(key);
        if (it == merges_.end()) return;
        heap.push_back({it->second.rank, l, r, sym[size_t(l)].id, sym[size_t(r)].id, it->second.result});
        std::push_heap(heap.begin(), heap.end(), later);
    };
    for (int32_t i = 0; i + 1 < int32_t(word.size()); ++i) add(i, i + 1);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const Pair p = heap.back();
        heap.pop_back();
        Symbol& l = sym[size_t(p.left)];
        Symbol& r = sym[size_t(p.right)];
        // Stale when either side has merged since (ids identify the texts, which only grow).
        if (!l.alive || !r.alive || l.next != p.right || l.id != p.left_id || r.id != p.right_id) continue;
        l.id = p.result;
        r.alive = false;
        l.next = r.next;
        if (r.next >= 0) sym[size_t(r.next)].prev = p.left;
        add(l.prev, p.left);
        add(p.left, l.next);
    }
    const auto n_vocab = int32_t(tokens_.size());
    for (int32_t i = word.empty() ? -1 : 0; i >= 0; i = sym[size_t(i)].next) {
        const int32_t id = sym[size_t(i)].id;
        if (id < n_vocab) {
            out.push_back(id);
            continue;
        }
        // A symbol that is no vocab entry: llama.cpp looks each of its characters up alone, which
        // finds only the printable ASCII ones.
        for (unsigned char c : synthetic_[size_t(id - n_vocab)])
            if (c >= 0x21 && c <= 0x7e && byte_sym_[c] < n_vocab) out.push_back(byte_sym_[c]);
    }
}

std::string BpeTokenizer::piece(int32_t id) const {
    const std::string& text = tokens_[size_t(id)];
    switch (types_[size_t(id)]) {
        case TokenType::Control:
        case TokenType::Unknown: return {};
        case TokenType::UserDefined: return text;
        default: break;
    }
    std::string raw;
    if (to_raw(text, raw)) return raw;
    // Characters outside the byte alphabet are kept as they are.
    raw.clear();
    const ByteMap& m = byte_map();
    for (size_t i = 0; i < text.size();) {
        const size_t len = utf8::char_len(text, i);
        const auto c0 = static_cast<unsigned char>(text[i]);
        uint32_t cp = c0 < 0x80  ? c0
                      : len == 2 ? (c0 & 0x1fu) << 6 | (static_cast<unsigned char>(text[i + 1]) & 0x3fu)
                                 : 0xffff;
        if (cp < m.to_byte.size() && m.to_byte[cp] >= 0)
            raw += char(m.to_byte[cp]);
        else
            raw.append(text, i, len);
        i += len;
    }
    return raw;
}

}  // namespace vkllm
