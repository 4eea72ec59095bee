// gpt-oss's Harmony replies (serving/answer/harmony.h): replies rendered by gpt-oss's own template
// read back into the thinking, content and call they were rendered from; hand-written replies in the
// shapes the model writes (the recipient after the channel, "<|constrain|>json", preambles, several
// calls) and the ones it should not (unknown tools, bad JSON, plain text, replies cut anywhere).
// Every reply is read whole and in pieces of every size: the results must not differ, and no
// released piece may hold a marker or a part of one.
#include "serving/answer/harmony.h"

#include "model/grammar/grammar.h"
#include "serving/chat_template/chat_template.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace fs = std::filesystem;
using vkllm::chat_template::ChatInputs;
using vkllm::chat_template::ChatTemplate;
using vkllm::answer::HarmonyStream;
using vkllm::answer::ToolCall;
using Json = nlohmann::ordered_json;

namespace {

const fs::path kRoot = fs::path(VKLLM_TEMPLATES_DIR);
const fs::path kTemplate = kRoot / "templates" / "openai-gpt-oss-120b.jinja";

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "cannot read " << p.string());
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

bool have_template() {
    if (fs::exists(kTemplate)) return true;
    MESSAGE("skipped: " << kTemplate.string() << " not found");
    return false;
}

// The tools of messages/d_tool_call.json and a second one, written here so that the hand-written
// cases run without ../shared/templates, and a parser that knows one name only cannot pass.
Json tools() {
    return Json::parse(R"([
      {"type": "function", "function": {"name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "The city and country, e.g. San Francisco, USA"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "The temperature unit to use"}},
          "required": ["location"]}}},
      {"type": "function", "function": {"name": "get_time",
        "description": "Get the current time in a time zone",
        "parameters": {"type": "object", "properties": {
            "timezone": {"type": "string", "description": "IANA time zone name, e.g. Europe/Paris"}},
          "required": ["timezone"]}}}])");
}

struct WantCall {
    std::string name;
    Json arguments;
};

WantCall weather_call() {
    return {"get_current_weather", Json::parse(R"({"location": "Paris, France", "unit": "celsius"})")};
}
WantCall time_call() { return {"get_time", Json::parse(R"({"timezone": "Europe/Paris"})")}; }

struct Want {
    std::string reasoning, content;
    std::vector<WantCall> calls;
};

struct Got {
    std::string reasoning, content;
    std::vector<ToolCall> calls;
};

bool has_markup(std::string_view s) { return s.find("<|") != std::string_view::npos; }

// `text` pushed in pieces of `piece` bytes (0: whole), what comes out joined. No released piece may
// hold a marker or the start of one, unless the reply's own text has "<|" (`markup_in_text`).
Got run(std::string_view text, const Json& tool_list, bool parallel, size_t piece, bool markup_in_text = false) {
    HarmonyStream s(tool_list, parallel);
    Got out;
    if (piece == 0) piece = std::max<size_t>(text.size(), 1);
    for (size_t i = 0; i < text.size(); i += piece) {
        const HarmonyStream::Piece p = s.push(text.substr(i, std::min(piece, text.size() - i)));
        if (!markup_in_text) {
            CHECK_MESSAGE(!has_markup(p.reasoning), "reasoning piece: " << p.reasoning);
            CHECK_MESSAGE(!has_markup(p.content), "content piece: " << p.content);
        }
        out.reasoning += p.reasoning;
        out.content += p.content;
    }
    HarmonyStream::Rest r = s.finish();
    if (!markup_in_text) {
        CHECK_MESSAGE(!has_markup(r.reasoning), "reasoning rest: " << r.reasoning);
        CHECK_MESSAGE(!has_markup(r.content), "content rest: " << r.content);
    }
    out.reasoning += r.reasoning;
    out.content += r.content;
    out.calls = std::move(r.calls);
    return out;
}

void check_calls(const std::vector<ToolCall>& got, const std::vector<WantCall>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].id.empty());
        CHECK(got[i].name == want[i].name);
        const Json args = Json::parse(got[i].arguments, nullptr, false);
        REQUIRE_MESSAGE(!args.is_discarded(), "arguments are not JSON: " << got[i].arguments);
        CHECK(args.is_object());
        // Compact, as the header promises; compared as unordered JSON: key order is the model's.
        CHECK(got[i].arguments == args.dump());
        CHECK(nlohmann::json::parse(got[i].arguments) == nlohmann::json::parse(want[i].arguments.dump()));
    }
}

