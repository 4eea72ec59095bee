#include "serving/chat_template/jinja/value.h"

#include "serving/chat_template/jinja/pystr.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace vkllm::chat_template::jinja {

namespace {

// A list may contain itself (`l.append(l)`), and a few shared lists nested a few levels deep
// print exponentially long: printing, JSON and comparison stop at a depth and a size.
constexpr int kMaxValueDepth = 128;

thread_local size_t t_max_text = size_t(64) << 20;

void check_depth(int depth) {
    if (depth > kMaxValueDepth)
        throw Error("a value nested more than 128 levels deep (a list or dict that contains itself?)");
}

void check_text(const std::string& out) {
    if (out.size() > t_max_text)
        throw Error("a value's text is larger than the output limit (" + std::to_string(t_max_text) + " bytes)");
}

void repr_into(std::string& out, const Value& v, int depth);

void str_into(std::string& out, const Value& v, int depth) {
    switch (v.kind()) {
        case Kind::Undefined: return;
        case Kind::String: out += v.str(); return;
        default: repr_into(out, v, depth);
    }
}

void repr_into(std::string& out, const Value& v, int depth) {
    check_depth(depth);
    check_text(out);
    switch (v.kind()) {
        case Kind::Undefined: out += "Undefined"; return;
        case Kind::None: out += "None"; return;
        case Kind::Bool: out += v.as_bool() ? "True" : "False"; return;
        case Kind::Int: out += std::to_string(v.as_int()); return;
        case Kind::Float: out += format_float(v.as_float()); return;
        case Kind::String: out += quote_string(v.str()); return;
        case Kind::List: {
            if (v.is_generator()) {
                out += "<generator object>";
                return;
            }
            const bool tuple = v.is_tuple();
            out += tuple ? '(' : '[';
            const auto& items = v.items();
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += ", ";
                repr_into(out, items[i], depth + 1);
            }
            if (tuple && items.size() == 1) out += ',';
            out += tuple ? ')' : ']';
            return;
        }
        case Kind::Dict:
        case Kind::Namespace: {
            if (v.is_namespace()) out += "<Namespace ";
            out += '{';
            bool first = true;
            for (const auto& [k, val] : v.dict_obj().items) {
                if (!first) out += ", ";
                first = false;
                repr_into(out, k, depth + 1);
                out += ": ";
                repr_into(out, val, depth + 1);
            }
            out += '}';
            if (v.is_namespace()) out += '>';
            return;
        }
        case Kind::Callable: out += "<function " + v.callable_obj().name + ">"; return;
        case Kind::Loop: out += "<LoopContext>"; return;
    }
}

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    out += '"';
    auto hex4 = [&](uint32_t u) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(u & 0xFFFF));
        out += buf;
    };
    if (!ensure_ascii) {
        for (char ch : s) {
            const auto c = uint8_t(ch);
            switch (c) {
                case '"': out += "\\\""; break;
                case '\\': out += "\\\\"; break;
                case '\n': out += "\\n"; break;
                case '\r': out += "\\r"; break;
                case '\t': out += "\\t"; break;
                case '\b': out += "\\b"; break;
                case '\f': out += "\\f"; break;
                default:
                    if (c < 0x20)
                        hex4(c);
                    else
                        out += ch;
            }
        }
    } else {
        for (uint32_t cp : pystr::decode(s)) {
            switch (cp) {
                case '"': out += "\\\""; break;
                case '\\': out += "\\\\"; break;
                case '\n': out += "\\n"; break;
                case '\r': out += "\\r"; break;
                case '\t': out += "\\t"; break;
                case '\b': out += "\\b"; break;
                case '\f': out += "\\f"; break;
                default:
                    if (cp >= 0x20 && cp < 0x7F) {
                        out += char(cp);
                    } else if (cp < 0x10000) {
                        hex4(cp);
                    } else {
                        const uint32_t u = cp - 0x10000;
                        hex4(0xD800 + (u >> 10));
                        hex4(0xDC00 + (u & 0x3FF));
                    }
            }
        }
    }
    out += '"';
}

std::string json_key(const Value& k) {
    switch (k.kind()) {
        case Kind::String: return k.str();
        case Kind::Bool: return k.as_bool() ? "true" : "false";
        case Kind::None: return "null";
        case Kind::Int: return std::to_string(k.as_int());
        case Kind::Float: return format_float(k.as_float());
        default: throw Error("keys must be str, int, float, bool or None, not " + k.type_name());
    }
}

