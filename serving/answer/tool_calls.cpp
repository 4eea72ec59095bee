#include "serving/answer/tool_calls.h"

#include "model/grammar/json_schema.h"
#include "serving/answer/harmony.h"
#include "serving/answer/reasoning.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <optional>
#include <random>
#include <set>

namespace vkllm::chat {

using json = nlohmann::ordered_json;

namespace {

// DeepSeek's markers: full-width bars and U+2581 (the SentencePiece space) inside.
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
// The action Command R+'s tool-use template offers besides the request's tools: no tool is needed.
constexpr const char* kDirectlyAnswer = "directly-answer";

struct Row {
    ToolFormat format;
    // The template source must hold both (nullptr: no second marker) to speak this format.
    std::array<const char*, 2> template_markers;
    // Where a call begins in a reply (nullptr: none), and whether a reply that starts with a JSON
    // object is a call too (formats whose call is the whole reply).
    const char* call_marker;
    bool call_is_reply;
    // Every marker text of the format: where a vocabulary has one as a control token, the engine
    // shows it in the text for the parser (other control tokens stay hidden).
    std::array<const char*, 6> markup;
    // Markers that frame text for the user (or reasoning left in it): dropped from the content.
    std::array<const char*, 4> dropped = {};
};

// Detection order matters: more specific markers first (Qwen3-Coder's and GLM's templates also
// hold "<tool_call>", Mistral Small 3.2's also "[TOOL_CALLS]").
constexpr Row kRows[] = {
    {{ToolFamily::QwenCoder, "qwen3-coder", "Qwen3-Coder", ForceKind::NamedMarkup, true}, {"<function=", "<parameter="}, "<tool_call>", false,
     {"<tool_call>", "</tool_call>"}},
    {{ToolFamily::FunctionaryV31, "functionary-v3.1", "Functionary medium v3.1", ForceKind::NamedMarkup, true},
     {"<function=", nullptr}, "<function=", false, {}},
    {{ToolFamily::Glm45, "glm-4.5", "GLM-4.5 / 4.6", ForceKind::NamedMarkup, true}, {"<arg_key>", nullptr}, "<tool_call>", false,
     {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"}},
    {{ToolFamily::Hermes, "hermes", "Hermes 2 Pro / 3, Qwen2.5, Qwen3, QwQ", ForceKind::CallObject, true},
     {"<tool_call>", nullptr}, "<tool_call>", false, {"<tool_call>", "</tool_call>"}},
    {{ToolFamily::MistralV11, "mistral-v11", "Mistral Small 3.2, Magistral, Devstral", ForceKind::NamedMarkup, true},
     {"[TOOL_CALLS]", "[ARGS]"}, "[TOOL_CALLS]", false, {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"}},
    {{ToolFamily::MistralNemo, "mistral-nemo", "Mistral Nemo, Mistral 7B v0.3", ForceKind::CallObject, true},
     {"[TOOL_CALLS]", nullptr}, "[TOOL_CALLS]", false, {"[TOOL_CALLS]"}},
    {{ToolFamily::DeepSeekR1, "deepseek-r1", "DeepSeek R1 and its distills", ForceKind::NamedMarkup, true},
     {"tool▁calls▁begin", "```json"}, "<｜tool▁calls▁begin｜>", false,
     {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"}},
    {{ToolFamily::DeepSeekV31, "deepseek-v3.1", "DeepSeek V3 / V3.1", ForceKind::NamedMarkup, true},
     {"tool▁calls▁begin", nullptr}, "<｜tool▁calls▁begin｜>", false,
     {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"}},
    // Harmony replies are read by HarmonyStream (harmony.h), not by ReplyStream: this row names the
    // format; its markers are harmony_markup()'s.
    {{ToolFamily::Harmony, "gpt-oss", "gpt-oss (Harmony)", ForceKind::NamedPrefix, true}, {"<|channel|>", nullptr}, nullptr, false, {}},
    {{ToolFamily::KimiK2, "kimi-k2", "Kimi K2", ForceKind::NamedMarkup, true}, {"tool_calls_section", nullptr},
     "<|tool_calls_section_begin|>", false,
     {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
      "<|tool_call_end|>"}},
    {{ToolFamily::Granite, "granite", "IBM Granite 3", ForceKind::CallObject, true}, {"<|tool_call|>", nullptr}, "<|tool_call|>",
     false, {"<|tool_call|>"}},
    // Command R7B's template also has Command R+'s turn tokens, but its calls are another format. Its
    // plan (<|START_THINKING|>) is a reasoning block (reasoning.h); the markers are control tokens.
    {{ToolFamily::CommandR7B, "command-r7b", "Command R7B", ForceKind::CallObject, true}, {"<|START_ACTION|>", nullptr},
     "<|START_ACTION|>", false,
     {"<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_THINKING|>", "<|END_THINKING|>"},
     {"<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_THINKING|>", "<|END_THINKING|>"}},
    {{ToolFamily::CommandRPlus, "command-r-plus", "Command R / R+ (tool-use template)", ForceKind::CallObject, true},
     {"START_OF_TURN_TOKEN", "Action:"}, "Action:", false, {"Action:"}},
    // The call marker begins every part of the reply, a call or not: parts for the user are told
    // apart while the stream reads them (ReplyStream::Impl::find_heads).
    {{ToolFamily::FunctionaryV32, "functionary-v3.2", "Functionary medium v3.2", ForceKind::NamedMarkup, true}, {">>>all", nullptr},
     ">>>", false, {">>>"}},
    {{ToolFamily::Llama3, "llama3", "Llama 3.1, 3.2, 3.3", ForceKind::CallObject, false}, {"<|start_header_id|>", "ipython"},
     "<|python_tag|>", true, {"<|python_tag|>"}},
    {{ToolFamily::Generic, "generic", "every other template", ForceKind::CallObject, true}, {nullptr, nullptr}, nullptr, true, {}},
};

const Row& row_of(const ToolFormat& f) {
    for (const Row& r : kRows)
        if (&r.format == &f) return r;
    for (const Row& r : kRows)
        if (r.format.family == f.family) return r;
    return kRows[std::size(kRows) - 1];
}

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
    return s;
}

// The end of the JSON object or array that starts at s[pos] (one past its closing bracket), or npos
// when it does not close within s. Only brackets and strings are tracked: json::parse checks the rest.
size_t json_end(std::string_view s, size_t pos) {
    if (pos >= s.size() || (s[pos] != '{' && s[pos] != '[')) return std::string_view::npos;
    int depth = 0;
    bool in_string = false;
    for (size_t i = pos; i < s.size(); ++i) {
        const char c = s[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            ++depth;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        }
    }
    return std::string_view::npos;
}

// A cursor over a reply's call markup. Every method that fails leaves `ok` false; the caller then
// treats the whole markup as content.
class Cursor {
public:
    Cursor(std::string_view s, const json& tools) : s_(s), tools_(tools) {}

    bool ok() const { return ok_; }
    bool at_end() const { return pos_ >= s_.size(); }
    size_t pos() const { return pos_; }
    std::string_view rest() const { return s_.substr(std::min(pos_, s_.size())); }
    void fail() { ok_ = false; }

    void skip_ws() {
        while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
    }
    bool next_is(std::string_view lit) const { return ok_ && s_.substr(pos_).starts_with(lit); }
    bool accept(std::string_view lit) {
        if (!next_is(lit)) return false;
        pos_ += lit.size();
        return true;
    }
    void expect(std::string_view lit) {
        if (!accept(lit)) ok_ = false;
    }
    // A closing marker the reply may lack at its very end (the grammar of a forced call ends the
    // generation right after the JSON, or the model ended its turn there).
    void expect_or_end(std::string_view lit) {
        skip_ws();
        if (at_end()) return;
        if (lit.starts_with(rest())) {  // cut inside the marker
            pos_ = s_.size();
            return;
        }
        expect(lit);
    }
    // The text up to `lit` (consumed), trimmed.
    std::string until(std::string_view lit) {
        if (!ok_) return {};
        const size_t e = s_.find(lit, pos_);
        if (e == std::string_view::npos) {
            ok_ = false;
            return {};
        }
        std::string out(trim(s_.substr(pos_, e - pos_)));
        pos_ = e + lit.size();
        return out;
    }
    json value() {
        if (!ok_) return nullptr;
        skip_ws();
        const size_t e = json_end(s_, pos_);
        if (e == std::string_view::npos) {
            ok_ = false;
            return nullptr;
        }
        json v = parse_json_bounded(s_.substr(pos_, e - pos_));
        if (v.is_discarded()) {
            ok_ = false;
            return nullptr;
        }
        pos_ = e;
        return v;
    }

    // A call from its parts: a tool the request offers (when it offered any), arguments an object
    // (or a string holding one, as some models write).
    void add_call(std::string name, json args, std::string id = {}) {
        if (!ok_) return;
        if (args.is_string()) {
            json parsed = parse_json_bounded(args.get<std::string>());
            args = parsed.is_discarded() ? json(nullptr) : std::move(parsed);
        }
        if (name.empty() || !args.is_object() || !known(name)) {
            ok_ = false;
            return;
        }
        // Bare values (Qwen3-Coder's) are the model's bytes, which need not be valid UTF-8.
        calls_.push_back({std::move(id), std::move(name), args.dump(-1, ' ', false, json::error_handler_t::replace)});
    }
    // Cohere's list of actions: [{"tool_name", "parameters"?}, ...], with a call among them.
    // Actions named `no_call` (unless the request offers such a tool) are the model saying that no
    // tool is needed: not calls.
    void add_actions(const json& list, const char* no_call = nullptr) {
        if (!list.is_array()) ok_ = false;
        const size_t before = calls_.size();
        for (size_t i = 0; ok_ && i < list.size(); ++i) {
            const json& a = list[i];
            if (!a.is_object() || !a.contains("tool_name") || !a["tool_name"].is_string()) {
                ok_ = false;
                break;
            }
            const std::string name = a["tool_name"].get<std::string>();
            if (no_call && name == no_call && !known(name)) continue;
            add_call(name, a.contains("parameters") ? a["parameters"] : json::object());
        }
        if (calls_.size() == before) ok_ = false;
    }
    // {"name": ..., <args_key>: {...}} (Llama 3 also writes "arguments").
    // A tool without parameters may be called without arguments, except where the call is the whole
    // reply and the key is what tells a call from an answer that happens to be JSON (Llama 3).
    void add_call_object(const json& obj, const char* args_key, const char* alt_key = nullptr, bool args_optional = true) {
        if (!obj.is_object() || !obj.contains("name") || !obj["name"].is_string()) {
            ok_ = false;
            return;
        }
        const char* key = obj.contains(args_key) ? args_key : alt_key && obj.contains(alt_key) ? alt_key : nullptr;
        std::string id = obj.contains("id") && obj["id"].is_string() ? obj["id"].get<std::string>() : std::string();
        if (!key && !args_optional) {
            ok_ = false;
            return;
        }
        add_call(obj["name"].get<std::string>(), key ? obj[key] : json::object(), std::move(id));
    }
    const json* tool_parameters(const std::string& name) const {
        if (!tools_.is_array()) return nullptr;
        for (const json& t : tools_)
            if (t.contains("function") && t["function"].value("name", "") == name && t["function"].contains("parameters"))
                return &t["function"]["parameters"];
        return nullptr;
    }
    std::vector<ToolCall> take_calls() { return std::move(calls_); }

private:
    bool known(const std::string& name) const { return offers_tool(tools_, name); }

    std::string_view s_;
    const json& tools_;
    size_t pos_ = 0;
    bool ok_ = true;
    std::vector<ToolCall> calls_;
};

// A subschema of a tool's parameters with its local references followed ("#/$defs/x" inside
// `params`); nullptr when a reference leads nowhere or the chain is longer than 16.
const json* resolve_local(const json& params, const json* s) {
    for (int hops = 0; s && s->is_object() && s->contains("$ref"); ++hops) {
        const json& ref = (*s)["$ref"];
        if (hops >= 16 || !ref.is_string() || !ref.get<std::string>().starts_with("#")) return nullptr;
        try {
            const json::json_pointer ptr(ref.get<std::string>().substr(1));
            s = params.contains(ptr) ? &params.at(ptr) : nullptr;
        } catch (const json::exception&) {
            return nullptr;
        }
    }
    return s;
}

// How Qwen3-Coder's and GLM's templates write a parameter's value between its tags: a string bare
// (as its text), anything else as JSON (Qwen3-Coder's as Python's str() for booleans and null:
// True, False, None). Decided once from the tool's schema, for the parser and the grammars alike.
enum class ValueForm {
    Bare,     // the schema says string: "type": "string" (or ["string"]), or no type and string const / enum values
    Json,     // the schema says another type (or its enum / const values are not all strings)
    Mixed,    // string or another type: JSON when the text is JSON, else the text
    Unknown,  // no schema for it: JSON when the text is JSON, else the text
};
ValueForm value_form(const json* params, const std::string& key) {
    // Any JSON may stand where a schema is expected (true, "string" from a careless client).
    if (!params || !params->is_object() || !params->contains("properties") || !(*params)["properties"].is_object() ||
        !(*params)["properties"].contains(key))
        return ValueForm::Unknown;
    const json* p = resolve_local(*params, &(*params)["properties"][key]);
    if (!p || !p->is_object()) return ValueForm::Unknown;
    if (p->contains("type")) {
        const json& t = (*p)["type"];
        if (t == "string" || t == json::array({"string"})) return ValueForm::Bare;
        if (t.is_array() && std::find(t.begin(), t.end(), json("string")) != t.end()) return ValueForm::Mixed;
        return ValueForm::Json;
    }
    const json values = p->contains("const") ? json::array({(*p)["const"]}) : p->value("enum", json());
    if (values.is_array() && !values.empty())
        return std::all_of(values.begin(), values.end(), [](const json& v) { return v.is_string(); }) ? ValueForm::Bare
                                                                                                     : ValueForm::Json;
    return ValueForm::Unknown;
}

// JSON text, or Python's spelling of true, false and null (Qwen3-Coder's template writes them so).
json json_or_python(std::string_view text) {
    const std::string_view t = trim(text);
    if (t == "True") return true;
    if (t == "False") return false;
    if (t == "None") return nullptr;
    return parse_json_bounded(text);
}

// The value of parameter `key` at the start of `rest`, which runs to its closing tag `close` (Qwen3-Coder
// also writes a newline on each side of the value: `newlines`). A bare value ends at the first
// closing tag; a JSON value at the first one where the text before it is JSON (its strings may
// hold the tag). `len`: the bytes through that closing tag. nullopt when there is none (or the
// value the schema types is not JSON).
std::optional<json> tagged_value(std::string_view rest, std::string_view close, bool newlines, const json* params,
                                 const std::string& key, size_t& len) {
    const ValueForm form = value_form(params, key);
    for (size_t e = rest.find(close); e != std::string_view::npos; e = rest.find(close, e + 1)) {
        std::string_view v = rest.substr(0, e);
        if (newlines) {
            if (v.starts_with("\n")) v.remove_prefix(1);
            if (v.ends_with("\n")) v.remove_suffix(1);
        }
        len = e + close.size();
        if (form == ValueForm::Bare) return json(std::string(v));
        json j = json_or_python(v);
        if (!j.is_discarded()) return j;
        if (form != ValueForm::Json) return json(std::string(v));
    }
    return std::nullopt;
}

// Argument `key`'s value at the cursor (tagged_value) into `args`, the cursor past its closing tag
// and the whitespace after it; false, the cursor failed, when there is none.
bool read_tagged_arg(Cursor& c, const std::string& key, std::string_view close, bool newlines, const json* params,
                     json& args) {
    const std::string_view rest = c.rest();
    size_t len = 0;
    std::optional<json> v = c.ok() && !key.empty() ? tagged_value(rest, close, newlines, params, key, len) : std::nullopt;
    if (!v) {
        c.fail();
        return false;
    }
    args[key] = std::move(*v);
    c.expect(rest.substr(0, len));
    c.skip_ws();
    return true;
}

// The calls at the start of `markup` (which begins at the family's call marker, or with the JSON
// object of a call_is_reply format); nullopt when they are malformed. `tail`: text after them.
std::optional<std::vector<ToolCall>> parse_calls(ToolFamily family, std::string_view markup, const json& tools,
                                                 std::string& tail) {
    Cursor c(markup, tools);
    switch (family) {
    case ToolFamily::Hermes:
        do {
            c.expect("<tool_call>");
            c.add_call_object(c.value(), "arguments");
            c.expect_or_end("</tool_call>");
            c.skip_ws();
        } while (c.ok() && c.next_is("<tool_call>"));
        break;
    case ToolFamily::QwenCoder:
        do {
            c.expect("<tool_call>");
            c.skip_ws();
            c.expect("<function=");
            const std::string name = c.until(">");
            const json* params = c.tool_parameters(name);
            json args = json::object();
            for (c.skip_ws(); c.ok() && c.accept("<parameter=");) {
                const std::string key = c.until(">");
                // The template writes "\n" around each value: one on each side is markup.
                if (!read_tagged_arg(c, key, "</parameter>", true, params, args)) break;
            }
            c.expect_or_end("</function>");
            c.add_call(name, std::move(args));
            c.expect_or_end("</tool_call>");
            c.skip_ws();
        } while (c.ok() && c.next_is("<tool_call>"));
        break;
    case ToolFamily::Llama3:
        c.accept("<|python_tag|>");
        do {
            c.add_call_object(c.value(), "parameters", "arguments", false);
            c.skip_ws();
        } while (c.ok() && c.accept(";"));
        if (!c.at_end()) c.fail();  // the calls are the whole reply: text after them makes it an answer
        break;
    case ToolFamily::MistralNemo: {
        c.expect("[TOOL_CALLS]");
        const json list = c.value();
        if (!list.is_array() || list.empty()) c.fail();
        for (size_t i = 0; c.ok() && i < list.size(); ++i) c.add_call_object(list[i], "arguments");
        break;
    }
    case ToolFamily::MistralV11:
        while (c.ok() && c.accept("[TOOL_CALLS]")) {
            const size_t args_at = c.rest().find("[ARGS]");
            const size_t id_at = c.rest().find("[CALL_ID]");
            std::string name, id;
            if (id_at != std::string_view::npos && id_at < args_at) {
                name = c.until("[CALL_ID]");
                id = c.until("[ARGS]");
            } else {
                name = c.until("[ARGS]");
            }
            c.add_call(name, c.value(), id);
            c.skip_ws();
        }
        break;
    case ToolFamily::DeepSeekV31:
    case ToolFamily::DeepSeekR1:
        c.expect(kDsCallsBegin);
        do {
            c.skip_ws();
            c.expect(kDsCallBegin);
            std::string name;
            json args;
            if (family == ToolFamily::DeepSeekR1) {
                c.accept("function");
                c.expect(kDsSep);
                name = c.until("\n");
                c.skip_ws();
                c.expect("```json");
                args = c.value();
                c.expect_or_end("```");
            } else {
                name = c.until(kDsSep);
                args = c.value();
            }
            c.add_call(name, std::move(args));
            c.expect_or_end(kDsCallEnd);
            c.skip_ws();
        } while (c.ok() && c.next_is(kDsCallBegin));
        c.expect_or_end(kDsCallsEnd);
        break;
    case ToolFamily::FunctionaryV31:
        do {
            c.expect("<function=");
            const std::string name = c.until(">");
            c.add_call(name, c.value());
            c.expect_or_end("</function>");
            c.skip_ws();
        } while (c.ok() && c.next_is("<function="));
        break;
    case ToolFamily::FunctionaryV32:
        // The reply's first part has no ">>>": the generation prompt ends with it.
        c.accept(">>>");
        do {
            const std::string name = c.until("\n");
            c.add_call(name, c.value());
            c.skip_ws();
            // ">>>all\n" goes back to the user: the text after it is the tail.
        } while (c.ok() && !c.next_is(">>>all\n") && c.accept(">>>"));
        break;
    case ToolFamily::Granite: {
        c.expect("<|tool_call|>");
        const json list = c.value();
        if (!list.is_array() || list.empty()) c.fail();
        for (size_t i = 0; c.ok() && i < list.size(); ++i) c.add_call_object(list[i], "arguments");
        break;
    }
    case ToolFamily::KimiK2:
        c.expect("<|tool_calls_section_begin|>");
        do {
            c.skip_ws();
            c.expect("<|tool_call_begin|>");
            // "functions.NAME:INDEX" is also the call's id: the template writes it back that way
            // in the history, and the tool's result refers to it.
            const std::string id = c.until("<|tool_call_argument_begin|>");
            std::string_view name = id;
            if (name.starts_with("functions.")) name.remove_prefix(std::string_view("functions.").size());
            const size_t colon = name.rfind(':');
            if (colon != std::string_view::npos && colon + 1 < name.size() &&
                std::all_of(name.begin() + colon + 1, name.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
                name = name.substr(0, colon);
            c.add_call(std::string(name), c.value(), id);
            c.expect_or_end("<|tool_call_end|>");
            c.skip_ws();
        } while (c.ok() && c.next_is("<|tool_call_begin|>"));
        c.expect_or_end("<|tool_calls_section_end|>");
        break;
    case ToolFamily::Glm45:
        do {
            c.expect("<tool_call>");
            // The name ends its line; a call without arguments may close right after it.
            const std::string_view rest = c.rest();
            const size_t name_end = std::min(rest.find("<arg_key>"), rest.find("</tool_call>"));
            if (name_end == std::string_view::npos) c.fail();
            const std::string name(trim(rest.substr(0, name_end)));
            c.expect(rest.substr(0, name_end));
            const json* params = c.tool_parameters(name);
            json args = json::object();
            while (c.ok() && c.accept("<arg_key>")) {
                const std::string key = c.until("</arg_key>");
                c.skip_ws();
                c.expect("<arg_value>");
                // The template writes a value as it is between the tags, strings bare (as
                // Qwen3-Coder's does).
                if (!read_tagged_arg(c, key, "</arg_value>", false, params, args)) break;
            }
            c.add_call(name, std::move(args));
            c.expect_or_end("</tool_call>");
            c.skip_ws();
        } while (c.ok() && c.next_is("<tool_call>"));
        break;
    case ToolFamily::CommandRPlus: {
        c.expect("Action:");
        c.skip_ws();
        // The template fences the list; a model may leave the fence out.
        const bool fenced = c.accept("```json") || c.accept("```");
        // An answer whose only action is "directly-answer" has no call: it is content, as written
        // (the template's flow answers in a turn of its own, which the request did not ask for).
        c.add_actions(c.value(), kDirectlyAnswer);
        if (fenced) c.expect_or_end("```");
        break;
    }
    case ToolFamily::CommandR7B:
        // Its "tool_call_id" is the call's place in the conversation, which the template counts
        // itself: not an id to give back.
        c.expect("<|START_ACTION|>");
        c.add_actions(c.value());
        c.skip_ws();
        c.expect_or_end("<|END_ACTION|>");
        break;
    case ToolFamily::Generic: {
        const json obj = c.value();
        if (!obj.is_object() || obj.size() != 1 || !obj.contains("tool_calls") || !obj["tool_calls"].is_array() ||
            obj["tool_calls"].empty())
            c.fail();
        for (size_t i = 0; c.ok() && i < obj["tool_calls"].size(); ++i) c.add_call_object(obj["tool_calls"][i], "arguments");
        break;
    }
    case ToolFamily::Harmony: c.fail(); break;  // HarmonyStream's
    }
    if (!c.ok()) return std::nullopt;
    c.skip_ws();
    tail = std::string(trim(c.rest()));
    return c.take_calls();
}

// JSON text less the whitespace between its tokens (strings untouched): the arguments as the model
// wrote them, in the form whole and streamed replies both give.
std::string compact_json_text(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool in_string = false, escaped = false;
    for (const char c : s) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
        } else if (is_ws(c)) {
            continue;
        } else if (c == '"') {
            in_string = true;
        }
        out += c;
    }
    return out;
}

// Whether a family's calls are JSON objects {"name": N, <arguments>: {...}}: those can be followed
// while they are written.
bool calls_are_objects(ToolFamily f) {
    return f == ToolFamily::Hermes || f == ToolFamily::Llama3 || f == ToolFamily::MistralNemo || f == ToolFamily::Granite ||
           f == ToolFamily::Generic;
}

// The calls of a JSON-object family as far as `markup` goes, in order: the family's list markup
// (Hermes' <tool_call> tags, the JSON list of Mistral Nemo, Granite and the generic format, Llama 3's
// optional <|python_tag|> and ';') around objects whose first key is "name" and second "arguments"
// (Llama 3: "parameters"), the arguments compacted (compact_json_text). The last may be unfinished
// (complete false: the arguments so far, or a name and no arguments yet). Scanning stops at anything
// else: text after the calls, a call written another way (the grammars that hold calls write this
// shape), so only what the parser will also read as calls is ever streamed. A call's arguments are
// skipped whole, so objects inside them never count.
struct ScannedCall {
    std::string name;
    std::string arguments;
    bool complete = false;
};
std::vector<ScannedCall> scan_calls(ToolFamily family, std::string_view s) {
    std::vector<ScannedCall> out;
    enum class Match { Yes, Partial, No };
    auto skip_ws = [&](size_t p) {
        while (p < s.size() && is_ws(s[p])) ++p;
        return p;
    };
    // Tokens in order, whitespace allowed between them (not inside); `p` moves past them on Yes.
    auto tokens = [&](size_t& p, std::initializer_list<std::string_view> toks) {
        size_t q = p;
        for (std::string_view t : toks) {
            q = skip_ws(q);
            const std::string_view have = s.substr(q, t.size());
            if (!t.starts_with(have)) return Match::No;
            if (have.size() < t.size()) return Match::Partial;
            q += t.size();
        }
        p = q;
        return Match::Yes;
    };
    // The markup before the first call object.
    size_t pos = 0;
    Match m = Match::No;
    switch (family) {
    case ToolFamily::Hermes: m = tokens(pos, {"<tool_call>"}); break;
    case ToolFamily::MistralNemo: m = tokens(pos, {"[TOOL_CALLS]", "["}); break;
    case ToolFamily::Granite: m = tokens(pos, {"<|tool_call|>", "["}); break;
    case ToolFamily::Generic: m = tokens(pos, {"{", "\"tool_calls\"", ":", "["}); break;
    case ToolFamily::Llama3:
        m = tokens(pos, {"<|python_tag|>"});
        if (m == Match::No) m = Match::Yes;  // the call may be the whole reply
        break;
    default: return out;
    }
    const std::string_view key = family == ToolFamily::Llama3 ? "\"parameters\"" : "\"arguments\"";
    while (m == Match::Yes) {
        // {"name": "N", "arguments": {...
        size_t p = pos;
        if (tokens(p, {"{", "\"name\"", ":"}) != Match::Yes) break;
        p = skip_ws(p);
        if (p >= s.size() || s[p] != '"') break;
        size_t q = p + 1;
        while (q < s.size() && s[q] != '"') q += s[q] == '\\' ? 2 : 1;
        if (q >= s.size()) break;
        const json name = parse_json_bounded(s.substr(p, q + 1 - p));
        if (!name.is_string()) break;
        p = q + 1;
        if (tokens(p, {",", key, ":"}) != Match::Yes) break;
        p = skip_ws(p);
        ScannedCall call{name.get<std::string>(), {}, false};
        if (p >= s.size()) {
            out.push_back(std::move(call));
            break;
        }
        if (s[p] != '{') break;
        const size_t end = json_end(s, p);
        call.arguments = compact_json_text(s.substr(p, end == std::string_view::npos ? std::string_view::npos : end - p));
        call.complete = end != std::string_view::npos;
        out.push_back(std::move(call));
        if (end == std::string_view::npos) break;
        // The markup to the next call object.
        pos = end;
        switch (family) {
        case ToolFamily::Hermes: m = tokens(pos, {"}", "</tool_call>", "<tool_call>"}); break;
        case ToolFamily::Llama3: m = tokens(pos, {"}", ";"}); break;
        case ToolFamily::MistralNemo: {
            // Its template writes the call's id after the arguments.
            size_t id = pos;
            if (tokens(id, {",", "\"id\"", ":"}) == Match::Yes) {
                id = skip_ws(id);
                const size_t close = id < s.size() && s[id] == '"' ? s.find('"', id + 1) : std::string_view::npos;
                if (close == std::string_view::npos) return out;
                pos = close + 1;
            }
            m = tokens(pos, {"}", ","});
            break;
        }
        default: m = tokens(pos, {"}", ","}); break;
        }
    }
    return out;
}

size_t trailing_ws(std::string_view s) {
    size_t n = 0;
    while (n < s.size() && is_ws(s[s.size() - 1 - n])) ++n;
    return n;
}

const std::string& function_name(const json& tool) { return tool["function"]["name"].get_ref<const std::string&>(); }

// A tool's parameters with every local reference moved under "#/$defs/<def>", where the wrapper
// schema of forced_call() keeps them.
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

// A tool's parameters as a forced call's grammar takes them: the arguments are an object (the
// parser refuses anything else), also where the schema leaves the type open ("parameters": {}).
json forced_parameters(const json& tool, size_t index) {
    const json& f = tool["function"];
    json p = f.contains("parameters") ? f["parameters"] : json::object();
    if (!p.contains("type")) {
        p["type"] = "object";
    } else if (p["type"] != "object") {
        const std::string param = fmt::format("tools[{}].function.parameters", index);
        throw ToolError(fmt::format("Invalid '{}': a tool's arguments are an object, so its parameters must have "
                                    "\"type\": \"object\".", param), param);
    }
    return p;
}

// The GBNF rules of `schema` as rule "tool-call"; a SchemaError becomes the client's error naming
// the tool's parameters (`where` under "/$defs/tool-<i>" maps back to tools[i]).
// `wrapped`: the schema is forced_call()'s wrapper, whose "/$defs/tool-<k>" is the k-th chosen tool's
// parameters; else it is the one chosen tool's parameters themselves (whose own $defs may have any
// names).
[[noreturn]] void throw_tool_schema_error(const grammar::SchemaError& e, const std::vector<size_t>& tool_index, bool wrapped) {
    {
        std::string param = "tools";
        std::string where = e.where();
        constexpr std::string_view kDef = "/$defs/tool-";
        size_t k = 0;
        const size_t slash = where.find('/', kDef.size());
        const std::string_view digits = std::string_view(where).substr(
            std::min(where.size(), kDef.size()), slash == std::string::npos ? std::string_view::npos : slash - kDef.size());
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
        if (!e.keyword().empty()) msg += fmt::format(" (keyword '{}'{})", e.keyword(), where.empty() ? "" : " at " + where);
        throw ToolError(msg, param);
    }
}

std::string call_rules(const json& schema, const std::vector<size_t>& tool_index, bool wrapped) {
    try {
        return grammar::json_schema_rules(schema.dump(), "tool-call");
    } catch (const grammar::SchemaError& e) {
        throw_tool_schema_error(e, tool_index, wrapped);
    }
}

// The schema of a CallObject family's calls (each chosen tool's {"name", arguments}, the
// parameters under "#/$defs/tool-<k>"): a list where the format holds one, one call otherwise.
json call_object_schema(ToolFamily family, const json& tools, const std::vector<size_t>& chosen, bool many) {
    const bool command_r = family == ToolFamily::CommandRPlus || family == ToolFamily::CommandR7B;
    const char* name_key = command_r ? "tool_name" : "name";
    const char* args_key = family == ToolFamily::Llama3 || command_r ? "parameters" : "arguments";
    json defs = json::object();
    json alternatives = json::array();
    for (size_t k = 0; k < chosen.size(); ++k) {
        const std::string def = fmt::format("tool-{}", k);
        defs[def] = rebase_refs(forced_parameters(tools[chosen[k]], chosen[k]), def);
        json properties = json::object();
        // Command R7B's template numbers the calls of a conversation ("0", "1", ...) before each name.
        if (family == ToolFamily::CommandR7B) properties["tool_call_id"] = {{"type", "string"}, {"pattern", "^[0-9]{1,4}$"}};
        properties[name_key] = {{"const", function_name(tools[chosen[k]])}};
        properties[args_key] = {{"$ref", "#/$defs/" + def}};
        // Mistral Nemo's template writes the call's id after its arguments (nine letters and digits).
        if (family == ToolFamily::MistralNemo) properties["id"] = {{"type", "string"}, {"pattern", "^[a-zA-Z0-9]{9}$"}};
        json required = {name_key, args_key};
        if (family == ToolFamily::CommandR7B) required.insert(required.begin(), "tool_call_id");
        alternatives.push_back({{"type", "object"},
                                {"properties", std::move(properties)},
                                {"required", std::move(required)},
                                {"additionalProperties", false}});
    }
    json call = alternatives.size() == 1 ? alternatives[0] : json{{"anyOf", alternatives}};
    json schema;
    switch (family) {
    case ToolFamily::Hermes:
    case ToolFamily::Llama3: schema = call; break;
    case ToolFamily::MistralNemo:
    case ToolFamily::Granite:
    case ToolFamily::CommandRPlus:
    case ToolFamily::CommandR7B:
        schema = {{"type", "array"}, {"items", call}, {"minItems", 1}};
        if (!many) schema["maxItems"] = 1;
        break;
    case ToolFamily::Generic: {
        json list = {{"type", "array"}, {"items", call}, {"minItems", 1}};
        if (!many) list["maxItems"] = 1;
        schema = {{"type", "object"}, {"properties", {{"tool_calls", list}}}, {"required", {"tool_calls"}},
                  {"additionalProperties", false}};
        break;
    }
    default: throw std::logic_error("call_object_schema: not a CallObject family");
    }
    schema["$defs"] = std::move(defs);
    return schema;
}

// JSON pointer text for one key (escaped as pointers are, and '%' too: the compiler reads pointers
// as URI fragments).
std::string pointer_token(std::string_view key) {
    std::string out;
    for (const char ch : key) {
        if (ch == '~') out += "~0";
        else if (ch == '/') out += "~1";
        else if (ch == '%') out += "%25";
        else out += ch;
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
        out += fmt::format("{}-{} ::= ([^{}{}] {}-0 | {} {}-1", name, i, cls(tag[0]), i ? cls(tag[i]) : "", name, first, name);
        if (i > 0 && i + 1 < tag.size()) out += fmt::format(" | {} {}-{}", grammar::gbnf_literal(tag.substr(i, 1)), name, i + 1);
        out += ")?\n";
    }
    return out;
}

// The grammar of a bare value (value_form Bare; `ps` its schema, references followed): any text
// without `tag`, or the listed strings of an enum / const. Other string constraints cannot be held
// on bare text: refused, naming the keyword.
std::string bare_value(const json& ps, const std::string& param, std::string_view tag) {
    static const std::set<std::string, std::less<>> kAnnotations = {"type", "title", "description", "default", "examples",
                                                                    "$comment", "readOnly", "writeOnly", "deprecated"};
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
                                                "string.", param, k), param);
                if (e.get<std::string>().find(tag) != std::string::npos)
                    throw ToolError(fmt::format("Invalid '{}': this model writes string arguments bare, up to '{}', "
                                                "which a value of '{}' holds.", param, tag, k), param);
                values.push_back(grammar::gbnf_literal(e.get<std::string>()));
            }
            continue;
        }
        throw ToolError(fmt::format("Invalid '{}': this model writes string arguments bare, where '{}' cannot be "
                                    "enforced; forcing a call is not supported for it (keyword '{}').", param, k, k), param);
    }
    if (values.empty()) return "bare-text-0";
    std::string alts;
    for (const std::string& v : values) alts += (alts.empty() ? "" : " | ") + v;
    return "(" + alts + ")";
}

// The markup around the calls of a NamedMarkup family (named-call is one call from after its
// opening marker on): [trigger opening] named-call ([between] named-call)* [close]? markup-ws.
// `opening` and `between` are GBNF (with markup-ws where templates put whitespace).
struct CallsMarkup {
    std::string forced_prefix;  // a forced call's: the prompt ends with it (the trigger and the opening, as templates write them)
    std::string trigger;        // where tool_choice auto's grammar starts ("": no lazy grammar)
    std::string opening;        // after the trigger, before the first call
    std::string between;        // between two calls
    std::string close;          // optional, after the last call
};
CallsMarkup calls_markup(ToolFamily family) {
    const auto lit = [](std::string_view t) { return grammar::gbnf_literal(t); };
    const std::string ds_call = lit(kDsCallBegin), kimi_call = lit("<|tool_call_begin|>");
    switch (family) {
    case ToolFamily::QwenCoder:
        return {"<tool_call>\n", "<tool_call>", "markup-ws", "markup-ws " + lit("<tool_call>") + " markup-ws", ""};
    case ToolFamily::Glm45: return {"<tool_call>", "<tool_call>", "", "markup-ws " + lit("<tool_call>"), ""};
    case ToolFamily::FunctionaryV31: return {"<function=", "<function=", "", "markup-ws " + lit("<function="), ""};
    // The generation prompt ends with ">>>", and every part of a reply begins with a head: a call's
    // head cannot be told from the others' by a trigger.
    case ToolFamily::FunctionaryV32: return {"", "", "", lit(">>>"), ""};
    // Markers that are control tokens in these models' vocabularies: a request with tools shows
    // them, so its grammar may write them (TokenPieces). DeepSeek R1's template leaves the closing
    // marker out after a single call.
    case ToolFamily::MistralV11: return {"[TOOL_CALLS]", "[TOOL_CALLS]", "", "markup-ws " + lit("[TOOL_CALLS]"), ""};
    case ToolFamily::DeepSeekV31:
    case ToolFamily::DeepSeekR1:
        return {std::string(kDsCallsBegin) + std::string(kDsCallBegin), std::string(kDsCallsBegin), "markup-ws " + ds_call,
                "markup-ws " + ds_call, "markup-ws " + lit(kDsCallsEnd)};
    case ToolFamily::KimiK2:
        return {"<|tool_calls_section_begin|><|tool_call_begin|>", "<|tool_calls_section_begin|>", "markup-ws " + kimi_call,
                "markup-ws " + kimi_call, "markup-ws " + lit("<|tool_calls_section_end|>")};
    default: throw std::logic_error("calls_markup: not a NamedMarkup family");
    }
}


// Rule named-call for the families whose markup names the tool as text (or between control tokens,
// which a request may speak: TokenPieces), from the end of the opening marker on: one branch per
// chosen tool. In most the arguments are one JSON object (Functionary v3.1's
// "NAME>{...}</function>", v3.2's "NAME\n{...}", Mistral v11's "NAME[ARGS]{...}", DeepSeek's and
// Kimi K2's between their markers); Qwen3-Coder ("<function=NAME>" then
// "<parameter=KEY>" each) and GLM ("NAME\n" then "<arg_key>KEY</arg_key>" each) list each parameter
// in markup, in the order of `properties` (the required ones always), string values bare. `own`:
// the caller's rule names, which these avoid.
std::string named_call_rules(ToolFamily family, const json& tools, const std::vector<size_t>& chosen,
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
        if (family != ToolFamily::QwenCoder && family != ToolFamily::Glm45) {
            // The arguments are one JSON object between markup that names the tool.
            tops.push_back({def, "#/$defs/" + def});
            const auto lit = [](const std::string& t) { return grammar::gbnf_literal(t); };
            std::string head, tail;
            switch (family) {
            case ToolFamily::FunctionaryV31: head = lit(name + ">"), tail = lit("</function>"); break;
            case ToolFamily::FunctionaryV32:
                // ">>>all" heads the text for the user: a tool of that name could never be called.
                if (name == "all")
                    throw ToolError(fmt::format("Invalid 'tools[{}].function.name': this model's format (functionary-v3.2) "
                                                "reserves 'all' for its answers to the user.", index),
                                    fmt::format("tools[{}].function.name", index));
                head = lit(name + "\n");
                break;
            // The call id is the client's to give; the model may write one it saw in the history.
            case ToolFamily::MistralV11: head = lit(name) + " (\"[CALL_ID]\" [a-zA-Z0-9]{9})? \"[ARGS]\""; break;
            case ToolFamily::DeepSeekV31: head = lit(name + std::string(kDsSep)), tail = lit(std::string(kDsCallEnd)); break;
            case ToolFamily::DeepSeekR1:
                head = lit("function" + std::string(kDsSep) + name + "\n```json\n");
                tail = lit("\n```" + std::string(kDsCallEnd));
                break;
            case ToolFamily::KimiK2:
                head = lit("functions." + name + ":") + " [0-9]{1,3} \"<|tool_call_argument_begin|>\"";
                tail = lit("<|tool_call_end|>");
                break;
            // gpt-oss: the rest of the call message's header after "to=functions." (rule harmony-head,
            // the caller's); the body ends at <|call|>, an end of generation.
            case ToolFamily::Harmony: head = lit(name) + " harmony-head"; break;
            default: throw std::logic_error("named_call_rules: a family without its call shape");
            }
            rules += call + " ::= " + head + " " + def + (tail.empty() ? "" : " " + tail) + "\n";
            defs[def] = std::move(p);
            continue;
        }
        // The arguments are listed one by one: an object's keywords beyond its properties cannot be held.
        static const std::set<std::string, std::less<>> kListed = {"type", "properties", "required", "additionalProperties",
                                                                   "$defs", "definitions", "title", "description",
                                                                   "$schema", "$comment", "examples", "default"};
        for (const auto& [key, v] : p.items()) {
            (void)v;
            if (!kListed.count(key))
                throw ToolError(fmt::format("Invalid '{}': this model lists arguments one by one in markup, where '{}' "
                                            "cannot be enforced; forcing a call is not supported for it (keyword '{}').",
                                            param, key, key), param);
        }
        const json props = p.contains("properties") ? p["properties"] : json::object();
        if (!props.is_object()) throw ToolError(fmt::format("Invalid '{}.properties': must be an object.", param), param);
        std::set<std::string> required;
        if (p.contains("required")) {
            if (!p["required"].is_array()) throw ToolError(fmt::format("Invalid '{}.required': must be a list.", param), param);
            for (const json& r : p["required"]) {
                if (!r.is_string() || !props.contains(r.get<std::string>()))
                    throw ToolError(fmt::format("Invalid '{}.required': {} is not one of 'properties'.", param, r.dump()),
                                    param);
                required.insert(r.get<std::string>());
            }
        }
        const bool coder = family == ToolFamily::QwenCoder;
        const std::string_view tag = coder ? "</parameter>" : "</arg_value>";
        const json original = forced_parameters(tools[index], index);  // value_form follows its own references
        std::string body = grammar::gbnf_literal(coder ? "<function=" + name + ">\n" : name + "\n");
        size_t j = 0;
        for (const auto& [key, ps] : props.items()) {
            const std::string at = fmt::format("{}.properties.{}", param, key);
            // The parser reads the name up to its closing markup, without the whitespace around it.
            if (key.empty() || key.find_first_of("<>\n") != std::string::npos || trim(key) != key)
                throw ToolError(fmt::format("Invalid '{}': this model writes a parameter's name in markup, which it may "
                                            "not contain ('<', '>', a newline), begin or end with (whitespace) or be "
                                            "empty.", at), param);
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
                throw ToolError(fmt::format("Invalid '{}': this model writes string arguments bare, so a parameter whose "
                                            "type is a string or something else cannot be told apart; forcing a call "
                                            "is not supported for it.", at), param);
            default: {
                // Qwen3-Coder's template writes booleans and null as Python does (the parser takes both).
                const json* resolved = resolve_local(original, &original["properties"][key]);
                const json type = resolved && resolved->is_object() ? resolved->value("type", json()) : json();
                if (coder && (type == "boolean" || type == "null") && !resolved->contains("enum") && !resolved->contains("const")) {
                    rules += value + (type == "boolean" ? " ::= (\"True\" | \"False\" | \"true\" | \"false\")\n"
                                                        : " ::= (\"None\" | \"null\")\n");
                    break;
                }
                tops.push_back({value, "#/$defs/" + def + "/properties/" + pointer_token(key)});
            }
            }
            const std::string open = coder ? "<parameter=" + key + ">\n" : "<arg_key>" + key + "</arg_key>\n<arg_value>";
            const std::string close = coder ? "\n</parameter>\n" : "</arg_value>\n";
            const std::string item = grammar::gbnf_literal(open) + " " + value + " " + grammar::gbnf_literal(close);
            body += " " + (required.count(key) ? item : "(" + item + ")?");
        }
        body += " " + grammar::gbnf_literal(coder ? "</function>\n</tool_call>" : "</tool_call>");
        rules += call + " ::= " + body + "\n";
        defs[def] = std::move(p);
    }
    std::string gbnf = "named-call ::= " + branches + "\n" + rules;
    own.insert("named-call");
    if (bare_used) {
        const std::string_view tag = family == ToolFamily::QwenCoder ? "</parameter>" : "</arg_value>";
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

// The rules of a NamedMarkup family's calls after `start` (GBNF), one call unless `many`.
std::string named_calls_gbnf(ToolFamily family, const json& tools, const std::vector<size_t>& chosen, bool many,
                             const std::string& start) {
    const CallsMarkup m = calls_markup(family);
    return "root ::= " + (start.empty() ? std::string() : start + " ") + "named-call" +
           (many ? " (" + m.between + " named-call)*" : std::string()) + (m.close.empty() ? "" : " (" + m.close + ")?") +
           " markup-ws\nmarkup-ws ::= [ \\t\\n]{0,8}\n" + named_call_rules(family, tools, chosen, {"root", "markup-ws"});
}

}  // namespace

std::span<const ToolFormat> tool_formats() {
    static const std::vector<ToolFormat> formats = [] {
        std::vector<ToolFormat> v;
        for (const Row& r : kRows) v.push_back(r.format);
        return v;
    }();
    return formats;
}

const ToolFormat& tool_format(ToolFamily f) {
    for (const Row& r : kRows)
        if (r.format.family == f) return r.format;
    return kRows[std::size(kRows) - 1].format;
}

const ToolFormat& detect_tool_format(std::string_view src) {
    for (const Row& r : kRows) {
        if (!r.template_markers[0]) return r.format;
        if (src.find(r.template_markers[0]) != std::string_view::npos &&
            (!r.template_markers[1] || src.find(r.template_markers[1]) != std::string_view::npos))
            return r.format;
    }
    return kRows[std::size(kRows) - 1].format;
}

bool template_renders_tools(std::string_view src) { return src.find("tools") != std::string_view::npos; }

std::vector<std::string> tool_markup(const ToolFormat& format) {
    if (format.family == ToolFamily::Harmony) return harmony_markup();
    std::vector<std::string> out;
    for (const char* m : row_of(format).markup)
        if (m) out.emplace_back(m);
    return out;
}

bool offers_tool(const json& tools, std::string_view name) {
    if (!tools.is_array()) return true;
    return std::any_of(tools.begin(), tools.end(), [&](const json& t) {
        return t.is_object() && t.contains("function") && t["function"].is_object() &&
               t["function"].value("name", "") == name;
    });
}

ToolError::ToolError(const std::string& what, std::string param) : std::invalid_argument(what), param_(std::move(param)) {}

void check_tools(const json& tools) {
    if (!tools.is_array()) throw ToolError("Invalid 'tools': expected an array.", "tools");
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
        const json& t = tools[i];
        const std::string at = fmt::format("tools[{}]", i);
        if (!t.is_object()) throw ToolError(fmt::format("Invalid '{}': expected an object.", at), at);
        if (!t.contains("type") || t["type"] != "function")
            throw ToolError(fmt::format("Invalid '{}.type': expected 'function'.", at), at + ".type");
        if (!t.contains("function") || !t["function"].is_object())
            throw ToolError(fmt::format("Missing required parameter: '{}.function'.", at), at + ".function");
        const json& f = t["function"];
        if (!f.contains("name") || !f["name"].is_string())
            throw ToolError(fmt::format("Missing required parameter: '{}.function.name'.", at), at + ".function.name");
        const std::string name = f["name"].get<std::string>();
        // OpenAI's rule; it also keeps names from closing the markup they sit in ("<function=NAME>").
        const bool good = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
            return std::isalnum(uint8_t(c)) || c == '_' || c == '-' || c == '.';
        });
        if (!good)
            throw ToolError(fmt::format("Invalid '{}.function.name': '{}' must be 1 to 64 letters, digits, '_', '-' or '.'.",
                                        at, name), at + ".function.name");
        if (!names.insert(name).second)
            throw ToolError(fmt::format("Invalid '{}.function.name': another tool is also named '{}'.", at, name),
                            at + ".function.name");
        if (f.contains("parameters") && !f["parameters"].is_object())
            throw ToolError(fmt::format("Invalid '{}.function.parameters': expected a JSON Schema object.", at),
                            at + ".function.parameters");
    }
}

