// Tool calls (serving/answer/tool_calls.h): the family each real chat template of
// ../shared/templates speaks; replies rendered by those templates themselves parsed back into the
// calls they were rendered from, whole and streamed in any pieces; call markup never leaking into
// streamed content; malformed calls coming back as content; forced calls whose grammar accepts the
// calls the parser reads and refuses the ones it must not; the checks on `tools`.
//
// The oracle for the round trips is the model's own template: what it renders for an assistant
// turn with tool calls is what the model was trained to write, so the parser must read it back.
#include "serving/answer/answer_stream.h"
#include "serving/answer/tool_calls.h"

#include "model/grammar/grammar.h"
#include "model/tokenizer/utf8.h"
#include "serving/template/chat_template.h"

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

namespace fs = std::filesystem;
using vkllm::chat::ChatInputs;
using vkllm::chat::ChatTemplate;
using vkllm::chat::ForceKind;
using vkllm::chat::ReplyStream;
using vkllm::chat::ToolCall;
using vkllm::chat::ToolError;
using vkllm::chat::ToolFamily;
using vkllm::chat::ToolFormat;
using vkllm::chat::tool_format;
using vkllm::grammar::Grammar;
using vkllm::grammar::Matcher;
using Json = nlohmann::ordered_json;

namespace {

const fs::path kRoot = fs::path(VKLLM_TEMPLATES_DIR);

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "cannot read " << p.string());
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

bool have_templates() {
    if (fs::exists(kRoot / "index.json")) return true;
    MESSAGE("skipped: " << (kRoot / "index.json").string() << " not found");
    return false;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

// The tool of messages/d_tool_call.json, written here too so that the tests that do not render a
// template run without ../shared/templates.
Json weather_tool() {
    return Json::parse(R"({"type": "function", "function": {"name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "The city and country, e.g. San Francisco, USA"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "The temperature unit to use"}},
          "required": ["location"]}}})");
}

// A second tool, so that a parser or grammar that only knows one tool's name cannot pass.
Json time_tool() {
    return Json::parse(R"({"type": "function", "function": {"name": "get_time",
        "description": "Get the current time in a time zone",
        "parameters": {"type": "object", "properties": {
            "timezone": {"type": "string", "description": "IANA time zone name, e.g. Europe/Paris"}},
          "required": ["timezone"]}}})");
}

Json both_tools() { return Json::array({weather_tool(), time_tool()}); }

