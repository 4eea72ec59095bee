#include "model/grammar/json_schema_numbers.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

namespace vkllm::grammar::detail {

namespace {

// A bound of a number as an exact decimal: |value| = whole + 0.frac (frac's digits, no trailing
// zeros), from the bound's JSON text (its shortest round-trip form).
struct Decimal {
    bool negative = false;
    uint64_t whole = 0;
    std::string frac;
    bool zero() const { return whole == 0 && frac.empty(); }
};
// Bounded numbers have at most this many digits in all: distinct decimals of 15 significant
// digits are distinct doubles, in the same order, so a client that parses the number into a
// double (Python, JavaScript) sees it within the bounds too, exclusive ones included.
constexpr size_t kBoundDigits = 15;
size_t digits_of(uint64_t whole) { return whole == 0 ? 0 : std::to_string(whole).size(); }
Decimal decimal(const Json& v, const char* k, const std::string& where) {
    std::string t = v.dump();
    Decimal d;
    if (!t.empty() && t[0] == '-') {
        d.negative = true;
        t.erase(0, 1);
    }
    const size_t dot = t.find('.');
    const std::string whole = t.substr(0, dot), frac = dot == std::string::npos ? "" : t.substr(dot + 1);
    if (whole.empty() || whole.size() > kBoundDigits || whole.find_first_not_of("0123456789") != std::string::npos ||
        frac.find_first_not_of("0123456789") != std::string::npos)
        refuse(k, where,
               fmt::format("'{}' must be a plain decimal of at most {} digits (not {})", k, kBoundDigits, v.dump()));
    d.whole = std::stoull(whole);
    d.frac = frac.substr(0, frac.find_last_not_of('0') + 1);
    if (digits_of(d.whole) + d.frac.size() > kBoundDigits)
        refuse(k, where,
               fmt::format("'{}' must be a plain decimal of at most {} digits (not {})", k, kBoundDigits, v.dump()));
    if (d.zero()) d.negative = false;
    return d;
}
// Compares |a| with |b|.
int compare_magnitude(const Decimal& a, const Decimal& b) {
    if (a.whole != b.whole) return a.whole < b.whole ? -1 : 1;
    return a.frac < b.frac ? -1 : a.frac > b.frac ? 1 : 0;  // no trailing zeros: string order is numeric order
}
int compare(const Decimal& a, const Decimal& b) {
    if (a.negative != b.negative) return a.negative ? -1 : 1;
    const int m = compare_magnitude(a, b);
    return a.negative ? -m : m;
}

// Decimal strings of the same length, lo <= hi: alternatives of digit classes.
void digit_range(const std::string& lo, const std::string& hi, const std::string& prefix,
                 std::vector<std::string>& out) {
    if (lo.empty()) {
        out.push_back(prefix.empty() ? "\"\"" : prefix);
        return;
    }
    const std::string tail_lo = lo.substr(1), tail_hi = hi.substr(1);
    auto cls = [](char a, char b) { return a == b ? lit(std::string(1, a)) : fmt::format("[{}-{}]", a, b); };
    auto cat = [](const std::string& a, const std::string& b) { return a.empty() ? b : a + " " + b; };
    const bool lo_zeros = tail_lo.find_first_not_of('0') == std::string::npos;
    const bool hi_nines = tail_hi.find_first_not_of('9') == std::string::npos;
    if (lo[0] == hi[0]) {
        digit_range(tail_lo, tail_hi, cat(prefix, cls(lo[0], lo[0])), out);
        return;
    }
    const std::string any(tail_lo.size(), '9'), zeros(tail_lo.size(), '0');
    char first = lo[0], last = hi[0];
    if (!lo_zeros) {
        digit_range(tail_lo, any, cat(prefix, cls(lo[0], lo[0])), out);
        ++first;
    }
    if (!hi_nines) --last;
    if (first <= last) {
        std::string p = cat(prefix, cls(first, last));
        if (!tail_lo.empty()) p = cat(p, fmt::format("[0-9]{{{}}}", tail_lo.size()));
        out.push_back(p);
    }
    if (!hi_nines) digit_range(zeros, tail_hi, cat(prefix, cls(hi[0], hi[0])), out);
}

// Non-negative integers in [lo, hi], without leading zeros.
void uint_range(uint64_t lo, uint64_t hi, std::vector<std::string>& out) {
    for (size_t len = std::to_string(lo).size(); len <= std::to_string(hi).size(); ++len) {
        const uint64_t p = uint64_t(std::pow(10.0, double(len - 1)));
        const uint64_t a = std::max(lo, len == 1 ? 0 : p), b = std::min(hi, p * 10 - 1);
        if (a <= b) digit_range(std::to_string(a), std::to_string(b), "", out);
    }
}

// Nonempty fraction digit strings D of at most `left` digits with 0.D in a range, as GBNF, and
// whether no fraction at all (0) is in it too.
struct Digits {
    std::string expr;  // "": no nonempty string
    bool empty_ok = false;
};
Digits digit_then(char d, const Digits& rest, size_t left) {
    // d followed by rest's strings (or nothing where rest takes nothing).
    if (left == 0) return {};
    const std::string head = lit(std::string(1, d));
    if (rest.expr.empty()) return {rest.empty_ok ? head : std::string(), false};
    return {head + " (" + rest.expr + ")" + (rest.empty_ok ? "?" : ""), false};
}
// A number's fraction part ("." and its digits, or nothing) for `d`; nullopt when none fits.
std::optional<std::string> fraction(const Digits& d) {
    if (d.expr.empty()) return d.empty_ok ? std::optional<std::string>("") : std::nullopt;
    const std::string f = "\".\" (" + d.expr + ")";
    return d.empty_ok ? "(" + f + ")?" : f;
}

// The rules of one grammar's bounded numbers (the shared runs are the grammar's: made once per
// grammar, whatever asks for them).
class NumberRules {
public:
    explicit NumberRules(SchemaRules& rules) : rules_(rules) {}

