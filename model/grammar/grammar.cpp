#include "model/grammar/grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace vkllm::grammar {

GrammarError::GrammarError(const std::string& what, uint32_t line, uint32_t column)
    : std::invalid_argument(line ? fmt::format("grammar: line {}, column {}: {}", line, column, what)
                                 : "grammar: " + what),
      line_(line),
      column_(column) {}

namespace {

// Bytes of the UTF-8 character a lead byte starts (RFC 3629); 0 for a byte that starts none.
size_t utf8_len(uint8_t lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xc2 && lead <= 0xdf) return 2;
    if (lead >= 0xe0 && lead <= 0xef) return 3;
    if (lead >= 0xf0 && lead <= 0xf4) return 4;
    return 0;
}

// The continuation byte allowed right after `lead`: narrower for the leads where overlong forms,
// surrogates or code points above U+10FFFF would start.
bool valid_second(uint8_t lead, uint8_t b) {
    const uint8_t lo = lead == 0xe0 ? 0xa0 : lead == 0xf0 ? 0x90 : 0x80;
    const uint8_t hi = lead == 0xed ? 0x9f : lead == 0xf4 ? 0x8f : 0xbf;
    return b >= lo && b <= hi;
}

// Whether `bytes` (at most one character) is a valid start of a UTF-8 character.
bool valid_utf8_prefix(std::string_view bytes) {
    const auto lead = uint8_t(bytes[0]);
    const size_t len = utf8_len(lead);
    if (len == 0 || bytes.size() > len) return false;
    for (size_t i = 1; i < bytes.size(); ++i) {
        const auto b = uint8_t(bytes[i]);
        if (i == 1 ? !valid_second(lead, b) : (b & 0xc0) != 0x80) return false;
    }
    return true;
}

// The code point of one whole, valid UTF-8 character.
uint32_t code_point(std::string_view ch) {
    const auto lead = uint8_t(ch[0]);
    const size_t len = utf8_len(lead);
    uint32_t cp = len == 1 ? lead : len == 2 ? lead & 0x1f : len == 3 ? lead & 0x0f : lead & 0x07;
    for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (uint8_t(ch[i]) & 0x3f);
    return cp;
}

}  // namespace

bool Element::matches(uint32_t cp) const {
    bool in = false;
    for (const auto& [lo, hi] : ranges) in = in || (lo <= cp && cp <= hi);
    return in != negated;
}

bool Element::matches_any(uint32_t lo, uint32_t hi) const {
    if (!negated) {
        for (const auto& [a, b] : ranges)
            if (a <= hi && lo <= b) return true;
        return false;
    }
    // Some code point of [lo, hi] lies outside every excluded range.
    std::vector<std::pair<uint32_t, uint32_t>> r = ranges;
    std::sort(r.begin(), r.end());
    uint32_t next = lo;  // the lowest code point not yet known to be excluded
    for (const auto& [a, b] : r) {
        if (a > next) break;
        if (b >= next) {
            if (b >= hi) return false;
            next = b + 1;
        }
    }
    return next <= hi;
}

namespace {

class Parser {
public:
    explicit Parser(std::string_view src) : s_(src) {}

    Grammar run() {
        skip_space(true);
        while (pos_ < s_.size()) {
            parse_rule();
            skip_space(true);
        }
        for (const auto& [name, use] : first_use_)
            if (!defined(name)) fail_at(use, fmt::format("rule '{}' is used but never defined", name));
        const auto root = index_.find("root");
        if (root == index_.end() || !defined("root")) throw GrammarError("the grammar has no 'root' rule");
        g_.root = root->second;
        check_left_recursion();
        return std::move(g_);
    }

private:
    [[noreturn]] void fail_at(size_t at, const std::string& what) const {
        uint32_t line = 1, col = 1;
        for (size_t i = 0; i < at && i < s_.size(); ++i) {
            if (s_[i] == '\n')
                ++line, col = 1;
            else if ((uint8_t(s_[i]) & 0xc0) != 0x80)
                ++col;
        }
        throw GrammarError(what, line, col);
    }
    [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

    bool at_end() const { return pos_ >= s_.size(); }
    char peek() const { return at_end() ? '\0' : s_[pos_]; }

    // Spaces, tabs and comments; newlines too where the grammar may continue on the next line.
    void skip_space(bool newlines) {
        while (!at_end()) {
            const char c = s_[pos_];
            if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
                ++pos_;
            } else if (c == '#') {
                while (!at_end() && s_[pos_] != '\n') ++pos_;
            } else {
                break;
            }
        }
    }

