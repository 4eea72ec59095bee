// Helpers shared by the tool-call tests (test_tool_calls.cpp, test_tool_call_parsing.cpp,
// test_tool_call_grammars.cpp, test_tool_call_streams.cpp): the tools and calls they use, the
// replies each family's model writes, reading a reply whole and streamed, and fitting text to a
// grammar.
#pragma once

#include "serving/answer/answer_stream.h"
#include "serving/answer/tool_calls.h"

#include "model/grammar/grammar.h"
#include "model/tokenizer/utf8.h"
#include "serving/chat_template/chat_template.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::tool_call_testing {

namespace fs = std::filesystem;
using vkllm::chat_template::ChatInputs;
using vkllm::chat_template::ChatTemplate;
using vkllm::answer::ForceKind;
using vkllm::answer::ReplyStream;
using vkllm::answer::ToolCall;
using vkllm::answer::ToolError;
using vkllm::answer::ToolFamily;
using vkllm::answer::ToolFormat;
using vkllm::answer::tool_format;
using vkllm::grammar::Grammar;
using vkllm::grammar::Matcher;
using Json = nlohmann::ordered_json;

inline const fs::path kRoot = fs::path(VKLLM_TEMPLATES_DIR);

inline std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "cannot read " << p.string());
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline bool have_templates() {
    if (fs::exists(kRoot / "index.json")) return true;
    MESSAGE("skipped: " << (kRoot / "index.json").string() << " not found");
    return false;
}

inline bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
inline bool ends_with(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

// The tool of messages/d_tool_call.json, written here too so that the tests that do not render a
// template run without ../shared/templates.
inline Json weather_tool() {
    return Json::parse(R"({"type": "function", "function": {"name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "The city and country, e.g. San Francisco, USA"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "The temperature unit to use"}},
          "required": ["location"]}}})");
}

// A second tool, so that a parser or grammar that only knows one tool's name cannot pass.
inline Json time_tool() {
    return Json::parse(R"({"type": "function", "function": {"name": "get_time",
        "description": "Get the current time in a time zone",
        "parameters": {"type": "object", "properties": {
            "timezone": {"type": "string", "description": "IANA time zone name, e.g. Europe/Paris"}},
          "required": ["timezone"]}}})");
}

inline Json both_tools() { return Json::array({weather_tool(), time_tool()}); }

// A tool whose arguments are not all plain strings: how each template writes booleans, numbers,
// lists, untyped enums, referenced strings and markup inside strings must read back the same, and
// forced and lazy grammars must take it.
inline Json options_tool() {
    return Json::parse(R"({"type": "function", "function": {"name": "set_options",
        "description": "Set the page's options",
        "parameters": {"type": "object", "properties": {
            "verbose": {"type": "boolean", "description": "Say more"},
            "count": {"type": "integer", "description": "How many"},
            "mode": {"enum": ["fast", "slow"], "description": "The mode"},
            "label": {"$ref": "#/$defs/label", "description": "A label"},
            "html": {"type": "string", "description": "The page"},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags"},
            "note": {"type": "string", "description": "An optional note"}},
          "required": ["verbose", "count", "mode", "label", "html", "tags"],
          "$defs": {"label": {"type": "string"}}}}})");
}

struct WantCall {
    std::string name;
    Json arguments;
    std::string id;  // "" where the format has no ids
};

inline WantCall weather_call(std::string id = {}) {
    return {"get_current_weather", Json::parse(R"({"location": "Paris, France", "unit": "celsius"})"), std::move(id)};
}
inline WantCall time_call(std::string id = {}) {
    return {"get_time", Json::parse(R"({"timezone": "Europe/Paris"})"), std::move(id)};
}
// "note" left out; markup in a bare string and in a list's string.
inline WantCall options_call(std::string id = {}) {
    return {"set_options",
            Json::parse(R"({"verbose": true, "count": 3, "mode": "fast", "label": "123", "html": "<p>Hi</p>\n<br/>",)"
                        R"( "tags": ["a</parameter>b", "c</arg_value>d"]})"),
            std::move(id)};
}

// JSON as Python's json.dumps writes it (", " and ": "), the way templates and models write it;
// nlohmann's dump() only knows compact and indented.
inline std::string spaced(const Json& v) {
    if (v.is_object()) {
        std::string s = "{";
        bool first = true;
        for (const auto& [k, x] : v.items()) {
            s += (first ? "" : ", ") + Json(k).dump() + ": " + spaced(x);
            first = false;
        }
        return s + "}";
    }
    if (v.is_array()) {
        std::string s = "[";
        for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + spaced(v[i]);
        return s + "]";
    }
    return v.dump();
}