    // Numbers within minimum / maximum / exclusiveMinimum / exclusiveMaximum, written without an
    // exponent (any decimal the bounds allow; a subset of JSON's forms, every one valid).
    std::string number(const Json& s, const std::string& where) {
        std::optional<Decimal> lo, hi;
        bool ls = false, hs = false;
        struct Bound {
            const char* key;
            bool upper, strict;
        };
        for (const Bound& bound : {Bound{"minimum", false, false}, Bound{"exclusiveMinimum", false, true},
                                   Bound{"maximum", true, false}, Bound{"exclusiveMaximum", true, true}}) {
            const char* k = bound.key;
            if (!s.contains(k)) continue;
            if (!s[k].is_number())
                refuse(k, where, fmt::format("'{}' must be a number (draft 4's boolean form is not supported)", k));
            const Decimal d = decimal(s[k], k, where);
            const bool upper = bound.upper, strict = bound.strict;
            std::optional<Decimal>& b = upper ? hi : lo;
            bool& bs = upper ? hs : ls;
            const int c = b ? compare(d, *b) : 0;
            // The tighter bound wins; at the same value the strict one.
            if (!b || (upper ? c < 0 : c > 0) || (c == 0 && strict)) {
                b = d;
                bs = strict;
            }
        }
        if (!lo && !hi) return "number";
        // Numbers with the same bounds share one rule.
        auto text = [](const std::optional<Decimal>& d, bool strict) {
            return d ? fmt::format("{}{}{}.{}", strict ? "x" : "", d->negative ? "-" : "", d->whole, d->frac)
                     : std::string("none");
        };
        const std::string key = "number " + text(lo, ls) + " " + text(hi, hs);
        if (const std::string* made = rules_.shared(key)) return *made;
        if (lo && hi && (compare(*lo, *hi) > 0 || (compare(*lo, *hi) == 0 && (ls || hs))))
            refuse(s.contains("minimum") ? "minimum" : "exclusiveMinimum", where, "no number lies within the bounds");
        std::vector<std::string> alts;
        const Decimal zero;
        // x >= 0: magnitudes from max(lo, 0) (0 itself only where the bound allows it) to hi.
        if (!hi || !hi->negative) {
            const bool from_lo = lo && !lo->negative;
            magnitudes(from_lo ? *lo : zero, from_lo && ls, hi, hs, "", alts);
        }
        // x < 0: "-" and magnitudes above max(-hi, 0) (strictly above 0: no "-0") up to -lo.
        if (!lo || lo->negative) {
            Decimal lo_mag = zero, hi_mag;
            bool lo_strict = true;
            if (hi && hi->negative) {
                lo_mag = *hi;
                lo_mag.negative = false;
                lo_strict = hs;
            }
            std::optional<Decimal> top;
            if (lo) {
                hi_mag = *lo;
                hi_mag.negative = false;
                top = hi_mag;
            }
            magnitudes(lo_mag, lo_strict, top, ls, "\"-\" ", alts);
        }
        if (alts.empty()) refuse("minimum", where, "no number lies within the bounds");
        return rules_.share(key, rules_.add("number", join(alts, " | ")));
    }

private:
    // Shared rules, each made once per grammar: runs of min..max digits, of 1..max zeros, and
    // nonempty runs of at most `max` digits that are not all zeros.
    std::string digit_run(size_t min, size_t max) {
        const std::string key = fmt::format("digits-{}-{}", min, max);
        if (const std::string* made = rules_.shared(key)) return *made;
        return rules_.share(key, rules_.add(key, fmt::format("[0-9]{{{},{}}}", min, max)));
    }
    std::string zero_run(size_t max) {
        const std::string key = fmt::format("zeros-{}", max);
        if (const std::string* made = rules_.shared(key)) return *made;
        return rules_.share(key, rules_.add(key, fmt::format("\"0\"{{1,{}}}", max)));
    }
    std::string nonzero_run(size_t max) {
        const std::string key = fmt::format("nonzero-{}", max);
        if (const std::string* made = rules_.shared(key)) return *made;
        const std::string body =
            max == 1 ? "[1-9]" : fmt::format("[1-9] {} | \"0\" {}", digit_run(0, max - 1), nonzero_run(max - 1));
        return rules_.share(key, rules_.add(key, body));
    }