// --- ReplyStream ---------------------------------------------------------------------------------

struct ReplyStream::Impl {
    const Row* row;
    json tools;
    bool parallel;
    std::string pending;   // not released, no call found yet
    std::string held_ws;   // whitespace between the content and a call: dropped when the call is good
    std::string markup;    // from the call marker on
    bool started = false;
    bool seen_text = false;  // released or held non-whitespace: a call_is_reply format can no longer start
    // Functionary v3.2: `pending` begins with a part's head that has no ">>>" (the prompt's), as the
    // reply does; text after calls does not.
    bool head_at_start = false;
    // stream_arguments(): calls go out as deltas while they are written; per call streamed, its
    // arguments sent so far and its id.
    bool fragments = false;
    std::vector<std::string> sent, ids;

    std::vector<CallDelta> take_deltas() {
        std::vector<CallDelta> out;
        if (!fragments || !started) return out;
        std::vector<ScannedCall> calls = scan_calls(row->format.family, markup);
        if (!parallel && calls.size() > 1) calls.resize(1);
        for (size_t i = 0; i < calls.size(); ++i) {
            if (!offers_tool(tools, calls[i].name)) break;
            if (i == sent.size()) {
                ids.push_back(new_tool_call_id(row->format.family));
                sent.push_back(calls[i].arguments);
                out.push_back({i, ids.back(), calls[i].name, calls[i].arguments});
            } else if (calls[i].arguments.size() > sent[i].size() && calls[i].arguments.starts_with(sent[i])) {
                out.push_back({i, {}, {}, calls[i].arguments.substr(sent[i].size())});
                sent[i] = calls[i].arguments;
            }
        }
        return out;
    }