inline void check_calls(const std::vector<ToolCall>& got, const std::vector<WantCall>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].name == want[i].name);
        CHECK(got[i].id == want[i].id);
        std::optional<Json> args;
        try {
            args = Json::parse(got[i].arguments);
        } catch (const std::exception& e) {
            FAIL_CHECK("arguments are not JSON: " << got[i].arguments << " (" << e.what() << ")");
            continue;
        }
        // Compared as unordered JSON: the call is the same whatever order its keys come in.
        CHECK(nlohmann::json::parse(got[i].arguments) == nlohmann::json::parse(want[i].arguments.dump()));
        // The header promises compact JSON text of an object.
        CHECK(args->is_object());
        CHECK(got[i].arguments == args->dump());
    }
}

// What a stream gives for `text` cut into pieces: `max_chunk` 1 is byte by byte, larger is
// pseudo-random sizes 1..max_chunk from a fixed seed (a small LCG: the same pieces everywhere).
struct Streamed {
    std::string released;  // push() results, joined
    ReplyStream::Rest rest;
};
inline Streamed stream(const ToolFormat& f, const Json& tools, std::string_view text, size_t max_chunk,
                const std::string& prefix = {}) {
    ReplyStream s(f, tools, prefix);
    Streamed out;
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < text.size();) {
        size_t n = 1;
        if (max_chunk > 1) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            n = 1 + size_t((state >> 33) % max_chunk);
        }
        n = std::min(n, text.size() - i);
        out.released += s.push(text.substr(i, n));
        i += n;
    }
    out.rest = s.finish();
    return out;
}

// `text` through an AnswerStream of `f` in pieces of `piece` bytes: the reasoning and content that
// push() released and finish() gave, joined, and the calls. No content piece holds a control
// token's "<|".
inline vkllm::answer::AnswerStream::Rest read_answer(const vkllm::answer::AnswerFormat& f, std::string_view text, size_t piece) {
    vkllm::answer::AnswerStream s(f);
    std::string reasoning, content;
    for (size_t i = 0; i < text.size(); i += piece) {
        const auto p = s.push(text.substr(i, piece));
        CHECK(p.content.find("<|") == std::string::npos);
        reasoning += p.reasoning;
        content += p.content;
    }
    auto rest = s.finish();
    rest.reasoning = reasoning + rest.reasoning;
    rest.content = content + rest.content;
    return rest;
}

// The reply parsed whole, byte by byte and in random pieces: each must give `content` and `calls`.
inline void check_reply(const ToolFormat& f, const Json& tools, const std::string& text, const std::string& content,
                 const std::vector<WantCall>& calls) {
    INFO("family: " << std::string(f.name));
    CAPTURE(text);
    {
        INFO("parse_reply");
        const auto r = vkllm::answer::parse_reply(f, tools, text);
        CHECK(r.content == content);
        check_calls(r.calls, calls);
    }
    for (size_t max_chunk : {size_t(1), size_t(7)}) {
        INFO("streamed in pieces of at most " << max_chunk << " bytes");
        const auto s = stream(f, tools, text, max_chunk);
        CHECK(s.released + s.rest.content == content);
        check_calls(s.rest.calls, calls);
    }
}

// --- the grammar side ----------------------------------------------------------------------------

inline bool is_space(std::string_view ch) { return ch == " " || ch == "\n" || ch == "\t" || ch == "\r"; }

