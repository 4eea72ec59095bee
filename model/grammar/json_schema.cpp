#include "model/grammar/json_schema.h"

#include "model/grammar/grammar.h"
#include "model/grammar/json_schema_numbers.h"
#include "model/grammar/json_schema_pattern.h"
#include "model/grammar/json_schema_rules.h"
#include "model/tokenizer/utf8.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace vkllm::grammar {

SchemaError::SchemaError(const std::string& what, std::string keyword, std::string where)
    : std::invalid_argument(where.empty() ? "json schema: " + what : fmt::format("json schema at {}: {}", where, what)),
      keyword_(std::move(keyword)), where_(std::move(where)) {}

namespace {

using detail::join;
using detail::Json;
using detail::json_char;
using detail::lit;
using detail::refuse;
using detail::SchemaRules;

// Rules every compiled schema may use. `space` is the whitespace allowed between tokens (none,
// one space, or a newline and indentation); `char` one character of a JSON string as written (a
// \u escape of a surrogate only as a high-low pair: strict parsers refuse a lone one).
constexpr std::string_view kCommonRules = R"(space ::= ("" | " " | "\n" [ \t]{0,20})
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2}))
char-cp ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))
string ::= "\"" char* "\""
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" space (string space ":" space value (space "," space string space ":" space value)* space)? "}"
array ::= "[" space (value (space "," space value)* space)? "]"
)";

constexpr size_t kMaxSchemaDepth = 64;  // nested subschemas (a $ref is a rule: recursion does not nest)

// The JSON text of a string value, as a GBNF literal (quotes and escapes included).
std::string json_string_lit(const std::string& s) { return lit(Json(s).dump()); }

// JSON equality as JSON Schema means it: object members in any order (ordered_json compares them
// in order), numbers by value.
bool same_value(const Json& a, const Json& b) { return nlohmann::json(a) == nlohmann::json(b); }

const std::set<std::string, std::less<>> kAnnotations = {"title",    "description", "default",  "examples", "$comment",
                                                         "$schema",  "readOnly",    "writeOnly", "deprecated",
                                                         "$defs",    "definitions"};

class Compiler {
public:
    explicit Compiler(const Json& root) : root_(root) {}

    // The grammar with the schema's value as rule `top`.
    std::string run(const std::string& top) {
        if (root_.is_object() && root_.contains("$id") && !root_["$id"].is_string())
            throw SchemaError("'$id' must be a string", "$id", "");
        rules_.take(top);
        const std::string body = compile(root_, "", 0);
        std::string out = top + " ::= " + body + "\n";
        out += rules_.text();
        out += kCommonRules;
        return out;
    }

