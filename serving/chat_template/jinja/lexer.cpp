#include "serving/chat_template/jinja/lexer.h"

#include "serving/chat_template/jinja/pystr.h"
#include "serving/chat_template/jinja/value.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace vkllm::chat_template::jinja {

namespace {

// \r\n, \r and \n become \n, and one final newline goes (jinja2's keep_trailing_newline=False).
std::string normalize_newlines(const std::string& src) {
    std::string out;
    out.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
        if (src[i] == '\r') {
            out += '\n';
            if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
        } else {
            out += src[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

// Python's str.rstrip(): trailing Unicode whitespace.
size_t rstrip_end(const std::string& s, size_t begin, size_t end) {
    std::vector<uint32_t> cps = pystr::decode(std::string_view(s).substr(begin, end - begin));
    size_t n = cps.size();
    while (n > 0 && pystr::is_space(cps[n - 1])) --n;
    return begin + pystr::encode(cps, 0, n).size();
}

// The length of the whitespace run (Python's \s) at `pos`.
size_t skip_space(const std::string& s, size_t pos) {
    size_t i = pos;
    while (i < s.size()) {
        const auto b = uint8_t(s[i]);
        if (b < 0x80) {
            if (!pystr::is_space(b)) break;
            ++i;
            continue;
        }
        // Multi-byte whitespace (U+00A0, U+2028, ...): decode one character.
        size_t n = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
        std::vector<uint32_t> cp = pystr::decode(std::string_view(s).substr(i, n));
        if (cp.size() != 1 || !pystr::is_space(cp[0])) break;
        i += n;
    }
    return i;
}

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
public:
    explicit Lexer(std::string src) : src_(std::move(src)) {}

    std::vector<Token> run() {
        bool line_starting = true;  // the previous match ended with a newline (or nothing precedes)
        while (pos_ < src_.size()) {
            const size_t tag = find_tag(pos_);
            if (tag == std::string::npos) {
                emit_data(pos_, src_.size());
                advance_to(src_.size());
                break;
            }
            const char kind = src_[tag + 1];  // '{', '%' or '#'
            const char sign =
                tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
            size_t text_end = tag;
            if (sign == '-') {
                text_end = rstrip_end(src_, pos_, tag);
            } else if (sign != '+' && kind != '{') {
                // lstrip_blocks: only spaces and tabs between the line start and the tag go.
                const size_t nl = src_.rfind('\n', tag == 0 ? 0 : tag - 1);
                const size_t line_start = (nl == std::string::npos || nl < pos_) ? pos_ : nl + 1;
                if (line_start > pos_ || line_starting) {
                    if (skip_space(src_, line_start) >= tag && line_start < tag) text_end = line_start;
                }
            }
            emit_data(pos_, text_end);
            advance_to(tag);
            const size_t after = tag + 2 + (sign ? 1 : 0);
            if (kind == '#') {
                line_starting = lex_comment(after);
            } else if (kind == '%' && try_raw(after)) {
                line_starting = ends_with_newline_;
            } else {
                line_starting = lex_tag(kind == '{', after);
            }
        }
        tokens_.push_back(Token{Tok::Eof, "", line_});
        return std::move(tokens_);
    }

private:
    // The next "{{", "{%" or "{#" at or after `from`.
    size_t find_tag(size_t from) const {
        for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
            if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
        }
        return std::string::npos;
    }

    void advance_to(size_t p) {
        for (size_t i = pos_; i < p; ++i)
            if (src_[i] == '\n') ++line_;
        pos_ = p;
    }

    void emit_data(size_t b, size_t e) {
        if (e > b) tokens_.push_back(Token{Tok::Data, src_.substr(b, e - b), line_});
    }

    // After an end delimiter: `-` eats all whitespace, a plain block end eats one newline
    // (trim_blocks). Returns whether the consumed text ended with a newline.
    bool after_end(size_t p, char sign, bool trim_newline) {
        if (sign == '-') {
            const size_t e = skip_space(src_, p);
            advance_to(e);
            return e > p ? src_[e - 1] == '\n' : false;
        }
        if (sign != '+' && trim_newline && p < src_.size() && src_[p] == '\n') {
            advance_to(p + 1);
            return true;
        }
        advance_to(p);
        return false;
    }

    bool lex_comment(size_t body) {
        const size_t end = src_.find("#}", body);
        if (end == std::string::npos) throw Error("missing end of comment tag '#}'", line_);
        const char sign = end > body && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
        advance_to(end);
        return after_end(end + 2, sign, true);
    }

    // {% raw %}...{% endraw %}: the body is text, tags inside it included.
    bool try_raw(size_t after_open) {
        size_t p = skip_space(src_, after_open);
        if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) return false;
        p = skip_space(src_, p + 3);
        char open_sign = 0;
        if (p < src_.size() && src_[p] == '-') open_sign = '-', ++p;
        if (src_.compare(p, 2, "%}") != 0) return false;
        p += 2;
        if (open_sign == '-') p = skip_space(src_, p);
        // The first {% endraw %} (any spacing and signs) closes it.
        size_t search = p;
        while (true) {
            const size_t t = src_.find("{%", search);
            if (t == std::string::npos) throw Error("missing end of raw directive ({% endraw %})", line_);
            size_t q = t + 2;
            const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
            if (sign) ++q;
            q = skip_space(src_, q);
            if (src_.compare(q, 6, "endraw") != 0) {
                search = t + 2;
                continue;
            }
            q = skip_space(src_, q + 6);
            char end_sign = 0;
            if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q], ++q;
            if (src_.compare(q, 2, "%}") != 0) {
                search = t + 2;
                continue;
            }
            size_t body_end = t;
            if (sign == '-') {
                body_end = rstrip_end(src_, p, t);
            } else if (sign != '+') {
                const size_t nl = src_.rfind('\n', t == 0 ? 0 : t - 1);
                const size_t line_start = (nl == std::string::npos || nl < p) ? p : nl + 1;
                // lstrip_blocks for {% endraw %}: as for any tag, when it starts its line (the
                // raw-begin match ending in a newline counts as a line start).
                if ((line_start > p || (p > 0 && src_[p - 1] == '\n')) && skip_space(src_, line_start) >= t &&
                    line_start < t)
                    body_end = line_start;
            }
            advance_to(p);
            emit_data(p, body_end);
            advance_to(q);
            ends_with_newline_ = after_end(q + 2, end_sign, true);
            return true;
        }
    }