    // What completes the streamed calls: the rest of each one's arguments, and the calls not begun.
    void complete_deltas(Rest& r) {
        if (r.calls.empty() && !sent.empty()) {
            // Cut inside a call (max_tokens, a stop string): its markup already went out as the
            // call's deltas, so it is not content as well. A call that was written whole and is
            // still refused (JSON nested deeper than the parser takes) is content, as in a whole reply.
            const std::vector<ScannedCall> scanned = scan_calls(row->format.family, markup);
            if (scanned.empty() || !scanned.back().complete) r.content.clear();
            return;
        }
        for (size_t i = 0; i < r.calls.size(); ++i) {
            const ToolCall& c = r.calls[i];
            if (i >= sent.size()) {
                r.deltas.push_back({i, c.id.empty() ? new_tool_call_id(row->format.family) : c.id, c.name, c.arguments});
            } else if (c.arguments.size() > sent[i].size() && c.arguments.starts_with(sent[i])) {
                r.deltas.push_back({i, {}, {}, c.arguments.substr(sent[i].size())});
            }
        }
    }

    // Where a call begins in `pending`, or npos.
    size_t find_start() const {
        size_t best = std::string_view::npos;
        if (row->call_marker) best = pending.find(row->call_marker);
        if (row->call_is_reply && !seen_text) {
            const size_t first = pending.find_first_not_of(" \n\t\r");
            if (first != std::string::npos && pending[first] == '{') best = std::min(best, first);
        }
        return best;
    }

