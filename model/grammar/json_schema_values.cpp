#include "model/grammar/json_schema_compiler.h"

#include "model/grammar/json_schema_numbers.h"
#include "model/grammar/json_schema_pattern.h"
#include "model/tokenizer/utf8.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>

namespace vkllm::grammar::detail {

// A JSON value written out, with the whitespace the grammar allows between its tokens.
std::string Compiler::literal(const Json& v) {
    if (v.is_object()) {
        if (v.empty()) return "\"{\" space \"}\"";
        std::vector<std::string> kv;
        for (const auto& [k, x] : v.items()) kv.push_back(json_string_lit(k) + " space \":\" space " + literal(x));
        return "\"{\" space " + join(kv, " space \",\" space ") + " space \"}\"";
    }
    if (v.is_array()) {
        if (v.empty()) return "\"[\" space \"]\"";
        std::vector<std::string> items;
        for (const Json& x : v) items.push_back(literal(x));
        return "\"[\" space " + join(items, " space \",\" space ") + " space \"]\"";
    }
    return lit(v.dump());
}

bool Compiler::has_type(const Json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer")
        return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    return false;
}

std::string Compiler::enumeration(const Json& s, const std::string& where) {
    const auto others = constraints(s, {"enum", "const", "type"});
    if (!others.empty())
        refuse(others[0], where, fmt::format("'{}' beside 'enum' or 'const' is not supported", others[0]));
    std::vector<Json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
        if (!s["enum"].is_array()) refuse("enum", where, "'enum' must be a list");
        if (s.contains("const")) {
            if (std::none_of(s["enum"].begin(), s["enum"].end(),
                             [&](const Json& v) { return same_value(v, s["const"]); }))
                values.clear();
        } else {
            for (const Json& v : s["enum"]) values.push_back(v);
        }
    }
    if (s.contains("type")) {
        std::vector<std::string> types;
        if (s["type"].is_string())
            types.push_back(s["type"]);
        else if (s["type"].is_array())
            for (const Json& t : s["type"]) types.push_back(t.is_string() ? t.get<std::string>() : "");
        values.erase(std::remove_if(values.begin(), values.end(),
                                    [&](const Json& v) {
                                        return std::none_of(types.begin(), types.end(),
                                                            [&](const std::string& t) { return has_type(v, t); });
                                    }),
                     values.end());
    }
    if (values.empty()) refuse(s.contains("enum") ? "enum" : "const", where, "no value satisfies 'enum' / 'const'");
    std::vector<std::string> alts;
    for (const Json& v : values) alts.push_back(literal(v));
    return alts.size() == 1 ? alts[0] : "(" + join(alts, " | ") + ")";
}

// Keys that are not in `names`, however written: a trie over the names' code points; at each
// node the key may end (unless a name ends there), go on with a child (in the form JSON
// writes it), or leave the trie with any other character and then continue freely. Escapes
// that could spell a child are not a way out: \u escapes are allowed for control characters
// only (names with control characters are refused), and \" \\ \/ only where that character is
// not a child.
std::string Compiler::key_not_in(const std::vector<std::string>& names, const std::string& where) {
    struct Node {
        std::map<char32_t, size_t> next;
        bool end = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& n : names) {
        size_t cur = 0;
        std::vector<uint32_t> cps;  // a parsed JSON string: valid UTF-8
        utf8::decode_lenient(n, cps);
        for (const char32_t c : cps) {
            if (c < 0x20) refuse("properties", where, "property names with control characters are not supported");
            auto it = trie[cur].next.find(c);
            if (it == trie[cur].next.end()) {
                trie.push_back({});
                it = trie[cur].next.emplace(c, trie.size() - 1).first;
            }
            cur = it->second;
        }
        trie[cur].end = true;
    }
    auto hex = [](uint32_t cp) { return cp <= 0xffff ? fmt::format("\\u{:04X}", cp) : fmt::format("\\U{:08X}", cp); };
    std::vector<std::string> names_of(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) names_of[i] = rules_.add("key-other", "");
    for (size_t i = 0; i < trie.size(); ++i) {
        std::vector<std::string> alts;
        if (!trie[i].end) alts.push_back("\"\\\"\"");
        std::string excluded, escapes = "bfnrt";
        for (const auto& [c, child] : trie[i].next) {
            alts.push_back(json_char(uint32_t(c)) + " " + names_of[child]);
            excluded += hex(uint32_t(c));
        }
        for (const char e : {'"', '\\', '/'})
            if (!trie[i].next.count(char32_t(e))) escapes += e == '"' ? "\\\"" : e == '\\' ? "\\\\" : "/";
        alts.push_back("([^\"\\\\\\x00-\\x1F" + excluded + "] | \"\\\\\" ([" + escapes +
                       "] | \"u00\" [01] [0-9a-fA-F])) char* \"\\\"\"");
        rules_.body(names_of[i]) = join(alts, " | ");
    }
    return "\"\\\"\" " + names_of[0];
}