    // 0.D >= 0.G (> when strict); G's digits, no trailing zeros.
    Digits frac_ge(std::string_view g, bool strict, size_t left) {
        if (left == 0) return {"", !strict && g.empty()};
        if (g.empty()) return strict ? Digits{nonzero_run(left), false} : Digits{digit_run(1, left), true};
        std::vector<std::string> alts;
        if (g[0] < '9') alts.push_back(fmt::format("[{}-9] {}", char(g[0] + 1), digit_run(0, left - 1)));
        const Digits same = digit_then(g[0], frac_ge(g.substr(1), strict, left - 1), left);
        if (!same.expr.empty()) alts.push_back(same.expr);
        return {join(alts, " | "), false};
    }
    // 0.D <= 0.H (< when strict).
    Digits frac_le(std::string_view h, bool strict, size_t left) {
        if (h.empty()) return {strict || left == 0 ? std::string() : zero_run(left), !strict};
        if (left == 0) return {"", true};
        std::vector<std::string> alts;
        if (h[0] > '0') alts.push_back(fmt::format("[0-{}] {}", char(h[0] - 1), digit_run(0, left - 1)));
        const Digits same = digit_then(h[0], frac_le(h.substr(1), strict, left - 1), left);
        if (!same.expr.empty()) alts.push_back(same.expr);
        return {join(alts, " | "), true};
    }
    // 0.L <= 0.D <= 0.H (each bound strict or not), L <= H.
    Digits frac_between(std::string_view l, bool ls, std::string_view h, bool hs, size_t left) {
        if (h.empty()) {  // then l is empty too: only zero
            const bool ok = !ls && !hs;
            return {ok && left > 0 ? zero_run(left) : std::string(), ok};
        }
        if (l.empty() && !ls) return frac_le(h, hs, left);
        if (left == 0) return {};
        const char lo = l.empty() ? '0' : l[0], hi = h[0];
        const std::string_view lrest = l.empty() ? l : l.substr(1);
        if (lo == hi) return {digit_then(lo, frac_between(lrest, ls, h.substr(1), hs, left - 1), left).expr, false};
        std::vector<std::string> alts;
        const Digits low = digit_then(lo, frac_ge(lrest, ls, left - 1), left);
        if (!low.expr.empty()) alts.push_back(low.expr);
        if (hi - lo > 1) alts.push_back(fmt::format("[{}-{}] {}", char(lo + 1), char(hi - 1), digit_run(0, left - 1)));
        const Digits high = digit_then(hi, frac_le(h.substr(1), hs, left - 1), left);
        if (!high.expr.empty()) alts.push_back(high.expr);
        // No fraction is 0: below a lower bound that is not 0 (or is 0, strictly).
        return {join(alts, " | "), false};
    }