    static bool word_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    }

    std::string parse_name() {
        const size_t start = pos_;
        while (!at_end() && word_char(s_[pos_])) ++pos_;
        if (pos_ == start)
            fail(at_end() ? "expected a rule name, got the end of the text"
                          : fmt::format("expected a rule name, got '{}'", s_[pos_]));
        return std::string(s_.substr(start, pos_ - start));
    }

    uint32_t rule_index(const std::string& name, size_t use) {
        auto it = index_.find(name);
        if (it != index_.end()) return it->second;
        if (g_.rules.size() >= kMaxRules) fail_at(use, fmt::format("more than {} rules", kMaxRules));
        const uint32_t i = uint32_t(g_.rules.size());
        g_.rules.push_back({name, {}});
        defined_.push_back(false);
        index_.emplace(name, i);
        first_use_.emplace(name, use);
        return i;
    }
    bool defined(const std::string& name) const {
        auto it = index_.find(name);
        return it != index_.end() && defined_[it->second];
    }
    uint32_t new_rule(const std::string& base) {
        std::string name;
        do name = fmt::format("{}_{}", base, ++generated_);
        while (index_.count(name));
        const uint32_t i = rule_index(name, pos_);
        defined_[i] = true;
        return i;
    }

    void count(size_t n) {
        elements_ += n;
        if (elements_ > kMaxElements) fail(fmt::format("the grammar expands to more than {} elements", kMaxElements));
    }

    void parse_rule() {
        const size_t start = pos_;
        const std::string name = parse_name();
        skip_space(false);
        if (s_.substr(pos_, 3) != "::=") fail(fmt::format("expected '::=' after the rule name '{}'", name));
        pos_ += 3;
        skip_space(true);
        const uint32_t r = rule_index(name, start);
        if (defined_[r]) fail_at(start, fmt::format("rule '{}' is defined twice", name));
        defined_[r] = true;
        current_ = name;
        std::vector<Sequence> alts = parse_alternatives(false);
        g_.rules[r].alternatives = std::move(alts);
        skip_space(false);
        if (!at_end() && s_[pos_] != '\n' && s_[pos_] != '\r')
            fail(fmt::format("unexpected '{}' after the rule '{}'", s_[pos_], name));
    }

    std::vector<Sequence> parse_alternatives(bool nested) {
        std::vector<Sequence> alts;
        alts.push_back(parse_sequence(nested));
        while (peek() == '|') {
            ++pos_;
            skip_space(true);
            alts.push_back(parse_sequence(nested));
        }
        return alts;
    }

    // A code point of a literal or a class: UTF-8, or an escape.
    uint32_t parse_char() {
        if (at_end()) fail("unexpected end of the text");
        const auto c = uint8_t(s_[pos_]);
        if (c == '\\') {
            ++pos_;
            if (at_end()) fail("unexpected end of the text after '\\'");
            const char e = s_[pos_++];
            auto hex = [&](int digits) {
                uint32_t v = 0;
                for (int i = 0; i < digits; ++i) {
                    if (at_end()) fail("unexpected end of the text in an escape");
                    const char h = s_[pos_];
                    const int d = h >= '0' && h <= '9'   ? h - '0'
                                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                         : -1;
                    if (d < 0) fail(fmt::format("'{}' is not a hex digit", h));
                    v = v * 16 + uint32_t(d);
                    ++pos_;
                }
                if (v > 0x10ffff) fail(fmt::format("U+{:X} is beyond U+10FFFF", v));
                return v;
            };
            switch (e) {
                case 'n': return '\n';
                case 'r': return '\r';
                case 't': return '\t';
                case '\\':
                case '"':
                case '[':
                case ']':
                case '-':
                case '^': return uint32_t(e);
                case 'x': return hex(2);
                case 'u': return hex(4);
                case 'U': return hex(8);
                default: --pos_; fail(fmt::format("unknown escape '\\{}'", e));
            }
        }
        // UTF-8, checked
        const size_t len = utf8_len(c);
        if (len == 0 || pos_ + len > s_.size() || !valid_utf8_prefix(s_.substr(pos_, len))) fail("invalid UTF-8");
        const uint32_t cp = code_point(s_.substr(pos_, len));
        pos_ += len;
        return cp;
    }

