#include "model/grammar/json_schema.h"

#include "model/grammar/json_schema_compiler.h"

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
      keyword_(std::move(keyword)),
      where_(std::move(where)) {}

namespace detail {

// The grammar with the schema's value as rule `top`.
std::string Compiler::run(const std::string& top) {
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
std::string Compiler::run(const std::vector<NamedSchema>& tops, const std::set<std::string>& taken) {
    if (root_.is_object() && root_.contains("$id") && !root_["$id"].is_string())
        throw SchemaError("'$id' must be a string", "$id", "");
    for (const std::string& t : taken) rules_.take(t);
    for (const NamedSchema& t : tops) rules_.take(t.rule);
    std::string out;
    // Each top is a reference into the document, so that a subschema two tops share is one rule.
    // Errors name the subschema's own place ("/$defs/tool-0/properties/x").
    for (const NamedSchema& t : tops)
        out += t.rule +
               " ::= " + compile(Json{{"$ref", t.pointer}}, t.pointer.substr(t.pointer.starts_with("#") ? 1 : 0), 0) +
               "\n";
    out += rules_.text();
    out += kCommonRules;
    return out;
}

// The GBNF expression of a schema (wrapped in parentheses when it has alternatives).
std::string Compiler::compile(const Json& s, const std::string& where, size_t depth) {
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
        if (t.is_string())
            types.push_back(t.get<std::string>());
        else if (t.is_array() && !t.empty())
            for (const Json& x : t) {
                if (!x.is_string()) refuse("type", where, "'type' lists must hold strings");
                types.push_back(x.get<std::string>());
            }
        else
            refuse("type", where, "'type' must be a string or a non-empty list of strings");
    } else {
        types = {"object", "array", "string", "number", "boolean", "null"};
    }
    // "integer" is part of "number": listing both is "number".
    if (std::find(types.begin(), types.end(), "number") != types.end())
        types.erase(std::remove(types.begin(), types.end(), "integer"), types.end());
    std::vector<std::string> alts;
    for (const std::string& t : types) {
        std::string e;
        if (t == "object")
            e = object(s, where, depth);
        else if (t == "array")
            e = array(s, where, depth);
        else if (t == "string")
            e = string(s, where);
        else if (t == "integer")
            e = detail::integer_range_gbnf(s, where, rules_);
        else if (t == "number")
            e = detail::number_range_gbnf(s, where, rules_);
        else if (t == "boolean")
            e = "boolean";
        else if (t == "null")
            e = "null";
        else
            refuse("type", where, fmt::format("unknown type '{}'", t));
        if (std::find(alts.begin(), alts.end(), e) == alts.end()) alts.push_back(e);
    }
    return alts.size() == 1 ? alts[0] : "(" + join(alts, " | ") + ")";
}

bool Compiler::known(std::string_view k) {
    static const std::set<std::string, std::less<>> kw = {"type",
                                                          "properties",
                                                          "required",
                                                          "additionalProperties",
                                                          "enum",
                                                          "const",
                                                          "items",
                                                          "prefixItems",
                                                          "additionalItems",
                                                          "minItems",
                                                          "maxItems",
                                                          "anyOf",
                                                          "oneOf",
                                                          "allOf",
                                                          "$ref",
                                                          "minLength",
                                                          "maxLength",
                                                          "pattern",
                                                          "format",
                                                          "minimum",
                                                          "maximum",
                                                          "exclusiveMinimum",
                                                          "exclusiveMaximum",
                                                          "$id",
                                                          "uniqueItems"};
    return kw.count(k) || kAnnotations.count(k);
}

// Keywords that constrain a value beside `exclude` (annotations and the given ones aside).
std::vector<std::string> Compiler::constraints(const Json& s, std::initializer_list<std::string_view> exclude) {
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

const Json& Compiler::resolve(const std::string& ptr, const std::string& where) {
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
        if (cur->is_object() && cur->contains(t))
            cur = &(*cur)[t];
        else if (cur->is_array() && index && std::stoul(t) < cur->size())
            cur = &(*cur)[std::stoul(t)];
        else
            refuse("$ref", where, fmt::format("'{}' points to nothing in the document", ptr));
        // Below an $id the base URI changes: references there would mean something else.
        if (cur->is_object() && cur->contains("$id"))
            refuse("$ref", where,
                   fmt::format("'{}' passes through a subschema with its own '$id' (not supported)", ptr));
        if (next == std::string::npos) break;
        i = next;
    }
    return *cur;
}

// The pointer of a schema that is a reference, checked: a string, nothing beside it.
const std::string& Compiler::checked_ref(const Json& s, const std::string& where) {
    if (!s["$ref"].is_string()) refuse("$ref", where, "'$ref' must be a string");
    const auto others = constraints(s, {"$ref"});
    if (!others.empty()) refuse(others[0], where, fmt::format("'{}' beside '$ref' is not supported", others[0]));
    return s["$ref"].get_ref<const std::string&>();
}

std::string Compiler::ref(const Json& s, const std::string& where, size_t depth) {
    const std::string ptr = checked_ref(s, where);
    if (auto it = refs_.find(ptr); it != refs_.end()) return it->second;
    const Json& target = resolve(ptr, where);
    // The rule exists before its body is compiled, so that the target may refer to itself.
    const std::string name =
        rules_.add("ref-" + ptr.substr(ptr.rfind('/') == std::string::npos ? 1 : ptr.rfind('/') + 1), "");
    refs_[ptr] = name;
    // depth + 1: a chain of distinct references nests like subschemas (cycles end at the cache).
    std::string body = compile(target, ptr.substr(1), depth + 1);
    rules_.body(name) = std::move(body);
    return name;
}

std::string Compiler::any_of(const Json& s, const std::string& where, size_t depth) {
    const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
    if (s.contains("anyOf") && s.contains("oneOf"))
        refuse("oneOf", where, "'anyOf' and 'oneOf' together are not supported");
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
                    refuse("oneOf", where,
                           fmt::format("'oneOf' branches {} and {} may both match (a grammar cannot "
                                       "exclude that); use 'anyOf' if either may",
                                       i, j));
    std::vector<std::string> alts;
    for (size_t i = 0; i < list.size(); ++i) {
        if (list[i].is_boolean() && !list[i].get<bool>()) continue;  // a branch that allows nothing
        alts.push_back(compile(list[i], fmt::format("{}/{}/{}", where, key, i), depth + 1));
    }
    if (alts.empty()) refuse(key, where, fmt::format("every branch of '{}' is false: nothing is valid", key));
    return alts.size() == 1 ? alts[0] : "(" + join(alts, " | ") + ")";
}

// Follows $ref chains (without compiling anything).
const Json& Compiler::deref(const Json& s, const std::string& where) {
    const Json* cur = &s;
    for (int hops = 0; cur->is_object() && cur->contains("$ref"); ++hops) {
        if (hops > 32) refuse("$ref", where, "a chain of more than 32 references");
        cur = &resolve(checked_ref(*cur, where), where);
    }
    return *cur;
}

// The JSON types a schema may match, as far as its type, const and enum say ("integer" counts as
// "number"); all of them when it does not say.
std::set<std::string> Compiler::types_of(const Json& s0, const std::string& where) {
    const Json& s = deref(s0, where);
    const std::set<std::string> all = {"object", "array", "string", "number", "boolean", "null"};
    if (s.is_boolean()) return s.get<bool>() ? all : std::set<std::string>{};
    if (!s.is_object()) return all;
    auto type_name = [](const Json& v) -> std::string {
        return v.is_object()    ? "object"
               : v.is_array()   ? "array"
               : v.is_string()  ? "string"
               : v.is_number()  ? "number"
               : v.is_boolean() ? "boolean"
                                : "null";
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
bool Compiler::disjoint(const Json& a0, const Json& b0, const std::string& where) {
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
std::string Compiler::all_of(const Json& s, const std::string& where, size_t depth) {
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
                refuse(k, w,
                       fmt::format("'{}' inside 'allOf' is not supported (allOf of objects with properties "
                                   "and required only)",
                                   k));
            }
        }
    }
    if (object_typed) merged["type"] = "object";
    return compile(merged, where, depth + 1);
}

}  // namespace detail

using detail::Compiler;
using detail::Json;
using detail::kCommonRules;
using detail::lit;

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
    static const std::set<std::string, std::less<>> kCommon = {"root",   "space",   "char",   "char-cp",
                                                               "string", "integer", "number", "boolean",
                                                               "null",   "value",   "object", "array"};
    if (rule.empty() || kCommon.count(rule) ||
        !std::all_of(rule.begin(), rule.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }) ||
        !(rule[0] >= 'a' && rule[0] <= 'z'))
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
        if (!seen.insert(t.rule).second)
            throw std::invalid_argument(fmt::format("json_schema_rules: '{}' twice", t.rule));
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