    // Rules named tops[i].rule for the subschemas at tops[i].pointer, without a root rule.
    std::string run(const std::vector<NamedSchema>& tops, const std::set<std::string>& taken) {
        if (root_.is_object() && root_.contains("$id") && !root_["$id"].is_string())
            throw SchemaError("'$id' must be a string", "$id", "");
        for (const std::string& t : taken) rules_.take(t);
        for (const NamedSchema& t : tops) rules_.take(t.rule);
        std::string out;
        // Each top is a reference into the document, so that a subschema two tops share is one rule.
        // Errors name the subschema's own place ("/$defs/tool-0/properties/x").
        for (const NamedSchema& t : tops)
            out += t.rule + " ::= " + compile(Json{{"$ref", t.pointer}}, t.pointer.substr(t.pointer.starts_with("#") ? 1 : 0), 0) + "\n";
        out += rules_.text();
        out += kCommonRules;
        return out;
    }

private:
    // The GBNF expression of a schema (wrapped in parentheses when it has alternatives).
    std::string compile(const Json& s, const std::string& where, size_t depth) {
        if (depth > kMaxSchemaDepth) refuse("", where, fmt::format("subschemas nested deeper than {}", kMaxSchemaDepth));
        if (s.is_boolean()) {
            if (s.get<bool>()) return "value";
            refuse("", where, "the schema 'false' allows no value at all");
        }
        if (!s.is_object()) refuse("", where, "a schema must be an object or a boolean");
        for (const auto& [k, v] : s.items()) {
            (void)v;
            if (!known(k)) refuse(k, where, fmt::format("keyword '{}' is not supported", k));
        }
        if (s.contains("$id") && !where.empty()) refuse("$id", where, "'$id' below the root is not supported");
        if (s.contains("$ref")) return ref(s, where, depth);
        if (s.contains("allOf")) return all_of(s, where, depth);
        if (s.contains("anyOf") || s.contains("oneOf")) return any_of(s, where, depth);
        if (s.contains("const") || s.contains("enum")) return enumeration(s, where);

        std::vector<std::string> types;
        if (s.contains("type")) {
            const Json& t = s["type"];
            if (t.is_string()) types.push_back(t.get<std::string>());
            else if (t.is_array() && !t.empty())
                for (const Json& x : t) {
                    if (!x.is_string()) refuse("type", where, "'type' lists must hold strings");
                    types.push_back(x.get<std::string>());
                }
            else refuse("type", where, "'type' must be a string or a non-empty list of strings");
        } else {
            types = {"object", "array", "string", "number", "boolean", "null"};
        }
        // "integer" is part of "number": listing both is "number".
        if (std::find(types.begin(), types.end(), "number") != types.end())
            types.erase(std::remove(types.begin(), types.end(), "integer"), types.end());
        std::vector<std::string> alts;
        for (const std::string& t : types) {
            std::string e;
            if (t == "object") e = object(s, where, depth);
            else if (t == "array") e = array(s, where, depth);
            else if (t == "string") e = string(s, where);
            else if (t == "integer") e = detail::integer_range_gbnf(s, where, rules_);
            else if (t == "number") e = detail::number_range_gbnf(s, where, rules_);
            else if (t == "boolean") e = "boolean";
            else if (t == "null") e = "null";
            else refuse("type", where, fmt::format("unknown type '{}'", t));
            if (std::find(alts.begin(), alts.end(), e) == alts.end()) alts.push_back(e);
        }
        return alts.size() == 1 ? alts[0] : "(" + join(alts, " | ") + ")";
    }

    static bool known(std::string_view k) {
        static const std::set<std::string, std::less<>> kw = {
            "type",          "properties", "required", "additionalProperties", "enum",       "const",
            "items",         "prefixItems", "additionalItems", "minItems",      "maxItems",   "anyOf",
            "oneOf",         "allOf",      "$ref",     "minLength",            "maxLength",  "pattern",
            "format",        "minimum",    "maximum",  "exclusiveMinimum",     "exclusiveMaximum", "$id",
            "uniqueItems"};
        return kw.count(k) || kAnnotations.count(k);
    }

    // Keywords that constrain a value beside `exclude` (annotations and the given ones aside).
    static std::vector<std::string> constraints(const Json& s, std::initializer_list<std::string_view> exclude) {
        std::vector<std::string> out;
        for (const auto& [k, v] : s.items()) {
            (void)v;
            if (kAnnotations.count(k) || k == "$id") continue;
            if (std::find(exclude.begin(), exclude.end(), k) != exclude.end()) continue;
            if (k == "uniqueItems" && v.is_boolean() && !v.get<bool>()) continue;
            out.push_back(k);
        }
        return out;
    }

    // --- references -------------------------------------------------------------------------------