    Sequence parse_sequence(bool nested) {
        Sequence seq;
        for (;;) {
            const size_t elem_start = seq.size();
            const char c = peek();
            if (c == '"') {
                ++pos_;
                while (peek() != '"') {
                    if (at_end() || peek() == '\n') fail("unterminated string literal");
                    const uint32_t cp = parse_char();
                    seq.push_back({Element::Kind::Chars, {{cp, cp}}, false, 0});
                }
                ++pos_;
                count(seq.size() - elem_start);
            } else if (c == '[') {
                ++pos_;
                Element e;
                if (peek() == '^') ++pos_, e.negated = true;
                while (peek() != ']') {
                    if (at_end()) fail("unterminated character class");
                    const uint32_t lo = parse_char();
                    uint32_t hi = lo;
                    if (peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
                        ++pos_;
                        hi = parse_char();
                        if (hi < lo) fail(fmt::format("range U+{:X}-U+{:X} is backwards", lo, hi));
                    }
                    e.ranges.emplace_back(lo, hi);
                }
                ++pos_;
                seq.push_back(std::move(e));
                count(1);
            } else if (c == '.') {
                ++pos_;
                seq.push_back({Element::Kind::Chars, {}, true, 0});
                count(1);
            } else if (word_char(c)) {
                const size_t use = pos_;
                const std::string name = parse_name();
                seq.push_back({Element::Kind::Rule, {}, false, rule_index(name, use)});
                count(1);
            } else if (c == '(') {
                if (++depth_ > kMaxDepth) fail(fmt::format("groups nested deeper than {}", kMaxDepth));
                ++pos_;
                skip_space(true);
                std::vector<Sequence> alts = parse_alternatives(true);
                skip_space(true);
                if (peek() != ')') fail("expected ')'");
                ++pos_;
                --depth_;
                const uint32_t r = new_rule(current_);
                g_.rules[r].alternatives = std::move(alts);
                seq.push_back({Element::Kind::Rule, {}, false, r});
                count(1);
            } else {
                break;
            }
            skip_space(nested);
            // Repetition applies to the last element (a literal's last character, as llama.cpp does
            // for a multi-character literal only through a group).
            const char r = peek();
            if (r == '*' || r == '+' || r == '?' || r == '{') {
                if (seq.size() == elem_start) fail("a repetition needs something before it");
                Sequence last(seq.begin() + long(elem_start), seq.end());
                if (c == '"' && last.size() > 1) {  // the whole literal repeats
                    const uint32_t g = new_rule(current_);
                    g_.rules[g].alternatives = {last};
                    last = {Element{Element::Kind::Rule, {}, false, g}};
                }
                seq.resize(elem_start);
                uint32_t min = 0, max = UINT32_MAX;  // UINT32_MAX: unbounded
                ++pos_;
                if (r == '+')
                    min = 1;
                else if (r == '?')
                    max = 1;
                else if (r == '{') {
                    skip_space(nested);
                    min = parse_int();
                    skip_space(nested);
                    max = min;
                    if (peek() == ',') {
                        ++pos_;
                        skip_space(nested);
                        max = peek() == '}' ? UINT32_MAX : parse_int();
                        skip_space(nested);
                    }
                    if (peek() != '}') fail("expected '}'");
                    ++pos_;
                    if (max < min)
                        fail(fmt::format("repetition {{{},{}}}: the maximum is below the minimum", min, max));
                }
                add_repetition(seq, last, min, max);
                skip_space(nested);
            }
        }
        return seq;
    }