void json_into(std::string& out, const Value& v, const JsonStyle& st, int depth) {
    check_depth(depth);
    check_text(out);
    auto newline = [&](int level) {
        out += '\n';
        for (int i = 0; i < level; ++i) out += st.indent_unit;
    };
    switch (v.kind()) {
        case Kind::None: out += "null"; return;
        case Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
        case Kind::Int: out += std::to_string(v.as_int()); return;
        case Kind::Float: {
            const double f = v.as_float();
            if (std::isnan(f))
                out += "NaN";
            else if (std::isinf(f))
                out += f > 0 ? "Infinity" : "-Infinity";
            else
                out += format_float(f);
            return;
        }
        case Kind::String: json_string(out, v.str(), st.ensure_ascii); return;
        case Kind::List: {
            if (v.is_generator()) throw Error("Object of type generator is not JSON serializable");
            const auto& items = v.items();
            if (items.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += st.item_sep;
                if (st.pretty) newline(depth + 1);
                json_into(out, items[i], st, depth + 1);
            }
            if (st.pretty) newline(depth);
            out += ']';
            return;
        }
        case Kind::Dict: {
            std::vector<const std::pair<Value, Value>*> items;
            for (const auto& kv : v.dict_obj().items) items.push_back(&kv);
            if (items.empty()) {
                out += "{}";
                return;
            }
            if (st.sort_keys)
                std::stable_sort(items.begin(), items.end(),
                                 [](const auto* a, const auto* b) { return compare(a->first, b->first) < 0; });
            out += '{';
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += st.item_sep;
                if (st.pretty) newline(depth + 1);
                json_string(out, json_key(items[i]->first), st.ensure_ascii);
                out += st.key_sep;
                json_into(out, items[i]->second, st, depth + 1);
            }
            if (st.pretty) newline(depth);
            out += '}';
            return;
        }
        default: {
            std::string type = v.is_undefined() ? "Undefined" : v.is_namespace() ? "Namespace" : v.type_name();
            throw Error("Object of type " + type + " is not JSON serializable");
        }
    }
}

bool equals_at(const Value& a, const Value& b, int depth) {
    check_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
        return a.as_int() == b.as_int();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Kind::Undefined:
        case Kind::None: return true;
        case Kind::String: return a.str() == b.str();
        case Kind::List: {
            if (a.is_tuple() != b.is_tuple()) return false;
            const auto &x = a.items(), &y = b.items();
            if (x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!equals_at(x[i], y[i], depth + 1)) return false;
            return true;
        }
        case Kind::Dict: {
            const DictObj &x = a.dict_obj(), &y = b.dict_obj();
            if (x.items.size() != y.items.size()) return false;
            for (const auto& [k, v] : x.items) {
                const Value* other = y.find(k);
                if (!other || !equals_at(v, *other, depth + 1)) return false;
            }
            return true;
        }
        default: return a.same_object(b);
    }
}