// A tool whose arguments are not all plain strings: how each template writes booleans, numbers,
// lists, untyped enums, referenced strings and markup inside strings must read back the same, and
// forced and lazy grammars must take it.
Json options_tool() {
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

WantCall weather_call(std::string id = {}) {
    return {"get_current_weather", Json::parse(R"({"location": "Paris, France", "unit": "celsius"})"), std::move(id)};
}
WantCall time_call(std::string id = {}) {
    return {"get_time", Json::parse(R"({"timezone": "Europe/Paris"})"), std::move(id)};
}
// "note" left out; markup in a bare string and in a list's string.
WantCall options_call(std::string id = {}) {
    return {"set_options",
            Json::parse(R"({"verbose": true, "count": 3, "mode": "fast", "label": "123", "html": "<p>Hi</p>\n<br/>",)"
                        R"( "tags": ["a</parameter>b", "c</arg_value>d"]})"),
            std::move(id)};
}

// JSON as Python's json.dumps writes it (", " and ": "), the way templates and models write it;
// nlohmann's dump() only knows compact and indented.
std::string spaced(const Json& v) {
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

void check_calls(const std::vector<ToolCall>& got, const std::vector<WantCall>& want) {
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
Streamed stream(const ToolFormat& f, const Json& tools, std::string_view text, size_t max_chunk,
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
vkllm::chat::AnswerStream::Rest read_answer(const vkllm::chat::AnswerFormat& f, std::string_view text, size_t piece) {
    vkllm::chat::AnswerStream s(f);
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
void check_reply(const ToolFormat& f, const Json& tools, const std::string& text, const std::string& content,
                 const std::vector<WantCall>& calls) {
    INFO("family: " << std::string(f.name));
    CAPTURE(text);
    {
        INFO("parse_reply");
        const auto r = vkllm::chat::parse_reply(f, tools, text);
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

bool is_space(std::string_view ch) { return ch == " " || ch == "\n" || ch == "\t" || ch == "\r"; }

// `text` fed to a matcher of `g`, with only its whitespace outside JSON strings adjusted: a space or
// newline the grammar refuses is dropped, and where the grammar refuses a character but takes a
// space or newline before it, one is put in. The test need not know which of JSON's whitespace the
// grammar picked, while every other character must be accepted as written. nullopt when the
// grammar refuses the text, or it is not a whole sentence.
std::optional<std::string> fit(const Grammar& g, std::string_view text) {
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
std::optional<std::string> after_prefix(std::string_view text, std::string_view prefix) {
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
std::string call_list(const std::vector<WantCall>& calls, const char* name_key, const char* args_key) {
    std::string s = "[";
    for (size_t i = 0; i < calls.size(); ++i)
        s += (i ? ", {" : "{") + Json(name_key).dump() + ": " + Json(calls[i].name).dump() + ", " + Json(args_key).dump() +
             ": " + spaced(calls[i].arguments) + "}";
    return s + "]";
}

// The reply each of these families' models writes for `calls`, in the shape its template renders
// (or, for Granite, whose template renders no calls, the one its system prompt asks for).
std::string shaped_reply(ToolFamily f, const std::vector<WantCall>& calls) {
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
std::optional<std::string> native_reply(ToolFamily f, const std::vector<WantCall>& calls, bool with_ids) {
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

// The families' expected table entries, as the header documents them.
const std::map<std::string, ToolFamily>& expected_families() {
    static const std::map<std::string, ToolFamily> m = {
        {"Qwen-Qwen2.5-7B-Instruct", ToolFamily::Hermes},
        {"Qwen-Qwen3-0.6B", ToolFamily::Hermes},
        {"Qwen-QwQ-32B", ToolFamily::Hermes},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", ToolFamily::Hermes},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolFamily::Hermes},
        {"Qwen3-Coder", ToolFamily::QwenCoder},
        {"meta-llama-Llama-3.1-8B-Instruct", ToolFamily::Llama3},
        {"meta-llama-Llama-3.2-3B-Instruct", ToolFamily::Llama3},
        {"meta-llama-Llama-3.3-70B-Instruct", ToolFamily::Llama3},
        {"mistralai-Mistral-Nemo-Instruct-2407", ToolFamily::MistralNemo},
        {"Mistral-Small-3.2-24B-Instruct-2506", ToolFamily::MistralV11},
        {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", ToolFamily::DeepSeekR1},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolFamily::DeepSeekR1},
        {"deepseek-ai-DeepSeek-V3.1", ToolFamily::DeepSeekV31},
        {"meetkai-functionary-medium-v3.1", ToolFamily::FunctionaryV31},
        {"meetkai-functionary-medium-v3.2", ToolFamily::FunctionaryV32},
        {"ibm-granite-granite-3.3-2B-Instruct", ToolFamily::Granite},
        {"moonshotai-Kimi-K2", ToolFamily::KimiK2},
        {"GLM-4.6", ToolFamily::Glm45},
        {"CohereForAI-c4ai-command-r-plus-tool_use", ToolFamily::CommandRPlus},
        {"openai-gpt-oss-120b", ToolFamily::Harmony},
        {"google-gemma-2-2b-it", ToolFamily::Generic},
        {"microsoft-Phi-3.5-mini-instruct", ToolFamily::Generic},
        {"HuggingFaceTB-SmolLM3-3B", ToolFamily::Generic},
    };
    return m;
}

struct TemplateFile {
    std::string source, bos, eos;
};

// The templates of index.json by name, with the bos and eos strings their cases use.
std::map<std::string, TemplateFile> template_files() {
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

}  // namespace

TEST_CASE("tool calls: every family has its row, with the force kind the header documents") {
    // Several rows may share a family (the unsupported formats each have one, for detection);
    // tool_format() gives the family's own row.
    for (const ToolFormat& f : vkllm::chat::tool_formats()) {
        INFO("row: " << std::string(f.name));
        CHECK(tool_format(f.family).family == f.family);
        CHECK(std::string(f.name).size() > 0);
    }
    const std::vector<ToolFamily> parsed = {
        ToolFamily::Generic,        ToolFamily::Hermes,         ToolFamily::QwenCoder,  ToolFamily::Llama3,
        ToolFamily::MistralNemo,    ToolFamily::MistralV11,     ToolFamily::DeepSeekR1, ToolFamily::DeepSeekV31,
        ToolFamily::FunctionaryV31, ToolFamily::FunctionaryV32, ToolFamily::Granite,    ToolFamily::KimiK2,
        ToolFamily::Glm45,          ToolFamily::CommandRPlus,   ToolFamily::CommandR7B, ToolFamily::Harmony};
    for (ToolFamily f : parsed) CHECK(tool_format(f).family == f);
    CHECK(vkllm::chat::tool_formats().size() == parsed.size());
    // A call object names its tool in JSON; NamedMarkup families in markup (text, or control tokens
    // the request speaks); gpt-oss in the header the prompt holds.
    for (ToolFamily f : {ToolFamily::Hermes, ToolFamily::Llama3, ToolFamily::MistralNemo, ToolFamily::Granite, ToolFamily::Generic,
                         ToolFamily::CommandRPlus, ToolFamily::CommandR7B})
        CHECK(tool_format(f).force == ForceKind::CallObject);
    for (ToolFamily f : {ToolFamily::QwenCoder, ToolFamily::FunctionaryV31, ToolFamily::FunctionaryV32, ToolFamily::Glm45,
                         ToolFamily::MistralV11, ToolFamily::DeepSeekR1, ToolFamily::DeepSeekV31, ToolFamily::KimiK2})
        CHECK(tool_format(f).force == ForceKind::NamedMarkup);
    CHECK(tool_format(ToolFamily::Harmony).force == ForceKind::NamedPrefix);
    // Formats that hold several calls in one reply, as their templates render them.
    for (ToolFamily f : {ToolFamily::Hermes, ToolFamily::QwenCoder, ToolFamily::MistralNemo, ToolFamily::DeepSeekV31,
                         ToolFamily::FunctionaryV32, ToolFamily::Granite, ToolFamily::KimiK2, ToolFamily::Glm45,
                         ToolFamily::CommandRPlus, ToolFamily::CommandR7B})
        CHECK(tool_format(f).parallel);
}

TEST_CASE("tool calls: each real template is detected as the family its model speaks") {
    if (!have_templates()) return;
    const auto files = template_files();
    for (const auto& [name, family] : expected_families()) {
        CAPTURE(name);
        REQUIRE_MESSAGE(fs::exists(kRoot / "templates" / (name + ".jinja")), "template missing");
        const std::string source = read_file(kRoot / "templates" / (name + ".jinja"));
        const ToolFormat& got = vkllm::chat::detect_tool_format(source);
        INFO("detected " << std::string(got.name) << ", expected " << std::string(tool_format(family).name));
        CHECK(got.family == family);
    }
    for (const auto& [name, file] : files)
        if (!expected_families().count(name))
            MESSAGE(name << ": detected as " << std::string(vkllm::chat::detect_tool_format(file.source).name) << " (not checked)");
}

TEST_CASE("tool calls: template_renders_tools agrees with what the template renders") {
    if (!have_templates()) return;
    // The oracle: a template renders `tools` when its prompt changes with them.
    for (const auto& [name, file] : template_files()) {
        CAPTURE(name);
        ChatTemplate t(file.source, name);
        std::optional<bool> differs;
        std::string error;
        // Some templates refuse a system message (Gemma): then without one.
        for (bool with_system : {true, false}) {
            if (differs) break;
            ChatInputs in;
            if (with_system) in.messages.push_back({{"role", "system"}, {"content", "You are helpful."}});
            in.messages.push_back({{"role", "user"}, {"content", "What is the weather like in Paris?"}});
            in.bos_token = file.bos;
            in.eos_token = file.eos;
            in.now = "2024-07-26 00:00:00";
            // Hermes 2 Pro and Command R iterate `tools` unconditionally: for them "without" is an
            // empty list.
            for (const Json& none : {Json(nullptr), Json::array()}) {
                if (differs) break;
                try {
                    in.tools = none;
                    const std::string without = t.apply(in);
                    in.tools = both_tools();
                    differs = t.apply(in) != without;
                } catch (const std::exception& e) {
                    error = e.what();
                }
            }
        }
        if (!differs) {
            MESSAGE(name << ": cannot render (" << error << "), not checked");
            continue;
        }
        CHECK(vkllm::chat::template_renders_tools(file.source) == *differs);
    }
}

TEST_CASE("tool calls: calls rendered by each model's own template parse back, whole and streamed") {
    if (!have_templates()) return;
    const Json d_tool_call = Json::parse(read_file(kRoot / "messages" / "d_tool_call.json"));
    Json tools = d_tool_call["tools"];
    tools.push_back(time_tool());
    tools.push_back(options_tool());
    const std::string system = d_tool_call["messages"][0]["content"].get<std::string>();
    const std::string user = d_tool_call["messages"][1]["content"].get<std::string>();
    // The families whose templates must render a call this runtime reads back.
    const std::vector<std::string> must = {
        "Qwen-Qwen2.5-7B-Instruct", "Qwen3-Coder", "meta-llama-Llama-3.1-8B-Instruct",
        "mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506", "deepseek-ai-DeepSeek-V3.1",
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "meetkai-functionary-medium-v3.1", "meetkai-functionary-medium-v3.2",
        "moonshotai-Kimi-K2", "GLM-4.6", "CohereForAI-c4ai-command-r-plus-tool_use"};
    // The turn ends here in what a template renders; generation stops at these tokens.
    const std::vector<std::string> end_of_turn = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>",
                                                  "<｜end▁of▁sentence｜>"};

    const auto files = template_files();
    size_t round_trips = 0, lazy_checked = 0, forced_checked = 0;
    for (const auto& [name, family] : expected_families()) {
        // Harmony's round trips are test_harmony's: its replies are read by HarmonyStream.
        if (family == ToolFamily::Generic || family == ToolFamily::Harmony) continue;
        CAPTURE(name);
        const TemplateFile& file = files.at(name);
        const bool required = std::find(must.begin(), must.end(), name) != must.end();
        const ToolFormat& format = tool_format(family);
        ChatTemplate tmpl(file.source, name);
        // Ids of nine characters: Mistral's templates refuse any other. The assistant's text, where
        // its template renders it beside the calls, is the reply's content.
        const std::vector<std::pair<std::string, std::vector<WantCall>>> turns = {
            {"", {weather_call("call00001")}},
            {"", {weather_call("call00001"), time_call("call00002")}},
            {"Let me check.", {weather_call("call00001")}},
            {"", {options_call("call00003")}}};
        for (const auto& [text, calls] : turns) {
            if (calls.size() > 1 && !format.parallel) continue;
            CAPTURE(calls.size());
            CAPTURE(text);
            // Templates disagree on what an assistant turn with calls looks like in the messages:
            // most take arguments as an object, DeepSeek R1's and Functionary v3.2's concatenate
            // them as a string; R1's drops the calls unless content is null, Command R+'s writes a
            // null content as "None" (so "" is tried first); some want a system message, some do
            // without. The first shape that renders every call is used.
            std::optional<std::string> reply;
            std::string last_error = "the calls do not appear in the render";
            for (bool with_system : {true, false}) {
                for (bool string_args : {false, true}) {
                    for (bool null_content : {false, true}) {
                        if (reply) break;
                        Json prompt = Json::array();
                        if (with_system) prompt.push_back({{"role", "system"}, {"content", system}});
                        prompt.push_back({{"role", "user"}, {"content", user}});
                        Json tool_calls = Json::array();
                        for (const auto& c : calls) {
                            const Json args = string_args ? Json(c.arguments.dump()) : c.arguments;
                            tool_calls.push_back({{"id", c.id},
                                                  {"type", "function"},
                                                  {"function", {{"name", c.name}, {"arguments", args}}}});
                        }
                        Json conversation = prompt;
                        conversation.push_back({{"role", "assistant"},
                                                {"content", null_content && text.empty() ? Json(nullptr) : Json(text)},
                                                {"tool_calls", tool_calls}});
                        ChatInputs in;
                        in.tools = tools;
                        in.bos_token = file.bos;
                        in.eos_token = file.eos;
                        in.now = "2024-07-26 00:00:00";
                        std::string gen, full;
                        try {
                            in.messages = prompt;
                            in.add_generation_prompt = true;
                            gen = tmpl.apply(in);
                            in.messages = conversation;
                            in.add_generation_prompt = false;
                            full = tmpl.apply(in);
                        } catch (const std::exception& e) {
                            last_error = e.what();
                            continue;
                        }
                        if (!starts_with(full, gen)) {
                            // DeepSeek R1 and QwQ open a reasoning block in the generation prompt
                            // (and close it at once when thinking is off) that their rendered
                            // history does not show; reasoning is split off before calls are
                            // parsed, so the reply begins where the prompt did before that block.
                            for (std::string_view opener : {"<think>\n</think>", "<think>\n", "<think>"})
                                if (ends_with(gen, opener) && starts_with(full, gen.substr(0, gen.size() - opener.size()))) {
                                    gen.resize(gen.size() - opener.size());
                                    break;
                                }
                        }
                        std::string r;
                        if (starts_with(full, gen)) {
                            r = full.substr(gen.size());
                        } else {
                            // Command R+'s template ends every prompt with an instruction after the
                            // history, and the reply's turn goes in before it: the prompt without
                            // the generation prompt's header is history + ending, the conversation
                            // history + header + reply + ending.
                            std::string base;
                            try {
                                in.messages = prompt;
                                in.add_generation_prompt = false;
                                base = tmpl.apply(in);
                            } catch (const std::exception& e) {
                                last_error = e.what();
                                continue;
                            }
                            std::optional<std::string> cut;
                            if (starts_with(gen, base) && gen.size() > base.size()) {
                                const std::string header = gen.substr(base.size());
                                // The history ends at or before where the two renders part.
                                size_t common = 0;
                                while (common < base.size() && common < full.size() && base[common] == full[common]) ++common;
                                for (size_t n = common + 1; n > 0 && !cut; --n) {
                                    const size_t k = n - 1;
                                    const std::string history = base.substr(0, k), ending = base.substr(k);
                                    if (full.size() >= base.size() + header.size() && starts_with(full, history + header) &&
                                        ends_with(full, ending))
                                        cut = full.substr(k + header.size(), full.size() - base.size() - header.size());
                                }
                            }
                            if (!cut) {
                                last_error = "the render of the conversation does not begin with the generation prompt";
                                continue;
                            }
                            r = *cut;
                        }
                        // Qwen3 and GLM show the last assistant turn's (empty) reasoning before
                        // its content; that is reasoning, split off before calls are parsed.
                        if (starts_with(r.substr(std::min(r.size(), r.find_first_not_of(" \n"))), "<think>")) {
                            const size_t close = r.find("</think>");
                            if (close != std::string::npos) {
                                r.erase(0, close + std::string_view("</think>").size());
                                r.erase(0, r.find_first_not_of(" \n"));
                            }
                        }
                        size_t cut = r.size();
                        for (const std::string& eot : end_of_turn) cut = std::min(cut, r.find(eot));
                        if (!file.eos.empty()) cut = std::min(cut, r.find(file.eos));
                        r.resize(cut);
                        bool all = true;
                        for (const auto& c : calls) all = all && r.find(c.name) != std::string::npos;
                        // Templates that drop the text beside calls (Llama 3's) are read without it.
                        if (all && (text.empty() || r.find(text) != std::string::npos)) reply = r;
                    }
                }
            }
            if (!reply) {
                if (required && calls.size() == 1 && text.empty())
                    FAIL_CHECK(name << " cannot render a call: " << last_error);
                else
                    MESSAGE(name << ": cannot render " << calls.size() << " call(s): " << last_error);
                continue;
            }
            MESSAGE(name << " (" << std::string(format.name) << "), " << calls.size() << " call(s), reply:\n" << *reply);
            // Ids come back only where the model writes them: Mistral's formats the ones it was
            // given, Kimi K2 the ones its template makes of the name and the call's index.
            std::vector<WantCall> want = calls;
            for (size_t i = 0; i < want.size(); ++i) {
                const std::string kimi_id = "functions." + want[i].name + ":" + std::to_string(i);
                if (reply->find(want[i].id) == std::string::npos) want[i].id.clear();
                if (reply->find(kimi_id) != std::string::npos) want[i].id = kimi_id;
            }
            check_reply(format, tools, *reply, text, want);
            ++round_trips;
            // tool_choice required: the forced grammar takes the calls the model was trained to write
            // after the forced prefix (control-token markers as their text: a request with tools
            // speaks them).
            if (text.empty() && (format.force != ForceKind::NamedPrefix || calls.size() == 1)) {
                const std::string only = format.force == ForceKind::NamedPrefix ? calls[0].name : std::string();
                vkllm::chat::ForcedCall fc;
                REQUIRE_NOTHROW(fc = vkllm::chat::forced_call(format, tools, only, true));
                CAPTURE(fc.prompt_prefix);
                // The prefix leaves out the call id Mistral's template writes back (the parser takes both).
                std::string written = *reply;
                if (const size_t id = written.find("[CALL_ID]" + calls[0].id); id != std::string::npos)
                    written.erase(id, std::string("[CALL_ID]").size() + calls[0].id.size());
                const auto rest = after_prefix(written, fc.prompt_prefix);
                REQUIRE_MESSAGE(rest.has_value(), "the reply does not begin with the forced prefix");
                std::string body = *rest;
                while (!body.empty() && is_space(std::string_view(body).substr(body.size() - 1))) body.pop_back();
                CHECK_MESSAGE(fit(Grammar::parse(fc.gbnf), body).has_value(), "the forced grammar refuses:\n" << body);
                ++forced_checked;
            }
            // tool_choice auto: the family's lazy grammar holds from the call marker on and must let
            // through the calls the model was trained to write.
            const vkllm::chat::LazyCall lazy = vkllm::chat::lazy_call(format, tools, true);
            if (!lazy.gbnf.empty()) {
                const size_t at = vkllm::grammar::find_trigger(*reply, {lazy.triggers});
                REQUIRE(at != std::string::npos);
                const Grammar g = Grammar::parse(lazy.gbnf);
                Matcher m(g);
                CHECK(m.accept(std::string_view(*reply).substr(at)));
                CHECK(m.can_end());
                ++lazy_checked;
            }
        }
    }
    CHECK(round_trips >= must.size());
    // hermes (Qwen, Hermes), llama3, mistral-nemo, mistral-v11, deepseek, kimi-k2, qwen3-coder, glm-4.5,
    // functionary-v3.1 and v3.2, gpt-oss, command-r-plus (64 renders today); Granite's template renders no calls.
    CHECK(lazy_checked >= 64);
    CHECK(forced_checked >= 20);
}

TEST_CASE("tool calls: text before a Hermes call is content, and the markup never reaches it") {
    const ToolFormat& hermes = tool_format(ToolFamily::Hermes);
    const Json tools = both_tools();
    const std::string call =
        "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, France\", \"unit\": "
        "\"celsius\"}}\n</tool_call>";
    const std::string text = "Let me check.\n" + call;
    // Whitespace between the text and the call is the call's layout, not content.
    check_reply(hermes, tools, text, "Let me check.", {weather_call()});

    // Held back from the first '<' until it is known to open the call: what push() released may
    // hold none of the marker, not even its first character.
    const auto s = stream(hermes, tools, text, 1);
    CHECK(s.released.find('<') == std::string::npos);
    CHECK(s.released + s.rest.content == "Let me check.");

    // Markup that is not a call is content, as written.
    check_reply(hermes, tools, "Hello <b>world</b>", "Hello <b>world</b>", {});
    check_reply(hermes, tools, "Use <tool_callx> or <tool_call", "Use <tool_callx> or <tool_call", {});

    // A reply ending in a marker's beginning: held back while it might open a call, then released
    // by finish() when the reply ends there.
    const std::string partial = "Hello <tool_ca";
    check_reply(hermes, tools, partial, partial, {});
    const auto p = stream(hermes, tools, partial, 1);
    CHECK(p.released.find("<tool_ca") == std::string::npos);
    CHECK(p.released + p.rest.content == partial);
    CHECK(p.rest.calls.empty());
}

TEST_CASE("tool calls: malformed calls come back as content, exactly as written") {
    const Json tools = both_tools();
    const ToolFormat& hermes = tool_format(ToolFamily::Hermes);
    const std::vector<std::string> bad_calls = {
        // bad JSON
        "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": }\n</tool_call>",
        // a tool the request does not have
        "<tool_call>\n{\"name\": \"get_stock_price\", \"arguments\": {\"symbol\": \"ACME\"}}\n</tool_call>",
        // arguments that are neither an object nor JSON text of one
        "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": \"Paris, France\"}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": [\"Paris, France\"]}\n</tool_call>",
        // no name
        "<tool_call>\n{\"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
        // cut off inside the call
        "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"locat",
    };
    for (const std::string& bad : bad_calls) {
        // Nothing is dropped around a call that is not one: not even the whitespace before it.
        check_reply(hermes, tools, bad, bad, {});
        check_reply(hermes, tools, "Sure.\n" + bad, "Sure.\n" + bad, {});
    }

    // The other families' markup, malformed, is content too.
    const std::vector<std::pair<ToolFamily, std::string>> others = {
        {ToolFamily::MistralNemo, "[TOOL_CALLS][{\"name\": \"get_stock_price\", \"arguments\": {\"symbol\": \"ACME\"}}]"},
        {ToolFamily::MistralNemo, "[TOOL_CALLS][{\"name\": \"get_current_weather\", \"arguments\": {\"location\": "},
        {ToolFamily::MistralV11, "[TOOL_CALLS]get_stock_price[ARGS]{\"symbol\": \"ACME\"}"},
        {ToolFamily::MistralV11, "[TOOL_CALLS]get_current_weather[ARGS]{\"location\" \"Paris\"}"},
        {ToolFamily::FunctionaryV31, "<function=get_stock_price>{\"symbol\": \"ACME\"}</function>"},
        {ToolFamily::FunctionaryV31, "<function=get_current_weather>[\"Paris\"]</function>"},
        {ToolFamily::DeepSeekV31,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_current_weather<｜tool▁sep｜>{\"location\": Paris}<｜tool▁call▁end｜><"
         "｜tool▁calls▁end｜>"},
        {ToolFamily::Llama3, "{\"name\": \"get_stock_price\", \"parameters\": {\"symbol\": \"ACME\"}}"},
        {ToolFamily::Generic, "{\"tool_calls\": [{\"name\": \"get_stock_price\", \"arguments\": {\"symbol\": \"ACME\"}}]}"},
        // Functionary v3.2: the reply begins with its first part's recipient (the prompt wrote ">>>").
        {ToolFamily::FunctionaryV32, "get_stock_price\n{\"symbol\": \"ACME\"}"},
        {ToolFamily::FunctionaryV32, "get_current_weather\n{\"location\": }"},
        {ToolFamily::FunctionaryV32, "get_current_weather\n[\"Paris\"]"},
        {ToolFamily::FunctionaryV32, "get_current_weather\n{\"location\": \"Paris\"}>>>get_time\n{\"timezone\": \"Eur"},
        {ToolFamily::FunctionaryV32, ">>>get_current_weather\nParis"},
        {ToolFamily::Granite, "<|tool_call|>[{\"name\": \"get_stock_price\", \"arguments\": {\"symbol\": \"ACME\"}}]"},
        {ToolFamily::Granite, "<|tool_call|>{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris\"}}"},
        {ToolFamily::Granite, "<|tool_call|>[]"},
        {ToolFamily::Granite, "<|tool_call|>[{\"name\": \"get_current_weather\", \"arguments\": {\"location\": "},
        {ToolFamily::KimiK2,
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_stock_price:0<|tool_call_argument_begin|>"
         "{\"symbol\": \"ACME\"}<|tool_call_end|><|tool_calls_section_end|>"},
        {ToolFamily::KimiK2,
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_current_weather:0<|tool_call_argument_begin|>"
         "{\"location\": Paris}<|tool_call_end|><|tool_calls_section_end|>"},
        {ToolFamily::KimiK2, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_current_weather:0{\"location\": \"Paris\"}"},
        {ToolFamily::Glm45, "<tool_call>get_stock_price\n<arg_key>symbol</arg_key>\n<arg_value>ACME</arg_value>\n</tool_call>"},
        {ToolFamily::Glm45, "<tool_call>get_current_weather\n<arg_key>location</arg_key>\n<arg_value>Paris\n</tool_call>"},
        {ToolFamily::Glm45, "<tool_call>get_current_weather\n<arg_key></arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"},
        {ToolFamily::Glm45, "<tool_call>get_current_weather\n<arg_key>location</arg_key>\n"},
        {ToolFamily::CommandRPlus, "Action:\n```json\n[{\"tool_name\": \"get_stock_price\", \"parameters\": {\"symbol\": \"ACME\"}}]```"},
        // The template's instruction offers `directly-answer`, a tool no request has: a reply whose
        // only action it is has no call, and comes back as written.
        {ToolFamily::CommandRPlus, "Action: ```json\n[{\"tool_name\": \"directly-answer\", \"parameters\": {}}]\n```"},
        {ToolFamily::CommandRPlus, "Action: ```json\n[{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris\"}}]\n```"},
        {ToolFamily::CommandRPlus, "Action: ```json\n[{\"tool_name\": \"get_current_weather\", \"parameters\": \"Paris\"}]\n```"},
        {ToolFamily::CommandRPlus, "Action: take the umbrella."},
    };
    for (const auto& [family, bad] : others) check_reply(tool_format(family), tools, bad, bad, {});
}

TEST_CASE("tool calls: Llama 3 replies are a call object, with or without <|python_tag|>") {
    const ToolFormat& llama = tool_format(ToolFamily::Llama3);
    const Json tools = both_tools();
    const WantCall paris{"get_current_weather", Json::parse(R"({"location": "Paris"})"), ""};
    check_reply(llama, tools, R"({"name": "get_current_weather", "parameters": {"location": "Paris"}})", "", {paris});
    check_reply(llama, tools, R"(<|python_tag|>{"name": "get_current_weather", "parameters": {"location": "Paris"}})", "",
                {paris});
    // JSON that is not a call is an answer.
    check_reply(llama, tools, R"({"answer": 42})", R"({"answer": 42})", {});
    check_reply(llama, tools, "It is sunny in Paris.", "It is sunny in Paris.", {});
}

TEST_CASE("tool calls: Generic replies are {\"tool_calls\": [...]}, anything else is content") {
    const ToolFormat& generic = tool_format(ToolFamily::Generic);
    const Json tools = both_tools();
    check_reply(generic, tools, R"({"tool_calls": [{"name": "get_current_weather", "arguments": {"location": "Paris"}}]})",
                "", {{"get_current_weather", Json::parse(R"({"location": "Paris"})"), ""}});
    check_reply(generic, tools, "It is sunny in Paris, {\"as\": \"usual\"}.", "It is sunny in Paris, {\"as\": \"usual\"}.",
                {});
}

TEST_CASE("tool calls: arguments keep their text, escapes and non-ASCII through any split") {
    const Json tools = both_tools();
    // Escaped quotes, a backslash, non-ASCII (split across pushes byte by byte) and markup-like
    // text inside a string: all argument data, none of it markup.
    const WantCall odd{"get_current_weather",
                       Json::parse(R"({"location": "Zürich \"old town\" </tool_call> \\ 東京", "unit": "celsius"})"), ""};
    const std::string args = odd.arguments.dump();
    check_reply(tool_format(ToolFamily::Hermes), tools,
                "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": " + args + "}\n</tool_call>", "", {odd});
    check_reply(tool_format(ToolFamily::FunctionaryV31), tools, "<function=get_current_weather>" + args + "</function>", "",
                {odd});
    check_reply(tool_format(ToolFamily::MistralNemo), tools,
                "[TOOL_CALLS][{\"name\": \"get_current_weather\", \"arguments\": " + args + "}]", "", {odd});
    check_reply(tool_format(ToolFamily::DeepSeekV31), tools,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_current_weather<｜tool▁sep｜>" + args +
                    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                "", {odd});
}

TEST_CASE("tool calls: family details the templates do not show") {
    const Json tools = both_tools();
    // Mistral Small 3.2 writes the call id only when it has one; without it, the call has none.
    check_reply(tool_format(ToolFamily::MistralV11), tools,
                R"([TOOL_CALLS]get_current_weather[ARGS]{"location": "Paris, France", "unit": "celsius"})", "",
                {weather_call()});
    // Text before the call is content; its trailing whitespace is the call's layout.
    check_reply(tool_format(ToolFamily::Hermes), tools,
                "1 < 2, so:\n\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Europe/Paris\"}}\n</tool_call>",
                "1 < 2, so:", {time_call()});
    // A newline after the last call (before the end-of-turn token) is layout too.
    check_reply(tool_format(ToolFamily::Hermes), tools,
                "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Europe/Paris\"}}\n</tool_call>\n", "",
                {time_call()});
    // Llama 3: a call is the whole reply; a name-shaped object followed by prose is an answer.
    const std::string prose = R"({"name": "get_time"} is what the tool is called.)";
    check_reply(tool_format(ToolFamily::Llama3), tools, prose, prose, {});
    // Nothing at all is an empty reply.
    for (const ToolFormat& f : vkllm::chat::tool_formats()) check_reply(f, tools, "", "", {});
}

namespace {

const std::vector<ToolFamily> kNewFamilies = {ToolFamily::FunctionaryV32, ToolFamily::Granite, ToolFamily::KimiK2,
                                              ToolFamily::Glm45, ToolFamily::CommandRPlus};

// Kimi K2's calls carry the id its template makes of the name and the call's index.
std::vector<WantCall> with_ids(ToolFamily f, std::vector<WantCall> calls) {
    if (f == ToolFamily::KimiK2)
        for (size_t i = 0; i < calls.size(); ++i) calls[i].id = "functions." + calls[i].name + ":" + std::to_string(i);
    return calls;
}

}  // namespace

TEST_CASE("tool calls: each call is its own tool and arguments, in every family") {
    // Two tools, called alone, together, in either order and with other arguments: a parser that
    // takes the first tool, a fixed order or the first call's arguments for all cannot pass.
    const Json tools = both_tools();
    const WantCall london{"get_current_weather", Json::parse(R"({"location": "London, UK", "unit": "fahrenheit"})"), ""};
    const WantCall tokyo{"get_time", Json::parse(R"({"timezone": "Asia/Tokyo"})"), ""};
    const std::vector<std::vector<WantCall>> sets = {
        {time_call()}, {weather_call()}, {time_call(), weather_call()}, {weather_call(), tokyo, london}};
    for (ToolFamily f : kNewFamilies) {
        const ToolFormat& format = tool_format(f);
        for (const auto& calls : sets) {
            const auto want = with_ids(f, calls);
            check_reply(format, tools, shaped_reply(f, calls), "", want);
            // Text before the calls is content, and never holds their markup.
            const std::string before = f == ToolFamily::FunctionaryV32 ? "all\nLet me check.>>>" : "Let me check.\n";
            check_reply(format, tools, before + shaped_reply(f, calls), "Let me check.", want);
        }
        // A call naming a tool of another request is no call, whatever its arguments.
        const Json weather_only = Json::array({weather_tool()});
        const std::string reply = shaped_reply(f, {time_call()});
        check_reply(format, weather_only, reply, reply, {});
    }
}

TEST_CASE("tool calls: details of the Functionary v3.2, Granite, Kimi K2, GLM-4.5 and Command R+ formats") {
    const Json tools = both_tools();
    const ToolFormat& v32 = tool_format(ToolFamily::FunctionaryV32);
    // Functionary v3.2: text for the user is a part headed "all"; the head is markup.
    check_reply(v32, tools, "all\nIt is sunny in Paris.", "It is sunny in Paris.", {});
    // Parts for the user around calls: all of them are content.
    check_reply(v32, tools, "all\nChecking.>>>get_time\n{\"timezone\": \"Europe/Paris\"}>>>all\nDone.", "Checking.Done.",
                {time_call()});
    // ">>>" in text (a Python prompt) heads no part: it stays content, and a call after it is read.
    check_reply(v32, tools, "all\nIn Python:\n>>> 1 + 1\n2\n>>>get_time\n{\"timezone\": \"Europe/Paris\"}",
                "In Python:\n>>> 1 + 1\n2", {time_call()});
    // A head's ">>>" is the end of a run of '>', however the stream splits the run.
    check_reply(v32, tools, "all\nA >>>>get_time\n{\"timezone\": \"Europe/Paris\"}", "A >", {time_call()});
    check_reply(v32, tools, "all\nA >>>>>>>all\nB", "A >>>>B", {});
    // A reply that writes the prompt's ">>>" itself is read the same.
    check_reply(v32, tools, ">>>get_time\n{\"timezone\": \"Europe/Paris\"}", "", {time_call()});
    check_reply(v32, tools, ">>>all\nHello.", "Hello.", {});
    // A head is held back until its newline decides it, and only while it may still be one.
    {
        const auto s = stream(v32, tools, "all\nHi", 1);
        CHECK(s.released + s.rest.content == "Hi");
        ReplyStream r(v32, tools);
        CHECK(r.push("al") == "");
        CHECK(r.push("ways sunny") == "always sunny");
        ReplyStream t(v32, tools);
        CHECK(t.push("get_t") == "");
        CHECK(t.push("ea") == "get_tea");
    }
    // The first part's head is only at the reply's start: later "all\n" is text.
    check_reply(v32, tools, "all\nall\nfine", "all\nfine", {});

    // Granite 3.3's template renders no calls in the history; its system prompt says what one is.
    if (have_templates()) {
        const TemplateFile file = template_files().at("ibm-granite-granite-3.3-2B-Instruct");
        ChatInputs in;
        in.messages = Json::array({Json{{"role", "user"}, {"content", "What time is it in Paris?"}}});
        in.tools = tools;
        in.bos_token = file.bos;
        in.eos_token = file.eos;
        in.now = "2024-07-26 00:00:00";
        in.add_generation_prompt = true;
        const std::string prompt = ChatTemplate(file.source, "granite").apply(in);
        CHECK(prompt.find("respond only with <|tool_call|> followed by a JSON list of tools used") != std::string::npos);
    }
    // Granite: several calls in one list, also laid out on lines.
    check_reply(tool_format(ToolFamily::Granite), tools,
                "<|tool_call|>[\n  {\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Europe/Paris\"}}\n]", "",
                {time_call()});

    // Kimi K2: the id is the call's, given back in the tool's result ("## Return of <id>").
    const auto kimi = vkllm::chat::parse_reply(tool_format(ToolFamily::KimiK2), tools,
                                               shaped_reply(ToolFamily::KimiK2, {weather_call(), time_call()}));
    const Json out = vkllm::chat::tool_calls_json(kimi.calls, ToolFamily::KimiK2, false);
    REQUIRE(out.size() == 2);
    CHECK(out[1]["id"] == "functions.get_time:1");
    // Between calls and around the section, layout whitespace is not content.
    check_reply(tool_format(ToolFamily::KimiK2), tools,
                "<|tool_calls_section_begin|>\n<|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>"
                "{\"timezone\": \"Europe/Paris\"}<|tool_call_end|>\n<|tool_calls_section_end|>",
                "", with_ids(ToolFamily::KimiK2, {time_call()}));

    // GLM-4.5: values typed from the tool's schema, strings as written; a call without arguments.
    Json alarm = both_tools();
    alarm.push_back(Json::parse(R"({"type": "function", "function": {"name": "set_alarm", "parameters": {"type": "object",
        "properties": {"hour": {"type": "integer"}, "label": {"type": "string"},
                       "days": {"type": "array", "items": {"type": "string"}}, "loud": {"type": "boolean"}}}}})"));
    alarm.push_back(Json::parse(R"({"type": "function", "function": {"name": "ping"}})"));
    const WantCall set_alarm{"set_alarm", Json::parse(R"({"hour": 7, "label": "42", "days": ["mon", "tue"], "loud": true})"), ""};
    check_reply(tool_format(ToolFamily::Glm45), alarm, shaped_reply(ToolFamily::Glm45, {set_alarm}), "", {set_alarm});
    check_reply(tool_format(ToolFamily::Glm45), alarm,
                "<tool_call>ping\n</tool_call>\n<tool_call>get_current_weather\n<arg_key>location</arg_key>\n"
                "<arg_value>Zürich \"old town\" </tool_call></arg_value>\n</tool_call>",
                "", {{"ping", Json::object(), ""}, {"get_current_weather", Json::parse(R"({"location": "Zürich \"old town\" </tool_call>"})"), ""}});

    // Command R+: the list fenced or not; escapes and non-ASCII in the JSON.
    const WantCall odd{"get_current_weather", Json::parse(R"({"location": "Zürich \"old town\" ``` \\ 東京"})"), ""};
    check_reply(tool_format(ToolFamily::CommandRPlus), tools, "Action: " + Json::array({Json{{"tool_name", odd.name}, {"parameters", odd.arguments}}}).dump(),
                "", {odd});
    check_reply(tool_format(ToolFamily::CommandRPlus), tools, shaped_reply(ToolFamily::CommandRPlus, {odd}), "", {odd});
}

TEST_CASE("tool calls: Qwen3-Coder parameter values take their types from the tool's schema") {
    Json tools = both_tools();
    tools.push_back(Json::parse(R"({"type": "function", "function": {"name": "set_alarm", "parameters": {"type": "object",
        "properties": {"hour": {"type": "integer"}, "label": {"type": "string"},
                       "days": {"type": "array", "items": {"type": "string"}}, "loud": {"type": "boolean"}},
        "required": ["hour"]}}})"));
    // The template writes strings bare and other values as JSON (Qwen3-Coder.jinja); a string that
    // looks like a number stays a string.
    const std::string reply =
        "<tool_call>\n<function=set_alarm>\n<parameter=hour>\n7\n</parameter>\n<parameter=label>\n42\n</parameter>\n"
        "<parameter=days>\n[\"mon\", \"tue\"]\n</parameter>\n<parameter=loud>\ntrue\n</parameter>\n</function>\n</tool_call>";
    check_reply(tool_format(ToolFamily::QwenCoder), tools, reply, "",
                {{"set_alarm", Json::parse(R"({"hour": 7, "label": "42", "days": ["mon", "tue"], "loud": true})"), ""}});
}

TEST_CASE("tool calls: a stream moved mid-reply goes on where it was") {
    const Json tools = both_tools();
    const std::string text =
        "Checking.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Europe/Paris\"}}\n</tool_call>";
    ReplyStream a(tool_format(ToolFamily::Hermes), tools);
    std::string released = a.push(text.substr(0, 20));
    ReplyStream b(std::move(a));
    released += b.push(text.substr(20, 10));
    ReplyStream c(tool_format(ToolFamily::Generic), tools);
    c = std::move(b);
    released += c.push(text.substr(30));
    const auto rest = c.finish();
    CHECK(released + rest.content == "Checking.");
    check_calls(rest.calls, {time_call()});
}

TEST_CASE("tool calls: prose that cannot open a call is released as it comes") {
    const Json tools = both_tools();
    // No character here can begin any family's markup, so nothing needs holding back: a client
    // streaming the reply sees it as it is generated.
    const std::string prose = "Sunny and 22 degrees in Paris today";
    for (const ToolFormat& f : vkllm::chat::tool_formats()) {
        INFO("family: " << std::string(f.name));
        ReplyStream s(f, tools);
        std::string released;
        for (char ch : prose) released += s.push(std::string_view(&ch, 1));
        CHECK(released == prose);
        const auto rest = s.finish();
        CHECK(rest.content == "");
        CHECK(rest.calls.empty());
    }
}

TEST_CASE("tool calls: more shapes models write") {
    const Json tools = both_tools();
    // JSON is JSON however it is laid out.
    check_reply(tool_format(ToolFamily::Hermes), tools,
                "<tool_call>\n{\n  \"name\": \"get_time\",\n  \"arguments\": {\n    \"timezone\": \"Europe/Paris\"\n  }\n}\n</tool_call>",
                "", {time_call()});
    // Several calls in one Generic reply.
    check_reply(tool_format(ToolFamily::Generic), tools,
                R"({"tool_calls": [{"name": "get_current_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}, )"
                R"({"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}]})",
                "", {weather_call(), time_call()});
    // A forced prefix is parsed as the model's own text: when what follows it is no call, the
    // prefix comes back in the content with the rest.
    const std::string prefix = "<tool_call>\n";
    const std::string rest = "{\"name\": \"get_stock_price\", \"arguments\": {}}\n</tool_call>";
    ReplyStream s(tool_format(ToolFamily::Hermes), tools, prefix);
    std::string released;
    for (char ch : rest) released += s.push(std::string_view(&ch, 1));
    const auto r = s.finish();
    CHECK(released + r.content == prefix + rest);
    CHECK(r.calls.empty());
}

TEST_CASE("tool calls: a forced call's grammar accepts the calls the parser reads, and only those") {
    const Json tools = both_tools();
    const std::vector<ToolFamily> call_object = {ToolFamily::Hermes,       ToolFamily::Llama3,    ToolFamily::MistralNemo,
                                                 ToolFamily::Granite,      ToolFamily::Generic,   ToolFamily::CommandRPlus,
                                                 ToolFamily::FunctionaryV31, ToolFamily::FunctionaryV32, ToolFamily::QwenCoder,
                                                 ToolFamily::Glm45,          ToolFamily::MistralV11, ToolFamily::DeepSeekV31,
                                                 ToolFamily::DeepSeekR1,     ToolFamily::KimiK2};
    const WantCall no_location{"get_current_weather", Json::parse(R"({"unit": "celsius"})"), ""};
    const WantCall unknown{"get_stock_price", Json::parse(R"({"symbol": "ACME"})"), ""};
    for (ToolFamily family : call_object) {
        const ToolFormat& format = tool_format(family);
        for (bool parallel : {false, true}) {
            INFO("family: " << std::string(format.name));
            CAPTURE(parallel);
            vkllm::chat::ForcedCall fc;
            REQUIRE_NOTHROW(fc = vkllm::chat::forced_call(format, tools, "", parallel));
            CAPTURE(fc.prompt_prefix);
            CAPTURE(fc.gbnf);
            Grammar g;
            REQUIRE_NOTHROW(g = Grammar::parse(fc.gbnf));
            const bool many = parallel && format.parallel;

            // Fits the model's own text for `calls` (Mistral's with or without ids: the grammar may
            // leave the id to the server) after the forced prefix.
            auto accepted = [&](const std::vector<WantCall>& calls) -> std::optional<std::string> {
                for (bool with_ids : {false, true}) {
                    std::vector<WantCall> c = calls;
                    for (size_t i = 0; i < c.size(); ++i) c[i].id = "call0000" + std::to_string(i + 1);
                    const auto text = native_reply(family, c, with_ids);
                    if (!text) return std::nullopt;
                    const auto rest = after_prefix(*text, fc.prompt_prefix);
                    if (!rest) continue;
                    if (auto fitted = fit(g, *rest)) return fitted;
                }
                return std::nullopt;
            };
            std::vector<std::vector<WantCall>> good = {{weather_call()}, {time_call()}};
            if (many) good.push_back({weather_call(), time_call()});
            for (const auto& calls : good) {
                CAPTURE(calls.size());
                CAPTURE(calls[0].name);
                const auto text = accepted(calls);
                REQUIRE_MESSAGE(text.has_value(), "the grammar refuses " << *native_reply(family, calls, false));
                // The model writes only what follows the prefix; the parser reads both, as one reply
                // or with the prefix given to the stream.
                const auto r = vkllm::chat::parse_reply(format, tools, fc.prompt_prefix + *text);
                CHECK(r.content == "");
                std::vector<WantCall> want = calls;
                for (size_t i = 0; i < want.size(); ++i) {
                    if ((fc.prompt_prefix + *text).find("call0000" + std::to_string(i + 1)) != std::string::npos)
                        want[i].id = "call0000" + std::to_string(i + 1);
                    if (family == ToolFamily::KimiK2) want[i].id = "functions." + want[i].name + ":" + std::to_string(i);
                }
                check_calls(r.calls, want);
                const auto s = stream(format, tools, *text, 1, fc.prompt_prefix);
                CHECK(s.released + s.rest.content == "");
                check_calls(s.rest.calls, want);
            }
            CHECK_FALSE(accepted({unknown}).has_value());
            CHECK_FALSE(accepted({no_location}).has_value());
            CHECK_FALSE(accepted({{"get_current_weather", Json::parse(R"({"location": "Paris", "unit": "kelvin"})"), ""}})
                            .has_value());
            if (format.parallel && !parallel) CHECK_FALSE(accepted({weather_call(), time_call()}).has_value());

            // A named tool_choice: that tool and no other.
            vkllm::chat::ForcedCall named;
            REQUIRE_NOTHROW(named = vkllm::chat::forced_call(format, tools, "get_time", parallel));
            Grammar ng = Grammar::parse(named.gbnf);
            const auto time_text = native_reply(family, {time_call()}, false);
            const auto weather_text = native_reply(family, {weather_call()}, false);
            const auto time_rest = after_prefix(*time_text, named.prompt_prefix);
            const auto weather_rest = after_prefix(*weather_text, named.prompt_prefix);
            CHECK((time_rest && fit(ng, *time_rest)));
            CHECK_FALSE((weather_rest && fit(ng, *weather_rest)));
        }
    }
}

TEST_CASE("tool calls: a named-prefix family forces one named tool") {
    // gpt-oss names the tool in the header of the call's message, which the prompt holds: the
    // grammar is the arguments' alone (HarmonyStream reads the call: test_harmony).
    const Json tools = both_tools();
    size_t checked = 0;
    for (const ToolFormat& row : vkllm::chat::tool_formats()) {
        // tool_formats() holds copies of the rows: the family's own row is told by its name.
        if (row.force != ForceKind::NamedPrefix || std::string_view(tool_format(row.family).name) != row.name) continue;
        ++checked;
        const ToolFormat& format = tool_format(row.family);
        INFO("family: " << std::string(format.name));
        CHECK_THROWS_AS(vkllm::chat::forced_call(format, tools, "", false), ToolError);
        vkllm::chat::ForcedCall fc;
        REQUIRE_NOTHROW(fc = vkllm::chat::forced_call(format, tools, "get_current_weather", false));
        CHECK(fc.prompt_prefix.find("get_current_weather") != std::string::npos);
        const Grammar g = Grammar::parse(fc.gbnf);
        for (const std::string& args : {spaced(weather_call().arguments), weather_call().arguments.dump()}) {
            Matcher m(g);
            CHECK(m.accept(args));
            CHECK(m.can_end());
        }
        CHECK_FALSE(Matcher(g).accept(R"({"unit": "celsius"})"));
        CHECK_FALSE(Matcher(g).accept(R"({"location": "Paris", "unit": "kelvin"})"));
    }
    CHECK(checked == 1);  // gpt-oss
}

TEST_CASE("tool calls: forcing is refused where the format cannot do it, or the schema is outside the subset") {
    const Json tools = both_tools();
    CHECK_THROWS_AS(vkllm::chat::forced_call(tool_format(ToolFamily::Hermes), tools, "no_such_tool", false), ToolError);
    // Qwen3-Coder and GLM write string arguments bare and list the arguments one by one: string
    // constraints but enum / const, and object keywords beyond properties / required, cannot be held.
    for (ToolFamily family : {ToolFamily::QwenCoder, ToolFamily::Glm45}) {
        INFO("family: " << std::string(tool_format(family).name));
        for (const char* bad : {R"({"type": "string", "pattern": "^[A-Z]"})", R"({"type": "string", "maxLength": 3})",
                                R"({"type": ["string", "null"]})"}) {
            CAPTURE(bad);
            Json t = both_tools();
            t[1]["function"]["parameters"]["properties"]["timezone"] = Json::parse(bad);
            try {
                vkllm::chat::forced_call(tool_format(family), t, "", false);
                FAIL_CHECK("a bare string constraint was accepted");
            } catch (const ToolError& e) {
                CAPTURE(e.what());
                CHECK(starts_with(e.param(), "tools[1]"));
                CHECK(std::string(e.what()).find("timezone") != std::string::npos);
            }
        }
        Json t = both_tools();
        t[0]["function"]["parameters"]["minProperties"] = 1;
        try {
            vkllm::chat::forced_call(tool_format(family), t, "", false);
            FAIL_CHECK("minProperties was accepted");
        } catch (const ToolError& e) {
            CHECK(e.param() == "tools[0].function.parameters");
            CHECK(std::string(e.what()).find("minProperties") != std::string::npos);
        }
        // A non-string parameter is JSON, held by the schema compiler (its errors name the tool).
        t = both_tools();
        t[1]["function"]["parameters"]["properties"]["timezone"] = Json::parse(R"({"type": "integer", "not": {}})");
        try {
            vkllm::chat::forced_call(tool_format(family), t, "", false);
            FAIL_CHECK("'not' was accepted");
        } catch (const ToolError& e) {
            CHECK(starts_with(e.param(), "tools[1]"));
        }
    }
    Json odd = both_tools();
    odd[1]["function"]["parameters"]["properties"]["timezone"] = Json::parse(R"({"not": {"type": "string"}})");
    for (ToolFamily family : {ToolFamily::Hermes, ToolFamily::Generic, ToolFamily::MistralV11}) {
        INFO("family: " << std::string(tool_format(family).name));
        const std::string only = family == ToolFamily::MistralV11 ? "get_time" : "";
        try {
            vkllm::chat::forced_call(tool_format(family), odd, only, false);
            FAIL_CHECK("a schema using \"not\" was accepted");
        } catch (const ToolError& e) {
            CAPTURE(e.what());
            CHECK(starts_with(e.param(), "tools[1]"));
        }
    }
    // Naming a tool the request does not have cannot be forced.
    for (ToolFamily family : {ToolFamily::Hermes, ToolFamily::MistralV11}) {
        INFO("family: " << std::string(tool_format(family).name));
        try {
            vkllm::chat::forced_call(tool_format(family), tools, "get_stock_price", false);
            FAIL_CHECK("an unknown tool was forced");
        } catch (const ToolError& e) {
            CHECK(e.param() == "tool_choice");
        }
    }
}

TEST_CASE("tool calls: check_tools refuses malformed tool lists, naming the field") {
    CHECK_NOTHROW(vkllm::chat::check_tools(both_tools()));
    // A function with no parameters is a valid tool.
    CHECK_NOTHROW(vkllm::chat::check_tools(Json::parse(R"([{"type": "function", "function": {"name": "ping"}}])")));

    auto param_of = [](const Json& tools) -> std::string {
        try {
            vkllm::chat::check_tools(tools);
        } catch (const ToolError& e) {
            return e.param();
        }
        return "<accepted>";
    };
    CHECK(starts_with(param_of(Json::object()), "tools"));
    CHECK(starts_with(param_of(Json("get_current_weather")), "tools"));

    Json no_name = both_tools();
    no_name[1]["function"].erase("name");
    const std::string p1 = param_of(no_name);
    CHECK(starts_with(p1, "tools[1]"));
    CHECK(p1.find("name") != std::string::npos);

    Json no_function = both_tools();
    no_function[0].erase("function");
    CHECK(starts_with(param_of(no_function), "tools[0]"));

    Json twice = Json::array({weather_tool(), time_tool(), weather_tool()});
    CHECK(starts_with(param_of(twice), "tools[2]"));

    Json bad_params = both_tools();
    bad_params[0]["function"]["parameters"] = "location: string";
    const std::string p2 = param_of(bad_params);
    CHECK(starts_with(p2, "tools[0]"));
    CHECK(p2.find("parameters") != std::string::npos);

    Json not_function = both_tools();
    not_function[1]["type"] = "retrieval";
    CHECK(starts_with(param_of(not_function), "tools[1]"));
}

// --- hostile and edge inputs (from review) ------------------------------------------------------

namespace {

Json one_tool(Json parameters) {
    return Json::array({Json{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", std::move(parameters)}}}}});
}

}  // namespace

TEST_CASE("tool calls: JSON nested past 64 levels is refused, never built") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    CHECK(vkllm::chat::parse_json_bounded(deep).is_discarded());
    CHECK(vkllm::chat::parse_json_bounded(std::string(64, '[') + std::string(64, ']')).is_array());
    // Follow-up arguments that deep stay the client's text.
    Json msg = {{"role", "assistant"}, {"tool_calls", Json::array({Json{{"function", {{"name", "f"}, {"arguments", deep}}}}})}};
    vkllm::chat::arguments_as_objects(msg);
    CHECK(msg["tool_calls"][0]["function"]["arguments"].is_string());
    // A model that writes them: content, not a call.
    const std::string reply = "<tool_call>{\"name\": \"f\", \"arguments\": " + std::string(200, '[') + std::string(200, ']') + "}</tool_call>";
    const ReplyStream::Rest r = vkllm::chat::parse_reply(tool_format(ToolFamily::Hermes), one_tool(Json::object()), reply);
    CHECK(r.calls.empty());
    CHECK(r.content == reply);
}

TEST_CASE("tool calls: Qwen3-Coder values with property schemas that are not objects") {
    const Json tools = one_tool(Json{{"type", "object"}, {"properties", {{"q", true}, {"r", "string"}}}});
    const ReplyStream::Rest r = vkllm::chat::parse_reply(
        tool_format(ToolFamily::QwenCoder), tools,
        "<tool_call>\n<function=f>\n<parameter=q>\n5\n</parameter>\n<parameter=r>\nx\n</parameter>\n</function>\n</tool_call>");
    REQUIRE(r.calls.size() == 1);
    CHECK(Json::parse(r.calls[0].arguments) == Json{{"q", 5}, {"r", "x"}});
}

TEST_CASE("tool calls: a forced call's errors name the tool, whatever the parameters' own $defs are called") {
    const Json tools = one_tool(Json{{"type", "object"},
                                     {"properties", {{"a", {{"$ref", "#/$defs/tool-x"}}}}},
                                     {"$defs", {{"tool-x", {{"not", Json::object()}}}}}});
    for (ToolFamily f : {ToolFamily::MistralV11, ToolFamily::Hermes}) {
        try {
            vkllm::chat::forced_call(tool_format(f), tools, "f", false);
            FAIL("expected a ToolError");
        } catch (const ToolError& e) {
            CHECK(e.param() == "tools[0].function.parameters");
            CHECK(std::string(e.what()).find("'not'") != std::string::npos);
        }
    }
}

TEST_CASE("tool calls: forced arguments are an object; a named choice needs a name") {
    // "parameters": {} allows any value in JSON Schema; a call's arguments are an object.
    const auto fc = vkllm::chat::forced_call(tool_format(ToolFamily::Hermes), one_tool(Json::object()), "", false);
    const Grammar g = Grammar::parse(fc.gbnf);  // the matchers point into it
    Matcher bad(g);
    CHECK_FALSE(bad.accept(R"({"name": "f", "arguments": 5})"));
    Matcher good(g);
    CHECK(good.accept(R"({"name": "f", "arguments": {"x": 1}})"));
    CHECK_THROWS_AS(vkllm::chat::forced_call(tool_format(ToolFamily::Hermes), one_tool(Json{{"type", "string"}}), "", false),
                    ToolError);
    std::string name;
    CHECK_THROWS_AS(vkllm::chat::parse_tool_choice("", name), ToolError);
    CHECK(vkllm::chat::parse_tool_choice("f", name) == vkllm::chat::ToolChoice::Named);
    CHECK(name == "f");
    CHECK_THROWS_AS(vkllm::chat::plan_tool_use(tool_format(ToolFamily::Hermes), true, one_tool(Json::object()),
                                               vkllm::chat::ToolChoice::Named, "", true),
                    ToolError);
}

TEST_CASE("tool calls: text between calls is content and both calls count; parallel false keeps the first") {
    const Json tools = one_tool(Json::object());
    const std::string reply = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>\nAlso:\n"
                              "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 2}}</tool_call>";
    for (size_t piece : {size_t(1), size_t(5), reply.size()}) {
        ReplyStream s(tool_format(ToolFamily::Hermes), tools);
        std::string content;
        for (size_t i = 0; i < reply.size(); i += piece) content += s.push(std::string_view(reply).substr(i, piece));
        ReplyStream::Rest r = s.finish();
        content += r.content;
        CHECK(content == "Also:");
        REQUIRE(r.calls.size() == 2);
        CHECK(r.calls[1].arguments == R"({"a":2})");
    }
    ReplyStream one(tool_format(ToolFamily::Hermes), tools, {}, false);
    one.push(reply);
    ReplyStream::Rest r = one.finish();
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].arguments == R"({"a":1})");
}

TEST_CASE("tool calls: a forced prompt closes a reasoning block the template left open") {
    vkllm::chat::ToolPlan plan;
    plan.forced = true;
    plan.reply_prefix = "<tool_call>\n";
    CHECK(vkllm::chat::forced_prompt("assistant\n<think>\n", plan) == "assistant\n<think>\n\n</think>\n\n<tool_call>\n");
    CHECK(vkllm::chat::forced_prompt("user: what is <think>?\nassistant\n", plan) == "user: what is <think>?\nassistant\n<tool_call>\n");
    plan.reply_prefix.clear();  // Generic and Llama 3 force without a prefix: the block is still closed
    CHECK(vkllm::chat::forced_prompt("assistant\n<think>\n", plan) == "assistant\n<think>\n\n</think>\n\n");
    plan.forced = false;  // not forced: the prompt as rendered
    CHECK(vkllm::chat::forced_prompt("assistant\n<think>\n", plan) == "assistant\n<think>\n");
}

TEST_CASE("tool calls: a bare Qwen3-Coder value that is not UTF-8 (fuzz_grammar finding)") {
    const std::string reply = "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar\xbe\x10is\n</parameter>\n</function>\n</tool_call>";
    const Json tools = Json::array({Json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}});
    const ReplyStream::Rest r = vkllm::chat::parse_reply(tool_format(ToolFamily::QwenCoder), tools, reply);
    REQUIRE(r.calls.size() == 1);
    CHECK(Json::parse(r.calls[0].arguments)["city"] == "Par\xef\xbf\xbd\x10is");  // U+FFFD for the stray byte
}

TEST_CASE("tool calls: with tool_choice auto, a call the model begins must follow its tool's parameters") {
    const Json tools = both_tools();
    auto follows = [](const vkllm::chat::LazyCall& lazy, const std::string& text) {
        const size_t at = vkllm::grammar::find_trigger(text, {lazy.triggers});
        if (at == std::string::npos) return false;
        const Grammar g = Grammar::parse(lazy.gbnf);
        Matcher m(g);
        return m.accept(std::string_view(text).substr(at)) && m.can_end();
    };
    const auto hermes = vkllm::chat::lazy_call(tool_format(ToolFamily::Hermes), tools, true);
    REQUIRE(!hermes.gbnf.empty());
    const std::string weather = R"({"name": "get_current_weather", "arguments": {"location": "Paris"}})";
    const std::string time = R"({"name":"get_time","arguments":{"timezone":"UTC"}})";
    // Free text before the marker; the calls from it on.
    CHECK(follows(hermes, "Let me look.\n<tool_call>\n" + weather + "\n</tool_call>"));
    CHECK(follows(hermes, "<tool_call>\n" + weather + "\n</tool_call>\n<tool_call>\n" + time + "\n</tool_call>\n"));
    CHECK_FALSE(follows(hermes, "<tool_call>\n{\"name\": \"get_news\", \"arguments\": {}}\n</tool_call>"));  // no such tool
    CHECK_FALSE(follows(hermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": 1}}\n</tool_call>"));
    CHECK_FALSE(follows(hermes, "<tool_call>\n" + weather + "\n</tool_call> and some prose"));  // the calls end the reply
    CHECK_FALSE(follows(hermes, "No call here."));
    // parallel_tool_calls false: one call.
    const auto one = vkllm::chat::lazy_call(tool_format(ToolFamily::Hermes), tools, false);
    CHECK(follows(one, "<tool_call>\n" + weather + "\n</tool_call>"));
    CHECK_FALSE(follows(one, "<tool_call>\n" + weather + "\n</tool_call>\n<tool_call>\n" + time + "\n</tool_call>"));

    // The call is the whole reply: it starts at a leading '{' (or Llama 3's <|python_tag|>).
    const auto generic = vkllm::chat::lazy_call(tool_format(ToolFamily::Generic), tools, true);
    CHECK(follows(generic, " {\"tool_calls\": [" + weather + ", " + time + "]}"));
    CHECK_FALSE(follows(generic, "{\"answer\": 42}"));
    CHECK_FALSE(follows(generic, "Here: {\"tool_calls\": [" + weather + "]}"));  // not at the start: free text
    const auto llama = vkllm::chat::lazy_call(tool_format(ToolFamily::Llama3), tools, true);
    CHECK(follows(llama, R"({"name": "get_time", "parameters": {"timezone": "UTC"}})"));
    CHECK(follows(llama, R"(Sure.<|python_tag|>{"name": "get_time", "parameters": {"timezone": "UTC"}})"));
    const auto nemo = vkllm::chat::lazy_call(tool_format(ToolFamily::MistralNemo), tools, true);
    CHECK(follows(nemo, "[TOOL_CALLS][" + time + "]"));
    CHECK(follows(nemo, R"([TOOL_CALLS][{"name": "get_time", "arguments": {"timezone": "UTC"}, "id": "abc123XYZ"}])"));
    CHECK_FALSE(follows(nemo, R"([TOOL_CALLS][{"name": "get_time", "arguments": {"timezone": "UTC"}, "id": "short"}])"));
    const auto granite = vkllm::chat::lazy_call(tool_format(ToolFamily::Granite), tools, true);
    CHECK(follows(granite, "Let me see. <|tool_call|>[" + time + ", " + weather + "]"));
    CHECK_FALSE(follows(granite, "<|tool_call|>[]"));

    // An answer that opens with JSON that is not a call stays free.
    CHECK(vkllm::grammar::find_trigger(R"({"answer": 1})", {llama.triggers}) == std::string::npos);
    CHECK(vkllm::grammar::find_trigger(R"({ "name": "get_time")", {llama.triggers}) == 0);
    // A \u escape of a surrogate only as a pair: the parser refuses a lone one, so the grammar does.
    CHECK(follows(hermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"\\ud83d\\ude00\"}}</tool_call>"));
    CHECK_FALSE(follows(hermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"\\ud800\"}}</tool_call>"));
    CHECK_FALSE(follows(hermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"\\ude00\"}}</tool_call>"));

    // Markup that names the tool and its parameters in text: the grammar starts at the marker.
    const auto coder = vkllm::chat::lazy_call(tool_format(ToolFamily::QwenCoder), tools, true);
    const std::string coder_time = "<tool_call>\n<function=get_time>\n<parameter=timezone>\nUTC\n</parameter>\n</function>\n</tool_call>";
    CHECK(follows(coder, "I will check.\n" + coder_time));
    CHECK(follows(coder, coder_time + "\n" + coder_time));
    CHECK_FALSE(follows(coder, "<tool_call>\n<function=get_news>\n</function>\n</tool_call>"));
    CHECK_FALSE(follows(coder, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>"));  // timezone is required
    CHECK_FALSE(follows(coder, coder_time + " and prose"));
    const auto glm = vkllm::chat::lazy_call(tool_format(ToolFamily::Glm45), tools, true);
    CHECK(follows(glm, "<tool_call>get_time\n<arg_key>timezone</arg_key>\n<arg_value>UTC</arg_value>\n</tool_call>"));
    CHECK_FALSE(follows(glm, "<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>UTC</arg_value>\n</tool_call>"));
    const auto fn31 = vkllm::chat::lazy_call(tool_format(ToolFamily::FunctionaryV31), tools, true);
    CHECK(follows(fn31, "Checking. <function=get_time>" + std::string(R"({"timezone": "UTC"})") + "</function>"));
    CHECK_FALSE(follows(fn31, "<function=get_time>" + std::string(R"({"timezone": 1})") + "</function>"));
    // Markers that are control tokens (which a request with tools speaks) hold like text.
    const auto kimi = vkllm::chat::lazy_call(tool_format(ToolFamily::KimiK2), tools, true);
    const std::string kimi_time = "<|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{\"timezone\": \"UTC\"}<|tool_call_end|>";
    CHECK(follows(kimi, "Sure. <|tool_calls_section_begin|>" + kimi_time + "<|tool_calls_section_end|>"));
    CHECK(follows(kimi, "<|tool_calls_section_begin|>" + kimi_time + kimi_time));
    CHECK_FALSE(follows(kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_news:0<|tool_call_argument_begin|>{}"
                              "<|tool_call_end|>"));
    const auto v11 = vkllm::chat::lazy_call(tool_format(ToolFamily::MistralV11), tools, true);
    CHECK(follows(v11, R"([TOOL_CALLS]get_time[ARGS]{"timezone": "UTC"}[TOOL_CALLS]get_time[CALL_ID]abc123XYZ[ARGS]{"timezone": "CET"})"));
    CHECK_FALSE(follows(v11, R"([TOOL_CALLS]get_time[ARGS]{"timezone": 3})"));
    const auto v31 = vkllm::chat::lazy_call(tool_format(ToolFamily::DeepSeekV31), tools, true);
    CHECK(follows(v31, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"timezone\": \"UTC\"}<｜tool▁call▁end｜>"
                       "<｜tool▁calls▁end｜>"));
    CHECK_FALSE(follows(v31, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜>"));
    // Functionary v3.2: every part opens with a head; those naming a tool start the grammar, at the
    // reply's start (the prompt ends with ">>>") or after text for the user.
    const auto fn32 = vkllm::chat::lazy_call(tool_format(ToolFamily::FunctionaryV32), tools, true);
    CHECK(follows(fn32, "get_time\n{\"timezone\": \"UTC\"}"));
    CHECK(follows(fn32, "all\nLet me look.>>>get_time\n{\"timezone\": \"UTC\"}>>>get_time\n{\"timezone\": \"CET\"}"));
    CHECK_FALSE(follows(fn32, "get_time\n{\"timezone\": 3}"));
    CHECK_FALSE(follows(fn32, "get_time\n{\"timezone\": \"UTC\"}>>>all\nDone."));  // the calls end the reply
    CHECK_FALSE(follows(fn32, "all\nThe time is get_time\n"));                       // not a head
    CHECK(vkllm::grammar::find_trigger("all\nHello", {fn32.triggers}) == std::string::npos);
    const auto fn32_one = vkllm::chat::lazy_call(tool_format(ToolFamily::FunctionaryV32), tools, false);
    CHECK_FALSE(follows(fn32_one, "get_time\n{\"timezone\": \"UTC\"}>>>get_time\n{\"timezone\": \"CET\"}"));
    // gpt-oss: a message to functions.NAME, its recipient before or after the channel.
    const auto harmony = vkllm::chat::lazy_call(tool_format(ToolFamily::Harmony), tools, true);
    CHECK(follows(harmony, "<|channel|>analysis<|message|>Need the time.<|end|><|start|>assistant<|channel|>commentary "
                           "to=functions.get_time <|constrain|>json<|message|>{\"timezone\": \"UTC\"}"));
    CHECK(follows(harmony, " to=functions.get_time<|channel|>commentary json<|message|>{\"timezone\": \"UTC\"}"));
    CHECK_FALSE(follows(harmony, "<|channel|>commentary to=functions.get_news <|constrain|>json<|message|>{}"));
    CHECK_FALSE(follows(harmony, "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{\"timezone\": 1}"));
    CHECK_FALSE(follows(harmony, "<|channel|>final<|message|>The time."));  // no call: free
    // Command R+: from "Action:" on, fenced or not; the template's own "directly-answer" action is
    // let through (the model says no tool is needed), and is no call.
    const ToolFormat& command_r = tool_format(ToolFamily::CommandRPlus);
    const auto cr = vkllm::chat::lazy_call(command_r, tools, true);
    const std::string cr_time = R"({"tool_name": "get_time", "parameters": {"timezone": "UTC"}})";
    const std::string cr_direct = R"({"tool_name": "directly-answer", "parameters": {}})";
    CHECK(follows(cr, "Action:\n```json\n[\n    " + cr_time + "\n]```"));
    CHECK(follows(cr, "Action: [" + cr_time + ", " + cr_direct + "]"));
    CHECK(follows(cr, "Action:\n```json\n[" + cr_direct + "]\n```"));
    CHECK_FALSE(follows(cr, R"(Action: [{"tool_name": "directly-answer", "parameters": {"text": "Hi"}}])"));
    CHECK_FALSE(follows(cr, R"(Action: [{"tool_name": "get_time", "parameters": {"timezone": 1}}])"));
    CHECK_FALSE(follows(cr, "Action:\n```json\n[" + cr_time + "]"));  // a fence opened is closed
    CHECK_FALSE(follows(cr, "Action: []"));
    check_reply(command_r, tools, "Action: [" + cr_direct + ", " + cr_time + "]", "",
                {{"get_time", Json::parse(R"({"timezone": "UTC"})"), ""}});
    // A request that offers a tool of that name calls it.
    const Json with_direct = Json::parse(R"([{"type": "function", "function": {"name": "directly-answer"}}])");
    check_reply(command_r, with_direct, "Action: [" + cr_direct + "]", "", {{"directly-answer", Json::object(), ""}});
    // Parameters outside the schema subset: no grammar ('auto' never promised one), where a
    // required call is refused.
    const Json odd = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}])");
    CHECK(vkllm::chat::lazy_call(tool_format(ToolFamily::Hermes), odd, true).gbnf.empty());
    const auto plan = vkllm::chat::plan_tool_use(tool_format(ToolFamily::Hermes), true, odd, vkllm::chat::ToolChoice::Auto, "", true);
    CHECK(plan.grammar == nullptr);
    CHECK(plan.parse_as != nullptr);
    const auto auto_plan =
        vkllm::chat::plan_tool_use(tool_format(ToolFamily::Hermes), true, tools, vkllm::chat::ToolChoice::Auto, "", true);
    CHECK(auto_plan.grammar != nullptr);
    CHECK(!auto_plan.forced);
    CHECK(auto_plan.triggers.size() == 1);
    const auto none_plan =
        vkllm::chat::plan_tool_use(tool_format(ToolFamily::Hermes), true, tools, vkllm::chat::ToolChoice::None, "", true);
    CHECK(none_plan.grammar == nullptr);
}

TEST_CASE("tool calls: streamed argument fragments add up to the whole reply's arguments, in any split") {
    const Json tools = both_tools();
    struct Case {
        ToolFamily family;
        std::string prefix, text;
        size_t calls;
    };
    const std::vector<Case> cases = {
        {ToolFamily::Hermes, "", "Let me look.\n<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, \\\"FR\\\"\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"timezone\":\"Europe/Paris ☀\"}}\n</tool_call>", 2},
        {ToolFamily::Hermes, "<tool_call>\n", "{\"name\": \"get_time\", \"arguments\": {\n  \"timezone\": \"UTC\"\n}}\n</tool_call>", 1},
        {ToolFamily::Generic, "", "{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"UTC\"}}, {\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Oslo {x}\"}}]}", 2},
        {ToolFamily::Llama3, "", "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"timezone\": \"UTC\"}}", 1},
        {ToolFamily::MistralNemo, "", "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"UTC\"}, \"id\": \"abc123XYZ\"}]", 1},
        {ToolFamily::Granite, "<|tool_call|>", "[{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"UTC\"}}, {\"name\": \"get_time\", \"arguments\": {}}]", 2},
    };
    for (const Case& c : cases) {
        const ToolFormat& format = tool_format(c.family);
        CAPTURE(std::string(format.name));
        CAPTURE(c.text);
        ReplyStream whole_stream(format, tools, c.prefix);
        const std::string whole_content = whole_stream.push(c.text);
        const ReplyStream::Rest whole = whole_stream.finish();
        REQUIRE(whole.calls.size() == c.calls);
        for (size_t piece : {size_t(1), size_t(2), size_t(3), size_t(7), c.text.size()}) {
            CAPTURE(piece);
            ReplyStream s(format, tools, c.prefix);
            s.stream_arguments();
            REQUIRE(s.streams_arguments());
            std::vector<std::string> names, args;
            size_t deltas = 0;
            auto take = [&](const std::vector<vkllm::chat::CallDelta>& ds) {
                for (const auto& d : ds) {
                    ++deltas;
                    if (d.index == names.size()) {
                        CHECK(!d.name.empty());
                        CHECK(!d.id.empty());
                        names.push_back(d.name);
                        args.emplace_back();
                    } else {
                        REQUIRE(d.index < names.size());
                        CHECK(d.name.empty());
                    }
                    args[d.index] += d.arguments;
                }
            };
            std::string content;
            for (size_t at = 0; at < c.text.size(); at += piece) {
                content += s.push(std::string_view(c.text).substr(at, piece));
                take(s.take_deltas());
            }
            const ReplyStream::Rest rest = s.finish();
            take(rest.deltas);
            CHECK(content + rest.content == whole_content + whole.content);
            REQUIRE(names.size() == whole.calls.size());
            CHECK(rest.calls.size() == whole.calls.size());
            for (size_t i = 0; i < names.size(); ++i) {
                CHECK(names[i] == whole.calls[i].name);
                CHECK(args[i] == whole.calls[i].arguments);
                CHECK_FALSE(Json::parse(args[i]).is_discarded());
            }
            if (piece == 1) CHECK(deltas > 2 * names.size());  // the arguments went out in pieces, not whole
        }
    }
    // The arguments are the model's JSON less the whitespace between tokens (strings untouched).
    const auto r = vkllm::chat::parse_reply(tool_format(ToolFamily::Hermes), tools,
                                            "<tool_call>{\"name\": \"get_time\", \"arguments\": { \"timezone\" : \"A B\\u00e9\" }}</tool_call>");
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].arguments == R"({"timezone":"A B\u00e9"})");

    // Families whose calls are not JSON objects naming the tool first do not stream arguments.
    ReplyStream ds(tool_format(ToolFamily::DeepSeekV31), tools);
    ds.stream_arguments();
    CHECK_FALSE(ds.streams_arguments());

    // Cut inside a call: what went out stays out; no calls, and the markup is not content too.
    ReplyStream cut(tool_format(ToolFamily::Hermes), tools);
    cut.stream_arguments();
    CHECK(cut.push("Hi.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"timez") == "Hi.");
    const auto begun = cut.take_deltas();
    REQUIRE(begun.size() == 1);
    CHECK(begun[0].name == "get_time");
    CHECK(begun[0].arguments == "{\"timez");
    const auto end = cut.finish();
    CHECK(end.calls.empty());
    CHECK(end.content.empty());
    CHECK(end.deltas.empty());

    // Text after the calls is not a call, even where it holds an object shaped like one (a
    // fuzz_grammar finding: the scan went on past the list and streamed a call the parser does not
    // read).
    for (const auto& [family, text] : std::vector<std::pair<ToolFamily, std::string>>{
             {ToolFamily::Granite, "<|tool_call|>[{\"name\": \"get_time\", \"arguments\": {}}] Sure. {\"name\": \"get_time\", \"arguments\": {\"a\": 1}}"},
             {ToolFamily::Hermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call> then {\"name\": \"get_time\", \"arguments\": {}}"},
             {ToolFamily::Generic, "{\"x\": {\"name\": \"get_time\", \"arguments\": {}}}"}}) {
        CAPTURE(text);
        ReplyStream after(tool_format(family), tools);
        after.stream_arguments();
        std::string content;
        size_t begun = 0;
        for (char ch : text) {
            content += after.push(std::string(1, ch));
            for (const auto& d : after.take_deltas()) begun += d.name.empty() ? 0 : 1;
        }
        const auto rest = after.finish();
        for (const auto& d : rest.deltas) begun += d.name.empty() ? 0 : 1;
        const auto whole = vkllm::chat::parse_reply(tool_format(family), tools, text);
        CHECK(begun == whole.calls.size());
        CHECK(content + rest.content == whole.content);
    }

    // A call written whole that the parser still refuses (nested deeper than it takes) is content,
    // as in a whole reply; only a call cut short is not.
    {
        const Json any = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
        std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": ";
        for (int i = 0; i < 70; ++i) deep += "[";
        for (int i = 0; i < 70; ++i) deep += "]";
        deep += "}}</tool_call>";
        ReplyStream refused(tool_format(ToolFamily::Hermes), any);
        refused.stream_arguments();
        std::string content = refused.push(deep);
        CHECK(refused.take_deltas().size() == 1);
        const auto rest = refused.finish();
        CHECK(rest.calls.empty());
        CHECK(content + rest.content == deep);
    }

    // A call naming a tool the request does not offer is never begun.
    ReplyStream unknown(tool_format(ToolFamily::Hermes), tools);
    unknown.stream_arguments();
    unknown.push("<tool_call>\n{\"name\": \"get_news\", \"arguments\": {\"q\": 1");
    CHECK(unknown.take_deltas().empty());
}

TEST_CASE("tool calls: a template that concatenates the arguments as text gets them as text (Functionary v3.2)") {
    if (!have_templates()) return;
    const TemplateFile file = template_files().at("meetkai-functionary-medium-v3.2");
    ChatTemplate t(file.source, "functionary-v3.2");
    ChatInputs in;
    in.tools = both_tools();
    in.messages = Json::parse(R"([{"role": "user", "content": "Time in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call00001", "type": "function",
          "function": {"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}}]},
        {"role": "tool", "tool_call_id": "call00001", "content": "12:00"}])");
    std::string prompt;
    REQUIRE_NOTHROW(prompt = t.apply(in));
    CHECK(prompt.find(">>>get_time\n{\"timezone\":\"Europe/Paris\"}") != std::string::npos);
    // Templates that take the object still get the object.
    const TemplateFile qwen = template_files().at("Qwen-Qwen2.5-7B-Instruct");
    const std::string q = ChatTemplate(qwen.source, "qwen").apply(in);
    CHECK(q.find("\"arguments\": {\"timezone\": \"Europe/Paris\"}") != std::string::npos);
}

TEST_CASE("tool calls: bare values run to their own closing tag; JSON values to the first that ends their JSON") {
    const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "w", "parameters": {"type": "object",
        "properties": {"html": {"type": "string"}, "k": {"type": "array", "items": {"type": "string"}},
                       "s": {"type": ["string"]}, "n": {"type": "integer"}, "b": {"type": "boolean"}}}}}])");
    for (ToolFamily family : {ToolFamily::QwenCoder, ToolFamily::Glm45}) {
        const bool coder = family == ToolFamily::QwenCoder;
        INFO("family: " << std::string(tool_format(family).name));
        auto arg = [&](const std::string& key, const std::string& value) {
            return coder ? "<parameter=" + key + ">\n" + value + "\n</parameter>\n"
                         : "<arg_key>" + key + "</arg_key>\n<arg_value>" + value + "</arg_value>\n";
        };
        auto call = [&](const std::string& args) {
            return coder ? "<tool_call>\n<function=w>\n" + args + "</function>\n</tool_call>" : "<tool_call>w\n" + args + "</tool_call>";
        };
        const std::string other_tag = coder ? "</arg_value>" : "</parameter>";
        const std::string own_tag = coder ? "</parameter>" : "</arg_value>";
        // Markup in a bare string, the other family's closing tag too; a list whose string holds
        // this family's closing tag; "type": ["string"] is a string; Python's True.
        const std::string reply = call(arg("html", "<b>x</b>" + other_tag) + arg("k", "[\"a" + own_tag + "b\"]") + arg("s", "123") +
                                       arg("n", "7") + arg("b", coder ? "True" : "true"));
        const auto r = vkllm::chat::parse_reply(tool_format(family), tools, reply);
        REQUIRE(r.calls.size() == 1);
        CHECK(r.content == "");
        const Json want = {{"html", "<b>x</b>" + other_tag}, {"k", Json::array({"a" + own_tag + "b"})}, {"s", "123"}, {"n", 7}, {"b", true}};
        CHECK(nlohmann::json::parse(r.calls[0].arguments) == nlohmann::json::parse(want.dump()));
        // The forced and lazy grammars take the same reply, and no bare value holding the tag.
        const auto fc = vkllm::chat::forced_call(tool_format(family), tools, "", false);
        const auto rest = after_prefix(reply, fc.prompt_prefix);
        REQUIRE(rest.has_value());
        const Grammar fg = Grammar::parse(fc.gbnf);
        CHECK(fit(fg, *rest).has_value());
        const auto lazy = vkllm::chat::lazy_call(tool_format(family), tools, false);
        const Grammar lg = Grammar::parse(lazy.gbnf);
        Matcher lm(lg);
        CHECK(lm.accept(reply));
        CHECK(lm.can_end());
        const std::string tagged = call(arg("html", "a" + own_tag + "b"));
        REQUIRE(starts_with(tagged, fc.prompt_prefix));
        CHECK_FALSE(Matcher(fg).accept(tagged.substr(fc.prompt_prefix.size())));
        CHECK(Matcher(fg).accept(reply.substr(fc.prompt_prefix.size())));
        // A value the schema types that is not JSON (or nests past what the parser reads): no call.
        CHECK(vkllm::chat::parse_reply(tool_format(family), tools, call(arg("n", "seven"))).calls.empty());
        CHECK(vkllm::chat::parse_reply(tool_format(family), tools, call(arg("k", std::string(70, '[') + std::string(70, ']'))))
                  .calls.empty());
        // Names the markup cannot hold as they are: refused when forcing.
        Json spaced_name = tools;
        spaced_name[0]["function"]["parameters"]["properties"][" html"] = Json{{"type", "string"}};
        CHECK_THROWS_AS(vkllm::chat::forced_call(tool_format(family), spaced_name, "", false), ToolError);
        Json tagged_enum = tools;
        tagged_enum[0]["function"]["parameters"]["properties"]["e"] = Json{{"enum", Json::array({"x" + own_tag})}};
        CHECK_THROWS_AS(vkllm::chat::forced_call(tool_format(family), tagged_enum, "", false), ToolError);
    }
    // A property named "$id" is a subschema the compiler refuses: the error names the tool.
    Json id_prop = tools;
    id_prop[0]["function"]["parameters"]["properties"]["$id"] = Json{{"type", "integer"}};
    try {
        vkllm::chat::forced_call(tool_format(ToolFamily::QwenCoder), id_prop, "", false);
        FAIL_CHECK("a property named $id was accepted");
    } catch (const ToolError& e) {
        CHECK(starts_with(e.param(), "tools[0]"));
    }
    // Functionary v3.2 keeps "all" for its answers to the user: no tool of that name can be forced.
    const Json all = Json::parse(R"([{"type": "function", "function": {"name": "all"}}])");
    CHECK_THROWS_AS(vkllm::chat::forced_call(tool_format(ToolFamily::FunctionaryV32), all, "", false), ToolError);
}

TEST_CASE("answer stream: reasoning, content and calls, the same whole and in pieces, for every front end") {
    const Json tools = both_tools();
    vkllm::chat::ToolPlan plan;
    plan.parse_as = &tool_format(ToolFamily::Hermes);
    vkllm::chat::AnswerFormat f;
    f.split_reasoning = &vkllm::chat::think_tags();
    f.plan = &plan;
    f.tools = tools;
    const std::string answer = "<think>Weather needs a tool.</think>\nLet me look.\n<tool_call>\n" +
                               std::string(R"({"name": "get_time", "arguments": {"timezone": "Europe/Paris"}})") + "\n</tool_call>";
    for (size_t piece : {answer.size(), size_t(1), size_t(5)}) {
        CAPTURE(piece);
        const auto rest = read_answer(f, answer, piece);
        CHECK(rest.reasoning == "Weather needs a tool.");
        CHECK(rest.content == "Let me look.");
        check_calls(rest.calls, {time_call()});
    }
    CHECK(vkllm::chat::AnswerStream(f).family() == ToolFamily::Hermes);
    // Without a plan that reads calls, and without splitting, the text passes through.
    vkllm::chat::AnswerStream plain(vkllm::chat::AnswerFormat{});
    CHECK(plain.push(answer).content == answer);
    CHECK(plain.finish().calls.empty());
    CHECK(plain.family() == ToolFamily::Generic);
    // Harmony: analysis is reasoning, or stays in the content when asked (reasoning_format "none").
    vkllm::chat::AnswerFormat h;
    h.harmony = true;
    const std::string harmony = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi.";
    vkllm::chat::AnswerStream split(h);
    auto p = split.push(harmony);
    auto r = split.finish();
    CHECK(p.reasoning + r.reasoning == "Think.");
    CHECK(p.content + r.content == "Hi.");
    h.inline_reasoning = true;
    vkllm::chat::AnswerStream inline_stream(h);
    p = inline_stream.push(harmony);
    r = inline_stream.finish();
    CHECK(p.reasoning + r.reasoning == "");
    CHECK(p.content + r.content == "Think.Hi.");
}

TEST_CASE("tool calls: a follow-up turn's null content is no text, also for templates that would print None") {
    if (!have_templates()) return;
    const auto files = template_files();
    const Json turn = Json::parse(R"([{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[)"
                                  R"({"id":"call00001","type":"function","function":{"name":"get_time","arguments":{"timezone":"UTC"}}}]},)"
                                  R"({"role":"tool","tool_call_id":"call00001","content":"12:00"}])");
    std::map<std::string, bool> expected = {{"GLM-4.6", true}, {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", false},
                                            {"Qwen-Qwen2.5-7B-Instruct", false}, {"CohereForAI-c4ai-command-r-plus-tool_use", true}};
    for (const auto& [name, prints] : expected) {
        CAPTURE(name);
        const TemplateFile& file = files.at(name);
        ChatTemplate tmpl(file.source, name);
        CHECK(tmpl.prints_null_content() == prints);
        ChatInputs in;
        in.messages = turn;
        in.tools = both_tools();
        in.bos_token = file.bos;
        in.eos_token = file.eos;
        in.now = "2024-07-26 00:00:00";
        const std::string out = tmpl.apply(in);
        CHECK(out.find("get_time") != std::string::npos);  // R1's template shows the call only for a null content
        if (prints) {
            // As if the client had sent "": no "None" for the null.
            ChatInputs empty = in;
            empty.messages[1]["content"] = "";
            CHECK(out == tmpl.apply(empty));
        }
    }
    // GLM-4.6 writes the content as it is: no "None" anywhere.
    {
        const TemplateFile& file = files.at("GLM-4.6");
        ChatTemplate tmpl(file.source, "GLM-4.6");
        ChatInputs in;
        in.messages = turn;
        CHECK(tmpl.apply(in).find("None") == std::string::npos);
    }
}

TEST_CASE("tool calls: Command R7B plans, acts and responds between its control tokens") {
    // Its own template is not in ../shared/templates: a stand-in written from the format renders
    // the turns as the model writes them (tests/fixtures/templates/command-r7b-format.jinja).
    const std::string src = read_file(fs::path(VKLLM_FIXTURES_DIR) / "templates" / "command-r7b-format.jinja");
    const ToolFormat& r7b = vkllm::chat::detect_tool_format(src);
    REQUIRE(r7b.family == ToolFamily::CommandR7B);
    const vkllm::chat::ReasoningTags* thinks = vkllm::chat::reasoning_tags(src);
    REQUIRE(thinks != nullptr);
    CHECK(thinks->open == "<|START_THINKING|>");
    const Json tools = both_tools();

    // The template's render of an assistant turn with a plan and two calls, after the generation
    // prompt and up to the end of the turn: what the model was trained to write.
    ChatTemplate tmpl(src, "command-r7b-format");
    ChatInputs in;
    in.tools = tools;
    in.bos_token = "<BOS_TOKEN>";
    in.messages = Json::array({{{"role", "user"}, {"content", "Weather and time in Paris?"}}});
    in.add_generation_prompt = true;
    const std::string prompt = tmpl.apply(in);
    Json assistant = {{"role", "assistant"}, {"content", nullptr}, {"reasoning_content", "I will look both up."}};
    assistant["tool_calls"] = Json::array();
    for (const WantCall& c : {weather_call(), time_call()})
        assistant["tool_calls"].push_back({{"id", "call_" + c.name}, {"type", "function"},
                                           {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    in.messages.push_back(assistant);
    in.add_generation_prompt = false;
    std::string reply = tmpl.apply(in);
    REQUIRE(starts_with(reply, prompt));
    reply.erase(0, prompt.size());
    REQUIRE(ends_with(reply, "<|END_OF_TURN_TOKEN|>"));
    reply.resize(reply.size() - std::string_view("<|END_OF_TURN_TOKEN|>").size());
    MESSAGE("rendered reply:\n" << reply);

    // Read as every front end reads it: the plan is reasoning, the actions are the calls, nothing
    // is content; in any pieces.
    vkllm::chat::ToolPlan plan;
    plan.parse_as = &r7b;
    vkllm::chat::AnswerFormat f;
    f.split_reasoning = thinks;
    f.plan = &plan;
    f.tools = tools;
    auto read = [&](const std::string& text, size_t piece) { return read_answer(f, text, piece); };
    for (size_t piece : {reply.size(), size_t(1), size_t(5)}) {
        CAPTURE(piece);
        const auto r = read(reply, piece);
        CHECK(r.reasoning == "I will look both up.");
        CHECK(r.content.empty());
        check_calls(r.calls, {weather_call(), time_call()});
        // A response: its markers are not content.
        const auto answer = read("<|START_RESPONSE|>It is 21 C in Paris.<|END_RESPONSE|>", piece);
        CHECK(answer.content == "It is 21 C in Paris.");
        CHECK(answer.calls.empty());
    }
    // Without a plan, and the tool_call_id (the call's place in the conversation) is no id.
    check_reply(r7b, tools, "<|START_ACTION|>[{\"tool_call_id\": \"3\", \"tool_name\": \"get_time\", \"parameters\": "
                            "{\"timezone\": \"Europe/Paris\"}}]<|END_ACTION|>", "", {time_call()});
    // Malformed actions come back as written; a response marker is dropped from the content all the same.
    check_reply(r7b, tools, "<|START_RESPONSE|>Hi<|END_RESPONSE|><|START_ACTION|>[{\"tool_name\": \"nope\"}]<|END_ACTION|>",
                "Hi<|START_ACTION|>[{\"tool_name\": \"nope\"}]<|END_ACTION|>", {});
    check_reply(r7b, tools, "<|START_ACTION|>[]<|END_ACTION|>", "<|START_ACTION|>[]<|END_ACTION|>", {});
    // A marker's beginning at the end is text.
    check_reply(r7b, tools, "Hi <|START_RESP", "Hi <|START_RESP", {});
    // reasoning_format none: the plan stays in the content, its markers do not.
    vkllm::chat::AnswerFormat inline_plan = f;
    inline_plan.split_reasoning = nullptr;
    f = inline_plan;
    const auto inlined = read("<|START_THINKING|>Easy.<|END_THINKING|><|START_RESPONSE|>Hi.<|END_RESPONSE|>", 3);
    CHECK(inlined.reasoning.empty());
    CHECK(inlined.content == "Easy.Hi.");

    // tool_choice required: the prompt opens the action list, the grammar holds the rest as the
    // template writes it and refuses arguments the tool does not take.
    const vkllm::chat::ForcedCall fc = vkllm::chat::forced_call(r7b, tools, "", true);
    CHECK(fc.prompt_prefix == "<|START_ACTION|>");
    const size_t action = reply.find("<|START_ACTION|>");
    REQUIRE(action != std::string::npos);
    const Grammar forced = Grammar::parse(fc.gbnf);
    const std::string actions = reply.substr(action + fc.prompt_prefix.size());
    CHECK_MESSAGE(fit(forced, actions).has_value(), "the forced grammar refuses:\n" << actions);
    CHECK_FALSE(fit(forced, R"([{"tool_call_id": "0", "tool_name": "get_time", "parameters": {"tz": "UTC"}}]<|END_ACTION|>)"));
    CHECK_FALSE(fit(forced, R"([{"tool_call_id": "0", "tool_name": "get_news", "parameters": {}}]<|END_ACTION|>)"));
    CHECK_FALSE(fit(forced, R"([]<|END_ACTION|>)"));
    // tool_choice auto: free until <|START_ACTION|>, not inside the plan.
    const vkllm::chat::LazyCall lazy = vkllm::chat::lazy_call(r7b, tools, true);
    REQUIRE(!lazy.gbnf.empty());
    vkllm::grammar::LazyStart start{lazy.triggers};
    vkllm::chat::skip_reasoning(start, false, *thinks);
    const size_t at = vkllm::grammar::find_trigger(reply, start);
    CHECK(at == action);
    const Grammar lg = Grammar::parse(lazy.gbnf);
    CHECK(fit(lg, reply.substr(at)).has_value());
    CHECK(vkllm::grammar::find_trigger("<|START_THINKING|>Maybe <|START_ACTION|>?", start) == std::string::npos);
    CHECK(vkllm::grammar::find_trigger("<|START_RESPONSE|>Hi<|END_RESPONSE|>", start) == std::string::npos);
}
