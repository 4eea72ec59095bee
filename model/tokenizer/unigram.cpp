#include "model/tokenizer/unigram.h"

#include "model/tokenizer/spm.h"
#include "model/tokenizer/utf8.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace vkllm {

namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's escaped space
constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD for an invalid byte
// How far below the lowest-scoring normal piece an unknown character scores (SentencePiece's
// kUnkPenalty, as llama.cpp).
constexpr double kUnknownPenalty = 10.0;

uint32_t load_le32(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Darts-clone's 32-bit unit: offset to the children in bits 10..30 (shifted left by 8 when bit 9
// is set), has-leaf in bit 8, the label in bits 0..7 (bit 31 set marks a leaf's value unit, so it
// never equals a byte label), the value in bits 0..30 of a leaf unit.
uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xffu); }
bool unit_has_leaf(uint32_t u) { return (u >> 8) & 1u; }
uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }

// Bytes of the character starting with lead byte c as llama.cpp steps through normalised text
// (by the high nibble alone; a stray continuation byte counts 1).
size_t lead_len(unsigned char c) {
    static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return kLen[c >> 4];
}

}  // namespace

// --- PrecompiledCharsMap ---------------------------------------------------------------------

PrecompiledCharsMap::PrecompiledCharsMap(std::span<const uint8_t> blob) {
    if (blob.size() < 4) throw std::invalid_argument(fmt::format("{} bytes is too short for a charsmap", blob.size()));
    const uint64_t trie_bytes = load_le32(blob.data());
    if (trie_bytes % 4 != 0)
        throw std::invalid_argument(fmt::format("trie size {} is not a multiple of 4 bytes", trie_bytes));
    if (4 + trie_bytes >= blob.size())
        throw std::invalid_argument(fmt::format("trie of {} bytes leaves no replacement strings in a blob of {} bytes",
                                                trie_bytes, blob.size()));
    if (blob.back() != 0) throw std::invalid_argument("the replacement strings do not end with a NUL byte");
    units_.resize(size_t(trie_bytes / 4));
    for (size_t i = 0; i < units_.size(); ++i) units_[i] = load_le32(blob.data() + 4 + 4 * i);
    replacements_.assign(reinterpret_cast<const char*>(blob.data()) + 4 + trie_bytes, blob.size() - 4 - trie_bytes);
}

size_t PrecompiledCharsMap::match(std::string_view text, std::string_view& replacement) const {
    if (units_.empty()) return 0;
    size_t best_len = 0;
    uint32_t best_value = 0;
    size_t node = unit_offset(units_[0]);
    for (size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c == 0) break;
        node ^= c;
        if (node >= units_.size() || unit_label(units_[node]) != c) break;
        const uint32_t u = units_[node];
        node ^= unit_offset(u);
        if (unit_has_leaf(u)) {
            if (node >= units_.size()) break;
            best_len = i + 1;
            best_value = unit_value(units_[node]);
        }
    }
    if (best_len == 0 || best_value >= replacements_.size()) return 0;
    replacement = std::string_view(replacements_.c_str() + best_value);
    return best_len;
}

// --- UnigramTokenizer ------------------------------------------------------------------------

UnigramTokenizer::UnigramTokenizer(const GgufFile& f)
    : Tokenizer(f, "t5", Defaults{.bos = -1, .eos = 1, .unk = 2, .add_bos = false, .add_eos = true}) {
    if (unk_id_ < 0)
        f.fail("key 'tokenizer.ggml.unknown_token_id'",
               "a Unigram vocab needs an unknown token (characters no piece covers become it)");
    if (const GgufValue* v = f.find("tokenizer.ggml.precompiled_charsmap")) {
        if (v->type != GgufType::ARRAY || (v->array_type != GgufType::UINT8 && v->array_type != GgufType::INT8))
            f.fail("key 'tokenizer.ggml.precompiled_charsmap'",
                   fmt::format("has type {}, expected ARRAY[UINT8]", v->describe_type()));
        if (v->array_size > 0) {
            try {
                charsmap_ = PrecompiledCharsMap(v->raw);
            } catch (const std::invalid_argument& e) {
                f.fail("key 'tokenizer.ggml.precompiled_charsmap'", e.what());
            }
        }
    }
    add_space_prefix_ = f.find_bool("tokenizer.ggml.add_space_prefix").value_or(false);
    remove_extra_whitespaces_ = f.find_bool("tokenizer.ggml.remove_extra_whitespaces").value_or(false);

    float min_score = std::numeric_limits<float>::max();
    bool any_normal = false;
    values_.push_back(-1);  // the root
    for (size_t id = 0; id < tokens_.size(); ++id) {
        const TokenType t = types_[id];
        if (t == TokenType::Normal) {
            min_score = std::min(min_score, scores_[id]);
            any_normal = true;
        }
        if ((t != TokenType::Normal && t != TokenType::UserDefined && t != TokenType::Unused) || tokens_[id].empty())
            continue;
        int32_t node = 0;
        for (unsigned char b : tokens_[id]) {
            const uint64_t key = uint64_t(node) << 8 | b;
            auto it = edges_.find(key);
            if (it == edges_.end()) {
                it = edges_.emplace(key, int32_t(values_.size())).first;
                values_.push_back(-1);
            }
            node = it->second;
        }
        values_[size_t(node)] = int32_t(id);  // a later duplicate wins, as in llama.cpp
    }
    if (!any_normal)
        f.fail("key 'tokenizer.ggml.token_type'", "a Unigram vocab needs normal pieces; this one has none");
    unknown_score_ = double(min_score) - kUnknownPenalty;
}