    uint32_t parse_int() {
        const size_t start = pos_;
        uint64_t v = 0;
        while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') {
            v = v * 10 + uint64_t(s_[pos_] - '0');
            if (v > kMaxRepeat) fail(fmt::format("repetition bound above {}", kMaxRepeat));
            ++pos_;
        }
        if (pos_ == start) fail("expected a number");
        return uint32_t(v);
    }

    // x{min,max}: min copies of x, then (max - min) optional ones nested (x (x (x)?)?)?, or x* for
    // an unbounded maximum, through rules of their own.
    void add_repetition(Sequence& seq, const Sequence& x, uint32_t min, uint32_t max) {
        for (uint32_t i = 0; i < min; ++i) {
            seq.insert(seq.end(), x.begin(), x.end());
            count(x.size());
        }
        if (max == UINT32_MAX) {  // star ::= x star | ε
            const uint32_t star = new_rule(current_);
            Sequence more = x;
            more.push_back({Element::Kind::Rule, {}, false, star});
            g_.rules[star].alternatives = {more, {}};
            count(more.size());
            seq.push_back({Element::Kind::Rule, {}, false, star});
            return;
        }
        if (max == min) return;
        uint32_t tail = 0;  // opt_k ::= x opt_{k-1} | ε, built from the innermost out
        for (uint32_t k = 0; k < max - min; ++k) {
            const uint32_t opt = new_rule(current_);
            Sequence more = x;
            if (k > 0) more.push_back({Element::Kind::Rule, {}, false, tail});
            g_.rules[opt].alternatives = {more, {}};
            count(more.size());
            tail = opt;
        }
        seq.push_back({Element::Kind::Rule, {}, false, tail});
    }

    // A rule that can reach itself before consuming a character never lets the matcher move on.
    void check_left_recursion() {
        const size_t n = g_.rules.size();
        std::vector<bool> nullable(n, false);
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t r = 0; r < n; ++r) {
                if (nullable[r]) continue;
                for (const Sequence& alt : g_.rules[r].alternatives) {
                    bool all = true;
                    for (const Element& e : alt)
                        if (e.kind == Element::Kind::Chars || !nullable[e.rule]) {
                            all = false;
                            break;
                        }
                    if (all) {
                        nullable[r] = true, changed = true;
                        break;
                    }
                }
            }
        }
        // Edges r -> s: s can be the first thing r matches. A depth-first search with its own stack
        // (a chain of thousands of rules must not exhaust the thread's).
        auto first_rules = [&](size_t r) {
            std::vector<uint32_t> out;
            for (const Sequence& alt : g_.rules[r].alternatives)
                for (const Element& e : alt) {
                    if (e.kind == Element::Kind::Chars) break;
                    out.push_back(e.rule);
                    if (!nullable[e.rule]) break;
                }
            return out;
        };
        std::vector<int> state(n, 0);  // 0 unvisited, 1 on the path, 2 done
        struct Frame {
            size_t rule;
            std::vector<uint32_t> next;
            size_t i = 0;
        };
        for (size_t start = 0; start < n; ++start) {
            if (state[start] != 0) continue;
            std::vector<Frame> path;
            path.push_back({start, first_rules(start)});
            state[start] = 1;
            while (!path.empty()) {
                Frame& f = path.back();
                if (f.i == f.next.size()) {
                    state[f.rule] = 2;
                    path.pop_back();
                    continue;
                }
                const uint32_t t = f.next[f.i++];
                if (state[t] == 1) {
                    const std::string& name = g_.rules[t].name;
                    fail_at(first_use_.count(name) ? first_use_.at(name) : 0,
                            fmt::format("rule '{}' is left-recursive (it can reach itself before matching a character)",
                                        name));
                }
                if (state[t] == 0) {
                    state[t] = 1;
                    path.push_back({t, first_rules(t)});
                }
            }
        }
    }

    std::string_view s_;
    size_t pos_ = 0;
    Grammar g_;
    std::vector<bool> defined_;
    std::map<std::string, uint32_t> index_;
    std::map<std::string, size_t> first_use_;
    std::string current_;
    uint32_t generated_ = 0;
    size_t elements_ = 0;
    size_t depth_ = 0;  // open parentheses
};

}  // namespace

Grammar Grammar::parse(std::string_view gbnf) { return Parser(gbnf).run(); }

bool Matcher::Pos::operator<(const Pos& o) const { return std::tie(rule, alt, elem) < std::tie(o.rule, o.alt, o.elem); }
bool Matcher::Pos::operator==(const Pos& o) const { return rule == o.rule && alt == o.alt && elem == o.elem; }