// `text` fed to a matcher of `g`, with only its whitespace outside JSON strings adjusted: a space or
// newline the grammar refuses is dropped, and where the grammar refuses a character but takes a
// space or newline before it, one is put in. The test need not know which of JSON's whitespace the
// grammar picked, while every other character must be accepted as written. nullopt when the
// grammar refuses the text, or it is not a whole sentence.
inline std::optional<std::string> fit(const Grammar& g, std::string_view text) {
    Matcher m(g);
    std::string out;
    bool in_string = false, escaped = false;
    auto track = [&](std::string_view ch) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (ch == "\\") escaped = true;
            else if (ch == "\"") in_string = false;
        } else if (ch == "\"") {
            in_string = true;
        }
    };
    for (size_t i = 0; i < text.size();) {
        const std::string_view ch = text.substr(i, vkllm::utf8::char_len(text, i));
        i += ch.size();
        if (m.accept(ch)) {
            out += ch;
            track(ch);
            continue;
        }
        if (in_string) return std::nullopt;
        if (is_space(ch)) continue;
        bool inserted = false;
        for (std::string_view ws : {" ", "\n"}) {
            Matcher probe = m;
            if (probe.accept(ws) && probe.accept(ch)) {
                m = probe;
                out += std::string(ws) + std::string(ch);
                track(ch);
                inserted = true;
                break;
            }
        }
        if (!inserted) return std::nullopt;
    }
    if (!m.can_end()) return std::nullopt;
    return out;
}

// `text` after `prefix`, the two taken as equal where they differ only in whitespace (a forced
// prefix may end in a newline that the model's own text has, or not).
inline std::optional<std::string> after_prefix(std::string_view text, std::string_view prefix) {
    size_t i = 0, j = 0;
    while (j < prefix.size()) {
        if (is_space(prefix.substr(j, 1))) {
            ++j;
        } else if (i < text.size() && is_space(text.substr(i, 1))) {
            ++i;
        } else if (i < text.size() && text[i] == prefix[j]) {
            ++i, ++j;
        } else {
            return std::nullopt;
        }
    }
    return std::string(text.substr(i));
}

// A JSON list of {name_key: NAME, args_key: {...}} as models write it.
inline std::string call_list(const std::vector<WantCall>& calls, const char* name_key, const char* args_key) {
    std::string s = "[";
    for (size_t i = 0; i < calls.size(); ++i)
        s += (i ? ", {" : "{") + Json(name_key).dump() + ": " + Json(calls[i].name).dump() + ", " + Json(args_key).dump() +
             ": " + spaced(calls[i].arguments) + "}";
    return s + "]";
}

// The reply each of these families' models writes for `calls`, in the shape its template renders
// (or, for Granite, whose template renders no calls, the one its system prompt asks for).
inline std::string shaped_reply(ToolFamily f, const std::vector<WantCall>& calls) {
    std::string s;
    switch (f) {
    case ToolFamily::FunctionaryV32:  // after the prompt's ">>>"
        for (size_t i = 0; i < calls.size(); ++i) s += (i ? ">>>" : "") + calls[i].name + "\n" + calls[i].arguments.dump();
        return s;
    case ToolFamily::Granite: return "<|tool_call|>" + call_list(calls, "name", "arguments");
    case ToolFamily::KimiK2:
        s = "<|tool_calls_section_begin|>";
        for (size_t i = 0; i < calls.size(); ++i)
            s += "<|tool_call_begin|>functions." + calls[i].name + ":" + std::to_string(i) + "<|tool_call_argument_begin|>" +
                 spaced(calls[i].arguments) + "<|tool_call_end|>";
        return s + "<|tool_calls_section_end|>";
    case ToolFamily::Glm45:
        for (size_t i = 0; i < calls.size(); ++i) {
            s += (i ? "\n" : "") + std::string("<tool_call>") + calls[i].name + "\n";
            for (const auto& [k, v] : calls[i].arguments.items())
                s += "<arg_key>" + k + "</arg_key>\n<arg_value>" + (v.is_string() ? v.get<std::string>() : v.dump()) +
                     "</arg_value>\n";
            s += "</tool_call>";
        }
        return s;
    case ToolFamily::CommandRPlus:
        // As the model writes it after the template's closing instruction (its own history adds
        // newlines and indentation; the round trip with the template reads those).
        return "Action: ```json\n" + call_list(calls, "tool_name", "parameters") + "\n```";
    default: return {};
    }
}