    const Json& resolve(const std::string& ptr, const std::string& where) {
        if (ptr.empty() || ptr[0] != '#')
            refuse("$ref", where, fmt::format("only local references ('#...') are supported, not '{}'", ptr));
        std::string p = ptr.substr(1);
        // URI fragment: percent-decoding first, then JSON pointer escapes.
        std::string dec;
        for (size_t i = 0; i < p.size(); ++i) {
            if (p[i] == '%' && i + 2 < p.size() && std::isxdigit(uint8_t(p[i + 1])) && std::isxdigit(uint8_t(p[i + 2]))) {
                dec += char(std::stoi(p.substr(i + 1, 2), nullptr, 16));
                i += 2;
            } else {
                dec += p[i];
            }
        }
        if (!dec.empty() && dec[0] != '/') refuse("$ref", where, fmt::format("'{}' is not a JSON pointer", ptr));
        const Json* cur = &root_;
        size_t i = 0;
        while (i < dec.size()) {
            const size_t next = dec.find('/', i + 1);
            std::string tok = dec.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
            std::string t;
            for (size_t j = 0; j < tok.size(); ++j) {
                if (tok[j] == '~' && j + 1 < tok.size() && (tok[j + 1] == '0' || tok[j + 1] == '1')) {
                    t += tok[j + 1] == '0' ? '~' : '/';
                    ++j;
                } else {
                    t += tok[j];
                }
            }
            const bool index = !t.empty() && t.size() <= 9 &&
                               std::all_of(t.begin(), t.end(), [](char c) { return std::isdigit(uint8_t(c)) != 0; });
            if (cur->is_object() && cur->contains(t)) cur = &(*cur)[t];
            else if (cur->is_array() && index && std::stoul(t) < cur->size()) cur = &(*cur)[std::stoul(t)];
            else refuse("$ref", where, fmt::format("'{}' points to nothing in the document", ptr));
            // Below an $id the base URI changes: references there would mean something else.
            if (cur->is_object() && cur->contains("$id"))
                refuse("$ref", where, fmt::format("'{}' passes through a subschema with its own '$id' (not supported)", ptr));
            if (next == std::string::npos) break;
            i = next;
        }
        return *cur;
    }

    // The pointer of a schema that is a reference, checked: a string, nothing beside it.
    static const std::string& checked_ref(const Json& s, const std::string& where) {
        if (!s["$ref"].is_string()) refuse("$ref", where, "'$ref' must be a string");
        const auto others = constraints(s, {"$ref"});
        if (!others.empty()) refuse(others[0], where, fmt::format("'{}' beside '$ref' is not supported", others[0]));
        return s["$ref"].get_ref<const std::string&>();
    }

    std::string ref(const Json& s, const std::string& where, size_t depth) {
        const std::string ptr = checked_ref(s, where);
        if (auto it = refs_.find(ptr); it != refs_.end()) return it->second;
        const Json& target = resolve(ptr, where);
        // The rule exists before its body is compiled, so that the target may refer to itself.
        const std::string name = rules_.add("ref-" + ptr.substr(ptr.rfind('/') == std::string::npos ? 1 : ptr.rfind('/') + 1), "");
        refs_[ptr] = name;
        // depth + 1: a chain of distinct references nests like subschemas (cycles end at the cache).
        std::string body = compile(target, ptr.substr(1), depth + 1);
        rules_.body(name) = std::move(body);
        return name;
    }

    // --- combinators ------------------------------------------------------------------------------

    std::string any_of(const Json& s, const std::string& where, size_t depth) {
        const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
        if (s.contains("anyOf") && s.contains("oneOf")) refuse("oneOf", where, "'anyOf' and 'oneOf' together are not supported");
        const auto others = constraints(s, {key});
        if (!others.empty()) refuse(others[0], where, fmt::format("'{}' beside '{}' is not supported", others[0], key));
        const Json& list = s[key];
        if (!list.is_array() || list.empty()) refuse(key, where, fmt::format("'{}' must be a non-empty list", key));
        // oneOf holds when exactly one branch matches; a grammar can only say "some branch", so the
        // branches must be shown not to overlap (different types, or different constant values).
        if (std::string(key) == "oneOf")
            for (size_t i = 0; i < list.size(); ++i)
                for (size_t j = i + 1; j < list.size(); ++j)
                    if (!disjoint(list[i], list[j], where))
                        refuse("oneOf", where, fmt::format("'oneOf' branches {} and {} may both match (a grammar cannot "
                                                           "exclude that); use 'anyOf' if either may", i, j));
        std::vector<std::string> alts;
        for (size_t i = 0; i < list.size(); ++i) {
            if (list[i].is_boolean() && !list[i].get<bool>()) continue;  // a branch that allows nothing
            alts.push_back(compile(list[i], fmt::format("{}/{}/{}", where, key, i), depth + 1));
        }
        if (alts.empty()) refuse(key, where, fmt::format("every branch of '{}' is false: nothing is valid", key));
        return alts.size() == 1 ? alts[0] : "(" + join(alts, " | ") + ")";
    }