// The reply read whole and in pieces of every size from 1 byte to all of it: each must give `want`.
void check_reply(const std::string& text, const Want& want, const Json& tool_list = tools(), bool parallel = true,
                 bool markup_in_text = false) {
    CAPTURE(text);
    for (size_t piece = 0; piece <= text.size(); ++piece) {
        CAPTURE(piece);
        const Got got = run(text, tool_list, parallel, piece, markup_in_text);
        CHECK(got.reasoning == want.reasoning);
        CHECK(got.content == want.content);
        check_calls(got.calls, want.calls);
        if (got.reasoning != want.reasoning || got.content != want.content || got.calls.size() != want.calls.size())
            break;  // one failing split is enough to read
    }
}

// The assistant's reply as gpt-oss's template renders it after `prompt`: the conversation with
// `assistant` last, rendered without a generation prompt, less the prompt rendered with one.
std::string rendered_reply(const ChatTemplate& tmpl, const Json& prompt, const Json& assistant, const Json& tool_list) {
    ChatInputs in;
    in.tools = tool_list;
    in.now = "2024-07-26 00:00:00";
    in.messages = prompt;
    in.add_generation_prompt = true;
    const std::string gen = tmpl.apply(in);
    in.messages.push_back(assistant);
    in.add_generation_prompt = false;
    const std::string full = tmpl.apply(in);
    REQUIRE(gen.ends_with("<|start|>assistant"));
    REQUIRE_MESSAGE(full.starts_with(gen), "the conversation's render does not begin with the prompt's:\n" << full);
    return full.substr(gen.size());
}