// The reply each family's model writes for `calls` (the shapes its template renders; shaped_reply's
// for the families it covers); nullopt for a family without one here.
inline std::optional<std::string> native_reply(ToolFamily f, const std::vector<WantCall>& calls, bool with_ids) {
    std::string s;
    switch (f) {
        case ToolFamily::Hermes:
            for (size_t i = 0; i < calls.size(); ++i)
                s += (i ? "\n" : "") + std::string("<tool_call>\n{\"name\": ") + Json(calls[i].name).dump() +
                     ", \"arguments\": " + spaced(calls[i].arguments) + "}\n</tool_call>";
            return s;
        case ToolFamily::Llama3:
            for (const auto& c : calls)
                s += "{\"name\": " + Json(c.name).dump() + ", \"parameters\": " + spaced(c.arguments) + "}";
            return s;
        case ToolFamily::MistralNemo:
            s = "[TOOL_CALLS][";
            for (size_t i = 0; i < calls.size(); ++i) {
                s += (i ? ", " : "") + std::string("{\"name\": ") + Json(calls[i].name).dump() +
                     ", \"arguments\": " + spaced(calls[i].arguments);
                if (with_ids) s += ", \"id\": " + Json(calls[i].id).dump();
                s += "}";
            }
            return s + "]";
        case ToolFamily::Generic:
            s = "{\"tool_calls\": [";
            for (size_t i = 0; i < calls.size(); ++i)
                s += (i ? ", " : "") + std::string("{\"name\": ") + Json(calls[i].name).dump() +
                     ", \"arguments\": " + spaced(calls[i].arguments) + "}";
            return s + "]}";
        case ToolFamily::FunctionaryV31:
            for (const auto& c : calls) s += "<function=" + c.name + ">" + spaced(c.arguments) + "</function>";
            return s;
        case ToolFamily::MistralV11:
            for (const auto& c : calls)
                s += "[TOOL_CALLS]" + c.name + (with_ids ? "[CALL_ID]" + c.id : std::string()) + "[ARGS]" + c.arguments.dump();
            return s;
        case ToolFamily::DeepSeekV31:
        case ToolFamily::DeepSeekR1: {
            const bool r1 = f == ToolFamily::DeepSeekR1;
            s = "<｜tool▁calls▁begin｜>";
            for (size_t i = 0; i < calls.size(); ++i)
                s += (i ? "\n" : "") + std::string("<｜tool▁call▁begin｜>") + (r1 ? "function<｜tool▁sep｜>" : "") + calls[i].name +
                     (r1 ? "\n```json\n" + calls[i].arguments.dump() + "\n```" : "<｜tool▁sep｜>" + calls[i].arguments.dump()) +
                     "<｜tool▁call▁end｜>";
            return s + "<｜tool▁calls▁end｜>";
        }
        case ToolFamily::QwenCoder:
            for (size_t i = 0; i < calls.size(); ++i) {
                s += (i ? "\n" : "") + std::string("<tool_call>\n<function=") + calls[i].name + ">\n";
                for (const auto& [k, v] : calls[i].arguments.items())
                    s += "<parameter=" + k + ">\n" + (v.is_string() ? v.get<std::string>() : v.dump()) + "\n</parameter>\n";
                s += "</function>\n</tool_call>";
            }
            return s;
        case ToolFamily::Granite:
        case ToolFamily::CommandRPlus:
        case ToolFamily::KimiK2:
        case ToolFamily::FunctionaryV32:
        case ToolFamily::Glm45: return shaped_reply(f, calls);
        default: return std::nullopt;
    }
}

struct TemplateFile {
    std::string source, bos, eos;
};

// The templates of index.json by name, with the bos and eos strings their cases use.
inline std::map<std::string, TemplateFile> template_files() {
    std::map<std::string, TemplateFile> out;
    const auto index = Json::parse(read_file(kRoot / "index.json"));
    for (const auto& c : index["cases"]) {
        const std::string name = c["template_name"].get<std::string>();
        if (out.count(name)) continue;
        out[name] = {read_file(kRoot / c["template"].get<std::string>()), c["bos"].get<std::string>(),
                     c["eos"].get<std::string>()};
    }
    return out;
}

inline const std::vector<ToolFamily> kNewFamilies = {ToolFamily::FunctionaryV32, ToolFamily::Granite, ToolFamily::KimiK2,
                                                     ToolFamily::Glm45, ToolFamily::CommandRPlus};

// Kimi K2's calls carry the id its template makes of the name and the call's index.
inline std::vector<WantCall> with_ids(ToolFamily f, std::vector<WantCall> calls) {
    if (f == ToolFamily::KimiK2)
        for (size_t i = 0; i < calls.size(); ++i) calls[i].id = "functions." + calls[i].name + ":" + std::to_string(i);
    return calls;
}

// A tool list of one tool "f" with these parameters.
inline Json one_tool(Json parameters) {
    return Json::array({Json{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", std::move(parameters)}}}}});
}

}  // namespace vkllm::tool_call_testing