    // Follows $ref chains (without compiling anything).
    const Json& deref(const Json& s, const std::string& where) {
        const Json* cur = &s;
        for (int hops = 0; cur->is_object() && cur->contains("$ref"); ++hops) {
            if (hops > 32) refuse("$ref", where, "a chain of more than 32 references");
            cur = &resolve(checked_ref(*cur, where), where);
        }
        return *cur;
    }

    // The JSON types a schema may match, as far as its type, const and enum say ("integer" counts as
    // "number"); all of them when it does not say.
    std::set<std::string> types_of(const Json& s0, const std::string& where) {
        const Json& s = deref(s0, where);
        const std::set<std::string> all = {"object", "array", "string", "number", "boolean", "null"};
        if (s.is_boolean()) return s.get<bool>() ? all : std::set<std::string>{};
        if (!s.is_object()) return all;
        auto type_name = [](const Json& v) -> std::string {
            return v.is_object() ? "object" : v.is_array() ? "array" : v.is_string() ? "string" : v.is_number() ? "number"
                 : v.is_boolean() ? "boolean" : "null";
        };
        std::set<std::string> out = all;
        if (s.contains("type")) {
            std::set<std::string> t;
            const Json& ty = s["type"];
            for (const Json& x : ty.is_array() ? ty : Json::array({ty}))
                if (x.is_string()) t.insert(x == "integer" ? "number" : x.get<std::string>());
            out = t;
        }
        if (s.contains("const")) {
            std::set<std::string> t{type_name(s["const"])};
            std::set<std::string> both;
            std::set_intersection(out.begin(), out.end(), t.begin(), t.end(), std::inserter(both, both.end()));
            out = both;
        }
        return out;
    }

    // Whether no value can match both schemas (a sufficient test: disjoint types, or two const/enum
    // lists with no common value).
    bool disjoint(const Json& a0, const Json& b0, const std::string& where) {
        const Json& a = deref(a0, where);
        const Json& b = deref(b0, where);
        if (a.is_boolean() && !a.get<bool>()) return true;
        if (b.is_boolean() && !b.get<bool>()) return true;
        const auto ta = types_of(a, where), tb = types_of(b, where);
        std::set<std::string> both;
        std::set_intersection(ta.begin(), ta.end(), tb.begin(), tb.end(), std::inserter(both, both.end()));
        if (both.empty()) return true;
        auto values = [](const Json& s) -> std::optional<std::vector<Json>> {
            if (!s.is_object()) return std::nullopt;
            if (s.contains("const")) return std::vector<Json>{s["const"]};
            if (s.contains("enum") && s["enum"].is_array()) return std::vector<Json>(s["enum"].begin(), s["enum"].end());
            return std::nullopt;
        };
        const auto va = values(a), vb = values(b);
        if (va && vb) {
            for (const Json& x : *va)
                if (std::any_of(vb->begin(), vb->end(), [&](const Json& y) { return same_value(x, y); })) return false;
            return true;
        }
        return false;
    }