int32_t UnigramTokenizer::child(int32_t node, unsigned char byte) const {
    auto it = edges_.find(uint64_t(node) << 8 | byte);
    return it == edges_.end() ? -1 : it->second;
}

std::string UnigramTokenizer::normalize(std::string_view text) const {
    std::string out;
    out.reserve(text.size() + text.size() / 2 + kSpace.size());
    bool prefix_added = false, in_word = false;
    for (size_t pos = 0; pos < text.size();) {
        std::string_view chunk;
        size_t used = charsmap_.match(text.substr(pos), chunk);
        if (used == 0) {
            const size_t len = utf8::sequence_len(text, pos);  // values past U+10FFFF pass whole, as llama.cpp
            chunk = len ? text.substr(pos, len) : kReplacement;
            used = len ? len : 1;
        }
        for (const char c : chunk) {
            if (c == ' ') {
                in_word = false;
                if (!remove_extra_whitespaces_) out += kSpace;
                continue;
            }
            if (!in_word) {
                in_word = true;
                // Collapsing spaces puts one "▁" before every word, the first included.
                if ((add_space_prefix_ && !prefix_added) || remove_extra_whitespaces_) {
                    out += kSpace;
                    prefix_added = true;
                }
            }
            out += c;
        }
        pos += used;
    }
    return out;
}

void UnigramTokenizer::encode_text(std::string_view text, bool /*after_special*/, std::vector<int32_t>& out) const {
    const std::string norm = normalize(text);
    const size_t n = norm.size();
    if (n == 0) return;
    // best[i]: the highest-scoring segmentation of norm[0, i): its last token, where that token
    // starts, and the total score.
    struct Best {
        int32_t id;
        size_t from;
        double score;
    };
    std::vector<Best> best(n + 1, Best{unk_id_, 0, -std::numeric_limits<double>::infinity()});
    best[0].score = 0;
    for (size_t pos = 0; pos < n;) {
        const size_t char_bytes = std::min(lead_len(static_cast<unsigned char>(norm[pos])), n - pos);
        const double base = best[pos].score;
        bool whole_char_piece = false;
        int32_t node = 0;
        for (size_t end = pos; end < n;) {
            node = child(node, static_cast<unsigned char>(norm[end++]));
            if (node < 0) break;
            const int32_t id = values_[size_t(node)];
            if (id < 0) continue;
            if (end - pos == char_bytes) whole_char_piece = true;
            const double s = base + (types_[size_t(id)] == TokenType::UserDefined ? 0.0 : double(scores_[size_t(id)]));
            if (s > best[end].score) best[end] = {id, pos, s};  // ties: the first found (shorter) stays
        }
        if (!whole_char_piece) {
            Best& b = best[pos + char_bytes];
            if (base + unknown_score_ > b.score) b = {unk_id_, pos, base + unknown_score_};
        }
        pos += char_bytes;
    }
    const size_t first = out.size();
    bool prev_unknown = false;
    for (size_t at = n;;) {
        const Best& b = best[at];
        const bool unknown = b.id == unk_id_;
        if (!(prev_unknown && unknown)) out.push_back(b.id);
        if (b.from == 0) break;
        prev_unknown = unknown;
        at = b.from;
    }
    std::reverse(out.begin() + std::ptrdiff_t(first), out.end());
}

std::string UnigramTokenizer::piece(int32_t id) const {
    return sentencepiece_piece(tokens_[size_t(id)], types_[size_t(id)]);
}

}  // namespace vkllm
