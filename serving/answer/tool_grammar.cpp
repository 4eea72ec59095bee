#include "serving/answer/tool_grammar.h"

#include "serving/answer/tool_cursor.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace vkllm::answer::detail {

namespace {

[[noreturn]] void throw_tool_schema_error(const grammar::SchemaError& e, const std::vector<size_t>& tool_index,
                                          bool wrapped) {
    {
        std::string param = "tools";
        std::string where = e.where();
        constexpr std::string_view kDef = "/$defs/tool-";
        size_t k = 0;
        const size_t slash = where.find('/', kDef.size());
        const std::string_view digits =
            std::string_view(where).substr(std::min(where.size(), kDef.size()),
                                           slash == std::string::npos ? std::string_view::npos : slash - kDef.size());
        const bool in_def = wrapped && where.starts_with(kDef) &&
                            std::from_chars(digits.data(), digits.data() + digits.size(), k).ec == std::errc() &&
                            k < tool_index.size();
        if (in_def) {
            param = fmt::format("tools[{}].function.parameters", tool_index[k]);
            where = slash == std::string::npos ? "" : where.substr(slash);
        } else if (!wrapped || tool_index.size() == 1) {
            // Unplaced (a grammar the schema cannot be followed as): with one tool, it is that tool's.
            param = fmt::format("tools[{}].function.parameters", tool_index.at(0));
        }
        std::string msg = fmt::format("Invalid '{}': {}", param, e.what());
        if (!e.keyword().empty())
            msg += fmt::format(" (keyword '{}'{})", e.keyword(), where.empty() ? "" : " at " + where);
        throw ToolError(msg, param);
    }
}

// JSON pointer text for one key (escaped as pointers are, and '%' too: the compiler reads pointers
// as URI fragments).
std::string pointer_token(std::string_view key) {
    std::string out;
    for (const char ch : key) {
        if (ch == '~')
            out += "~0";
        else if (ch == '/')
            out += "~1";
        else if (ch == '%')
            out += "%25";
        else
            out += ch;
    }
    return out;
}

// Rules `name` for any text that does not contain `tag` (whose first character occurs in it only
// there, as in "</parameter>"): a bare value runs to the first closing tag, so it may hold any
// other text, "</div>" included. One rule per character of the tag matched so far.
std::string text_without(const std::string& name, std::string_view tag) {
    const auto cls = [](char ch) {
        std::string out;
        if (ch == ']' || ch == '\\' || ch == '^' || ch == '-') out += '\\';
        return out + ch;
    };
    const std::string first = grammar::gbnf_literal(tag.substr(0, 1));
    std::string out;
    for (size_t i = 0; i < tag.size(); ++i) {
        // i characters of the tag matched: another character starts over, its first starts a new
        // match, and its next goes on (but not to the whole tag).
        out += fmt::format("{}-{} ::= ([^{}{}] {}-0 | {} {}-1", name, i, cls(tag[0]), i ? cls(tag[i]) : "", name, first,
                           name);
        if (i > 0 && i + 1 < tag.size())
            out += fmt::format(" | {} {}-{}", grammar::gbnf_literal(tag.substr(i, 1)), name, i + 1);
        out += ")?\n";
    }
    return out;
}

// The grammar of a bare value (value_form Bare; `ps` its schema, references followed): any text
// without `tag`, or the listed strings of an enum / const. Other string constraints cannot be held
// on bare text: refused, naming the keyword.
std::string bare_value(const json& ps, const std::string& param, std::string_view tag) {
    static const std::set<std::string, std::less<>> kAnnotations = {
        "type", "title", "description", "default", "examples", "$comment", "readOnly", "writeOnly", "deprecated"};
    std::vector<std::string> values;
    for (const auto& [k, v] : ps.items()) {
        if (kAnnotations.count(k)) continue;
        if (k == "enum" || k == "const") {
            const json list = k == "const" ? json::array({v}) : v;
            if (!list.is_array() || list.empty())
                throw ToolError(fmt::format("Invalid '{}': '{}' must be a non-empty list.", param, k), param);
            for (const json& e : list) {
                if (!e.is_string())
                    throw ToolError(fmt::format("Invalid '{}': a string parameter's '{}' holds a value that is not a "
                                                "string.",
                                                param, k),
                                    param);
                if (e.get<std::string>().find(tag) != std::string::npos)
                    throw ToolError(fmt::format("Invalid '{}': this model writes string arguments bare, up to '{}', "
                                                "which a value of '{}' holds.",
                                                param, tag, k),
                                    param);
                values.push_back(grammar::gbnf_literal(e.get<std::string>()));
            }
            continue;
        }
        throw ToolError(fmt::format("Invalid '{}': this model writes string arguments bare, where '{}' cannot be "
                                    "enforced; forcing a call is not supported for it (keyword '{}').",
                                    param, k, k),
                        param);
    }
    if (values.empty()) return "bare-text-0";
    std::string alts;
    for (const std::string& v : values) alts += (alts.empty() ? "" : " | ") + v;
    return "(" + alts + ")";
}

}  // namespace

