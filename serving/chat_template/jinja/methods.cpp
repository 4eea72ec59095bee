// Methods of str, dict and list that templates call (`s.split()`, `d.items()`, `l.append(x)`),
// Python's printf-style `str % args` and `str.format`. Only the mutating list.append exists
// among the mutators (the sandbox of Hugging Face refuses the others, and so do we).
#include "serving/chat_template/jinja/interpreter.h"
#include "serving/chat_template/jinja/pystr.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_set>

namespace vkllm::chat_template::jinja {

namespace {

std::optional<std::string> opt_str(const Value& v) {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_string()) throw Error("expected a string argument, not " + v.type_name());
    return v.str();
}

int64_t opt_int(const Value& v, int64_t def) {
    if (v.is_none() || v.is_undefined()) return def;
    if (!v.is_int() && !v.is_bool()) throw Error("expected an integer argument, not " + v.type_name());
    return v.as_int();
}

Value str_list(const std::vector<std::string>& parts) {
    std::vector<Value> out;
    out.reserve(parts.size());
    for (const std::string& p : parts) out.emplace_back(p);
    return Value::list(std::move(out));
}

// startswith/endswith with a str or a tuple of str, and optional start/end in code points.
bool affix(const std::string& s, const Value& which, const Args& a, bool prefix) {
    std::string sub = s;
    if (has_arg(a, 1, "start") || has_arg(a, 2, "end")) {
        std::vector<uint32_t> cps = pystr::decode(s);
        const auto n = int64_t(cps.size());
        auto norm = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
        const int64_t b = norm(opt_int(arg(a, 1, "start", Value::none()), 0));
        const int64_t e = norm(opt_int(arg(a, 2, "end", Value::none()), n));
        sub = b < e ? pystr::encode(cps, size_t(b), size_t(e)) : std::string();
    }
    auto one = [&](const Value& v) {
        if (!v.is_string()) throw Error("startswith/endswith take a str or a tuple of str, not " + v.type_name());
        const std::string& x = v.str();
        if (x.size() > sub.size()) return false;
        return prefix ? sub.compare(0, x.size(), x) == 0 : sub.compare(sub.size() - x.size(), x.size(), x) == 0;
    };
    if (which.is_list()) {
        for (const Value& v : which.items())
            if (one(v)) return true;
        return false;
    }
    return one(which);
}

// The text of one str.format() field: `{}`, `{0}`, `{name}`, `{0.attr}`/`{0[key]}` and a format
// spec of [[fill]align][sign][0][width][.precision][type].
std::string format_field(Interpreter& in, const Value& v, const std::string& spec, char conversion) {
    std::string text;
    if (conversion == 'r')
        text = v.repr();
    else if (conversion == 's')
        text = v.to_str();
    if (spec.empty()) return conversion ? text : v.to_str();
    size_t i = 0;
    uint32_t fill = ' ';
    char align = 0;
    std::vector<uint32_t> sc = pystr::decode(spec);
    auto is_align = [](uint32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
    if (sc.size() >= 2 && is_align(sc[1])) {
        fill = sc[0];
        align = char(sc[1]);
        i = 2;
    } else if (!sc.empty() && is_align(sc[0])) {
        align = char(sc[0]);
        i = 1;
    }
    char sign = 0;
    if (i < sc.size() && (sc[i] == '+' || sc[i] == '-' || sc[i] == ' ')) sign = char(sc[i++]);
    if (i < sc.size() && sc[i] == '0') {
        if (!align) {
            fill = '0';
            align = '=';
        }
        ++i;
    }
    int64_t width = 0;
    while (i < sc.size() && sc[i] >= '0' && sc[i] <= '9')
        width = std::min<int64_t>(width * 10 + (sc[i++] - '0'), 1 << 20);
    int64_t precision = -1;
    if (i < sc.size() && sc[i] == '.') {
        precision = 0;
        ++i;
        while (i < sc.size() && sc[i] >= '0' && sc[i] <= '9')
            precision = std::min<int64_t>(precision * 10 + (sc[i++] - '0'), 300);
    }
    char type = i < sc.size() ? char(sc[i++]) : 0;
    if (i != sc.size()) throw Error("invalid format specifier '" + spec + "'");
    if (!conversion) {
        if (v.is_number() && !v.is_bool() && type != 's') {
            char buf[400];
            const char* sg = sign == '+' ? "+" : sign == ' ' ? " " : "";
            if (type == 'd' || (!type && v.is_int())) {
                if (!v.is_int()) throw Error("unknown format code 'd' for object of type 'float'");
                std::snprintf(buf, sizeof buf, v.as_int() >= 0 ? "%s%lld" : "%s%lld", v.as_int() >= 0 ? sg : "",
                              (long long)v.as_int());
            } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == '%' || type == 'g' ||
                       type == 'G') {
                double x = v.as_float();
                const int p = int(precision < 0 ? 6 : precision);
                if (type == '%') x *= 100;
                const char t = type == '%' ? 'f' : type;
                char f[16];
                std::snprintf(f, sizeof f, "%%s%%.%d%c", p, t);
                std::snprintf(buf, sizeof buf, f, x >= 0 ? sg : "", x);
                if (type == '%') std::strncat(buf, "%", sizeof buf - std::strlen(buf) - 1);
            } else if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
                if (!v.is_int()) throw Error("unknown format code for float");
                const long long x = v.as_int();
                if (type == 'b') {
                    std::string b;
                    unsigned long long u = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
                    do {
                        b.insert(b.begin(), char('0' + (u & 1)));
                        u >>= 1;
                    } while (u);
                    std::snprintf(buf, sizeof buf, "%s%s", x < 0 ? "-" : sg, b.c_str());
                } else {
                    std::snprintf(buf, sizeof buf,
                                  type == 'x'   ? "%s%llx"
                                  : type == 'X' ? "%s%llX"
                                                : "%s%llo",
                                  x < 0 ? "-" : sg, x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x);
                }
            } else {
                std::string r = v.to_str();
                if (precision >= 0 && v.is_float()) {
                    std::snprintf(buf, sizeof buf, "%.*g", int(precision), v.as_float());
                    r = buf;
                }
                std::snprintf(buf, sizeof buf, "%s%s", v.as_float() >= 0 ? sg : "", r.c_str());
            }
            text = buf;
            if (!align) align = '>';
        } else {
            if (type && type != 's')
                throw Error(std::string("unknown format code '") + type + "' for object of type '" + v.type_name() +
                            "'");
            text = v.to_str();
        }
    }
    if (precision >= 0 && (conversion || !v.is_number() || v.is_bool() || type == 's')) {
        std::vector<uint32_t> cps = pystr::decode(text);
        if (int64_t(cps.size()) > precision) text = pystr::encode(cps, 0, size_t(precision));
    }
    const auto len = int64_t(pystr::length(text));
    if (width <= len) return text;
    in.check_size(size_t(width) * 4);
    std::string pad;
    for (int64_t k = 0; k < width - len; ++k) pystr::append_utf8(pad, fill);
    if (!align) align = '<';
    if (align == '<') return text + pad;
    if (align == '>') return pad + text;
    if (align == '=') {
        const bool signed_text = !text.empty() && (text[0] == '-' || text[0] == '+' || text[0] == ' ');
        return signed_text ? text.substr(0, 1) + pad + text.substr(1) : pad + text;
    }
    std::string left, right;
    const int64_t l = (width - len) / 2;
    for (int64_t k = 0; k < l; ++k) pystr::append_utf8(left, fill);
    for (int64_t k = l; k < width - len; ++k) pystr::append_utf8(right, fill);
    return left + text + right;
}