    // Functionary v3.2 heads each part of a reply with its recipient after ">>>": "all\n" before
    // text for the user, "NAME\n" before a call's arguments. ">>>" alone is no call marker (text may
    // hold it: a Python prompt), so a head is read up to its newline: a user part's head is dropped
    // from `pending`, a call's is where the call begins (returned; npos: none). `hold`: where a head
    // begins that may still become either (npos: none).
    size_t find_heads(size_t& hold) {
        hold = std::string::npos;
        for (size_t from = 0;;) {
            const bool first = head_at_start;
            const size_t at = first ? 0 : pending.find(">>>", from);
            if (at == std::string::npos) return at;
            if (!first && at + 3 < pending.size() && pending[at + 3] == '>') {
                // The head's ">>>" ends a run of '>': read the same however the run was split.
                from = at + 1;
                continue;
            }
            const size_t name_at = first ? 0 : at + 3;
            const size_t nl = pending.find('\n', name_at);
            const std::string_view name =
                std::string_view(pending).substr(name_at, nl == std::string::npos ? std::string::npos : nl - name_at);
            if (nl == std::string::npos && may_begin_head(name)) {
                hold = at;
                return std::string::npos;
            }
            if (nl != std::string::npos && name != "all" && names_tool(name)) return at;
            head_at_start = false;
            if (nl != std::string::npos && name == "all") {
                pending.erase(at, nl + 1 - at);
                from = at;
            } else {
                from = name_at;
            }
        }
    }
    bool names_tool(std::string_view name) const {
        if (!tools.is_array()) return !name.empty() && name.find_first_of(" \t\r{}<>") == std::string_view::npos;
        return offers_tool(tools, name);
    }
    bool may_begin_head(std::string_view name) const {
        if (std::string_view("all").starts_with(name) || !tools.is_array()) return name.size() <= 64;
        return std::any_of(tools.begin(), tools.end(), [&](const json& t) {
            return t.contains("function") && std::string_view(t["function"].value("name", "")).starts_with(name);
        });
    }