const std::string& function_name(const json& tool) { return tool["function"]["name"].get_ref<const std::string&>(); }

json rebase_refs(const json& s, const std::string& def) {
    if (s.is_object()) {
        json out = json::object();
        for (const auto& [k, v] : s.items()) {
            if (k == "$ref" && v.is_string() && v.get<std::string>().starts_with("#"))
                out[k] = "#/$defs/" + def + v.get<std::string>().substr(1);
            else
                out[k] = rebase_refs(v, def);
        }
        return out;
    }
    if (s.is_array()) {
        json out = json::array();
        for (const json& v : s) out.push_back(rebase_refs(v, def));
        return out;
    }
    return s;
}

json forced_parameters(const json& tool, size_t index) {
    const json& f = tool["function"];
    json p = f.contains("parameters") ? f["parameters"] : json::object();
    if (!p.contains("type")) {
        p["type"] = "object";
    } else if (p["type"] != "object") {
        const std::string param = fmt::format("tools[{}].function.parameters", index);
        throw ToolError(fmt::format("Invalid '{}': a tool's arguments are an object, so its parameters must have "
                                    "\"type\": \"object\".",
                                    param),
                        param);
    }
    return p;
}

std::string call_rules(const json& schema, const std::vector<size_t>& tool_index, bool wrapped) {
    try {
        return grammar::json_schema_rules(schema.dump(), "tool-call");
    } catch (const grammar::SchemaError& e) {
        throw_tool_schema_error(e, tool_index, wrapped);
    }
}

json call_object_schema(const CallObjectShape& shape, const json& tools, const std::vector<size_t>& chosen, bool many) {
    const char* name_key = shape.name_key;
    const char* args_key = shape.args_key;
    json defs = json::object();
    json alternatives = json::array();
    for (size_t k = 0; k < chosen.size(); ++k) {
        const std::string def = fmt::format("tool-{}", k);
        defs[def] = rebase_refs(forced_parameters(tools[chosen[k]], chosen[k]), def);
        json properties = json::object();
        if (shape.numbered) properties["tool_call_id"] = {{"type", "string"}, {"pattern", "^[0-9]{1,4}$"}};
        properties[name_key] = {{"const", function_name(tools[chosen[k]])}};
        properties[args_key] = {{"$ref", "#/$defs/" + def}};
        if (shape.id_after_args) properties["id"] = {{"type", "string"}, {"pattern", "^[a-zA-Z0-9]{9}$"}};
        json required = {name_key, args_key};
        if (shape.numbered) required.insert(required.begin(), "tool_call_id");
        alternatives.push_back({{"type", "object"},
                                {"properties", std::move(properties)},
                                {"required", std::move(required)},
                                {"additionalProperties", false}});
    }
    json call = alternatives.size() == 1 ? alternatives[0] : json{{"anyOf", alternatives}};
    json schema;
    switch (shape.list) {
        case CallList::One: schema = call; break;
        case CallList::Array:
            schema = {{"type", "array"}, {"items", call}, {"minItems", 1}};
            if (!many) schema["maxItems"] = 1;
            break;
        case CallList::ToolCalls: {
            json list = {{"type", "array"}, {"items", call}, {"minItems", 1}};
            if (!many) list["maxItems"] = 1;
            schema = {{"type", "object"},
                      {"properties", {{"tool_calls", list}}},
                      {"required", {"tool_calls"}},
                      {"additionalProperties", false}};
            break;
        }
    }
    schema["$defs"] = std::move(defs);
    return schema;
}

