#include "serving/chat_template/jinja/pystr.h"

#include <clocale>
#include <cwctype>
#include <locale.h>

namespace vkllm::chat_template::jinja::pystr {

namespace {

// Case mapping and classes beyond ASCII come from the C library's Unicode tables (the C.UTF-8
// locale, present on every glibc system); without it only ASCII is mapped.
locale_t unicode_locale() {
    static locale_t loc = [] {
        locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t(0));
        if (!l) l = newlocale(LC_CTYPE_MASK, "en_US.UTF-8", locale_t(0));
        return l;
    }();
    return loc;
}

bool is_surrogate_escape(uint32_t cp) { return cp >= 0xDC80 && cp <= 0xDCFF; }

}  // namespace

std::vector<uint32_t> decode(std::string_view s) {
    std::vector<uint32_t> out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const auto b = uint8_t(s[i]);
        int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
        bool ok = n > 0 && i + n <= s.size();
        for (int k = 1; ok && k < n; ++k) {
            const auto c = uint8_t(s[i + k]);
            ok = (c & 0xC0) == 0x80;
            cp = (cp << 6) | (c & 0x3F);
        }
        // Overlong forms and surrogates are invalid too; keep such bytes as escapes.
        if (ok && ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
                   (cp >= 0xD800 && cp <= 0xDFFF)))
            ok = false;
        if (!ok) {
            out.push_back(0xDC00 + b);
            i += 1;
        } else {
            out.push_back(cp);
            i += size_t(n);
        }
    }
    return out;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (is_surrogate_escape(cp)) {
        out += char(cp - 0xDC00);
    } else if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

std::string encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
    std::string out;
    end = std::min(end, cps.size());
    for (size_t i = begin; i < end; ++i) append_utf8(out, cps[i]);
    return out;
}

bool is_ascii(std::string_view s) {
    for (char c : s)
        if (uint8_t(c) >= 0x80) return false;
    return true;
}

size_t length(std::string_view s) {
    if (is_ascii(s)) return s.size();
    return decode(s).size();
}

bool is_space(uint32_t cp) {
    switch (cp) {
        case 0x09:
        case 0x0A:
        case 0x0B:
        case 0x0C:
        case 0x0D:
        case 0x1C:
        case 0x1D:
        case 0x1E:
        case 0x1F:
        case 0x20:
        case 0x85:
        case 0xA0:
        case 0x1680:
        case 0x2028:
        case 0x2029:
        case 0x202F:
        case 0x205F:
        case 0x3000: return true;
        default: return cp >= 0x2000 && cp <= 0x200A;
    }
}

uint32_t to_upper(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
    if (is_surrogate_escape(cp) || !unicode_locale()) return cp;
    return uint32_t(towupper_l(wint_t(cp), unicode_locale()));
}

uint32_t to_lower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    if (is_surrogate_escape(cp) || !unicode_locale()) return cp;
    return uint32_t(towlower_l(wint_t(cp), unicode_locale()));
}

bool is_alpha(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    if (is_surrogate_escape(cp) || !unicode_locale()) return false;
    return iswalpha_l(wint_t(cp), unicode_locale()) != 0;
}

bool is_digit(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    if (is_surrogate_escape(cp) || !unicode_locale()) return false;
    return iswdigit_l(wint_t(cp), unicode_locale()) != 0;
}

bool is_alnum(uint32_t cp) { return is_alpha(cp) || is_digit(cp); }

namespace {

template <typename F>
std::string map_cps(std::string_view s, F f) {
    std::string out;
    out.reserve(s.size());
    for (uint32_t cp : decode(s)) append_utf8(out, f(cp));
    return out;
}

bool is_cased(uint32_t cp) { return to_upper(cp) != cp || to_lower(cp) != cp; }

}  // namespace

std::string upper(std::string_view s) { return map_cps(s, to_upper); }
std::string lower(std::string_view s) { return map_cps(s, to_lower); }

std::string capitalize(std::string_view s) {
    std::vector<uint32_t> cps = decode(s);
    std::string out;
    for (size_t i = 0; i < cps.size(); ++i) append_utf8(out, i == 0 ? to_upper(cps[i]) : to_lower(cps[i]));
    return out;
}