Value str_format(Interpreter& in, const std::string& fmt, const Args& a) {
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < fmt.size(); ++i) {
        const char c = fmt[i];
        if (c == '}') {
            if (i + 1 < fmt.size() && fmt[i + 1] == '}')
                ++i;
            else
                throw Error("single '}' encountered in format string");
            out += '}';
            continue;
        }
        if (c != '{') {
            out += c;
            continue;
        }
        if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
            out += '{';
            ++i;
            continue;
        }
        const size_t close = fmt.find('}', i);
        if (close == std::string::npos) throw Error("single '{' encountered in format string");
        std::string field = fmt.substr(i + 1, close - i - 1);
        i = close;
        std::string spec;
        char conversion = 0;
        if (size_t colon = field.find(':'); colon != std::string::npos) {
            spec = field.substr(colon + 1);
            field.resize(colon);
        }
        if (size_t bang = field.find('!'); bang != std::string::npos) {
            conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
            field.resize(bang);
        }
        // The argument: a position, a keyword, or the next position; then .attr / [key] parts.
        size_t end = field.find_first_of(".[");
        const std::string head = field.substr(0, end);
        Value v;
        if (head.empty()) {
            if (auto_index >= a.pos.size())
                throw Error("Replacement index " + std::to_string(auto_index) + " out of range");
            v = a.pos[auto_index++];
        } else if (std::all_of(head.begin(), head.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
            const size_t k = size_t(std::atoll(head.c_str()));
            if (head.size() > 9 || k >= a.pos.size()) throw Error("Replacement index " + head + " out of range");
            v = a.pos[k];
        } else {
            bool found = false;
            for (const auto& [k, val] : a.kw)
                if (k == head) {
                    v = val;
                    found = true;
                }
            if (!found) throw Error("KeyError: '" + head + "'");
        }
        while (end != std::string::npos && end < field.size()) {
            if (field[end] == '.') {
                const size_t next = field.find_first_of(".[", end + 1);
                v = in.getattr(v,
                               field.substr(end + 1, next == std::string::npos ? std::string::npos : next - end - 1));
                end = next;
            } else {
                const size_t rb = field.find(']', end);
                if (rb == std::string::npos) throw Error("missing ']' in format string");
                const std::string key = field.substr(end + 1, rb - end - 1);
                const bool digits = !key.empty() && key.size() < 10 &&
                                    std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
                v = in.getitem(v, digits ? Value(int64_t(std::atoll(key.c_str()))) : Value(key));
                end = rb + 1;
            }
        }
        if (v.is_undefined()) throw Error(v.undefined_hint());
        out += format_field(in, v, spec, conversion);
        in.check_size(out.size());
    }
    return Value(std::move(out));
}