Json call_message(const WantCall& c) {
    return {{"id", "call00001"}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace

TEST_CASE("harmony: which templates speak it, and its markup") {
    CHECK(vkllm::answer::template_is_harmony("{{- '<|start|>assistant<|channel|>final<|message|>' }}"));
    CHECK_FALSE(vkllm::answer::template_is_harmony("{{ '<|im_start|>assistant\\n' }}"));
    const std::vector<std::string> markup = vkllm::answer::harmony_markup();
    for (const char* m : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>"})
        CHECK_MESSAGE(std::find(markup.begin(), markup.end(), m) != markup.end(), m);
    CHECK(markup.size() == 7);
    if (!have_template()) return;
    CHECK(vkllm::answer::template_is_harmony(read_file(kTemplate)));
    // No other template of the conformance set speaks it.
    for (const auto& e : fs::directory_iterator(kRoot / "templates")) {
        if (e.path() == kTemplate) continue;
        CAPTURE(e.path().string());
        CHECK_FALSE(vkllm::answer::template_is_harmony(read_file(e.path())));
    }
}

TEST_CASE("harmony: replies rendered by gpt-oss's own template read back, whole and in pieces of every size") {
    if (!have_template()) return;
    const ChatTemplate tmpl(read_file(kTemplate), "openai-gpt-oss-120b");
    const Json tool_list = tools();
    const Json system = {{"role", "system"}, {"content", "You are a helpful assistant with access to tools."}};
    const Json user = {{"role", "user"}, {"content", "What is the weather like in Paris today?"}};

    SUBCASE("a call, with the reasoning before it as `thinking`, as `content` or none") {
        // The template renders one call per message, and the text beside it (content or thinking)
        // as the analysis before the call: reasoning either way.
        struct Turn {
            bool with_system;
            std::string field, text;
            WantCall call;
        };
        const std::vector<Turn> turns = {
            {true, "", "", weather_call()},
            {false, "", "", time_call()},
            {true, "thinking", "The user wants the weather in Paris; call the tool.", weather_call()},
            {false, "content", "I should look up the time there.", time_call()},
        };
        for (const Turn& t : turns) {
            Json prompt = Json::array();
            if (t.with_system) prompt.push_back(system);
            prompt.push_back(user);
            Json assistant = {{"role", "assistant"}, {"tool_calls", Json::array({call_message(t.call)})}};
            assistant["content"] = t.field == "content" ? t.text : "";
            if (t.field == "thinking") assistant["thinking"] = t.text;
            const std::string reply = rendered_reply(tmpl, prompt, assistant, tool_list);
            MESSAGE("reply:\n" << reply);
            CHECK(reply.find("to=functions." + t.call.name) != std::string::npos);
            check_reply(reply, {t.text, "", {t.call}});
        }
    }

    SUBCASE("an answer, with its thinking or without") {
        // Only the last assistant turn of a conversation rendered without a generation prompt shows
        // its thinking (the training shape), ended by "<|return|>".
        const std::string thinking = "15 * 4 = 60.\nDouble-check: 60 / 4 = 15.";
        const std::string answer = "15 × 4 = **60**.\n\nAnything else?";
        const Json question = {{"role", "user"}, {"content", "What is 15 * 4?"}};
        const std::string with = rendered_reply(tmpl, Json::array({question}),
                                                {{"role", "assistant"}, {"thinking", thinking}, {"content", answer}}, nullptr);
        MESSAGE("reply:\n" << with);
        CHECK(with.find("<|channel|>analysis") != std::string::npos);
        check_reply(with, {thinking, answer, {}});
        const std::string without =
            rendered_reply(tmpl, Json::array({question}), {{"role", "assistant"}, {"content", answer}}, nullptr);
        check_reply(without, {"", answer, {}});
        // Generation stops at "<|return|>": the text the engine gives does not have it.
        REQUIRE(with.ends_with("<|return|>"));
        check_reply(with.substr(0, with.size() - std::string_view("<|return|>").size()), {thinking, answer, {}});
    }
}

TEST_CASE("harmony: reasoning then the answer") {
    const std::string r = "<|channel|>analysis<|message|>The user greets; answer briefly.<|end|>"
                          "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?";
    check_reply(r + "<|return|>", {"The user greets; answer briefly.", "Hello! How can I help?", {}});
    check_reply(r, {"The user greets; answer briefly.", "Hello! How can I help?", {}});
    // Several analysis messages are one reasoning; a "<" of the text is not held forever.
    check_reply("<|channel|>analysis<|message|>a < b<|end|><|start|>assistant<|channel|>analysis<|message|>, so b.<|end|>"
                "<|start|>assistant<|channel|>final<|message|>b is larger <",
                {"a < b, so b.", "b is larger <", {}});
}

TEST_CASE("harmony: a call with the recipient after the channel and <|constrain|>json") {
    const std::string r = "<|channel|>analysis<|message|>Need the weather.<|end|>"
                          "<|start|>assistant<|channel|>commentary to=functions.get_current_weather <|constrain|>json"
                          "<|message|>{\"location\":\"Paris, France\",\"unit\":\"celsius\"}";
    check_reply(r + "<|call|>", {"Need the weather.", "", {weather_call()}});
    // Generation stops at "<|call|>": the call is read from the text before it.
    check_reply(r, {"Need the weather.", "", {weather_call()}});
    // Arguments spread over lines and keys in any order are the same call, given compact.
    check_reply("<|channel|>commentary to=functions.get_current_weather json<|message|>{\n  \"unit\": \"celsius\",\n"
                "  \"location\": \"Paris, France\"\n}<|call|>",
                {"", "", {weather_call()}});
}

TEST_CASE("harmony: a preamble for the user, then a call") {
    check_reply("<|channel|>commentary<|message|>Let me check the time in Paris.<|end|>"
                "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{\"timezone\": \"Europe/Paris\"}<|call|>",
                {"", "Let me check the time in Paris.", {time_call()}});
}

TEST_CASE("harmony: malformed calls come back as content, their body as written") {
    // A tool the request did not offer.
    const std::string unknown = "<|channel|>commentary to=functions.get_stock <|constrain|>json<|message|>{\"symbol\": \"ACME\"}<|call|>";
    check_reply(unknown, {"", "{\"symbol\": \"ACME\"}", {}});
    // With no tools in the request any name is taken.
    check_reply(unknown, {"", "", {{"get_stock", Json::parse(R"({"symbol": "ACME"})")}}}, nullptr);
    // Bad JSON, and JSON that is no object.
    check_reply("<|channel|>analysis<|message|>Call it.<|end|><|start|>assistant to=functions.get_time<|channel|>commentary json"
                "<|message|>{\"timezone\": Europe/Paris}<|call|>",
                {"Call it.", "{\"timezone\": Europe/Paris}", {}});
    check_reply("<|channel|>commentary to=functions.get_time json<|message|>[\"Europe/Paris\"]<|call|>",
                {"", "[\"Europe/Paris\"]", {}});
    check_reply("<|channel|>commentary to=functions. json<|message|>{}<|call|>", {"", "{}", {}});
    // A malformed call does not stop a good one after it.
    check_reply(unknown + "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>"
                          "{\"timezone\": \"Europe/Paris\"}<|call|>",
                {"", "{\"symbol\": \"ACME\"}", {time_call()}}, tools(), false);
}

TEST_CASE("harmony: several calls; parallel false keeps the first") {
    const std::string r = "<|channel|>commentary to=functions.get_current_weather json<|message|>"
                          "{\"location\": \"Paris, France\", \"unit\": \"celsius\"}<|call|>"
                          "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>"
                          "{\"timezone\": \"Europe/Paris\"}<|call|>";
    check_reply(r, {"", "", {weather_call(), time_call()}}, tools(), true);
    check_reply(r, {"", "", {weather_call()}}, tools(), false);
}

TEST_CASE("harmony: text outside any message is content") {
    check_reply("Hello there, how can I help?", {"", "Hello there, how can I help?", {}});
    check_reply(" tomorrow it rains", {"", " tomorrow it rains", {}});
    check_reply("", {"", "", {}});
    // Plain text and then the format; whitespace alone between messages is nobody's.
    check_reply("Sure.<|channel|>final<|message|>It is 4.", {"", "Sure.It is 4.", {}});
    check_reply("<|channel|>analysis<|message|>x<|end|>\n<|start|>assistant<|channel|>final<|message|>y<|end|>\n",
                {"x", "y", {}});
    // Text after an end of generation (the engine did not stop there) is read on.
    check_reply("<|channel|>final<|message|>A.<|return|>B.", {"", "A.B.", {}});
    // "<|" that begins no marker ("<|x") is text.
    check_reply("a <|x b", {"", "a <|x b", {}}, tools(), true, true);
}

TEST_CASE("harmony: replies that stray from the format lose no markup into the text") {
    // The next message begun without ending this one.
    check_reply("<|channel|>analysis<|message|>think<|channel|>final<|message|>answer", {"think", "answer", {}});
    // A turn the model imagines for someone else is not its answer.
    check_reply("<|channel|>final<|message|>Done.<|end|><|start|>user<|message|>Thanks!<|end|>"
                "<|start|>functions.get_time to=assistant<|channel|>commentary<|message|>\"12:00\"<|end|>",
                {"", "Done.", {}});
    // A header that never reaches "<|message|>" is text after a while, its markers dropped; a short
    // one cut by an end marker says nothing.
    const std::string prose(300, 'x');
    check_reply("<|channel|>final " + prose + "<|end|>", {"", "final " + prose, {}});
    check_reply("<|channel|>final<|end|><|start|>assistant<|channel|>final<|message|>ok", {"", "ok", {}});
    // A body marker with no header: the answer.
    check_reply("<|message|>bare", {"", "bare", {}});
}

TEST_CASE("harmony: a reply cut anywhere gives a prefix of its parts and never a marker") {
    const std::string thinking = "Paris is UTC+2 in summer.", answer = "It is noon in Paris.";
    const std::string full = "<|channel|>analysis<|message|>" + thinking + "<|end|><|start|>assistant<|channel|>final<|message|>" +
                             answer + "<|return|>";
    for (size_t cut = 0; cut <= full.size(); ++cut) {
        CAPTURE(cut);
        for (size_t piece : {size_t(0), size_t(1), size_t(5)}) {
            Got got = run(std::string_view(full).substr(0, cut), tools(), true, piece);
            // A "<" alone at the end of a body is the text's own as far as anyone can tell: kept.
            if (cut > 0 && full[cut - 1] == '<') {
                if (got.content.ends_with('<')) got.content.pop_back();
                else if (got.reasoning.ends_with('<')) got.reasoning.pop_back();
            }
            CHECK(thinking.starts_with(got.reasoning));
            CHECK(answer.starts_with(got.content));
            CHECK(got.calls.empty());
        }
    }
    // Cut in a header: what came before only. Cut in a body or its end marker: the body so far.
    check_reply(full.substr(0, full.find("final") + 3), {thinking, "", {}});
    check_reply(full.substr(0, full.find("noon")), {thinking, "It is ", {}});
    check_reply(full.substr(0, full.size() - 3), {thinking, answer, {}});
    check_reply(full.substr(0, full.find("<|end|>") + 3), {thinking, "", {}});

    const std::string call = "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{\"timezone\": \"Europe/Paris\"}";
    // Cut in the call's header: nothing; right after its JSON (where generation stops): the call.
    check_reply(call.substr(0, call.find("json")), {"", "", {}});
    check_reply(call.substr(0, call.find("<|message|>") + 4), {"", "", {}});
    check_reply(call, {"", "", {time_call()}});
    check_reply(call + "<|ca", {"", "", {time_call()}});
    // Cut inside the arguments: no call; the JSON so far comes back as content, as any malformed call's.
    check_reply(call.substr(0, call.size() - 5), {"", "{\"timezone\": \"Europe/Pa", {}});
}

TEST_CASE("harmony: a forced call: the prompt opens the call's message, the grammar holds its arguments") {
    using vkllm::grammar::Grammar;
    using vkllm::grammar::Matcher;
    const vkllm::answer::ToolFormat& format = vkllm::answer::tool_format(vkllm::answer::ToolFamily::Harmony);
    // The tool is named in the header, between control tokens: a named choice only.
    CHECK_THROWS_AS(vkllm::answer::forced_call(format, tools(), "", true), vkllm::answer::ToolError);
    const vkllm::answer::ForcedCall fc = vkllm::answer::forced_call(format, tools(), "get_time", true);
    CHECK(fc.prompt_prefix == "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>");
    const Grammar g = Grammar::parse(fc.gbnf);
    const std::string args = R"({"timezone": "Europe/Paris"})";
    Matcher m(g);
    REQUIRE(m.accept(args));
    CHECK(m.can_end());
    CHECK_FALSE(Matcher(g).accept(R"({"zone": "Europe/Paris"})"));
    CHECK_FALSE(Matcher(g).accept(R"({"location": "Paris"})"));
    // The stream reads the prefix as the reply's start: the arguments are the call, in any pieces;
    // generation ends at "<|call|>" (an end-of-generation token) or right after the arguments.
    for (const std::string& tail : {std::string(), std::string("<|call|>")}) {
        const std::string text = args + tail;
        for (size_t piece = 1; piece <= text.size(); ++piece) {
            CAPTURE(piece);
            HarmonyStream s(tools(), true, fc.prompt_prefix);
            std::string released;
            for (size_t i = 0; i < text.size(); i += piece) {
                const HarmonyStream::Piece p = s.push(std::string_view(text).substr(i, piece));
                released += p.reasoning + p.content;
            }
            HarmonyStream::Rest r = s.finish();
            CHECK(released + r.reasoning + r.content == "");
            check_calls(r.calls, {time_call()});
        }
    }
}

TEST_CASE("harmony: a marker's text inside the arguments' strings is the arguments'") {
    const Json tool_list = Json::parse(R"([{"type": "function", "function": {"name": "q"}}])");
    for (const std::string& s : {std::string("a<|message|>b"), std::string("a<|end|>b"), std::string("a<|call|>\\\"<|start|>")}) {
        CAPTURE(s);
        const std::string args = "{\"q\":\"" + s + "\"}";
        const std::string text = "<|channel|>commentary to=functions.q <|constrain|>json<|message|>" + args + "<|call|>";
        for (size_t piece : {size_t(0), size_t(1), size_t(3)}) {
            const Got got = run(text, tool_list, true, piece, true);
            CHECK(got.content == "");
            REQUIRE(got.calls.size() == 1);
            CHECK(nlohmann::json::parse(got.calls[0].arguments) == nlohmann::json::parse(args));
        }
    }
}