    // allOf of object schemas: one object with the union of properties and required keys.
    std::string all_of(const Json& s, const std::string& where, size_t depth) {
        const Json& list = s["allOf"];
        if (!list.is_array() || list.empty()) refuse("allOf", where, "'allOf' must be a non-empty list");
        Json merged = Json::object();
        std::vector<std::pair<const Json*, std::string>> parts;
        Json base = s;
        base.erase("allOf");
        parts.emplace_back(&base, where);
        for (size_t i = 0; i < list.size(); ++i) parts.emplace_back(&list[i], fmt::format("{}/allOf/{}", where, i));
        bool object_typed = false;  // some part says "type": "object" (else non-objects pass too)
        for (auto& [p, w] : parts) {
            const Json* cur = &deref(*p, w);
            if (cur->is_boolean()) {
                if (!cur->get<bool>()) refuse("allOf", w, "a 'false' part of 'allOf' allows nothing");
                continue;
            }
            if (!cur->is_object()) refuse("allOf", w, "a schema must be an object or a boolean");
            for (const auto& [k, v] : cur->items()) {
                if (kAnnotations.count(k) || k == "$id") continue;
                if (k == "type") {
                    if (v != "object") refuse("allOf", w, "'allOf' is supported for object schemas only");
                    object_typed = true;
                } else if (k == "properties") {
                    if (!v.is_object()) refuse("properties", w, "'properties' must be an object");
                    for (const auto& [name, ps] : v.items()) {
                        if (merged["properties"].contains(name) && merged["properties"][name] != ps)
                            refuse("allOf", w, fmt::format("property '{}' has different schemas in 'allOf' parts", name));
                        merged["properties"][name] = ps;
                    }
                } else if (k == "required") {
                    if (!v.is_array()) refuse("required", w, "'required' must be a list");
                    for (const Json& r : v)
                        if (std::find(merged["required"].begin(), merged["required"].end(), r) == merged["required"].end())
                            merged["required"].push_back(r);
                } else {
                    refuse(k, w, fmt::format("'{}' inside 'allOf' is not supported (allOf of objects with properties "
                                             "and required only)", k));
                }
            }
        }
        if (object_typed) merged["type"] = "object";
        return compile(merged, where, depth + 1);
    }

    // --- values -----------------------------------------------------------------------------------

    // A JSON value written out, with the whitespace the grammar allows between its tokens.
    static std::string literal(const Json& v) {
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

    static bool has_type(const Json& v, const std::string& t) {
        if (t == "object") return v.is_object();
        if (t == "array") return v.is_array();
        if (t == "string") return v.is_string();
        if (t == "number") return v.is_number();
        if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
        if (t == "boolean") return v.is_boolean();
        if (t == "null") return v.is_null();
        return false;
    }

    std::string enumeration(const Json& s, const std::string& where) {
        const auto others = constraints(s, {"enum", "const", "type"});
        if (!others.empty()) refuse(others[0], where, fmt::format("'{}' beside 'enum' or 'const' is not supported", others[0]));
        std::vector<Json> values;
        if (s.contains("const")) values.push_back(s["const"]);
        if (s.contains("enum")) {
            if (!s["enum"].is_array()) refuse("enum", where, "'enum' must be a list");
            if (s.contains("const")) {
                if (std::none_of(s["enum"].begin(), s["enum"].end(), [&](const Json& v) { return same_value(v, s["const"]); }))
                    values.clear();
            } else {
                for (const Json& v : s["enum"]) values.push_back(v);
            }
        }
        if (s.contains("type")) {
            std::vector<std::string> types;
            if (s["type"].is_string()) types.push_back(s["type"]);
            else if (s["type"].is_array()) for (const Json& t : s["type"]) types.push_back(t.is_string() ? t.get<std::string>() : "");
            values.erase(std::remove_if(values.begin(), values.end(), [&](const Json& v) {
                return std::none_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(v, t); });
            }), values.end());
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
    std::string key_not_in(const std::vector<std::string>& names, const std::string& where) {
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

    std::string object(const Json& s, const std::string& where, size_t depth) {
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
                if (required.count(name)) refuse("required", where, fmt::format("property '{}' is required but its schema is false", name));
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
                    refuse("required", where, fmt::format("'{}' is required but additionalProperties is false and it is "
                                                          "not in properties: nothing is valid", r));
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
                after[i] = "(" + a + (after[i + 1].empty() ? "" : " | " + after[i + 1]) + ")" +
                           (after[i + 1].empty() ? "?" : "");
                first[i] = "(" + f + (first[i + 1].empty() ? "" : " | " + first[i + 1]) + ")" +
                           (first[i + 1].empty() ? "?" : "");
            }
            // Keep the expressions small: each level is a rule of its own.
            after[i] = rules_.add("after", after[i]);
            first[i] = rules_.add("props", first[i]);
        }
        // When nothing at all is written the braces hold only whitespace.
        return rules_.add("object", "\"{\" space " + (first[0].empty() ? "" : first[0] + " space ") + "\"}\"");
    }

