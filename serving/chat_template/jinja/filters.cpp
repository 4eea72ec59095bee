// jinja2's built-in filters and tests, as the Python originals behave (argument names and
// defaults included), with Hugging Face's `tojson` (json.dumps, non-ASCII kept).
#include "serving/chat_template/jinja/interpreter.h"
#include "serving/chat_template/jinja/pystr.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

namespace vkllm::chat_template::jinja {

namespace {

[[noreturn]] void fail_undefined(const Value& v) { throw Error(v.undefined_hint()); }

int64_t int_arg(const Value& v, const char* what) {
    if (v.is_int() || v.is_bool()) return v.as_int();
    if (v.is_float()) return int64_t(v.as_float());
    throw Error(std::string(what) + " must be an integer, not " + v.type_name());
}

std::optional<std::string> opt_str(const Value& v) {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    return v.to_str();
}

// "a.b.0": nested attribute / item lookup, as jinja2's make_attrgetter.
Value lookup_path(Interpreter& in, Value v, const std::string& path) {
    size_t pos = 0;
    while (true) {
        const size_t dot = path.find('.', pos);
        const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
        const bool digits =
            !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        v = in.getitem(v, digits ? Value(int64_t(std::atoll(part.c_str()))) : Value(part));
        if (dot == std::string::npos) return v;
        pos = dot + 1;
    }
}

// The sort / unique / min / max key: the attribute, lower-cased when case-insensitive.
Value sort_key(Interpreter& in, const Value& item, const Value& attribute, bool case_sensitive) {
    Value k = (attribute.is_none() || attribute.is_undefined()) ? item : lookup_path(in, item, attribute.to_str());
    if (!case_sensitive && k.is_string()) return Value(pystr::lower(k.str()));
    return k;
}

std::vector<Value> sorted(std::vector<Value> items, std::vector<Value> keys, bool reverse) {
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Python's sort is stable; reverse=True keeps equal items in their original order too.
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return reverse ? compare(keys[b], keys[a]) < 0 : compare(keys[a], keys[b]) < 0;
    });
    std::vector<Value> out;
    out.reserve(items.size());
    for (size_t i : order) out.push_back(items[i]);
    return out;
}

Value f_length(Interpreter&, const Value& v, Args&) {
    switch (v.kind()) {
        case Kind::Undefined: return Value(int64_t(0));
        case Kind::String: return Value(int64_t(pystr::length(v.str())));
        case Kind::List:
            if (v.is_generator()) throw Error("object of type 'generator' has no len()");
            return Value(int64_t(v.items().size()));
        case Kind::Dict: return Value(int64_t(v.dict_obj().items.size()));
        default: throw Error("object of type '" + v.type_name() + "' has no len()");
    }
}

Value f_tojson(Interpreter&, const Value& v, Args& a) {
    // Hugging Face's signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    JsonStyle st;
    st.ensure_ascii = arg(a, 0, "ensure_ascii", Value(false)).truthy();
    const Value indent = arg(a, 1, "indent", Value::none());
    if (!indent.is_none() && !indent.is_undefined()) {
        st.pretty = true;
        st.item_sep = ",";
        if (indent.is_string())
            st.indent_unit = indent.str();
        else
            st.indent_unit = std::string(size_t(std::clamp<int64_t>(int_arg(indent, "indent"), 0, 1 << 16)), ' ');
    }
    const Value seps = arg(a, 2, "separators", Value::none());
    if (seps.is_list()) {
        if (seps.items().size() != 2) throw Error("separators must be a pair (item separator, key separator)");
        st.item_sep = seps.items()[0].to_str();
        st.key_sep = seps.items()[1].to_str();
    }
    st.sort_keys = arg(a, 3, "sort_keys", Value(false)).truthy();
    return Value(to_json(v, st));
}