std::string named_call_rules(const NamedCalls& calls, const json& tools, const std::vector<size_t>& chosen,
                             std::set<std::string> own) {
    json defs = json::object();
    std::vector<grammar::NamedSchema> tops;
    std::string branches, rules;
    bool bare_used = false;
    for (size_t k = 0; k < chosen.size(); ++k) {
        const size_t index = chosen[k];
        const std::string def = fmt::format("tool-{}", k), call = fmt::format("call-{}", k);
        const std::string param = fmt::format("tools[{}].function.parameters", index);
        json p = rebase_refs(forced_parameters(tools[index], index), def);
        const std::string& name = function_name(tools[index]);
        branches += (k ? " | " : "") + call;
        own.insert(call);
        if (!calls.listed) {
            // The arguments are one JSON object between markup that names the tool.
            tops.push_back({def, "#/$defs/" + def});
            const auto [head, tail] = calls.frame(name, index);
            rules += call + " ::= " + head + " " + def + (tail.empty() ? "" : " " + tail) + "\n";
            defs[def] = std::move(p);
            continue;
        }
        // The arguments are listed one by one: an object's keywords beyond its properties cannot be held.
        static const std::set<std::string, std::less<>> kListed = {
            "type",    "properties",  "required", "additionalProperties",
            "$defs",   "definitions", "title",    "description",
            "$schema", "$comment",    "examples", "default"};
        for (const auto& [key, v] : p.items()) {
            (void)v;
            if (!kListed.count(key))
                throw ToolError(
                    fmt::format("Invalid '{}': this model lists arguments one by one in markup, where '{}' "
                                "cannot be enforced; forcing a call is not supported for it (keyword '{}').",
                                param, key, key),
                    param);
        }
        const json props = p.contains("properties") ? p["properties"] : json::object();
        if (!props.is_object())
            throw ToolError(fmt::format("Invalid '{}.properties': must be an object.", param), param);
        std::set<std::string> required;
        if (p.contains("required")) {
            if (!p["required"].is_array())
                throw ToolError(fmt::format("Invalid '{}.required': must be a list.", param), param);
            for (const json& r : p["required"]) {
                if (!r.is_string() || !props.contains(r.get<std::string>()))
                    throw ToolError(
                        fmt::format("Invalid '{}.required': {} is not one of 'properties'.", param, r.dump()), param);
                required.insert(r.get<std::string>());
            }
        }
        const ListedArgs& listed = *calls.listed;
        const std::string_view tag = listed.tag;
        const json original = forced_parameters(tools[index], index);  // value_form follows its own references
        std::string body = grammar::gbnf_literal(listed.call_open + name + listed.name_close);
        size_t j = 0;
        for (const auto& [key, ps] : props.items()) {
            const std::string at = fmt::format("{}.properties.{}", param, key);
            // The parser reads the name up to its closing markup, without the whitespace around it.
            if (key.empty() || key.find_first_of("<>\n") != std::string::npos || trim(key) != key)
                throw ToolError(
                    fmt::format("Invalid '{}': this model writes a parameter's name in markup, which it may "
                                "not contain ('<', '>', a newline), begin or end with (whitespace) or be "
                                "empty.",
                                at),
                    param);
            const std::string value = fmt::format("{}-arg-{}", def, j++);
            own.insert(value);
            switch (value_form(&original, key)) {
                case ValueForm::Bare: {
                    const json* resolved = resolve_local(original, &original["properties"][key]);
                    rules += value + " ::= " + bare_value(resolved ? *resolved : json::object(), at, tag) + "\n";
                    bare_used = true;
                    break;
                }
                case ValueForm::Mixed:
                    throw ToolError(
                        fmt::format("Invalid '{}': this model writes string arguments bare, so a parameter whose "
                                    "type is a string or something else cannot be told apart; forcing a call "
                                    "is not supported for it.",
                                    at),
                        param);
                default: {
                    // Qwen3-Coder's template writes booleans and null as Python does (the parser takes both).
                    const json* resolved = resolve_local(original, &original["properties"][key]);
                    const json type = resolved && resolved->is_object() ? resolved->value("type", json()) : json();
                    if (listed.python_literals && (type == "boolean" || type == "null") &&
                        !resolved->contains("enum") && !resolved->contains("const")) {
                        rules += value + (type == "boolean" ? " ::= (\"True\" | \"False\" | \"true\" | \"false\")\n"
                                                            : " ::= (\"None\" | \"null\")\n");
                        break;
                    }
                    tops.push_back({value, "#/$defs/" + def + "/properties/" + pointer_token(key)});
                }
            }
            const std::string open = listed.arg_open + key + listed.value_open;
            const std::string close = listed.value_close;
            const std::string item = grammar::gbnf_literal(open) + " " + value + " " + grammar::gbnf_literal(close);
            body += " " + (required.count(key) ? item : "(" + item + ")?");
        }
        body += ' ' + grammar::gbnf_literal(listed.call_close);
        rules += call + " ::= " + body + "\n";
        defs[def] = std::move(p);
    }
    std::string gbnf = "named-call ::= " + branches + "\n" + rules;
    own.insert("named-call");
    if (bare_used) {
        const std::string_view tag = calls.listed->tag;
        gbnf += text_without("bare-text", tag);
        for (size_t i = 0; i < tag.size(); ++i) own.insert(fmt::format("bare-text-{}", i));
    }
    if (!tops.empty()) {
        json doc = {{"$defs", std::move(defs)}};
        try {
            gbnf += grammar::json_schema_rules(doc.dump(), tops, own);
        } catch (const grammar::SchemaError& e) {
            throw_tool_schema_error(e, chosen, true);
        }
    }
    return gbnf;
}