Value bind(const Value& self, const std::string& name, Value (*fn)(Interpreter&, const Value&, Args&)) {
    return Value::callable(name, [self, fn](Interpreter& in, Args& a) { return fn(in, self, a); });
}

// --- str ----------------------------------------------------------------------------------------

Value s_upper(Interpreter&, const Value& s, Args&) { return Value(pystr::upper(s.str())); }
Value s_lower(Interpreter&, const Value& s, Args&) { return Value(pystr::lower(s.str())); }
Value s_title(Interpreter&, const Value& s, Args&) { return Value(pystr::title(s.str())); }
Value s_capitalize(Interpreter&, const Value& s, Args&) { return Value(pystr::capitalize(s.str())); }
Value s_strip(Interpreter&, const Value& s, Args& a) {
    return Value(pystr::strip(s.str(), opt_str(arg(a, 0, "chars", Value::none())), true, true));
}
Value s_lstrip(Interpreter&, const Value& s, Args& a) {
    return Value(pystr::strip(s.str(), opt_str(arg(a, 0, "chars", Value::none())), true, false));
}
Value s_rstrip(Interpreter&, const Value& s, Args& a) {
    return Value(pystr::strip(s.str(), opt_str(arg(a, 0, "chars", Value::none())), false, true));
}

Value split_impl(Interpreter& in, const Value& s, Args& a, bool right) {
    const std::optional<std::string> sep = opt_str(arg(a, 0, "sep", Value::none()));
    if (sep && sep->empty()) throw Error("empty separator");
    const int64_t maxsplit = opt_int(arg(a, 1, "maxsplit", Value::none()), -1);
    std::vector<std::string> parts =
        right ? pystr::rsplit(s.str(), sep, maxsplit) : pystr::split(s.str(), sep, maxsplit);
    in.step(parts.size() / 16);
    return str_list(parts);
}
Value s_split(Interpreter& in, const Value& s, Args& a) { return split_impl(in, s, a, false); }
Value s_rsplit(Interpreter& in, const Value& s, Args& a) { return split_impl(in, s, a, true); }
Value s_splitlines(Interpreter&, const Value& s, Args& a) {
    return str_list(pystr::splitlines(s.str(), arg(a, 0, "keepends", Value(false)).truthy()));
}
Value s_startswith(Interpreter&, const Value& s, Args& a) {
    return Value(affix(s.str(), arg(a, 0, "prefix"), a, true));
}
Value s_endswith(Interpreter&, const Value& s, Args& a) { return Value(affix(s.str(), arg(a, 0, "suffix"), a, false)); }
Value s_replace(Interpreter& in, const Value& s, Args& a) {
    const std::optional<std::string> old = opt_str(arg(a, 0, "old")), repl = opt_str(arg(a, 1, "new"));
    if (!old || !repl) throw Error("replace() takes two strings");
    std::string out = pystr::replace(s.str(), *old, *repl, opt_int(arg(a, 2, "count", Value::none()), -1));
    in.check_size(out.size());
    return Value(std::move(out));
}