    // Expression tokens up to the matching end delimiter. Returns whether the consumed text
    // ended with a newline.
    bool lex_tag(bool variable, size_t p) {
        tokens_.push_back(Token{variable ? Tok::VarBegin : Tok::BlockBegin, "", line_});
        advance_to(p);
        int depth = 0;  // open brackets: an end delimiter inside them does not close the tag
        while (true) {
            p = skip_space(src_, pos_);
            advance_to(p);
            if (p >= src_.size())
                throw Error(std::string("unexpected end of template: missing '") + (variable ? "}}" : "%}") + "'",
                            line_);
            if (depth == 0) {
                const char* close = variable ? "}}" : "%}";
                char sign = 0;
                size_t q = p;
                if ((src_[p] == '-' || (src_[p] == '+' && !variable)) && src_.compare(p + 1, 2, close) == 0)
                    sign = src_[p], ++q;
                if (src_.compare(q, 2, close) == 0) {
                    tokens_.push_back(Token{variable ? Tok::VarEnd : Tok::BlockEnd, "", line_});
                    advance_to(q);
                    return after_end(q + 2, sign, !variable);
                }
            }
            const char c = src_[p];
            if (is_name_start(c)) {
                size_t e = p;
                while (e < src_.size() && is_name_char(src_[e])) ++e;
                tokens_.push_back(Token{Tok::Name, src_.substr(p, e - p), line_});
                advance_to(e);
            } else if (is_digit(c)) {
                lex_number(p);
            } else if (c == '\'' || c == '"') {
                lex_string(p);
            } else {
                static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "(",
                                            ")",  "[",  "]",  "{",  "}",  ",",  ".", ":", "|", "=", "<", ">", ";"};
                const char* hit = nullptr;
                for (const char* op : ops)
                    if (src_.compare(p, std::strlen(op), op) == 0) {
                        hit = op;
                        break;
                    }
                if (!hit) throw Error(std::string("unexpected character '") + c + "' in tag", line_);
                const std::string op = hit;
                if (op == "(" || op == "[" || op == "{") ++depth;
                if (op == ")" || op == "]" || op == "}") {
                    if (depth == 0) throw Error("unexpected '" + op + "'", line_);
                    --depth;
                }
                tokens_.push_back(Token{Tok::Op, op, line_});
                advance_to(p + op.size());
            }
        }
    }

    void lex_number(size_t p) {
        auto digits = [&](size_t q) {  // digits with single '_' separators
            while (q < src_.size() &&
                   (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && is_digit(src_[q + 1]))))
                ++q;
            return q;
        };
        size_t e = digits(p);
        bool is_float = false;
        // After a '.', as in `x.0.1`, a number is an index: no fraction (jinja2's rule).
        const bool after_dot = !tokens_.empty() && tokens_.back().type == Tok::Op && tokens_.back().text == ".";
        if (!after_dot) {
            if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
                e = digits(e + 1);
                is_float = true;
            }
            if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
                size_t q = e + 1;
                if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
                if (q < src_.size() && is_digit(src_[q])) {
                    e = digits(q);
                    is_float = true;
                }
            }
        }
        std::string text;
        for (size_t i = p; i < e; ++i)
            if (src_[i] != '_') text += src_[i];
        Token t{is_float ? Tok::Float : Tok::Int, text, line_};
        if (is_float) {
            t.float_value = std::strtod(text.c_str(), nullptr);
        } else {
            errno = 0;
            const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
            if (errno || v > uint64_t(std::numeric_limits<int64_t>::max()))
                throw Error("integer literal " + text + " is too large", line_);
            t.int_value = int64_t(v);
        }
        tokens_.push_back(std::move(t));
        advance_to(e);
    }

    // A quoted string with Python's escapes (\n, \t, \xNN, \uNNNN, \UNNNNNNNN, octal, ...);
    // an unknown escape keeps its backslash.
    void lex_string(size_t p) {
        const char q = src_[p];
        std::string out;
        size_t i = p + 1;
        const int start_line = line_;
        auto hex = [&](size_t at, int n) -> int64_t {
            if (at + size_t(n) > src_.size()) return -1;
            int64_t v = 0;
            for (int k = 0; k < n; ++k) {
                const char c = src_[at + size_t(k)];
                int d = is_digit(c)              ? c - '0'
                        : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                        : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                                 : -1;
                if (d < 0) return -1;
                v = v * 16 + d;
            }
            return v;
        };
        while (true) {
            if (i >= src_.size()) throw Error("unterminated string literal", start_line);
            const char c = src_[i];
            if (c == q) break;
            if (c != '\\') {
                out += c;
                ++i;
                continue;
            }
            if (i + 1 >= src_.size()) throw Error("unterminated string literal", start_line);
            const char e = src_[i + 1];
            i += 2;
            switch (e) {
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                case 'r': out += '\r'; break;
                case '\\': out += '\\'; break;
                case '\'': out += '\''; break;
                case '"': out += '"'; break;
                case 'a': out += '\a'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'v': out += '\v'; break;
                case '\n': break;  // line continuation
                case 'x':
                case 'u':
                case 'U': {
                    const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    const int64_t v = hex(i, n);
                    if (v < 0 || v > 0x10FFFF)
                        throw Error(std::string("invalid \\") + e + " escape in string literal", line_);
                    pystr::append_utf8(out, uint32_t(v));
                    i += size_t(n);
                    break;
                }
                default:
                    if (e >= '0' && e <= '7') {
                        uint32_t v = uint32_t(e - '0');
                        for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
                            v = v * 8 + uint32_t(src_[i] - '0');
                        pystr::append_utf8(out, v);
                    } else {
                        out += '\\';
                        out += e;
                    }
            }
        }
        tokens_.push_back(Token{Tok::String, std::move(out), start_line});
        advance_to(i + 1);
    }

    std::string src_;
    size_t pos_ = 0;
    int line_ = 1;
    bool ends_with_newline_ = false;
    std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace vkllm::chat_template::jinja