    static uint32_t count_of(const Json& s, const char* key, const std::string& where, uint32_t dflt) {
        if (!s.contains(key)) return dflt;
        const Json& v = s[key];
        const bool integral = v.is_number_unsigned() || v.is_number_integer() ||
                              (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && v.get<double>() >= 0);
        if (!integral || v.get<double>() < 0) refuse(key, where, fmt::format("'{}' must be a non-negative integer", key));
        if (v.get<double>() > kMaxRepeat)
            refuse(key, where, fmt::format("'{}' {} is above the supported {}", key, v.dump(), kMaxRepeat));
        return uint32_t(v.get<double>());
    }

    std::string array(const Json& s, const std::string& where, size_t depth) {
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
            if (s.contains("additionalItems")) refuse("additionalItems", where, "'additionalItems' with 'prefixItems' is not supported");
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
        if (lo > hi) refuse("minItems", where, fmt::format("no array length satisfies minItems {} here (at most {})", lo, hi));
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

    std::string string(const Json& s, const std::string& where) {
        const uint32_t lo = count_of(s, "minLength", where, 0);
        const uint32_t hi = count_of(s, "maxLength", where, UINT32_MAX);
        const bool lengths = s.contains("minLength") || s.contains("maxLength");
        if (s.contains("pattern")) {
            if (lengths) refuse("pattern", where, "'pattern' with 'minLength' or 'maxLength' is not supported");
            if (s.contains("format")) refuse("pattern", where, "'pattern' with 'format' is not supported");
            if (!s["pattern"].is_string()) refuse("pattern", where, "'pattern' must be a string");
            return rules_.add("pattern", "\"\\\"\" " + detail::pattern_gbnf(s["pattern"].get<std::string>(), where) + " \"\\\"\"");
        }
        if (s.contains("format")) {
            if (lengths) refuse("format", where, "'format' with 'minLength' or 'maxLength' is not supported");
            if (!s["format"].is_string()) refuse("format", where, "'format' must be a string");
            return format(s["format"].get<std::string>(), where);
        }
        if (!lengths) return "string";
        if (lo > hi) refuse("minLength", where, fmt::format("minLength {} is above maxLength {}", lo, hi));
        // char-cp: no surrogate escapes, so that every character counted is one code point.
        return rules_.add("string", fmt::format("\"\\\"\" char-cp{{{},{}}} \"\\\"\"", lo, hi == UINT32_MAX ? "" : std::to_string(hi)));
    }

    std::string format(const std::string& f, const std::string& where) {
        static const std::map<std::string, std::string> kFormats = {
            // Days per month; February 29 only in leap years (divisible by 4, centuries by 400).
            {"date", R"([0-9]{4} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])) | ([0-9]{2} ("0" [48] | [2468] [048] | [13579] [26]) | ([02468] [048] | [13579] [26]) "00") "-02-29")"},
            {"time", R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ([zZ] | [-+] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
            {"uuid", R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
            {"email", R"([a-zA-Z0-9_+-] ("."? [a-zA-Z0-9_+-]){0,63} "@" [a-zA-Z0-9] ([a-zA-Z0-9-]{0,62} [a-zA-Z0-9])? ("." [a-zA-Z0-9] ([a-zA-Z0-9-]{0,62} [a-zA-Z0-9])?){1,8})"},
        };
        std::string body;
        if (f == "date-time") body = "(" + kFormats.at("date") + ") [tT] (" + kFormats.at("time") + ")";
        else if (auto it = kFormats.find(f); it != kFormats.end()) body = it->second;
        else refuse("format", where, fmt::format("format '{}' is not supported (date, time, date-time, uuid, email)", f));
        return rules_.add("format-" + f, "\"\\\"\" (" + body + ") \"\\\"\"");
    }

    const Json& root_;
    SchemaRules rules_;
    std::map<std::string, std::string> refs_;
};

}  // namespace

namespace {

// The GBNF text and its parse (of `root ::= top` when the top rule is not root).
std::pair<std::string, Grammar> compile_schema(std::string_view schema_json, const std::string& top = "root") {
    Json schema;
    try {
        schema = Json::parse(schema_json);
    } catch (const nlohmann::json::exception& e) {
        throw SchemaError(fmt::format("not valid JSON: {}", e.what()));
    }
    std::string gbnf = Compiler(schema).run(top);
    // The grammar's own limits (rules, elements, left recursion such as {"$ref": "#"}) apply to the
    // result: refused here as the schema's problem.
    try {
        Grammar g = Grammar::parse(top == "root" ? gbnf : "root ::= " + top + "\n" + gbnf);
        return {std::move(gbnf), std::move(g)};
    } catch (const GrammarError& e) {
        throw SchemaError(fmt::format("the schema cannot be followed as a grammar: {}", e.what()));
    }
}

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_json) { return compile_schema(schema_json).first; }

Grammar json_schema_grammar(std::string_view schema_json) { return compile_schema(schema_json).second; }

namespace {

void check_rule_name(const std::string& rule) {
    static const std::set<std::string, std::less<>> kCommon = {"root",    "space", "char", "char-cp", "string", "integer",
                                                               "number",  "boolean", "null", "value", "object", "array"};
    if (rule.empty() || kCommon.count(rule) || !std::all_of(rule.begin(), rule.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
        }) || !(rule[0] >= 'a' && rule[0] <= 'z'))
        throw std::invalid_argument(fmt::format("json_schema_rules: '{}' is not a usable rule name", rule));
}

}  // namespace

std::string json_schema_rules(std::string_view schema_json, const std::string& rule) {
    check_rule_name(rule);
    return compile_schema(schema_json, rule).first;
}

std::string json_schema_rules(std::string_view schema_json, const std::vector<NamedSchema>& tops,
                              const std::set<std::string>& taken) {
    if (tops.empty()) throw std::invalid_argument("json_schema_rules: no rules asked for");
    std::set<std::string> seen;
    for (const NamedSchema& t : tops) {
        check_rule_name(t.rule);
        if (!seen.insert(t.rule).second) throw std::invalid_argument(fmt::format("json_schema_rules: '{}' twice", t.rule));
    }
    Json schema;
    try {
        schema = Json::parse(schema_json);
    } catch (const nlohmann::json::exception& e) {
        throw SchemaError(fmt::format("not valid JSON: {}", e.what()));
    }
    std::string gbnf = Compiler(schema).run(tops, taken);
    std::string root = "root ::= ";
    for (size_t i = 0; i < tops.size(); ++i) root += (i ? " | " : "") + tops[i].rule;
    try {
        Grammar::parse(root + "\n" + gbnf);
    } catch (const GrammarError& e) {
        throw SchemaError(fmt::format("the schema cannot be followed as a grammar: {}", e.what()));
    }
    return gbnf;
}

std::string gbnf_literal(std::string_view text) { return lit(text); }

std::string json_object_gbnf() { return "root ::= object\n" + std::string(kCommonRules); }

}  // namespace vkllm::grammar