std::string Compiler::object(const Json& s, const std::string& where, size_t depth) {
    const Json empty = Json::object();
    const Json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) refuse("properties", where, "'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
        if (!s["required"].is_array()) refuse("required", where, "'required' must be a list");
        for (const Json& r : s["required"]) {
            if (!r.is_string()) refuse("required", where, "'required' must list strings");
            required.insert(r.get<std::string>());
        }
    }
    struct Prop {
        std::string kv;
        bool required;
    };
    std::vector<Prop> list;
    std::vector<std::string> names;
    for (const auto& [name, ps] : props.items()) {
        names.push_back(name);
        const std::string w = where + "/properties/" + name;
        if (ps.is_boolean() && !ps.get<bool>()) {
            if (required.count(name))
                refuse("required", where, fmt::format("property '{}' is required but its schema is false", name));
            continue;
        }
        const std::string value = compile(ps, w, depth + 1);
        list.push_back({json_string_lit(name) + " space \":\" space " + value, required.count(name) > 0});
    }
    // A required key without a schema of its own is an additional property: its value follows
    // additionalProperties, and with additionalProperties false nothing is valid.
    std::string extra_value = "value";
    if (s.contains("additionalProperties") && s["additionalProperties"].is_object())
        extra_value = compile(s["additionalProperties"], where + "/additionalProperties", depth + 1);
    for (const std::string& r : required)
        if (!props.contains(r)) {
            if (s.contains("additionalProperties") && s["additionalProperties"] == false)
                refuse("required", where,
                       fmt::format("'{}' is required but additionalProperties is false and it is "
                                   "not in properties: nothing is valid",
                                   r));
            list.push_back({json_string_lit(r) + " space \":\" space " + extra_value, true});
            names.push_back(r);
        }
    // Additional properties: keys other than the named ones.
    std::string extra;
    if (!s.contains("additionalProperties") || s["additionalProperties"] == true) {
        extra = key_not_in(names, where) + " space \":\" space value";
    } else if (s["additionalProperties"].is_object()) {
        extra = key_not_in(names, where) + " space \":\" space " + extra_value;
    } else if (!s["additionalProperties"].is_boolean()) {
        refuse("additionalProperties", where, "'additionalProperties' must be a boolean or a schema");
    }
    if (!extra.empty()) extra = rules_.add("kv-extra", extra);
    // first(i): properties i.. with nothing written before; after(i): with a comma before each.
    const std::string sep = " space \",\" space ";
    const size_t n = list.size();
    std::vector<std::string> first(n + 1), after(n + 1);
    after[n] = extra.empty() ? "" : "(" + sep + extra + ")*";
    first[n] = extra.empty() ? "" : "(" + extra + after[n] + ")?";
    for (size_t i = n; i-- > 0;) {
        const std::string kv = rules_.add("kv", list[i].kv);
        const std::string rest_after = after[i + 1].empty() ? "" : " " + after[i + 1];
        std::string a = "\",\" space " + kv + rest_after;
        a = "space " + a;
        std::string f = kv + rest_after;
        if (list[i].required) {
            after[i] = "(" + a + ")";
            first[i] = "(" + f + ")";
        } else {
            after[i] =
                "(" + a + (after[i + 1].empty() ? "" : " | " + after[i + 1]) + ")" + (after[i + 1].empty() ? "?" : "");
            first[i] =
                "(" + f + (first[i + 1].empty() ? "" : " | " + first[i + 1]) + ")" + (first[i + 1].empty() ? "?" : "");
        }
        // Keep the expressions small: each level is a rule of its own.
        after[i] = rules_.add("after", after[i]);
        first[i] = rules_.add("props", first[i]);
    }
    // When nothing at all is written the braces hold only whitespace.
    return rules_.add("object", "\"{\" space " + (first[0].empty() ? "" : first[0] + " space ") + "\"}\"");
}