// String results keep the input's markup flag, as str methods on markupsafe.Markup do.
Value like(const Value& input, std::string s) {
    return input.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

Value f_string(Interpreter&, const Value& v, Args&) { return v.is_string() ? v : Value(v.to_str()); }
Value f_safe(Interpreter&, const Value& v, Args&) { return Value::markup(v.to_str()); }

Value f_default(Interpreter&, const Value& v, Args& a) {
    const Value def = arg(a, 0, "default_value", Value(std::string()));
    const bool boolean = arg(a, 1, "boolean", Value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return def;
    return v;
}

Value f_trim(Interpreter&, const Value& v, Args& a) {
    return like(v, pystr::strip(v.to_str(), opt_str(arg(a, 0, "chars", Value::none())), true, true));
}

Value f_upper(Interpreter&, const Value& v, Args&) { return like(v, pystr::upper(v.to_str())); }
Value f_lower(Interpreter&, const Value& v, Args&) { return like(v, pystr::lower(v.to_str())); }
Value f_capitalize(Interpreter&, const Value& v, Args&) { return like(v, pystr::capitalize(v.to_str())); }

Value f_title(Interpreter&, const Value& v, Args&) {
    // jinja2's own rule (not str.title): a word starts after '-', whitespace, '(', '{', '[' or '<'.
    std::string out;
    bool start = true;
    for (uint32_t cp : pystr::decode(v.to_str())) {
        const bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || pystr::is_space(cp);
        pystr::append_utf8(out, sep ? cp : start ? pystr::to_upper(cp) : pystr::to_lower(cp));
        start = sep;
    }
    return like(v, std::move(out));
}

Value f_replace(Interpreter& in, const Value& v, Args& a) {
    const std::string s = v.to_str();
    const std::string old = arg(a, 0, "old").to_str(), repl = arg(a, 1, "new").to_str();
    const Value count = arg(a, 2, "count", Value::none());
    std::string out = pystr::replace(s, old, repl, count.is_none() ? -1 : int_arg(count, "count"));
    in.check_size(out.size());
    return like(v, std::move(out));
}

Value f_items(Interpreter&, const Value& v, Args&) {
    if (v.is_undefined()) return Value::generator({});
    if (!v.is_dict()) throw Error("can only get item pairs from a mapping");
    std::vector<Value> out;
    for (const auto& [k, val] : v.dict_obj().items) out.push_back(Value::list({k, val}, true));
    return Value::generator(std::move(out));
}

Value f_list(Interpreter& in, const Value& v, Args&) { return Value::list(in.iterate(v)); }

Value f_join(Interpreter& in, const Value& v, Args& a) {
    const std::string sep = arg(a, 0, "d", Value(std::string())).to_str();
    const Value attribute = arg(a, 1, "attribute", Value::none());
    std::string out;
    bool first = true;
    for (const Value& item : in.iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += (attribute.is_none() ? item : lookup_path(in, item, attribute.to_str())).to_str();
        in.check_size(out.size());
    }
    in.step(out.size() / 64);
    return Value(std::move(out));
}

// select / reject / selectattr / rejectattr: `attr` (or the item) passed through a test, or
// through truthiness when no test is named.
Value select_impl(Interpreter& in, const Value& v, Args& a, bool by_attr, bool keep) {
    if (!v.truthy()) return Value::generator({});  // jinja2: `if value:` before anything else
    size_t p = 0;
    std::string attribute;
    if (by_attr) {
        if (a.pos.empty()) throw Error("selectattr/rejectattr need an attribute name");
        attribute = a.pos[p++].to_str();
    }
    std::optional<std::string> test;
    if (p < a.pos.size()) test = a.pos[p++].to_str();
    Args test_args;
    test_args.pos.assign(a.pos.begin() + std::ptrdiff_t(p), a.pos.end());
    test_args.kw = a.kw;
    std::vector<Value> out;
    for (const Value& item : in.iterate(v)) {
        in.step();
        const Value subject = by_attr ? lookup_path(in, item, attribute) : item;
        bool ok;
        if (test) {
            Args copy = test_args;
            ok = in.test(*test, subject, copy);
        } else {
            ok = subject.truthy();
        }
        if (ok == keep) out.push_back(item);
    }
    return Value::generator(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, true, false); }

Value f_map(Interpreter& in, const Value& v, Args& a) {
    if (!v.truthy()) return Value::generator({});  // jinja2: `if value:` before anything else
    std::vector<Value> out;
    const Value attribute = arg(a, 999, "attribute", Value::none());
    if (a.pos.empty() && !attribute.is_none()) {
        const Value def = arg(a, 999, "default");
        for (const Value& item : in.iterate(v)) {
            in.step();
            Value x = lookup_path(in, item, attribute.to_str());
            out.push_back(x.is_undefined() && has_arg(a, 999, "default") ? def : x);
        }
        return Value::generator(std::move(out));
    }
    if (a.pos.empty()) throw Error("map needs a filter name or attribute=");
    const std::string name = a.pos[0].to_str();
    Args rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const Value& item : in.iterate(v)) {
        in.step();
        Args copy = rest;
        out.push_back(in.filter(name, item, copy));
    }
    return Value::generator(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, Args& a) {
    const bool reverse = arg(a, 0, "reverse", Value(false)).truthy();
    const bool case_sensitive = arg(a, 1, "case_sensitive", Value(false)).truthy();
    const Value attribute = arg(a, 2, "attribute", Value::none());
    std::vector<Value> items = in.iterate(v), keys;
    in.step(items.size());
    for (const Value& item : items) keys.push_back(sort_key(in, item, attribute, case_sensitive));
    return Value::list(sorted(std::move(items), std::move(keys), reverse));
}

Value f_dictsort(Interpreter& in, const Value& v, Args& a) {
    if (!v.is_dict()) throw Error("dictsort: can only sort a mapping, not " + v.type_name());
    const bool case_sensitive = arg(a, 0, "case_sensitive", Value(false)).truthy();
    const std::string by = arg(a, 1, "by", Value("key")).to_str();
    const bool reverse = arg(a, 2, "reverse", Value(false)).truthy();
    if (by != "key" && by != "value") throw Error("dictsort: 'by' must be 'key' or 'value'");
    std::vector<Value> items, keys;
    for (const auto& [k, val] : v.dict_obj().items) {
        items.push_back(Value::list({k, val}, true));
        const Value& key = by == "key" ? k : val;
        keys.push_back(!case_sensitive && key.is_string() ? Value(pystr::lower(key.str())) : key);
    }
    in.step(items.size());
    return Value::list(sorted(std::move(items), std::move(keys), reverse));
}

Value f_unique(Interpreter& in, const Value& v, Args& a) {
    const bool case_sensitive = arg(a, 0, "case_sensitive", Value(false)).truthy();
    const Value attribute = arg(a, 1, "attribute", Value::none());
    std::unordered_set<std::string> seen;
    std::vector<Value> out;
    for (const Value& item : in.iterate(v)) {
        in.step();
        if (seen.insert(DictObj::hash_key(sort_key(in, item, attribute, case_sensitive))).second) out.push_back(item);
    }
    return Value::generator(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, Args& a, bool want_max) {
    const bool case_sensitive = arg(a, 0, "case_sensitive", Value(false)).truthy();
    const Value attribute = arg(a, 1, "attribute", Value::none());
    std::optional<Value> best, best_key;
    for (const Value& item : in.iterate(v)) {
        in.step();
        Value k = sort_key(in, item, attribute, case_sensitive);
        if (!best || (want_max ? compare(k, *best_key) > 0 : compare(k, *best_key) < 0)) {
            best = item;
            best_key = k;
        }
    }
    if (!best) return Value::undefined("no aggregated item, sequence was empty");
    return *best;
}

Value f_min(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, true); }

Value f_first(Interpreter& in, const Value& v, Args&) {
    std::vector<Value> items = in.iterate(v);
    if (items.empty()) return Value::undefined("no first item, sequence was empty");
    return items.front();
}

Value f_last(Interpreter& in, const Value& v, Args&) {
    std::vector<Value> items = in.iterate(v);
    if (items.empty()) return Value::undefined("no last item, sequence was empty");
    return items.back();
}

Value f_reverse(Interpreter& in, const Value& v, Args&) {
    if (v.is_string()) {
        std::vector<uint32_t> cps = pystr::decode(v.str());
        std::reverse(cps.begin(), cps.end());
        return Value(pystr::encode(cps));
    }
    std::vector<Value> items = in.iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::generator(std::move(items));
}

// Python's int(str): optional sign, digits with single underscores, surrounding whitespace.
std::optional<int64_t> parse_int(const std::string& text, int base) {
    const std::string s = pystr::strip(text, std::nullopt, true, true);
    std::string digits;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '_' && i > 0 && i + 1 < s.size() && s[i - 1] != '_' && s[i - 1] != '+' && s[i - 1] != '-') continue;
        digits += s[i];
    }
    if (digits.empty()) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(digits.c_str(), &end, base);
    if (errno || !end || *end || std::isspace(uint8_t(digits[0]))) return std::nullopt;
    return int64_t(v);
}