// find / rfind / index / count over s[start:end].
Value search(const Value& s, Args& a, const char* what) {
    const std::optional<std::string> sub = opt_str(arg(a, 0, "sub"));
    if (!sub) throw Error(std::string(what) + "() needs a string");
    std::vector<uint32_t> cps = pystr::decode(s.str());
    const auto n = int64_t(cps.size());
    auto norm = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
    const int64_t b = norm(opt_int(arg(a, 1, "start", Value::none()), 0));
    const int64_t e = norm(opt_int(arg(a, 2, "end", Value::none()), n));
    const std::string hay = b < e ? pystr::encode(cps, size_t(b), size_t(e)) : std::string();
    const std::string w = what;
    if (w == "count") return Value(b > e ? int64_t(0) : pystr::count(hay, *sub));
    if (b > e) return Value(int64_t(-1));
    const int64_t at = pystr::find(hay, *sub, w == "rfind" || w == "rindex");
    if (at < 0 && (w == "index" || w == "rindex")) throw Error("substring not found");
    return Value(at < 0 ? at : at + b);
}
Value s_find(Interpreter&, const Value& s, Args& a) { return search(s, a, "find"); }
Value s_rfind(Interpreter&, const Value& s, Args& a) { return search(s, a, "rfind"); }
Value s_index(Interpreter&, const Value& s, Args& a) { return search(s, a, "index"); }
Value s_count(Interpreter&, const Value& s, Args& a) { return search(s, a, "count"); }

Value s_join(Interpreter& in, const Value& s, Args& a) {
    std::string out;
    bool first = true;
    for (const Value& item : in.iterate(arg(a, 0, "iterable"))) {
        if (!item.is_string()) throw Error("sequence item: expected str instance, " + item.type_name() + " found");
        if (!first) out += s.str();
        first = false;
        out += item.str();
        in.check_size(out.size());
    }
    return Value(std::move(out));
}

Value s_format(Interpreter& in, const Value& s, Args& a) { return str_format(in, s.str(), a); }

template <bool (*Pred)(uint32_t)>
Value s_is(Interpreter&, const Value& s, Args&) {
    const std::vector<uint32_t> cps = pystr::decode(s.str());
    if (cps.empty()) return Value(false);
    for (uint32_t c : cps)
        if (!Pred(c)) return Value(false);
    return Value(true);
}
Value s_islower(Interpreter&, const Value& s, Args&) {
    return Value(pystr::lower(s.str()) == s.str() && pystr::upper(s.str()) != s.str());
}
Value s_isupper(Interpreter&, const Value& s, Args&) {
    return Value(pystr::upper(s.str()) == s.str() && pystr::lower(s.str()) != s.str());
}
Value s_removeprefix(Interpreter&, const Value& s, Args& a) {
    const std::string p = arg(a, 0, "prefix").to_str();
    return Value(s.str().compare(0, p.size(), p) == 0 ? s.str().substr(p.size()) : s.str());
}
Value s_removesuffix(Interpreter&, const Value& s, Args& a) {
    const std::string p = arg(a, 0, "suffix").to_str();
    const std::string& t = s.str();
    return Value(!p.empty() && t.size() >= p.size() && t.compare(t.size() - p.size(), p.size(), p) == 0
                     ? t.substr(0, t.size() - p.size())
                     : t);
}

// --- dict and list ----------------------------------------------------------------------------

Value d_items(Interpreter&, const Value& d, Args&) {
    std::vector<Value> out;
    for (const auto& [k, v] : d.dict_obj().items) out.push_back(Value::list({k, v}, true));
    return Value::list(std::move(out));
}
Value d_keys(Interpreter&, const Value& d, Args&) {
    std::vector<Value> out;
    for (const auto& kv : d.dict_obj().items) out.push_back(kv.first);
    return Value::list(std::move(out));
}
Value d_values(Interpreter&, const Value& d, Args&) {
    std::vector<Value> out;
    for (const auto& kv : d.dict_obj().items) out.push_back(kv.second);
    return Value::list(std::move(out));
}
Value d_get(Interpreter&, const Value& d, Args& a) {
    if (a.pos.empty()) throw Error("get expected at least 1 argument, got 0");
    if (const Value* v = d.dict_obj().find(a.pos[0])) return *v;
    return a.pos.size() > 1 ? a.pos[1] : Value::none();
}
Value d_copy(Interpreter&, const Value& d, Args&) {
    Value c = Value::dict();
    c.dict_obj() = d.dict_obj();
    return c;
}