    std::string push(std::string_view text) {
        if (started) {
            markup += text;
            return {};
        }
        pending += text;
        const bool heads = row->format.family == ToolFamily::FunctionaryV32;
        size_t hold = std::string::npos;
        const size_t start = heads ? find_heads(hold) : find_start();
        if (start != std::string_view::npos) {
            started = true;
            markup = pending.substr(start);
            std::string before = pending.substr(0, start);
            const size_t ws = trailing_ws(before);
            held_ws = before.substr(before.size() - ws);
            before.resize(before.size() - ws);
            pending.clear();
            return before;
        }
        if (row->call_is_reply && !seen_text && trim(pending).empty()) return {};  // a call may still open the reply
        if (!trim(pending).empty()) seen_text = true;
        size_t keep = row->call_marker ? partial_tag(pending, row->call_marker) : 0;
        if (hold != std::string::npos) keep = std::max(keep, pending.size() - hold);
        keep = std::max(keep, trailing_ws(std::string_view(pending).substr(0, pending.size() - keep)) + keep);
        std::string out = pending.substr(0, pending.size() - keep);
        pending.erase(0, pending.size() - keep);
        return out;
    }

    // `text` (content) less the row's dropped markers. A tail that may begin one is held back until
    // the next text decides it, and released as it is at the `last`.
    std::string dropped_tail;
    std::string drop_markers(std::string text, bool last) {
        if (!row->dropped[0]) return text;
        dropped_tail += text;
        std::string out;
        for (;;) {
            size_t at = std::string::npos, len = 0;  // the first marker
            for (const char* m : row->dropped) {
                if (!m) continue;
                const size_t found = dropped_tail.find(m);
                if (found < at) at = found, len = std::string_view(m).size();
            }
            if (at == std::string::npos) break;
            out += dropped_tail.substr(0, at);
            dropped_tail.erase(0, at + len);
        }
        size_t keep = 0;
        if (!last)
            for (const char* m : row->dropped)
                if (m) keep = std::max(keep, partial_tag(dropped_tail, m));
        out += dropped_tail.substr(0, dropped_tail.size() - keep);
        dropped_tail.erase(0, dropped_tail.size() - keep);
        return out;
    }