Matcher::Matcher(const Grammar& g) : g_(&g) {
    for (uint32_t a = 0; a < g.rules[g.root].alternatives.size(); ++a) expand({{g.root, a, 0}}, here_.stacks_);
    std::sort(here_.stacks_.begin(), here_.stacks_.end());
    here_.stacks_.erase(std::unique(here_.stacks_.begin(), here_.stacks_.end()), here_.stacks_.end());
}

// Resolves rule references and finished rules until the top of every stack is a character set
// (or the stack is empty: the text can end there).
void Matcher::expand(Stack s, std::vector<Stack>& out) const {
    for (;;) {
        if (s.empty()) {
            out.push_back(std::move(s));
            return;
        }
        const Pos p = s.back();
        const Sequence& seq = g_->rules[p.rule].alternatives[p.alt];
        if (p.elem >= seq.size()) {  // this rule is done: its caller goes on
            s.pop_back();
            continue;
        }
        const Element& e = seq[p.elem];
        if (e.kind == Element::Kind::Chars) {
            out.push_back(std::move(s));
            return;
        }
        // The caller continues after the reference; nothing is kept when the reference was its last
        // element (so that right recursion, x*, does not grow the stack).
        if (p.elem + 1 >= seq.size())
            s.pop_back();
        else
            ++s.back().elem;
        if (s.size() >= kMaxDepth)
            throw GrammarError(fmt::format("the grammar nests more than {} rules at once", kMaxDepth));
        const auto n_alts = uint32_t(g_->rules[e.rule].alternatives.size());
        for (uint32_t a = 0; a < n_alts; ++a) {
            if (out.size() > kMaxStacks)
                throw GrammarError(
                    fmt::format("the grammar is too ambiguous to follow (more than {} parse stacks)", kMaxStacks));
            Stack t = a + 1 < n_alts ? s : std::move(s);
            t.push_back({e.rule, a, 0});
            expand(std::move(t), out);
        }
        return;
    }
}

bool Matcher::advance(const std::vector<Stack>& stacks, uint32_t cp, std::vector<Stack>& next) const {
    next.clear();
    for (const Stack& s : stacks) {
        if (s.empty()) continue;
        const Pos p = s.back();
        if (!g_->rules[p.rule].alternatives[p.alt][p.elem].matches(cp)) continue;
        Stack t = s;
        ++t.back().elem;
        expand(std::move(t), next);
    }
    std::sort(next.begin(), next.end());
    next.erase(std::unique(next.begin(), next.end()), next.end());
    return !next.empty();
}

bool Matcher::allows(uint32_t cp) const { return top_matches(here_.stacks_, cp); }

bool Matcher::top_matches(const std::vector<Stack>& stacks, uint32_t cp) const {
    for (const Stack& s : stacks)
        if (!s.empty() && g_->rules[s.back().rule].alternatives[s.back().alt][s.back().elem].matches(cp)) return true;
    return false;
}

bool Matcher::can_end() const {
    return here_.partial_.empty() &&
           std::any_of(here_.stacks_.begin(), here_.stacks_.end(), [](const Stack& s) { return s.empty(); });
}

// The code points a partly received UTF-8 character could still become, and whether any is allowed.
bool Matcher::partial_allowed(const std::vector<Stack>& stacks, const std::string& partial) const {
    const auto lead = uint8_t(partial[0]);
    const size_t len = utf8_len(lead);
    uint32_t lo = len == 2 ? lead & 0x1f : len == 3 ? lead & 0x0f : lead & 0x07, hi = lo;
    for (size_t i = 1; i < len; ++i) {
        // A byte not received yet spans what may come there (the second byte's range depends on the lead).
        const uint32_t b = i < partial.size() ? uint8_t(partial[i]) & 0x3f : 0;
        const uint32_t first = i == 1 ? uint32_t(lead == 0xe0 ? 0x20 : lead == 0xf0 ? 0x10 : 0x00) : 0x00;
        const uint32_t last = i == 1 ? uint32_t(lead == 0xed ? 0x1f : lead == 0xf4 ? 0x0f : 0x3f) : 0x3f;
        lo = (lo << 6) | (i < partial.size() ? b : first);
        hi = (hi << 6) | (i < partial.size() ? b : last);
    }
    for (const Stack& s : stacks)
        if (!s.empty() && g_->rules[s.back().rule].alternatives[s.back().alt][s.back().elem].matches_any(lo, hi))
            return true;
    return false;
}

