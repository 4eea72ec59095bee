#include "model/grammar/json_schema_pattern.h"

#include "model/grammar/grammar.h"
#include "model/grammar/json_schema_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <utility>
#include <vector>

namespace vkllm::grammar::detail {

namespace {

// Recursive descent over the pattern from `pos`, each construct turned into GBNF as it is read;
// `depth` counts the groups open.
struct RegexParser {
    const std::string& re;
    size_t pos;
    const std::string& where;
    size_t depth;

    [[noreturn]] void bad(const std::string& why) const { refuse("pattern", where, "pattern: " + why); }
    bool more() const { return pos < re.size(); }

    std::string alternatives() {
        std::vector<std::string> alts{sequence()};
        while (more() && re[pos] == '|') {
            ++pos;
            alts.push_back(sequence());
        }
        return join(alts, " | ");
    }

    std::string sequence() {
        std::vector<std::string> items;
        while (more() && re[pos] != '|' && re[pos] != ')') {
            std::string atom = this->atom();
            if (more() && (re[pos] == '*' || re[pos] == '+' || re[pos] == '?')) {
                atom = "(" + atom + ")" + re[pos];
                ++pos;
            } else if (more() && re[pos] == '{') {
                const size_t close = re.find('}', pos);
                if (close == std::string::npos) bad("unterminated '{'");
                const std::string q = re.substr(pos + 1, close - pos - 1);
                const size_t comma = q.find(',');
                auto num = [&](const std::string& t) -> std::string {
                    if (t.empty()) return "";
                    if (t.size() > 4 || t.find_first_not_of("0123456789") != std::string::npos)
                        bad("bad repetition '{" + q + "}'");
                    if (std::stoul(t) > kMaxRepeat) bad(fmt::format("repetition above {}", kMaxRepeat));
                    return t;
                };
                const std::string a = num(q.substr(0, comma));
                if (a.empty()) bad("bad repetition '{" + q + "}'");
                const std::string b = comma == std::string::npos ? a : num(q.substr(comma + 1));
                atom = "(" + atom + "){" + a + (comma == std::string::npos ? "" : "," + b) + "}";
                pos = close + 1;
            }
            if (more() && re[pos] == '?') ++pos;  // lazy: the same language
            if (more() && (re[pos] == '*' || re[pos] == '+' || re[pos] == '{')) bad("a repetition of a repetition");
            items.push_back(atom);
        }
        return items.empty() ? "\"\"" : join(items, " ");
    }

    // A set of code points as GBNF over JSON text: the plain characters in one class, and quote,
    // backslash and control characters as their escapes.
    static std::string set_expr(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
        std::sort(ranges.begin(), ranges.end());
        std::vector<std::pair<uint32_t, uint32_t>> merged;
        for (auto r : ranges) {
            if (!merged.empty() && r.first <= merged.back().second + 1)
                merged.back().second = std::max(merged.back().second, r.second);
            else
                merged.push_back(r);
        }
        if (negated) {  // the complement over every code point
            std::vector<std::pair<uint32_t, uint32_t>> comp;
            uint32_t next = 0;
            for (auto [a, b] : merged) {
                if (a > next) comp.push_back({next, a - 1});
                next = b + 1;
            }
            if (next <= 0x10ffff) comp.push_back({next, 0x10ffff});
            merged = comp;
        }
        std::vector<std::string> alts;
        std::string cls;
        auto hex = [](uint32_t cp) {
            return cp <= 0xffff ? fmt::format("\\u{:04X}", cp) : fmt::format("\\U{:08X}", cp);
        };
        for (auto [a, b] : merged) {
            // Characters JSON must escape: each as its escape.
            for (uint32_t special : {uint32_t('"'), uint32_t('\\')})
                if (a <= special && special <= b) alts.push_back(json_char(special));
            for (uint32_t cp = a; cp <= std::min<uint32_t>(b, 0x1f); ++cp) alts.push_back(json_char(cp));
            // The plain rest: [a, b] minus controls, quote and backslash.
            std::vector<std::pair<uint32_t, uint32_t>> plain{{std::max<uint32_t>(a, 0x20), b}};
            if (plain[0].first > plain[0].second) continue;
            for (uint32_t special : {uint32_t('"'), uint32_t('\\')}) {
                std::vector<std::pair<uint32_t, uint32_t>> split;
                for (auto [x, y] : plain) {
                    if (special < x || special > y)
                        split.push_back({x, y});
                    else {
                        if (special > x) split.push_back({x, special - 1});
                        if (special < y) split.push_back({special + 1, y});
                    }
                }
                plain = split;
            }
            for (auto [x, y] : plain) cls += x == y ? hex(x) : hex(x) + "-" + hex(y);
        }
        if (!cls.empty()) alts.push_back("[" + cls + "]");
        if (alts.empty()) return "[^\\x00-\\U0010FFFF]";  // nothing
        if (alts.size() == 1) return alts[0];
        // A named string, not "(" + join(...): GCC 12 warns (-Wrestrict) on that form here.
        const std::string inner = join(alts, " | ");
        return "(" + inner + ")";
    }