std::optional<double> parse_float(const std::string& text) {
    const std::string s = pystr::strip(text, std::nullopt, true, true);
    if (s.empty() || s.find('_') != std::string::npos) return std::nullopt;
    if (s.size() > 1 && (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (!end || *end) return std::nullopt;
    return v;
}

Value f_int(Interpreter&, const Value& v, Args& a) {
    const Value def = arg(a, 0, "default", Value(int64_t(0)));
    const int base = int(int_arg(arg(a, 1, "base", Value(int64_t(10))), "base"));
    if (base < 2 || base > 36) throw Error("int() base must be >= 2 and <= 36");
    if (v.is_int() || v.is_bool()) return Value(v.as_int());
    if (v.is_float()) {
        const double f = v.as_float();
        if (std::isnan(f) || std::isinf(f) || std::fabs(f) >= 9.2e18) return def;
        return Value(int64_t(f));
    }
    if (v.is_string()) {
        if (auto i = parse_int(v.str(), base)) return Value(*i);
        // jinja2's quirk: "42.23"|int is 42.
        if (auto f = parse_float(v.str()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18) return Value(int64_t(*f));
    }
    return def;
}

Value f_float(Interpreter&, const Value& v, Args& a) {
    const Value def = arg(a, 0, "default", Value(0.0));
    if (v.is_number()) return Value(v.as_float());
    if (v.is_string())
        if (auto f = parse_float(v.str())) return Value(*f);
    return def;
}

Value f_abs(Interpreter&, const Value& v, Args&) {
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    if (v.is_int() || v.is_bool()) {
        if (v.as_int() == std::numeric_limits<int64_t>::min()) throw Error("integer overflow");
        return Value(std::abs(v.as_int()));
    }
    if (v.is_undefined()) fail_undefined(v);
    throw Error("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_round(Interpreter&, const Value& v, Args& a) {
    const int64_t precision = int_arg(arg(a, 0, "precision", Value(int64_t(0))), "precision");
    const std::string method = arg(a, 1, "method", Value("common")).to_str();
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_number()) throw Error("round: expected a number, not " + v.type_name());
    if (method != "common" && method != "ceil" && method != "floor")
        throw Error("method must be common, ceil or floor");
    if (method == "common" && !v.is_float()) return Value(v.as_int());
    const double x = v.as_float();
    if (method != "common") {
        const double m = std::pow(10.0, double(precision));
        return Value((method == "ceil" ? std::ceil(x * m) : std::floor(x * m)) / m);
    }
    if (precision <= 0 && precision > -20) {
        const double m = std::pow(10.0, double(-precision));
        return Value(std::nearbyint(x / m) * m);  // half to even, as Python's round()
    }
    // Python rounds the exact binary value correctly; so does printf.
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", int(std::min<int64_t>(precision, 300)), x);
    return Value(std::strtod(buf, nullptr));
}

Value f_indent(Interpreter& in, const Value& v, Args& a) {
    const Value w = arg(a, 0, "width", Value(int64_t(4)));
    const std::string unit =
        w.is_string() ? w.str() : std::string(size_t(std::clamp<int64_t>(int_arg(w, "width"), 0, 1 << 16)), ' ');
    const bool first = arg(a, 1, "first", Value(false)).truthy();
    const bool blank = arg(a, 2, "blank", Value(false)).truthy();
    std::vector<std::string> lines = pystr::splitlines(v.to_str() + "\n");
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) {
            out += '\n';
            if (blank || !lines[i].empty()) out += unit;
        }
        out += lines[i];
        in.check_size(out.size());
    }
    if (first) out = unit + out;
    in.check_size(out.size());
    return like(v, std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, Args&) {
    int64_t n = 0;
    bool in_word = false;
    for (uint32_t cp : pystr::decode(v.to_str())) {
        const bool w = pystr::is_alnum(cp) || cp == '_';
        if (w && !in_word) ++n;
        in_word = w;
    }
    return Value(n);
}

Value f_center(Interpreter& in, const Value& v, Args& a) {
    const std::string s = v.to_str();
    const int64_t width = int_arg(arg(a, 0, "width", Value(int64_t(80))), "width");
    const auto len = int64_t(pystr::length(s));
    if (width <= len) return Value(s);
    in.check_size(size_t(width - len) + s.size());
    const int64_t pad = width - len;
    const int64_t left = pad / 2 + (pad & width & 1);  // CPython's str.center
    return Value(std::string(size_t(left), ' ') + s + std::string(size_t(pad - left), ' '));
}

Value f_escape(Interpreter& in, const Value& v, Args&) {
    if (v.is_markup()) return v;  // already safe
    std::string out = html_escape(v.to_str());
    in.check_size(out.size());
    return Value::markup(std::move(out));
}

Value f_forceescape(Interpreter& in, const Value& v, Args&) {
    std::string out = html_escape(v.to_str());
    in.check_size(out.size());
    return Value::markup(std::move(out));
}

Value f_sum(Interpreter& in, const Value& v, Args& a) {
    const Value attribute = arg(a, 0, "attribute", Value::none());
    Value total = arg(a, 1, "start", Value(int64_t(0)));
    Args none;
    for (const Value& item : in.iterate(v)) {
        const Value x = attribute.is_none() ? item : lookup_path(in, item, attribute.to_str());
        if (!x.is_number() || !total.is_number()) throw Error("sum: unsupported operand types");
        if (total.is_float() || x.is_float())
            total = Value(total.as_float() + x.as_float());
        else {
            int64_t r;
            if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) throw Error("integer overflow in sum");
            total = Value(r);
        }
    }
    return total;
}

Value f_batch(Interpreter& in, const Value& v, Args& a) {
    const int64_t n = int_arg(arg(a, 0, "linecount"), "linecount");
    if (n <= 0) throw Error("batch: linecount must be positive");
    const bool fill = has_arg(a, 1, "fill_with");
    const Value fill_with = arg(a, 1, "fill_with", Value::none());
    std::vector<Value> out, cur;
    for (const Value& item : in.iterate(v)) {
        cur.push_back(item);
        if (int64_t(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
    }
    if (!cur.empty()) {
        while (fill && int64_t(cur.size()) < n) cur.push_back(fill_with);
        out.push_back(Value::list(std::move(cur)));
    }
    return Value::generator(std::move(out));
}

Value f_format(Interpreter& in, const Value& v, Args& a) {
    if (!a.kw.empty()) {
        Value d = Value::dict();
        for (const auto& [k, val] : a.kw) d.dict_obj().set(Value(k), val);
        return py_mod_format(in, v.to_str(), d);
    }
    return py_mod_format(in, v.to_str(), Value::list(a.pos, true));
}

// A Python attribute only: a dict's keys are not attributes (unlike `d.x` in a template).
Value f_attr(Interpreter& in, const Value& v, Args& a) {
    const std::string name = arg(a, 0, "name").to_str();
    if (v.is_dict()) {
        if (auto m = find_method(v, name)) return *m;
        return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    return in.getattr(v, name);
}

Value f_truncate(Interpreter&, const Value& v, Args& a) {
    const std::string s = v.to_str();
    const int64_t length = int_arg(arg(a, 0, "length", Value(int64_t(255))), "length");
    const bool killwords = arg(a, 1, "killwords", Value(false)).truthy();
    const std::string end = arg(a, 2, "end", Value("...")).to_str();
    const int64_t leeway = int_arg(arg(a, 3, "leeway", Value(int64_t(5))), "leeway");
    std::vector<uint32_t> cps = pystr::decode(s);
    const auto end_len = int64_t(pystr::length(end));
    if (int64_t(cps.size()) <= length + leeway) return Value(s);
    const int64_t keep = std::max<int64_t>(0, length - end_len);
    if (killwords) return Value(pystr::encode(cps, 0, size_t(keep)) + end);
    std::string head = pystr::encode(cps, 0, size_t(keep));
    const size_t sp = head.rfind(' ');
    if (sp != std::string::npos) head = head.substr(0, sp);
    return Value(head + end);
}

// --- tests ------------------------------------------------------------------------------------

bool t_defined(Interpreter&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, Args&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, Args&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, Args&) { return v.is_bool(); }
bool t_true(Interpreter&, const Value& v, Args&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, Args&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, Args&) { return v.is_int(); }
bool t_float(Interpreter&, const Value& v, Args&) { return v.is_float(); }
bool t_number(Interpreter&, const Value& v, Args&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, Args&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, Args&) { return v.is_dict(); }
// Undefined has __iter__, __len__ and __getitem__ in jinja2, so it is iterable and a sequence.
bool t_iterable(Interpreter&, const Value& v, Args&) {
    return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
}
bool t_sequence(Interpreter&, const Value& v, Args&) {
    return (v.is_list() && !v.is_generator()) || v.is_dict() || v.is_string() || v.is_undefined();
}
bool t_callable(Interpreter&, const Value& v, Args&) { return v.is_callable() || v.is_loop() || v.is_undefined(); }
bool t_sameas(Interpreter&, const Value& v, Args& a) { return v.same_object(arg(a, 0, "other")); }
bool t_escaped(Interpreter&, const Value&, Args&) { return false; }
bool t_in(Interpreter&, const Value& v, Args& a) { return contains(arg(a, 0, "seq"), v); }
bool t_eq(Interpreter&, const Value& v, Args& a) { return equals(v, arg(a, 0, "other")); }
bool t_ne(Interpreter&, const Value& v, Args& a) { return !equals(v, arg(a, 0, "other")); }

int ordered(const Value& a, const Value& b) {
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    return compare(a, b);
}
bool t_lt(Interpreter&, const Value& v, Args& a) { return ordered(v, arg(a, 0, "other")) < 0; }
bool t_le(Interpreter&, const Value& v, Args& a) { return ordered(v, arg(a, 0, "other")) <= 0; }
bool t_gt(Interpreter&, const Value& v, Args& a) { return ordered(v, arg(a, 0, "other")) > 0; }
bool t_ge(Interpreter&, const Value& v, Args& a) { return ordered(v, arg(a, 0, "other")) >= 0; }

int64_t int_operand(const Value& v) {
    if (v.is_undefined()) fail_undefined(v);
    if (v.is_int() || v.is_bool()) return v.as_int();
    if (v.is_float()) return int64_t(v.as_float());
    throw Error("not all arguments converted during string formatting");
}
bool t_odd(Interpreter&, const Value& v, Args&) { return (int_operand(v) % 2 + 2) % 2 == 1; }
bool t_even(Interpreter&, const Value& v, Args&) { return int_operand(v) % 2 == 0; }
bool t_divisibleby(Interpreter&, const Value& v, Args& a) {
    const int64_t n = int_operand(arg(a, 0, "num"));
    if (n == 0) throw Error("integer division or modulo by zero");
    return n == -1 || int_operand(v) % n == 0;
}
bool t_lower(Interpreter&, const Value& v, Args&) {
    const std::string s = v.to_str();
    return pystr::lower(s) == s && pystr::upper(s) != s;
}
bool t_upper(Interpreter&, const Value& v, Args&) {
    const std::string s = v.to_str();
    return pystr::upper(s) == s && pystr::lower(s) != s;
}
bool t_filter(Interpreter&, const Value& v, Args&) { return v.is_string() && find_filter(v.str()) != nullptr; }
bool t_test(Interpreter&, const Value& v, Args&) { return v.is_string() && find_test(v.str()) != nullptr; }

}  // namespace

FilterFn find_filter(const std::string& name) {
    static const std::unordered_map<std::string, FilterFn> filters = {
        {"abs", f_abs},           {"attr", f_attr},
        {"batch", f_batch},       {"capitalize", f_capitalize},
        {"center", f_center},     {"count", f_length},
        {"d", f_default},         {"default", f_default},
        {"dictsort", f_dictsort}, {"e", f_escape},
        {"escape", f_escape},     {"first", f_first},
        {"float", f_float},       {"forceescape", f_forceescape},
        {"format", f_format},     {"indent", f_indent},
        {"int", f_int},           {"items", f_items},
        {"join", f_join},         {"last", f_last},
        {"length", f_length},     {"list", f_list},
        {"lower", f_lower},       {"map", f_map},
        {"max", f_max},           {"min", f_min},
        {"reject", f_reject},     {"rejectattr", f_rejectattr},
        {"replace", f_replace},   {"reverse", f_reverse},
        {"round", f_round},       {"safe", f_safe},
        {"select", f_select},     {"selectattr", f_selectattr},
        {"sort", f_sort},         {"string", f_string},
        {"sum", f_sum},           {"title", f_title},
        {"tojson", f_tojson},     {"trim", f_trim},
        {"truncate", f_truncate}, {"unique", f_unique},
        {"upper", f_upper},       {"wordcount", f_wordcount},
    };
    auto it = filters.find(name);
    return it == filters.end() ? nullptr : it->second;
}

TestFn find_test(const std::string& name) {
    static const std::unordered_map<std::string, TestFn> tests = {
        {"boolean", t_boolean},
        {"callable", t_callable},
        {"defined", t_defined},
        {"divisibleby", t_divisibleby},
        {"eq", t_eq},
        {"equalto", t_eq},
        {"==", t_eq},
        {"escaped", t_escaped},
        {"even", t_even},
        {"false", t_false},
        {"filter", t_filter},
        {"float", t_float},
        {"ge", t_ge},
        {">=", t_ge},
        {"gt", t_gt},
        {"greaterthan", t_gt},
        {">", t_gt},
        {"in", t_in},
        {"integer", t_integer},
        {"iterable", t_iterable},
        {"le", t_le},
        {"<=", t_le},
        {"lower", t_lower},
        {"lt", t_lt},
        {"lessthan", t_lt},
        {"<", t_lt},
        {"mapping", t_mapping},
        {"ne", t_ne},
        {"!=", t_ne},
        {"none", t_none},
        {"number", t_number},
        {"odd", t_odd},
        {"sameas", t_sameas},
        {"sequence", t_sequence},
        {"string", t_string},
        {"test", t_test},
        {"true", t_true},
        {"undefined", t_undefined},
        {"upper", t_upper},
    };
    auto it = tests.find(name);
    return it == tests.end() ? nullptr : it->second;
}

}  // namespace vkllm::chat_template::jinja