    Rest finish() {
        Rest r;
        if (!started) {
            r.content = std::move(pending);
            pending.clear();
            return r;
        }
        std::string tail;
        if (auto calls = parse_calls(row->format.family, markup, tools, tail); calls && !calls->empty()) {
            r.calls = std::move(*calls);
            // Text after the calls is content, and may hold more calls ("Also:" between two): it is
            // read the same way. The whitespace that led to the calls is not content.
            Impl more{row, tools, true, {}, {}, {}, false, true, false};
            r.content = more.push(tail);
            Rest later = more.finish();
            r.content += later.content;
            for (ToolCall& c : later.calls) r.calls.push_back(std::move(c));
            // parallel_tool_calls false: the first call only.
            if (!parallel) r.calls.resize(1);
            // The arguments as written (compacted) where calls are JSON objects: what streamed
            // fragments add up to, so that whole and streamed replies agree.
            if (calls_are_objects(row->format.family)) {
                const std::vector<ScannedCall> scanned = scan_calls(row->format.family, markup);
                for (size_t i = 0; i < r.calls.size() && i < scanned.size(); ++i)
                    if (scanned[i].complete && scanned[i].name == r.calls[i].name) r.calls[i].arguments = scanned[i].arguments;
            }
        } else {
            r.content = held_ws + markup;
        }
        if (fragments) complete_deltas(r);
        markup.clear();
        started = false;
        return r;
    }
};

