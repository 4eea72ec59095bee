// Tool calls (serving/template/tool_calls.h): the family each real chat template of
// ../shared/templates speaks; replies rendered by those templates themselves parsed back into the
// calls they were rendered from, whole and streamed in any pieces; call markup never leaking into
// streamed content; malformed calls coming back as content; forced calls whose grammar accepts the
// calls the parser reads and refuses the ones it must not; the checks on `tools`.
//
// The oracle for the round trips is the model's own template: what it renders for an assistant
// turn with tool calls is what the model was trained to write, so the parser must read it back.
#include "serving/template/tool_calls.h"

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

std::vector<uint32_t> code_points(std::string_view s) {
    std::vector<uint32_t> out;
    vkllm::utf8::decode_lenient(s, out);
    return out;
}

std::string utf8(uint32_t cp) {
    std::string s;
    vkllm::utf8::append(s, cp);
    return s;
}

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

// From matcher `m`, the text the grammar forces on until the sentence may end: after a named
// call's arguments only closing markup remains. Whitespace is taken only where nothing else may
// come. nullopt where the grammar branches or runs on past 200 characters.
std::optional<std::string> forced_rest(Matcher m, const std::vector<uint32_t>& alphabet) {
    std::string out;
    for (int step = 0; step < 200; ++step) {
        if (m.can_end()) return out;
        std::vector<uint32_t> next, next_space;
        for (uint32_t cp : alphabet)
            if (m.allows(cp)) (is_space(utf8(cp)) ? next_space : next).push_back(cp);
        if (next.empty()) next = next_space;
        if (next.size() != 1) return std::nullopt;
        const std::string ch = utf8(next[0]);
        if (!m.accept(ch)) return std::nullopt;
        out += ch;
    }
    return std::nullopt;
}