Value l_append(Interpreter& in, const Value& l, Args& a) {
    if (a.pos.size() != 1) throw Error("append() takes exactly one argument");
    in.step();
    in.check_items(l.items().size() + 1);
    l.items().push_back(a.pos[0]);
    in.note_mutation(l);
    return Value::none();
}
Value l_index(Interpreter&, const Value& l, Args& a) {
    const Value x = arg(a, 0, "value");
    for (size_t i = 0; i < l.items().size(); ++i)
        if (equals(l.items()[i], x)) return Value(int64_t(i));
    throw Error(x.repr() + " is not in list");
}
Value l_count(Interpreter&, const Value& l, Args& a) {
    const Value x = arg(a, 0, "value");
    int64_t n = 0;
    for (const Value& v : l.items()) n += equals(v, x);
    return Value(n);
}

using Method = Value (*)(Interpreter&, const Value&, Args&);

}  // namespace

std::optional<Value> find_method(const Value& obj, const std::string& name) {
    static const std::unordered_map<std::string, Method> str_methods = {
        {"upper", s_upper},
        {"lower", s_lower},
        {"title", s_title},
        {"capitalize", s_capitalize},
        {"strip", s_strip},
        {"lstrip", s_lstrip},
        {"rstrip", s_rstrip},
        {"split", s_split},
        {"rsplit", s_rsplit},
        {"splitlines", s_splitlines},
        {"startswith", s_startswith},
        {"endswith", s_endswith},
        {"replace", s_replace},
        {"find", s_find},
        {"rfind", s_rfind},
        {"index", s_index},
        {"count", s_count},
        {"join", s_join},
        {"format", s_format},
        {"isdigit", s_is<pystr::is_digit>},
        {"isalpha", s_is<pystr::is_alpha>},
        {"isalnum", s_is<pystr::is_alnum>},
        {"isspace", s_is<pystr::is_space>},
        {"islower", s_islower},
        {"isupper", s_isupper},
        {"removeprefix", s_removeprefix},
        {"removesuffix", s_removesuffix},
    };
    static const std::unordered_map<std::string, Method> dict_methods = {
        {"items", d_items}, {"keys", d_keys}, {"values", d_values}, {"get", d_get}, {"copy", d_copy},
    };
    static const std::unordered_map<std::string, Method> list_methods = {
        {"append", l_append},
        {"index", l_index},
        {"count", l_count},
    };
    // Markup's str methods return Markup (and markupsafe escapes their string arguments; the
    // methods templates use on safe strings take none that matter).
    static const std::unordered_set<std::string> keeps_markup = {"upper", "lower",  "title",  "capitalize",
                                                                 "strip", "lstrip", "rstrip", "replace"};
    if (obj.is_markup() && keeps_markup.count(name)) {
        const Method m = str_methods.at(name);
        return Value::callable(name, [obj, m](Interpreter& in, Args& a) {
            Value r = m(in, obj, a);
            return Value::markup(r.str());
        });
    }
    const std::unordered_map<std::string, Method>* table = obj.is_string() ? &str_methods
                                                           : obj.is_dict() ? &dict_methods
                                                           : (obj.is_list() && !obj.is_tuple() && !obj.is_generator())
                                                               ? &list_methods
                                                               : nullptr;
    if (obj.is_tuple()) {
        if (name == "index") return bind(obj, name, l_index);
        if (name == "count") return bind(obj, name, l_count);
    }
    if (!table) return std::nullopt;
    auto it = table->find(name);
    if (it == table->end()) return std::nullopt;
    return bind(obj, name, it->second);
}