uint32_t Compiler::count_of(const Json& s, const char* key, const std::string& where, uint32_t dflt) {
    if (!s.contains(key)) return dflt;
    const Json& v = s[key];
    const bool integral =
        v.is_number_unsigned() || v.is_number_integer() ||
        (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && v.get<double>() >= 0);
    if (!integral || v.get<double>() < 0) refuse(key, where, fmt::format("'{}' must be a non-negative integer", key));
    if (v.get<double>() > kMaxRepeat)
        refuse(key, where, fmt::format("'{}' {} is above the supported {}", key, v.dump(), kMaxRepeat));
    return uint32_t(v.get<double>());
}

std::string Compiler::array(const Json& s, const std::string& where, size_t depth) {
    const uint32_t lo = count_of(s, "minItems", where, 0);
    const uint32_t hi_given = count_of(s, "maxItems", where, UINT32_MAX);
    std::vector<std::string> prefix;
    std::string rest = "value";  // schema of items past the prefix; "" when none may follow
    auto item = [&](const Json& is, const std::string& w) -> std::string {
        if (is.is_boolean() && !is.get<bool>()) return "";
        return compile(is, w, depth + 1);
    };
    if (s.contains("uniqueItems") && s["uniqueItems"] == true)
        refuse("uniqueItems", where, "'uniqueItems: true' is not supported");
    if (s.contains("prefixItems")) {
        if (!s["prefixItems"].is_array()) refuse("prefixItems", where, "'prefixItems' must be a list");
        for (size_t i = 0; i < s["prefixItems"].size(); ++i)
            prefix.push_back(item(s["prefixItems"][i], fmt::format("{}/prefixItems/{}", where, i)));
        if (s.contains("items")) rest = item(s["items"], where + "/items");
        if (s.contains("additionalItems"))
            refuse("additionalItems", where, "'additionalItems' with 'prefixItems' is not supported");
    } else if (s.contains("items") && s["items"].is_array()) {
        for (size_t i = 0; i < s["items"].size(); ++i)
            prefix.push_back(item(s["items"][i], fmt::format("{}/items/{}", where, i)));
        if (s.contains("additionalItems")) rest = item(s["additionalItems"], where + "/additionalItems");
    } else if (s.contains("items")) {
        rest = item(s["items"], where + "/items");
    }
    // A prefix item whose schema is false ends the array before it.
    uint32_t hi = hi_given;
    for (size_t i = 0; i < prefix.size(); ++i)
        if (prefix[i].empty()) {
            hi = std::min<uint32_t>(hi, uint32_t(i));
            prefix.resize(i);
            rest = "";
            break;
        }
    if (rest.empty()) hi = std::min<uint32_t>(hi, uint32_t(prefix.size()));
    if (lo > hi)
        refuse("minItems", where, fmt::format("no array length satisfies minItems {} here (at most {})", lo, hi));
    // items(i): the items from index i on, each after a comma when i > 0.
    const std::string sep = "space \",\" space ";
    std::string tail;  // items from prefix.size() on
    const uint32_t k = uint32_t(prefix.size());
    if (!rest.empty() && hi > k) {
        const uint32_t rmin = lo > k ? lo - k : 0;
        const std::string r = rules_.add("item", rest);
        const std::string max = hi == UINT32_MAX ? "" : std::to_string(hi - k);
        if (k > 0) {
            tail = "(" + sep + r + "){" + std::to_string(rmin) + "," + max + "}";
        } else {
            // The first item has no comma before it.
            const std::string more = "(" + sep + r + "){" + std::to_string(rmin > 0 ? rmin - 1 : 0) + "," +
                                     (hi == UINT32_MAX ? "" : std::to_string(hi - 1)) + "}";
            tail = rmin > 0 ? "(" + r + " " + more + ")" : "(" + r + " " + more + ")?";
        }
    }
    std::string body = tail;
    for (uint32_t i = std::min(k, hi); i-- > 0;) {
        const std::string head = (i > 0 ? sep : "") + rules_.add("item", prefix[i]);
        const std::string seq = head + (body.empty() ? "" : " " + body);
        body = i < lo ? "(" + seq + ")" : "(" + seq + ")?";
    }
    return rules_.add("array", "\"[\" space " + (body.empty() ? "" : body + " space ") + "\"]\"");
}