// The reply each call-object family's model writes for `calls` (the shapes its template renders).
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
        {"openai-gpt-oss-120b", ToolFamily::Unsupported},
        {"CohereForAI-c4ai-command-r-plus-tool_use", ToolFamily::Unsupported},
        {"GLM-4.6", ToolFamily::Unsupported},
        {"moonshotai-Kimi-K2", ToolFamily::Unsupported},
        {"ibm-granite-granite-3.3-2B-Instruct", ToolFamily::Unsupported},
        {"meetkai-functionary-medium-v3.2", ToolFamily::Unsupported},
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
    for (ToolFamily f : {ToolFamily::Generic, ToolFamily::Hermes, ToolFamily::QwenCoder, ToolFamily::Llama3,
                         ToolFamily::MistralNemo, ToolFamily::MistralV11, ToolFamily::DeepSeekR1, ToolFamily::DeepSeekV31,
                         ToolFamily::FunctionaryV31, ToolFamily::Unsupported})
        CHECK(tool_format(f).family == f);
    // A call object names its tool in JSON; these families name it in control tokens; Qwen3-Coder's
    // XML parameters and unsupported formats cannot be forced.
    for (ToolFamily f : {ToolFamily::Hermes, ToolFamily::Llama3, ToolFamily::MistralNemo, ToolFamily::Generic})
        CHECK(tool_format(f).force == ForceKind::CallObject);
    for (ToolFamily f : {ToolFamily::MistralV11, ToolFamily::DeepSeekV31, ToolFamily::FunctionaryV31})
        CHECK(tool_format(f).force == ForceKind::NamedPrefix);
    for (ToolFamily f : {ToolFamily::QwenCoder, ToolFamily::Unsupported}) CHECK(tool_format(f).force == ForceKind::None);
    // Formats that hold several calls in one reply, as their templates render them.
    for (ToolFamily f : {ToolFamily::Hermes, ToolFamily::QwenCoder, ToolFamily::MistralNemo, ToolFamily::DeepSeekV31})
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
    const std::string system = d_tool_call["messages"][0]["content"].get<std::string>();
    const std::string user = d_tool_call["messages"][1]["content"].get<std::string>();
    // The families whose templates must render a call this runtime reads back.
    const std::vector<std::string> must = {
        "Qwen-Qwen2.5-7B-Instruct", "Qwen3-Coder", "meta-llama-Llama-3.1-8B-Instruct",
        "mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506", "deepseek-ai-DeepSeek-V3.1",
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "meetkai-functionary-medium-v3.1"};
    // The turn ends here in what a template renders; generation stops at these tokens.
    const std::vector<std::string> end_of_turn = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>",
                                                  "<｜end▁of▁sentence｜>"};

    const auto files = template_files();
    size_t round_trips = 0;
    for (const auto& [name, family] : expected_families()) {
        if (family == ToolFamily::Generic || family == ToolFamily::Unsupported) continue;
        CAPTURE(name);
        const TemplateFile& file = files.at(name);
        const bool required = std::find(must.begin(), must.end(), name) != must.end();
        const ToolFormat& format = tool_format(family);
        ChatTemplate tmpl(file.source, name);
        // Ids of nine characters: Mistral's templates refuse any other.
        const std::vector<std::vector<WantCall>> call_sets = {{weather_call("call00001")},
                                                              {weather_call("call00001"), time_call("call00002")}};
        for (const auto& calls : call_sets) {
            if (calls.size() > 1 && !format.parallel) continue;
            CAPTURE(calls.size());
            // Templates disagree on what an assistant turn with calls looks like in the messages:
            // most take content null and arguments as an object, DeepSeek R1's concatenates the
            // arguments as a string and drops the calls unless content is null; some want a system
            // message, some do without. The first shape that renders every call is used.
            std::optional<std::string> reply;
            std::string last_error = "the calls do not appear in the render";
            for (bool with_system : {true, false}) {
                for (bool string_args : {false, true}) {
                    for (bool null_content : {true, false}) {
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
                                                {"content", null_content ? Json(nullptr) : Json("")},
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
                        if (!starts_with(full, gen)) {
                            last_error = "the render of the conversation does not begin with the generation prompt";
                            continue;
                        }
                        std::string r = full.substr(gen.size());
                        // Qwen3 shows the last assistant turn's (empty) reasoning before its
                        // content; that is reasoning, split off before calls are parsed.
                        if (starts_with(r, "<think>")) {
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
                        if (all) reply = r;
                    }
                }
            }
            if (!reply) {
                if (required && calls.size() == 1)
                    FAIL_CHECK(name << " cannot render a call: " << last_error);
                else
                    MESSAGE(name << ": cannot render " << calls.size() << " call(s): " << last_error);
                continue;
            }
            MESSAGE(name << " (" << std::string(format.name) << "), " << calls.size() << " call(s), reply:\n" << *reply);
            // Ids come back only where the model writes them (Mistral's formats).
            std::vector<WantCall> want = calls;
            for (auto& c : want)
                if (reply->find(c.id) == std::string::npos) c.id.clear();
            check_reply(format, tools, *reply, "", want);
            ++round_trips;
        }
    }
    CHECK(round_trips >= must.size());
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
    const std::vector<ToolFamily> call_object = {ToolFamily::Hermes, ToolFamily::Llama3, ToolFamily::MistralNemo,
                                                 ToolFamily::Generic};
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
                for (size_t i = 0; i < want.size(); ++i)
                    if ((fc.prompt_prefix + *text).find("call0000" + std::to_string(i + 1)) != std::string::npos)
                        want[i].id = "call0000" + std::to_string(i + 1);
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
    const Json tools = both_tools();
    for (const ToolFormat& row : vkllm::chat::tool_formats()) {
        if (row.force != ForceKind::NamedPrefix || &tool_format(row.family) != &row) continue;
        const ToolFamily family = row.family;
        const ToolFormat& format = tool_format(family);
        INFO("family: " << std::string(format.name));
        // The name is markup the prompt must already hold: no grammar over a choice of names.
        CHECK_THROWS_AS(vkllm::chat::forced_call(format, tools, "", false), ToolError);
        vkllm::chat::ForcedCall fc;
        REQUIRE_NOTHROW(fc = vkllm::chat::forced_call(format, tools, "get_current_weather", false));
        CAPTURE(fc.prompt_prefix);
        CAPTURE(fc.gbnf);
        CHECK(fc.prompt_prefix.find("get_current_weather") != std::string::npos);
        Grammar g;
        REQUIRE_NOTHROW(g = Grammar::parse(fc.gbnf));

        // The arguments, then whatever closing markup the grammar fixes.
        std::vector<uint32_t> alphabet;
        for (uint32_t cp = 0x20; cp < 0x7F; ++cp) alphabet.push_back(cp);
        alphabet.push_back('\n');
        for (uint32_t cp : code_points("｜▁")) alphabet.push_back(cp);
        for (const std::string& args : {spaced(weather_call().arguments), weather_call().arguments.dump()}) {
            CAPTURE(args);
            Matcher m(g);
            REQUIRE(m.accept(args));
            const auto rest = forced_rest(m, alphabet);
            REQUIRE_MESSAGE(rest.has_value(), "the grammar does not close the call deterministically");
            const std::string text = args + *rest;
            const auto r = vkllm::chat::parse_reply(format, tools, fc.prompt_prefix + text);
            CHECK(r.content == "");
            check_calls(r.calls, {weather_call()});
            const auto s = stream(format, tools, text, 1, fc.prompt_prefix);
            CHECK(s.released + s.rest.content == "");
            check_calls(s.rest.calls, {weather_call()});
        }
        // The arguments follow the tool's schema.
        CHECK_FALSE(Matcher(g).accept(R"({"unit": "celsius"})"));
        Matcher wrong_enum(g);
        CHECK_FALSE(wrong_enum.accept(R"({"location": "Paris", "unit": "kelvin"})"));
    }
}