    // Magnitudes A(.F) in [lo, hi] (either bound strict; no hi: unbounded), without exponents, at
    // most kBoundDigits digits in all.
    void magnitudes(const Decimal& lo, bool ls, const std::optional<Decimal>& hi, bool hs, const std::string& sign,
                    std::vector<std::string>& alts) {
        auto add = [&](uint64_t whole, const Digits& frac) {
            if (const auto f = fraction(frac))
                alts.push_back(sign + lit(std::to_string(whole)) + (f->empty() ? "" : " " + *f));
        };
        auto left = [](uint64_t whole) { return kBoundDigits - digits_of(whole); };
        // Whole parts a..b with any fraction, per length (a longer whole leaves fewer fraction digits).
        auto pow10 = [](size_t n) {
            uint64_t p = 1;
            while (n--) p *= 10;
            return p;
        };
        auto wholes = [&](uint64_t a, uint64_t b) {
            for (size_t len = std::max<size_t>(1, digits_of(a));
                 len <= std::max<size_t>(1, digits_of(b)) && len <= kBoundDigits; ++len) {
                const uint64_t first = len == 1 ? 0 : pow10(len - 1), last = pow10(len) - 1;
                const uint64_t lo_len = std::max(a, first), hi_len = std::min(b, last);
                if (lo_len > hi_len) continue;
                std::vector<std::string> w;
                uint_range(lo_len, hi_len, w);
                const size_t frac = kBoundDigits - len;
                alts.push_back(sign + "(" + join(w, " | ") + ")" +
                               (frac ? " (\".\" " + digit_run(1, frac) + ")?" : std::string()));
            }
        };
        const uint64_t max_whole = pow10(kBoundDigits) - 1;
        if (!hi) {
            add(lo.whole, frac_ge(lo.frac, ls, left(lo.whole)));
            if (lo.whole < max_whole) wholes(lo.whole + 1, max_whole);
        } else if (lo.whole < hi->whole) {
            add(lo.whole, frac_ge(lo.frac, ls, left(lo.whole)));
            if (hi->whole > 0) wholes(lo.whole + 1, hi->whole - 1);
            add(hi->whole, frac_le(hi->frac, hs, left(hi->whole)));
        } else if (lo.whole == hi->whole) {
            add(lo.whole, frac_between(lo.frac, ls, hi->frac, hs, left(lo.whole)));
        }
    }

    SchemaRules& rules_;
};

}  // namespace

std::string number_range_gbnf(const Json& s, const std::string& where, SchemaRules& rules) {
    return NumberRules(rules).number(s, where);
}

std::string integer_range_gbnf(const Json& s, const std::string& where, SchemaRules& rules) {
    constexpr int64_t kMax = 9999999999999999;  // 16 digits, as the integer rule
    int64_t lo = -kMax, hi = kMax;
    bool bounded = false;
    auto bound = [&](const char* k, bool upper, bool exclusive) {
        if (!s.contains(k)) return;
        const Json& v = s[k];
        if (!v.is_number())
            refuse(k, where, fmt::format("'{}' must be a number (draft 4's boolean form is not supported)", k));
        int64_t b;
        if (v.is_number_integer()) {  // exact: doubles lose integers above 2^53
            if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(kMax) : std::llabs(v.get<int64_t>()) > kMax)
                refuse(k, where, fmt::format("'{}' is beyond 16 digits", k));
            b = v.get<int64_t>();
            if (exclusive) b += upper ? -1 : 1;
        } else {
            const double x = v.get<double>();
            if (!(std::fabs(x) <= 1e15))
                refuse(k, where, fmt::format("'{}' is beyond 15 digits (as a non-integer)", k));
            b = upper ? int64_t(std::floor(x)) : int64_t(std::ceil(x));
            if (exclusive && double(b) == x) b += upper ? -1 : 1;
        }
        if (upper)
            hi = std::min(hi, b);
        else
            lo = std::max(lo, b);
        bounded = true;
    };
    bound("minimum", false, false);
    bound("exclusiveMinimum", false, true);
    bound("maximum", true, false);
    bound("exclusiveMaximum", true, true);
    if (!bounded) return "integer";
    if (lo > hi) refuse("minimum", where, "no integer lies within the bounds");
    std::vector<std::string> alts;
    if (lo < 0) {
        std::vector<std::string> neg;
        uint_range(uint64_t(hi < 0 ? -hi : 1), uint64_t(-lo), neg);
        for (const std::string& a : neg) alts.push_back("\"-\" " + a);
    }
    if (hi >= 0) uint_range(uint64_t(std::max<int64_t>(lo, 0)), uint64_t(hi), alts);
    return rules.add("integer", join(alts, " | "));
}

}  // namespace vkllm::grammar::detail