std::string Compiler::string(const Json& s, const std::string& where) {
    const uint32_t lo = count_of(s, "minLength", where, 0);
    const uint32_t hi = count_of(s, "maxLength", where, UINT32_MAX);
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
        if (lengths) refuse("pattern", where, "'pattern' with 'minLength' or 'maxLength' is not supported");
        if (s.contains("format")) refuse("pattern", where, "'pattern' with 'format' is not supported");
        if (!s["pattern"].is_string()) refuse("pattern", where, "'pattern' must be a string");
        return rules_.add("pattern",
                          "\"\\\"\" " + detail::pattern_gbnf(s["pattern"].get<std::string>(), where) + " \"\\\"\"");
    }
    if (s.contains("format")) {
        if (lengths) refuse("format", where, "'format' with 'minLength' or 'maxLength' is not supported");
        if (!s["format"].is_string()) refuse("format", where, "'format' must be a string");
        return format(s["format"].get<std::string>(), where);
    }
    if (!lengths) return "string";
    if (lo > hi) refuse("minLength", where, fmt::format("minLength {} is above maxLength {}", lo, hi));
    // char-cp: no surrogate escapes, so that every character counted is one code point.
    return rules_.add(
        "string", fmt::format("\"\\\"\" char-cp{{{},{}}} \"\\\"\"", lo, hi == UINT32_MAX ? "" : std::to_string(hi)));
}

std::string Compiler::format(const std::string& f, const std::string& where) {
    static const std::map<std::string, std::string> kFormats = {
        // Days per month; February 29 only in leap years (divisible by 4, centuries by 400).
        {"date",
         R"([0-9]{4} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])) | ([0-9]{2} ("0" [48] | [2468] [048] | [13579] [26]) | ([02468] [048] | [13579] [26]) "00") "-02-29")"},
        {"time",
         R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ([zZ] | [-+] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
        {"uuid", R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
        {"email",
         R"([a-zA-Z0-9_+-] ("."? [a-zA-Z0-9_+-]){0,63} "@" [a-zA-Z0-9] ([a-zA-Z0-9-]{0,62} [a-zA-Z0-9])? ("." [a-zA-Z0-9] ([a-zA-Z0-9-]{0,62} [a-zA-Z0-9])?){1,8})"},
    };
    std::string body;
    if (f == "date-time")
        body = "(" + kFormats.at("date") + ") [tT] (" + kFormats.at("time") + ")";
    else if (auto it = kFormats.find(f); it != kFormats.end())
        body = it->second;
    else
        refuse("format", where, fmt::format("format '{}' is not supported (date, time, date-time, uuid, email)", f));
    return rules_.add("format-" + f, "\"\\\"\" (" + body + ") \"\\\"\"");
}

}  // namespace vkllm::grammar::detail