int compare_at(const Value& a, const Value& b, int depth) {
    check_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) {
            const double x = a.as_float(), y = b.as_float();
            return x < y ? -1 : x > y ? 1 : 0;
        }
        const int64_t x = a.as_int(), y = b.as_int();
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) {
        const int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        const auto &x = a.items(), &y = b.items();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (equals_at(x[i], y[i], depth + 1)) continue;
            return compare_at(x[i], y[i], depth + 1);
        }
        return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    throw Error("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace

void set_max_text_bytes(size_t n) { t_max_text = n; }
size_t max_text_bytes() { return t_max_text; }

Value Value::undefined(std::string hint) {
    Value v;
    v.s_ = std::make_shared<const std::string>(std::move(hint));
    return v;
}

Value Value::none() {
    Value v;
    v.kind_ = Kind::None;
    return v;
}

Value::Value(bool b) : kind_(Kind::Bool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::Int), i_(i) {}
Value::Value(double f) : kind_(Kind::Float), f_(f) {}
Value::Value(std::string s) : kind_(Kind::String), s_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::markup(std::string s) {
    Value v(std::move(s));
    v.b_ = true;  // b_ is unused by strings otherwise
    return v;
}

std::string html_escape(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

Value Value::list(std::vector<Value> items, bool tuple) {
    Value v;
    v.kind_ = Kind::List;
    auto obj = std::make_shared<ListObj>();
    obj->items = std::move(items);
    obj->tuple = tuple;
    v.obj_ = std::move(obj);
    return v;
}

Value Value::dict() {
    Value v;
    v.kind_ = Kind::Dict;
    v.obj_ = std::make_shared<DictObj>();
    return v;
}

Value Value::namespace_obj() {
    Value v;
    v.kind_ = Kind::Namespace;
    v.obj_ = std::make_shared<DictObj>();
    return v;
}

Value Value::callable(std::string name, std::function<Value(Interpreter&, Args&)> fn) {
    Value v;
    v.kind_ = Kind::Callable;
    v.obj_ = std::make_shared<CallableObj>(CallableObj{std::move(name), std::move(fn)});
    return v;
}

Value Value::loop(std::shared_ptr<LoopObj> loop) {
    Value v;
    v.kind_ = Kind::Loop;
    v.obj_ = std::move(loop);
    return v;
}

Value Value::from_json(const nlohmann::ordered_json& j, uint32_t max_depth) {
    using T = nlohmann::ordered_json::value_t;
    if ((j.is_array() || j.is_object()) && max_depth == 0)
        throw Error("the template's input data is nested too deeply", 0);
    switch (j.type()) {
        case T::null: return none();
        case T::boolean: return Value(j.get<bool>());
        case T::number_integer: return Value(j.get<int64_t>());
        case T::number_unsigned: {
            const uint64_t u = j.get<uint64_t>();
            if (u <= uint64_t(std::numeric_limits<int64_t>::max())) return Value(int64_t(u));
            return Value(double(u));
        }
        case T::number_float: return Value(j.get<double>());
        case T::string: return Value(j.get<std::string>());
        case T::array: {
            std::vector<Value> items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(from_json(e, max_depth - 1));
            return list(std::move(items));
        }
        case T::object: {
            Value d = dict();
            for (const auto& [k, e] : j.items()) d.dict_obj().set(Value(k), from_json(e, max_depth - 1));
            return d;
        }
        default: return none();  // binary / discarded: not produced by parsing JSON text
    }
}

bool Value::is_tuple() const { return kind_ == Kind::List && list_obj().tuple; }
bool Value::is_generator() const { return kind_ == Kind::List && list_obj().generator; }

Value Value::generator(std::vector<Value> items) {
    Value v = list(std::move(items));
    v.list_obj().generator = true;
    return v;
}
double Value::as_float() const { return kind_ == Kind::Float ? f_ : double(as_int()); }
ListObj& Value::list_obj() const { return *static_cast<ListObj*>(obj_.get()); }
std::vector<Value>& Value::items() const { return list_obj().items; }
DictObj& Value::dict_obj() const { return *static_cast<DictObj*>(obj_.get()); }
CallableObj& Value::callable_obj() const { return *static_cast<CallableObj*>(obj_.get()); }
LoopObj& Value::loop_obj() const { return *static_cast<LoopObj*>(obj_.get()); }

const std::string& Value::undefined_hint() const {
    static const std::string none = "value is undefined";
    return s_ ? *s_ : none;
}

bool Value::truthy() const {
    switch (kind_) {
        case Kind::Undefined:
        case Kind::None: return false;
        case Kind::Bool: return b_;
        case Kind::Int: return i_ != 0;
        case Kind::Float: return f_ != 0;
        case Kind::String: return !s_->empty();
        case Kind::List: return is_generator() || !items().empty();
        case Kind::Dict: return !dict_obj().items.empty();
        default: return true;
    }
}

std::string Value::to_str() const {
    if (kind_ == Kind::String) return *s_;
    std::string out;
    str_into(out, *this, 0);
    check_text(out);
    return out;
}

std::string Value::repr() const {
    std::string out;
    repr_into(out, *this, 0);
    check_text(out);
    return out;
}

std::string Value::type_name() const {
    switch (kind_) {
        case Kind::Undefined: return "Undefined";
        case Kind::None: return "NoneType";
        case Kind::Bool: return "bool";
        case Kind::Int: return "int";
        case Kind::Float: return "float";
        case Kind::String: return "str";
        case Kind::List: return is_generator() ? "generator" : is_tuple() ? "tuple" : "list";
        case Kind::Dict: return "dict";
        case Kind::Namespace: return "Namespace";
        case Kind::Callable: return "function";
        case Kind::Loop: return "LoopContext";
    }
    return "object";
}

bool Value::same_object(const Value& o) const {
    if (kind_ != o.kind_) return false;
    switch (kind_) {
        case Kind::Undefined:
        case Kind::None: return true;
        case Kind::Bool: return b_ == o.b_;
        case Kind::Int: return i_ == o.i_;
        case Kind::Float: return f_ == o.f_;
        case Kind::String: return s_ == o.s_ || *s_ == *o.s_;
        default: return obj_ == o.obj_;
    }
}

const Value* DictObj::find(const Value& key) const {
    auto it = index.find(hash_key(key));
    return it == index.end() ? nullptr : &items[it->second].second;
}

void DictObj::set(const Value& key, Value v) {
    auto [it, inserted] = index.emplace(hash_key(key), items.size());
    if (inserted)
        items.emplace_back(key, std::move(v));
    else
        items[it->second].second = std::move(v);
}

std::string DictObj::hash_key(const Value& key) {
    switch (key.kind()) {
        case Kind::String: return "s" + key.str();
        case Kind::Bool:
        case Kind::Int: return "n" + std::to_string(key.as_int());
        case Kind::Float: {
            const double f = key.as_float();
            if (f == std::floor(f) && std::fabs(f) < 9e18) return "n" + std::to_string(int64_t(f));
            return "f" + format_float(f);
        }
        case Kind::None: return "N";
        case Kind::Undefined: return "U";
        case Kind::List:
            if (key.is_tuple()) {
                std::string h = "t(";
                for (const Value& e : key.items()) h += hash_key(e) + "\x1f";
                return h + ")";
            }
            [[fallthrough]];
        default: throw Error("unhashable type: '" + key.type_name() + "'");
    }
}

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }
int compare(const Value& a, const Value& b) { return compare_at(a, b, 0); }

std::string format_float(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
    // The shortest digits that read back to f (what Python's repr picks), placed as Python does:
    // positional for exponents -4..15, scientific with at least two exponent digits otherwise.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    const size_t e = sci.find('e');
    std::string mant = sci.substr(0, e);
    const int exp = std::stoi(sci.substr(e + 1));
    std::string sign;
    if (mant[0] == '-') {
        sign = "-";
        mant.erase(0, 1);
    }
    std::string digits;
    for (char c : mant)
        if (c != '.') digits += c;
    if (exp < -4 || exp >= 16) {
        std::string out = sign + digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char eb[16];
        std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
        return out + eb;
    }
    if (exp < 0) return sign + "0." + std::string(size_t(-exp - 1), '0') + digits;
    const size_t int_digits = size_t(exp) + 1;
    if (digits.size() <= int_digits) return sign + digits + std::string(int_digits - digits.size(), '0') + ".0";
    return sign + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

std::string quote_string(const std::string& s) {
    const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
    const char q = (has_single && !has_double) ? '"' : '\'';
    std::string out(1, q);
    for (uint32_t cp : pystr::decode(s)) {
        if (cp == uint32_t(q) || cp == '\\') {
            out += '\\';
            out += char(cp);
            continue;
        }
        if (cp == '\n') {
            out += "\\n";
            continue;
        }
        if (cp == '\r') {
            out += "\\r";
            continue;
        }
        if (cp == '\t') {
            out += "\\t";
            continue;
        }
        // Python escapes what it does not consider printable: controls, separators other than
        // the space, format characters, and (here) the escaped invalid bytes.
        const bool unprintable = cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD ||
                                 (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
                                 (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
                                 (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x1680;
        if (!unprintable) {
            pystr::append_utf8(out, cp);
            continue;
        }
        char buf[16];
        if (cp >= 0xDC80 && cp <= 0xDCFF)
            std::snprintf(buf, sizeof buf, "\\udc%02x", unsigned(cp - 0xDC00));
        else if (cp < 0x100)
            std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(cp));
        else
            std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
        out += buf;
    }
    out += q;
    return out;
}

std::string to_json(const Value& v, const JsonStyle& style) {
    std::string out;
    json_into(out, v, style, 0);
    check_text(out);
    return out;
}

}  // namespace vkllm::chat_template::jinja