std::string named_calls_gbnf(const NamedCalls& calls, const json& tools, const std::vector<size_t>& chosen, bool many,
                             const std::string& start) {
    const CallsMarkup m = calls.markup();
    return "root ::= " + (start.empty() ? std::string() : start + " ") + "named-call" +
           (many ? " (" + m.between + " named-call)*" : std::string()) +
           (m.close.empty() ? "" : " (" + m.close + ")?") + " markup-ws\nmarkup-ws ::= [ \\t\\n]{0,8}\n" +
           named_call_rules(calls, tools, chosen, {"root", "markup-ws"});
}

ForcedCall forced_named(const FamilyRow& row, const json& tools, const std::vector<size_t>& chosen, bool many) {
    ForcedCall fc;
    fc.prompt_prefix = row.named->markup().forced_prefix;
    fc.gbnf = named_calls_gbnf(*row.named, tools, chosen, many, "");
    return fc;
}

LazyCall lazy_named(const FamilyRow& row, const json& tools, const std::vector<size_t>& all, bool many) {
    LazyCall lc;
    const CallsMarkup m = row.named->markup();
    lc.triggers = {{m.trigger, false}};
    lc.gbnf = named_calls_gbnf(*row.named, tools, all, many,
                               grammar::gbnf_literal(m.trigger) + (m.opening.empty() ? "" : " " + m.opening));
    return lc;
}

}  // namespace vkllm::answer::detail