    // ECMA-262's \s: WhiteSpace (tab, VT, FF, space, NBSP, BOM, Unicode Zs) and LineTerminator.
    static constexpr std::array<std::pair<uint32_t, uint32_t>, 10> kEcmaSpace = {{{0x09, 0x0d},
                                                                                  {0x20, 0x20},
                                                                                  {0xa0, 0xa0},
                                                                                  {0x1680, 0x1680},
                                                                                  {0x2000, 0x200a},
                                                                                  {0x2028, 0x2029},
                                                                                  {0x202f, 0x202f},
                                                                                  {0x205f, 0x205f},
                                                                                  {0x3000, 0x3000},
                                                                                  {0xfeff, 0xfeff}}};
    static void class_escape(char e, std::vector<std::pair<uint32_t, uint32_t>>& r, bool& negate_set) {
        negate_set = false;
        switch (e) {
            case 'd': r.push_back({'0', '9'}); return;
            case 'w': r.insert(r.end(), {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}}); return;
            case 's': r.insert(r.end(), kEcmaSpace.begin(), kEcmaSpace.end()); return;
            case 'D':
                r.push_back({'0', '9'});
                negate_set = true;
                return;
            case 'W':
                r.insert(r.end(), {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}});
                negate_set = true;
                return;
            case 'S':
                r.insert(r.end(), kEcmaSpace.begin(), kEcmaSpace.end());
                negate_set = true;
                return;
            default: break;
        }
    }

    uint32_t escaped_char(char e) {
        switch (e) {
            case 'n': return '\n';
            case 'r': return '\r';
            case 't': return '\t';
            case 'f': return '\f';
            case 'v': return '\v';
            case '0': return 0;
            default: break;
        }
        if (std::isalnum(uint8_t(e))) bad(fmt::format("escape '\\{}' is not supported", e));
        return uint8_t(e);
    }

    uint32_t utf8_char() {
        const auto c = uint8_t(re[pos]);
        const size_t len = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
        if (pos + len > re.size()) bad("invalid UTF-8");
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
        for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (uint8_t(re[pos + i]) & 0x3f);
        pos += len;
        return cp;
    }

    std::string atom() {
        const char ch = re[pos];
        if (ch == '(') {
            if (++depth > 64) bad("groups nested deeper than 64");
            ++pos;
            if (re.compare(pos, 2, "?:") == 0)
                pos += 2;
            else if (more() && re[pos] == '?')
                bad("lookaround and other '(?' groups are not supported");
            std::string inner = alternatives();
            if (!more() || re[pos] != ')') bad("unbalanced '('");
            ++pos;
            --depth;
            return "(" + inner + ")";
        }
        if (ch == '[') return char_class();
        if (ch == '.') {
            ++pos;
            // ECMA-262: any character but the line terminators.
            return set_expr({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true);
        }
        if (ch == '\\') {
            if (pos + 1 >= re.size()) bad("a trailing '\\'");
            const char e = re[pos + 1];
            pos += 2;
            std::vector<std::pair<uint32_t, uint32_t>> r;
            bool neg = false;
            class_escape(e, r, neg);
            if (!r.empty()) return set_expr(r, neg);
            if (e == 'b' || e == 'B') bad("word boundaries are not supported");
            if (std::isdigit(uint8_t(e)) && e != '0') bad("back-references are not supported");
            return json_char(escaped_char(e));
        }
        if (ch == '^' || ch == '$') bad(fmt::format("'{}' is supported only at the ends of the pattern", ch));
        if (ch == '*' || ch == '+' || ch == '?' || ch == '{') bad(fmt::format("'{}' with nothing to repeat", ch));
        return json_char(utf8_char());
    }

    std::string char_class() {
        ++pos;  // '['
        bool negated = false;
        if (more() && re[pos] == '^') negated = true, ++pos;
        std::vector<std::pair<uint32_t, uint32_t>> r;
        // ECMA-262: [] matches nothing, [^] any character.
        if (more() && re[pos] == ']') {
            if (!negated) bad("an empty class '[]' matches nothing");
            ++pos;
            return set_expr({}, true);
        }
        while (more() && re[pos] != ']') {
            uint32_t lo;
            if (re[pos] == '\\') {
                if (pos + 1 >= re.size()) bad("a trailing '\\'");
                const char e = re[pos + 1];
                std::vector<std::pair<uint32_t, uint32_t>> sub;
                bool neg = false;
                class_escape(e, sub, neg);
                if (!sub.empty()) {
                    if (neg) bad(fmt::format("'\\{}' inside a class is not supported", e));
                    r.insert(r.end(), sub.begin(), sub.end());
                    pos += 2;
                    continue;
                }
                pos += 2;
                lo = e == 'b' ? '\b' : escaped_char(e);
            } else {
                lo = utf8_char();
            }
            uint32_t hi = lo;
            if (pos + 1 < re.size() && re[pos] == '-' && re[pos + 1] != ']') {
                ++pos;
                if (re[pos] == '\\') {
                    if (pos + 1 >= re.size()) bad("a trailing '\\'");
                    hi = escaped_char(re[pos + 1]);
                    pos += 2;
                } else {
                    hi = utf8_char();
                }
                if (hi < lo) bad("a backwards range in a class");
            }
            r.push_back({lo, hi});
        }
        if (!more()) bad("unterminated '['");
        ++pos;  // ']'
        return set_expr(r, negated);
    }
};

}  // namespace

std::string pattern_gbnf(const std::string& re, const std::string& where) {
    size_t pos = 0;
    const bool start = !re.empty() && re[0] == '^';
    if (start) ++pos;
    std::string end_re = re;
    bool end = false;
    if (re.size() > pos && re.back() == '$' && (re.size() < 2 || re[re.size() - 2] != '\\')) {
        end = true;
        end_re.pop_back();
    }
    RegexParser p{end_re, pos, where, 0};
    std::string body = p.alternatives();
    if (p.pos != end_re.size()) refuse("pattern", where, fmt::format("unexpected '{}' in the pattern", end_re[p.pos]));
    // JSON Schema patterns are not anchored: text may come before and after a match.
    return (start ? "" : "char* ") + std::string("(") + body + ")" + (end ? "" : " char*");
}

}  // namespace vkllm::grammar::detail