TEST_CASE("tool calls: forcing is refused where the format cannot do it, or the schema is outside the subset") {
    const Json tools = both_tools();
    for (ToolFamily family : {ToolFamily::QwenCoder, ToolFamily::Unsupported}) {
        INFO("family: " << std::string(tool_format(family).name));
        CHECK_THROWS_AS(vkllm::chat::forced_call(tool_format(family), tools, "", false), ToolError);
        CHECK_THROWS_AS(vkllm::chat::forced_call(tool_format(family), tools, "get_current_weather", false), ToolError);
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
    plan.gbnf = "root ::= \"x\"";
    plan.reply_prefix = "<tool_call>\n";
    CHECK(vkllm::chat::forced_prompt("assistant\n<think>\n", plan) == "assistant\n<think>\n\n</think>\n\n<tool_call>\n");
    CHECK(vkllm::chat::forced_prompt("user: what is <think>?\nassistant\n", plan) == "user: what is <think>?\nassistant\n<tool_call>\n");
    plan.reply_prefix.clear();  // Generic and Llama 3 force without a prefix: the block is still closed
    CHECK(vkllm::chat::forced_prompt("assistant\n<think>\n", plan) == "assistant\n<think>\n\n</think>\n\n");
    plan.gbnf.clear();  // not forced: the prompt as rendered
    CHECK(vkllm::chat::forced_prompt("assistant\n<think>\n", plan) == "assistant\n<think>\n");
}

TEST_CASE("tool calls: a bare Qwen3-Coder value that is not UTF-8 (fuzz_grammar finding)") {
    const std::string reply = "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar\xbe\x10is\n</parameter>\n</function>\n</tool_call>";
    const Json tools = Json::array({Json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}});
    const ReplyStream::Rest r = vkllm::chat::parse_reply(tool_format(ToolFamily::QwenCoder), tools, reply);
    REQUIRE(r.calls.size() == 1);
    CHECK(Json::parse(r.calls[0].arguments)["city"] == "Par\xef\xbf\xbd\x10is");  // U+FFFD for the stray byte
}