bool Matcher::consume(std::string_view bytes, std::vector<Stack>& stacks, std::string& partial) const {
    std::vector<Stack> next;
    for (const char ch : bytes) {
        const auto b = uint8_t(ch);
        if (partial.empty()) {
            const size_t len = utf8_len(b);
            if (len == 0) return false;  // not the start of a UTF-8 character
            if (len > 1) {
                partial.push_back(ch);
                if (!partial_allowed(stacks, partial)) return false;
                continue;
            }
            if (!advance(stacks, b, next)) return false;
        } else {
            partial.push_back(ch);
            if (!valid_utf8_prefix(partial)) return false;
            if (partial.size() < utf8_len(uint8_t(partial[0]))) {
                if (!partial_allowed(stacks, partial)) return false;
                continue;
            }
            const uint32_t cp = code_point(partial);
            partial.clear();
            if (!advance(stacks, cp, next)) return false;
        }
        stacks.swap(next);
    }
    return true;
}

bool Matcher::accept(std::string_view bytes) {
    std::vector<Stack> stacks = here_.stacks_;
    std::string partial = here_.partial_;
    if (!consume(bytes, stacks, partial)) return false;
    here_.stacks_ = std::move(stacks);
    here_.partial_ = std::move(partial);
    return true;
}

bool Matcher::allows_bytes(std::string_view bytes) const {
    std::vector<Stack> stacks = here_.stacks_;
    std::string partial = here_.partial_;
    return consume(bytes, stacks, partial);
}

Matcher::State Matcher::state() const { return here_; }

bool Matcher::step(State& st, uint8_t byte) const {
    const char c = char(byte);
    return consume(std::string_view(&c, 1), st.stacks_, st.partial_);
}

bool Matcher::may_step(const State& st, uint8_t byte) const {
    // consume() for one byte, but reading the stacks in place of advancing a copy of them.
    if (st.partial_.empty()) {
        const size_t len = utf8_len(byte);
        if (len == 0) return false;
        if (len > 1) return partial_allowed(st.stacks_, std::string(1, char(byte)));
        return top_matches(st.stacks_, byte);
    }
    const std::string partial = st.partial_ + char(byte);  // at most 4 bytes: no allocation
    if (!valid_utf8_prefix(partial)) return false;
    if (partial.size() < utf8_len(uint8_t(partial[0]))) return partial_allowed(st.stacks_, partial);
    return top_matches(st.stacks_, code_point(partial));
}

bool Matcher::complete() const {
    return here_.partial_.empty() &&
           std::all_of(here_.stacks_.begin(), here_.stacks_.end(), [](const Stack& s) { return s.empty(); });
}

size_t find_trigger(std::string_view text, const LazyStart& start) {
    constexpr std::string_view kWs = " \t\n\r";
    size_t from = 0;
    if (!start.skip_close.empty()) {
        bool in_block = start.skip_inside;
        if (!in_block && !start.skip_open.empty()) {
            const size_t first = std::min(text.size(), text.find_first_not_of(kWs));
            const std::string_view head = text.substr(first);
            if (head.size() < start.skip_open.size() && std::string_view(start.skip_open).starts_with(head))
                return std::string_view::npos;  // the block may be opening: undecided
            in_block = head.starts_with(start.skip_open);
        }
        if (in_block) {
            const size_t close = text.find(start.skip_close);
            if (close == std::string_view::npos) return std::string_view::npos;
            from = close + start.skip_close.size();
        }
    }
    const std::string_view rest = text.substr(from);
    size_t best = std::string_view::npos;
    for (const Trigger& t : start.triggers) {
        if (t.text.empty()) continue;
        if (t.at_start) {
            const size_t first = rest.find_first_not_of(kWs);
            if (first != std::string_view::npos && rest.substr(first).starts_with(t.text)) best = std::min(best, first);
        } else {
            best = std::min(best, rest.find(t.text));
        }
    }
    return best == std::string_view::npos ? best : from + best;
}

}  // namespace vkllm::grammar