std::string title(std::string_view s) {
    // A cased character after an uncased one starts a word (Python's rule, so "they're" -> "They'Re").
    std::string out;
    bool prev_cased = false;
    for (uint32_t cp : decode(s)) {
        append_utf8(out, prev_cased ? to_lower(cp) : to_upper(cp));
        prev_cased = is_cased(cp);
    }
    return out;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
    std::vector<uint32_t> cps = decode(s);
    std::vector<uint32_t> set;
    if (chars) set = decode(*chars);
    auto strip_it = [&](uint32_t cp) {
        if (!chars) return is_space(cp);
        for (uint32_t c : set)
            if (c == cp) return true;
        return false;
    };
    size_t b = 0, e = cps.size();
    if (left)
        while (b < e && strip_it(cps[b])) ++b;
    if (right)
        while (e > b && strip_it(cps[e - 1])) --e;
    return encode(cps, b, e);
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
    std::vector<std::string> out;
    if (sep) {
        if (sep->empty()) return {std::string(s)};  // the caller reports "empty separator"
        size_t pos = 0;
        while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
            size_t hit = s.find(*sep, pos);
            if (hit == std::string_view::npos) break;
            out.emplace_back(s.substr(pos, hit - pos));
            pos = hit + sep->size();
        }
        out.emplace_back(s.substr(pos));
        return out;
    }
    std::vector<uint32_t> cps = decode(s);
    size_t i = 0;
    while (true) {
        while (i < cps.size() && is_space(cps[i])) ++i;
        if (i == cps.size()) break;
        if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
            out.push_back(encode(cps, i, cps.size()));  // the rest, trailing whitespace and all
            break;
        }
        size_t j = i;
        while (j < cps.size() && !is_space(cps[j])) ++j;
        out.push_back(encode(cps, i, j));
        i = j;
    }
    return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
    if (maxsplit < 0) return split(s, sep, maxsplit);
    std::vector<std::string> out;
    if (sep) {
        if (sep->empty()) return {std::string(s)};
        size_t end = s.size();
        while (int64_t(out.size()) < maxsplit) {
            if (end < sep->size()) break;
            size_t hit = s.rfind(*sep, end - sep->size());
            if (hit == std::string_view::npos) break;
            out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
            end = hit;
        }
        out.emplace_back(s.substr(0, end));
        return {out.rbegin(), out.rend()};
    }
    std::vector<uint32_t> cps = decode(s);
    size_t e = cps.size();
    while (true) {
        while (e > 0 && is_space(cps[e - 1])) --e;
        if (e == 0) break;
        if (int64_t(out.size()) == maxsplit) {
            out.push_back(encode(cps, 0, e));  // the rest, leading whitespace and all
            break;
        }
        size_t b = e;
        while (b > 0 && !is_space(cps[b - 1])) --b;
        out.push_back(encode(cps, b, e));
        e = b;
    }
    return {out.rbegin(), out.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
    std::vector<uint32_t> cps = decode(s);
    std::vector<std::string> out;
    size_t start = 0, i = 0;
    while (i < cps.size()) {
        uint32_t c = cps[i];
        bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                   c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!brk) {
            ++i;
            continue;
        }
        size_t eol = i;
        i += (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ? 2 : 1;
        out.push_back(encode(cps, start, keepends ? i : eol));
        start = i;
    }
    if (start < cps.size()) out.push_back(encode(cps, start, cps.size()));
    return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
    std::string out;
    if (old.empty()) {
        // Python inserts `repl` before every character and at the end.
        std::vector<uint32_t> cps = decode(s);
        int64_t done = 0;
        for (size_t i = 0; i <= cps.size(); ++i) {
            if (count < 0 || done < count) {
                out += repl;
                ++done;
            }
            if (i < cps.size()) append_utf8(out, cps[i]);
        }
        return out;
    }
    size_t pos = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        size_t hit = s.find(old, pos);
        if (hit == std::string_view::npos) break;
        out.append(s.substr(pos, hit - pos));
        out.append(repl);
        pos = hit + old.size();
        ++done;
    }
    out.append(s.substr(pos));
    return out;
}

int64_t find(std::string_view s, std::string_view sub, bool reverse) {
    size_t hit = reverse ? s.rfind(sub) : s.find(sub);
    if (hit == std::string_view::npos) return -1;
    return int64_t(length(s.substr(0, hit)));
}

int64_t count(std::string_view s, std::string_view sub) {
    if (sub.empty()) return int64_t(length(s)) + 1;
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
    return n;
}

}  // namespace vkllm::chat_template::jinja::pystr