Value py_mod_format(Interpreter& in, const std::string& fmt, const Value& args, bool markup) {
    // Python: a tuple gives the positional values; a dict serves %(name)s; anything else is the
    // one value.
    std::vector<Value> values;
    if (args.is_tuple())
        values = args.items();
    else
        values.push_back(args);
    size_t next = 0;
    bool used_mapping = false;
    std::string out;
    for (size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%') {
            out += fmt[i];
            continue;
        }
        if (++i >= fmt.size()) throw Error("incomplete format");
        Value v;
        bool have = false;
        if (fmt[i] == '(') {
            const size_t close = fmt.find(')', i);
            if (close == std::string::npos) throw Error("incomplete format key");
            if (!args.is_dict()) throw Error("format requires a mapping");
            const Value* found = args.dict_obj().find(Value(fmt.substr(i + 1, close - i - 1)));
            if (!found) throw Error("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
            v = *found;
            have = true;
            used_mapping = true;
            i = close + 1;
        }
        std::string flags;
        while (i < fmt.size() && std::strchr("-+ #0", fmt[i])) flags += fmt[i++];
        std::string width, precision;
        while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') width += fmt[i++];
        if (i < fmt.size() && fmt[i] == '.') {
            precision = ".";
            ++i;
            while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') precision += fmt[i++];
        }
        while (i < fmt.size() && (fmt[i] == 'l' || fmt[i] == 'h' || fmt[i] == 'L')) ++i;
        if (i >= fmt.size()) throw Error("incomplete format");
        const char type = fmt[i];
        if (type == '%') {
            out += '%';
            continue;
        }
        if (width.size() > 6 || precision.size() > 4) throw Error("format width or precision too large");
        if (!have) {
            if (next >= values.size()) throw Error("not enough arguments for format string");
            v = values[next++];
        }
        if (v.is_undefined() && type != 's') throw Error(v.undefined_hint());
        char buf[512];
        std::string text;
        const std::string spec = "%" + flags + width + precision;
        switch (type) {
            case 's':
            case 'r':
            case 'a': {
                text = type == 's' ? v.to_str() : v.repr();
                if (markup && !(type == 's' && v.is_markup())) text = html_escape(text);
                if (precision.size() > 1) {
                    std::vector<uint32_t> cps = pystr::decode(text);
                    const size_t p = size_t(std::atoi(precision.c_str() + 1));
                    if (cps.size() > p) text = pystr::encode(cps, 0, p);
                }
                const auto w = size_t(width.empty() ? 0 : std::atoi(width.c_str()));
                const size_t len = pystr::length(text);
                if (w > len) {
                    const std::string pad(w - len, ' ');
                    text = flags.find('-') != std::string::npos ? text + pad : pad + text;
                }
                break;
            }
            case 'd':
            case 'i':
            case 'u': {
                if (!v.is_number())
                    throw Error("%" + std::string(1, type) + " format: a real number is required, not " +
                                v.type_name());
                const double f = v.as_float();
                if (v.is_float() && (!std::isfinite(f) || std::fabs(f) > 9e18))
                    throw Error("cannot convert float to integer");
                const long long x = v.is_float() ? (long long)f : (long long)v.as_int();
                std::snprintf(buf, sizeof buf, (spec + "lld").c_str(), x);
                text = buf;
                break;
            }
            case 'x':
            case 'X':
            case 'o': {
                if (!v.is_int() && !v.is_bool()) throw Error("%x format: an integer is required, not " + v.type_name());
                const long long x = v.as_int();
                std::snprintf(buf, sizeof buf, (spec + "ll" + type).c_str(),
                              x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x);
                text = x < 0 ? "-" + std::string(buf) : std::string(buf);
                break;
            }
            case 'f':
            case 'F':
            case 'e':
            case 'E':
            case 'g':
            case 'G': {
                if (!v.is_number()) throw Error("must be real number, not " + v.type_name());
                std::snprintf(buf, sizeof buf, (spec + type).c_str(), v.as_float());
                text = buf;
                break;
            }
            case 'c': {
                if (v.is_string() && pystr::length(v.str()) == 1)
                    text = v.str();
                else if (v.is_int() && v.as_int() >= 0 && v.as_int() <= 0x10FFFF)
                    pystr::append_utf8(text, uint32_t(v.as_int()));
                else
                    throw Error("%c requires int or char");
                break;
            }
            default: throw Error(std::string("unsupported format character '") + type + "'");
        }
        out += text;
        in.check_size(out.size());
    }
    if (!used_mapping && next < values.size() && !(values.size() == 1 && args.is_dict()))
        throw Error("not all arguments converted during string formatting");
    return markup ? Value::markup(std::move(out)) : Value(std::move(out));
}

}  // namespace vkllm::chat_template::jinja