ReplyStream::ReplyStream(const ToolFormat& format, json tools, std::string prefix, bool parallel)
    : impl_(std::make_unique<Impl>(Impl{&row_of(format), std::move(tools), parallel, {}, {}, {}, false, false, true})) {
    if (!prefix.empty()) impl_->push(prefix);
}
ReplyStream::~ReplyStream() = default;
ReplyStream::ReplyStream(ReplyStream&&) noexcept = default;
ReplyStream& ReplyStream::operator=(ReplyStream&&) noexcept = default;

std::string ReplyStream::push(std::string_view text) { return impl_->drop_markers(impl_->push(text), false); }
ReplyStream::Rest ReplyStream::finish() {
    Rest r = impl_->finish();
    r.content = impl_->drop_markers(std::move(r.content), true);
    return r;
}
void ReplyStream::stream_arguments() { impl_->fragments = calls_are_objects(impl_->row->format.family); }
bool ReplyStream::streams_arguments() const { return impl_->fragments; }
std::vector<CallDelta> ReplyStream::take_deltas() { return impl_->take_deltas(); }

ReplyStream::Rest parse_reply(const ToolFormat& format, const json& tools, std::string_view text) {
    ReplyStream s(format, tools);
    std::string content = s.push(text);
    ReplyStream::Rest r = s.finish();
    r.content = content + r.content;
    return r;
}

// --- forcing a call ------------------------------------------------------------------------------

ForcedCall forced_call(const ToolFormat& format, const json& tools, const std::string& only, bool parallel) {
    if (!tools.is_array() || tools.empty()) throw ToolError("Invalid 'tool_choice': the request has no tools to call.", "tool_choice");
    std::vector<size_t> chosen;
    for (size_t i = 0; i < tools.size(); ++i)
        if (only.empty() || function_name(tools[i]) == only) chosen.push_back(i);
    if (chosen.empty())
        throw ToolError(fmt::format("Invalid 'tool_choice': no tool in 'tools' is named '{}'.", only), "tool_choice");

    ForcedCall fc;
    if (format.force == ForceKind::NamedPrefix) {
        if (chosen.size() != 1)
            throw ToolError(fmt::format("Invalid 'tool_choice': this model's tool-call format ({}) names the tool in "
                                        "the header of the call's message, which the prompt must hold; name the function "
                                        "in 'tool_choice'.", format.name),
                            "tool_choice");
        const json& tool = tools[chosen[0]];
        const std::string& name = function_name(tool);
        // gpt-oss: the call is a message whose header names the tool (its body ends at <|call|>, an
        // end of generation).
        if (format.family != ToolFamily::Harmony) throw std::logic_error("forced_call: a NamedPrefix family without its prefix");
        fc.prompt_prefix = "<|channel|>commentary to=functions." + name + " <|constrain|>json<|message|>";
        fc.gbnf = "root ::= tool-call\n" + call_rules(forced_parameters(tool, chosen[0]), chosen, false);
        return fc;
    }

    const bool many = parallel && format.parallel;
    if (format.force == ForceKind::NamedMarkup) {
        fc.prompt_prefix = calls_markup(format.family).forced_prefix;
        fc.gbnf = named_calls_gbnf(format.family, tools, chosen, many, "");
        return fc;
    }
    // CallObject: one schema whose values are the calls, each tool's parameters under $defs.
    json schema = call_object_schema(format.family, tools, chosen, many);
    std::string root;
    switch (format.family) {
    case ToolFamily::Hermes:
        fc.prompt_prefix = "<tool_call>\n";
        root = "root ::= tool-call \"\\n</tool_call>\"";
        if (many) root += " (\"\\n<tool_call>\\n\" tool-call \"\\n</tool_call>\")*";
        break;
    case ToolFamily::Granite: fc.prompt_prefix = "<|tool_call|>"; root = "root ::= tool-call"; break;
    case ToolFamily::CommandRPlus:
        fc.prompt_prefix = "Action:\n```json\n";
        root = "root ::= tool-call \"\\n```\"";
        break;
    case ToolFamily::CommandR7B:
        fc.prompt_prefix = "<|START_ACTION|>";
        root = "root ::= [ \\t\\n]{0,8} tool-call [ \\t\\n]{0,8} \"<|END_ACTION|>\"";
        break;
    case ToolFamily::MistralNemo: fc.prompt_prefix = "[TOOL_CALLS]"; [[fallthrough]];
    case ToolFamily::Llama3:
    case ToolFamily::Generic: root = "root ::= tool-call"; break;
    default: throw std::logic_error("forced_call: a CallObject family without its shape");
    }
    fc.gbnf = root + "\n" + call_rules(schema, chosen, true);
    return fc;
}

LazyCall lazy_call(const ToolFormat& format, const json& tools, bool parallel) {
    LazyCall lc;
    if (!tools.is_array() || tools.empty()) return lc;
    std::vector<size_t> all(tools.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    const bool many = parallel && format.parallel;
    // One catch for every family: a tool whose parameters are outside the subset leaves no grammar.
    try {
        // Markup around the JSON is written by the model here: whitespace as its template may put it.
        std::string root;
        switch (format.family) {
        case ToolFamily::Hermes:
            lc.triggers = {{"<tool_call>", false}};
            root = "root ::= tool-call-markup" + std::string(many ? " (markup-ws tool-call-markup)*" : "") +
                   " markup-ws\ntool-call-markup ::= \"<tool_call>\" markup-ws tool-call markup-ws \"</tool_call>\"";
            break;
        case ToolFamily::Llama3:
            // Not any answer that opens with '{': one that asks for JSON is no call.
            lc.triggers = {{"<|python_tag|>", false}, {"{\"name\"", true}, {"{ \"name\"", true}};
            root = "root ::= (\"<|python_tag|>\" markup-ws)? tool-call markup-ws";
            break;
        case ToolFamily::MistralNemo:
            lc.triggers = {{"[TOOL_CALLS]", false}};
            root = "root ::= \"[TOOL_CALLS]\" markup-ws tool-call markup-ws";
            break;
        case ToolFamily::Granite:
            lc.triggers = {{"<|tool_call|>", false}};
            root = "root ::= \"<|tool_call|>\" markup-ws tool-call markup-ws";
            break;
        case ToolFamily::CommandR7B:
            lc.triggers = {{"<|START_ACTION|>", false}};
            root = "root ::= \"<|START_ACTION|>\" markup-ws tool-call markup-ws \"<|END_ACTION|>\" markup-ws";
            break;
        case ToolFamily::CommandRPlus:
            // The template asks for "Action:" in every answer, fenced or not (as the parser reads it).
            lc.triggers = {{"Action:", false}};
            root = "root ::= \"Action:\" markup-ws (\"```\" \"json\"? markup-ws tool-call markup-ws \"```\" | tool-call) markup-ws";
            break;
        case ToolFamily::Generic:
            lc.triggers = {{"{\"tool_calls\"", true}, {"{ \"tool_calls\"", true}};
            root = "root ::= tool-call markup-ws";
            break;
        case ToolFamily::QwenCoder:
        case ToolFamily::Glm45:
        case ToolFamily::FunctionaryV31:
        case ToolFamily::MistralV11:
        case ToolFamily::DeepSeekV31:
        case ToolFamily::DeepSeekR1:
        case ToolFamily::KimiK2: {
            const CallsMarkup m = calls_markup(format.family);
            lc.triggers = {{m.trigger, false}};
            lc.gbnf = named_calls_gbnf(format.family, tools, all, many,
                                       grammar::gbnf_literal(m.trigger) + (m.opening.empty() ? "" : " " + m.opening));
            return lc;
        }
        case ToolFamily::FunctionaryV32: {
            // Every part of a reply opens with a head naming its recipient ("all" for the user; the
            // first part's ">>>" is the prompt's): the heads that name a tool are the triggers.
            for (const size_t i : all) {
                const std::string& name = function_name(tools[i]);
                lc.triggers.push_back({name + "\n", true});
                lc.triggers.push_back({">>>" + name + "\n", false});
            }
            lc.gbnf = named_calls_gbnf(format.family, tools, all, many, "(\">>>\")?");
            return lc;
        }
        case ToolFamily::Harmony:
            // A call is a message whose header names the tool, before its channel (as the template
            // writes it) or after (as the model often does). One call ends the reply (<|call|>).
            lc.triggers = {{"to=functions.", false}};
            lc.gbnf = "root ::= \"to=functions.\" named-call\n"
                      "harmony-head ::= (\"<|channel|>\" (\"commentary\" | \"analysis\"))? "
                      "(\" \" \"<|constrain|>\"? \"json\" | \"<|constrain|>json\")? \"<|message|>\"\n" +
                      named_call_rules(format.family, tools, all, {"root", "harmony-head"});
            return lc;
        default: throw std::logic_error("lazy_call: a family without its trigger");
        }
        json schema = call_object_schema(format.family, tools, all, many);
        // Command R+'s template offers a "directly-answer" action of its own, which the model writes
        // when no tool is needed: the grammar lets it (the parser takes it for no call).
        if (format.family == ToolFamily::CommandRPlus && !offers_tool(tools, kDirectlyAnswer)) {
            json& items = schema["items"];
            if (!items.contains("anyOf")) items = json{{"anyOf", json::array({items})}};
            items["anyOf"].push_back({{"type", "object"},
                                      {"properties", {{"tool_name", {{"const", kDirectlyAnswer}}},
                                                      {"parameters", {{"type", "object"}, {"additionalProperties", false}}}}},
                                      {"required", {"tool_name"}},
                                      {"additionalProperties", false}});
        }
        lc.gbnf = root + "\nmarkup-ws ::= [ \\t\\n]{0,8}\n" + call_rules(schema, all, true);
    } catch (const ToolError&) {
        // Parameters outside the schema subset: 'auto' promised no grammar, so the calls are parsed
        // as the model writes them (a required call with these tools is refused instead).
        return LazyCall{};
    }
    return lc;
}

std::string tool_instructions(const json& tools) {
    // Short: every token of it is paid in every request's prompt.
    std::string out = "To call tools, reply only with {\"tool_calls\": [{\"name\": ..., \"arguments\": {...}}]}. Tools:\n";
    for (const json& t : tools) out += t["function"].dump() + "\n";
    return out;
}

json parse_json_bounded(std::string_view text) {
    static constexpr int kMaxDepth = 64;
    bool too_deep = false;
    const json::parser_callback_t guard = [&too_deep](int depth, json::parse_event_t, json&) {
        if (depth > kMaxDepth) too_deep = true;
        return !too_deep;
    };
    // Past the bound the callback discards every value, so nothing deep is ever built.
    json j = json::parse(text, guard, false);
    return too_deep ? json(json::value_t::discarded) : j;
}

ToolChoice parse_tool_choice(const std::string& text, std::string& name) {
    name.clear();
    if (text.empty()) throw ToolError("Invalid 'tool_choice': empty; expected auto, none, required or a tool's name.", "tool_choice");
    if (text == "auto") return ToolChoice::Auto;
    if (text == "none") return ToolChoice::None;
    if (text == "required") return ToolChoice::Required;
    name = text;
    return ToolChoice::Named;
}

std::string forced_prompt(std::string rendered, const ToolPlan& plan) {
    if (!plan.forced) return rendered;
    // Templates open a "<think>" block in the prompt (QwQ, DeepSeek R1); Command R7B's none.
    if (prompt_opens_reasoning(rendered, think_tags())) rendered += "\n</think>\n\n";
    return rendered + plan.reply_prefix;
}

ToolPlan plan_tool_use(const ToolFormat& format, bool template_renders_tools, const json& tools, ToolChoice choice,
                       const std::string& name, bool parallel) {
    ToolPlan plan;
    if (choice == ToolChoice::Named && name.empty())
        throw ToolError("Invalid 'tool_choice.function.name': empty.", "tool_choice.function.name");
    const bool forced = choice == ToolChoice::Required || choice == ToolChoice::Named;
    if (tools.is_null() || (tools.is_array() && tools.empty())) {
        if (forced) throw ToolError("Invalid 'tool_choice': a tool must be called, but the request has no 'tools'.", "tool_choice");
        return plan;
    }
    if (choice == ToolChoice::None) return plan;
    plan.parse_as = &format;
    plan.parallel = parallel;
    if (format.family == ToolFamily::Generic && !template_renders_tools) plan.system_text = tool_instructions(tools);
    // Parsed and started once here, so that every front end gets a grammar it can follow.
    auto followable = [](const std::string& gbnf) {
        auto g = std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(gbnf));
        grammar::Matcher start(*g);
        return g;
    };
    if (forced) {
        ForcedCall fc = forced_call(format, tools, choice == ToolChoice::Named ? name : std::string(), parallel);
        plan.forced = true;
        plan.reply_prefix = std::move(fc.prompt_prefix);
        try {
            plan.grammar = followable(fc.gbnf);
        } catch (const grammar::GrammarError& e) {
            throw ToolError(fmt::format("Invalid 'tools': the parameters cannot be followed as a grammar: {}", e.what()), "tools");
        }
    } else if (LazyCall lc = lazy_call(format, tools, parallel); !lc.gbnf.empty()) {
        try {
            plan.grammar = followable(lc.gbnf);
            plan.triggers = std::move(lc.triggers);
        } catch (const grammar::GrammarError&) {
            // Too big to follow: the calls are parsed as written, as 'auto' promises no more.
        }
    }
    return plan;
}

std::string random_id_chars(size_t n) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
    std::string out;
    for (size_t k = 0; k < n; ++k) out += kAlphabet[pick(rng)];
    return out;
}

std::string new_tool_call_id(ToolFamily family) {
    const bool mistral = family == ToolFamily::MistralNemo || family == ToolFamily::MistralV11;
    return mistral ? random_id_chars(9) : "call_" + random_id_chars(24);
}

json tool_call_deltas_json(const std::vector<CallDelta>& deltas) {
    json out = json::array();
    for (const CallDelta& d : deltas) {
        json c = json::object();
        c["index"] = d.index;
        json fn = json::object();
        if (!d.name.empty()) {
            c["id"] = d.id;
            c["type"] = "function";
            fn["name"] = d.name;
        }
        fn["arguments"] = d.arguments;
        c["function"] = std::move(fn);
        out.push_back(std::move(c));
    }
    return out;
}

json tool_calls_json(const std::vector<ToolCall>& calls, ToolFamily family, bool streamed) {
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        json c = json::object();
        if (streamed) c["index"] = i;
        c["id"] = calls[i].id.empty() ? new_tool_call_id(family) : calls[i].id;
        c["type"] = "function";
        c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
        out.push_back(std::move(c));
    }
    return out;
}

void arguments_as_objects(json& message) {
    if (!message.is_object() || !message.contains("tool_calls") || !message["tool_calls"].is_array()) return;
    for (json& call : message["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        json& fn = call["function"];
        if (!fn.contains("arguments") || fn["arguments"].is_null()) {
            fn["arguments"] = json::object();
        } else if (fn["arguments"].is_string()) {
            json parsed = parse_json_bounded(fn["arguments"].get<std::string>());
            if (!parsed.is_discarded()) fn["arguments"] = std::move(parsed);
        }
    }
}

void add_system_text(json& messages, const std::string& text) {
    if (text.empty()) return;
    if (!messages.empty() && messages[0].value("role", "") == "system" && messages[0].contains("content") &&
        messages[0]["content"].is_string())
        messages[0]["content"] = messages[0]["content"].get<std::string>() + "\n\n" + text;
    else
        messages.insert(messages.begin(), json{{"role", "system"}, {"content", text}});
}

}  // namespace vkllm::chat
