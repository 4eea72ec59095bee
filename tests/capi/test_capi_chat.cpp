// The C API's structured output from C++ through libvkllm.so alone: grammars and JSON schemas, and
// vkllm_chat_json's reasoning blocks, answer formats and forced tool calls in every markup family.
#include "capi_testing.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

using namespace capi_test;

TEST_CASE("capi: grammar and json_schema shape the output; ones that cannot be enforced are refused by name") {
    Model model;
    Session session(model.m);
    vkllm_sampling s = vkllm_sampling_default();
    s.temperature = 0.9f;
    s.seed = 5;
    s.n_predict = 60;
    s.json_schema = R"({"type":"object","properties":{"who":{"type":"string","maxLength":8},)"
                    R"("n":{"type":"integer","minimum":1,"maximum":9}},"required":["who","n"],"additionalProperties":false})";
    Collected out;
    REQUIRE(vkllm_generate(session.s, "Once upon a time", &s, collect, &out) == VKLLM_OK);
    INFO(out.text);
    const auto j = nlohmann::json::parse(out.text);
    CHECK(j.size() == 2);
    CHECK(j.at("n").get<int>() >= 1);
    CHECK(j.at("n").get<int>() <= 9);
    CHECK(j.at("who").get<std::string>().size() <= 8 * 4);
    vkllm_generation_stats st{};
    st.struct_size = sizeof(st);
    REQUIRE(vkllm_session_get_stats(session.s, &st) == VKLLM_OK);
    CHECK(st.finish == VKLLM_FINISH_STOP);

    vkllm_sampling g = vkllm_sampling_default();
    g.temperature = 0;
    g.grammar = R"(root ::= " and " ("a cat" | "a dog") ".")";
    Collected two;
    REQUIRE(vkllm_session_reset(session.s) == VKLLM_OK);
    REQUIRE(vkllm_generate(session.s, "Once upon a time", &g, collect, &two) == VKLLM_OK);
    CHECK((two.text == " and a cat." || two.text == " and a dog."));

    g.grammar = "root ::= [a-";
    CHECK(vkllm_generate(session.s, "x", &g, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "line 1, column"));
    g.grammar = nullptr;
    g.json_schema = R"({"type":"object","patternProperties":{"^x":{}}})";
    CHECK(vkllm_generate(session.s, "x", &g, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "patternProperties"));
    g.grammar = "root ::= \"a\"";
    CHECK(vkllm_generate(session.s, "x", &g, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "at most one"));
}

TEST_CASE("capi: vkllm_chat_json splits the reasoning block off the content, as the server does") {
    // A template that opens the block for the model, as QwQ's and DeepSeek R1's do.
    const std::filesystem::path tmpl = std::filesystem::temp_directory_path() / "vkllm_test_think.jinja";
    {
        std::ofstream f(tmpl);
        f << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant: <think>\n";
    }
    vkllm_model_params mp = test_params();
    const std::string tmpl_path = tmpl.string();
    mp.chat_template = tmpl_path.c_str();
    Model model("stories260K.gguf", mp);
    Session session(model.m);
    vkllm_chat_json_params p = vkllm_chat_json_default_params();
    p.messages = R"([{"role":"user","content":"Tell me a story."}])";
    vkllm_sampling s = vkllm_sampling_default();
    s.temperature = 0;
    // stories260K never closes a block by itself: a grammar writes the reasoning, the tag and the answer.
    s.grammar = R"(root ::= "Cats like fish." "</think>" "\n\nA cat.")";
    Collected split;
    REQUIRE(vkllm_chat_json(session.s, &p, &s, collect, &split) == VKLLM_OK);
    CHECK(split.text == "A cat.");
    CHECK(session_text(vkllm_session_get_reasoning, session.s) == "Cats like fish.");

    // "none": the block stays in the content; nothing is kept as reasoning.
    p.reasoning_format = "none";
    Collected inline_text;
    REQUIRE(vkllm_chat_json(session.s, &p, &s, collect, &inline_text) == VKLLM_OK);
    CHECK(inline_text.text == "Cats like fish.</think>\n\nA cat.");
    CHECK(session_text(vkllm_session_get_reasoning, session.s).empty());
    p.reasoning_format = "hidden";
    CHECK(vkllm_chat_json(session.s, &p, &s, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "reasoning_format"));
    size_t len = 0;
    CHECK(vkllm_session_get_reasoning(session.s, nullptr, 0, &len) == VKLLM_ERR_BUFFER_TOO_SMALL);
    CHECK(vkllm_session_get_reasoning(nullptr, nullptr, 0, &len) == VKLLM_ERR_INVALID_HANDLE);
    std::filesystem::remove(tmpl);
}

namespace {

// A chat template whose answers frame their parts with markers (gpt-oss' Harmony, Command R7B):
// stories260K is steered by `call` to a plan "Use the tool." and a call of get_weather with
// {"city": "Oslo"}, then by `answer` to "Hello!" with `answer_reasoning`. vkllm_chat_json splits
// reasoning, content and calls, and no marker reaches on_piece. The markers are plain text in this
// vocabulary; in the models' own they are control tokens, which vkllm_chat_json shows to the parser.
void check_framed_answers(const std::string& template_path, const char* call, const char* answer,
                          const std::string& answer_reasoning) {
    vkllm_model_params mp = test_params();
    mp.chat_template = template_path.c_str();
    Model model("stories260K.gguf", mp);
    Session session(model.m);
    vkllm_chat_json_params p = vkllm_chat_json_default_params();
    p.messages = R"([{"role":"user","content":"Weather?"}])";
    p.tools = R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
    vkllm_sampling s = vkllm_sampling_default();
    s.temperature = 0;
    s.n_predict = 400;  // the markers are spelled in small pieces in this vocabulary
    s.grammar = call;
    Collected out;
    REQUIRE(vkllm_chat_json(session.s, &p, &s, collect, &out) == VKLLM_OK);
    CHECK(out.text.empty());
    CHECK(session_text(vkllm_session_get_reasoning, session.s) == "Use the tool.");
    const auto calls = nlohmann::json::parse(session_text(vkllm_session_get_tool_calls, session.s));
    REQUIRE(calls.size() == 1);
    CHECK(calls[0]["function"]["name"] == "get_weather");
    CHECK(calls[0]["function"]["arguments"] == R"({"city":"Oslo"})");

    s.grammar = answer;
    Collected answered;
    REQUIRE(vkllm_chat_json(session.s, &p, &s, collect, &answered) == VKLLM_OK);
    CHECK(answered.text == "Hello!");
    for (const std::string& piece : answered.pieces) CHECK(piece.find("<|") == std::string::npos);
    CHECK(session_text(vkllm_session_get_reasoning, session.s) == answer_reasoning);
    CHECK(session_text(vkllm_session_get_tool_calls, session.s) == "[]");
}

}  // namespace

TEST_CASE("capi: vkllm_chat_json reads a gpt-oss (Harmony) answer: analysis as reasoning, final as content, calls") {
    // A template in Harmony's shape.
    const std::filesystem::path tmpl = std::filesystem::temp_directory_path() / "vkllm_test_harmony.jinja";
    {
        std::ofstream f(tmpl);
        f << "{% for m in messages %}<|start|>{{ m.role }}{% if m.role == 'assistant' %}<|channel|>final{% endif %}"
             "<|message|>{{ m.content }}<|end|>{% endfor %}<|start|>assistant";
    }
    check_framed_answers(tmpl.string(),
                         R"(root ::= "<|channel|>analysis<|message|>Use the tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}")",
                         R"(root ::= "<|channel|>analysis<|message|>Greet.<|end|><|start|>assistant<|channel|>final<|message|>Hello!")",
                         "Greet.");
    std::filesystem::remove(tmpl);
}

TEST_CASE("capi: vkllm_chat_json reads a Command R7B answer: the plan as reasoning, actions as calls, no markers") {
    // The stand-in for Command R7B's template (tests/fixtures/templates).
    check_framed_answers(std::string(VKLLM_FIXTURES_DIR) + "/templates/command-r7b-format.jinja",
                         R"(root ::= "<|START_THINKING|>Use the tool.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", )"
                         R"(\"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}\n]<|END_ACTION|>")",
                         R"(root ::= "<|START_RESPONSE|>Hello!<|END_RESPONSE|>")", "");
}

TEST_CASE("capi: vkllm_chat_json forces tool calls, keeps their markup out of on_piece, and refuses bad input by name") {
    Model model;
    Session session(model.m);
    const char* tools = R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
                        R"("properties":{"city":{"type":"string","maxLength":12}},"required":["city"],"additionalProperties":false}}}])";
    vkllm_chat_json_params p = vkllm_chat_json_default_params();
    p.messages = R"([{"role":"user","content":"Tell me a story."}])";
    p.tools = tools;
    p.tool_choice = "required";
    p.parallel_tool_calls = false;
    vkllm_sampling s = vkllm_sampling_default();
    s.temperature = 0.9f;
    s.seed = 11;
    s.n_predict = 200;
    Collected out;
    REQUIRE(vkllm_chat_json(session.s, &p, &s, collect, &out) == VKLLM_OK);
    CHECK(out.text.empty());  // the whole answer is the call
    size_t len = 0;
    CHECK(vkllm_session_get_tool_calls(session.s, nullptr, 0, &len) == VKLLM_ERR_BUFFER_TOO_SMALL);
    std::string buf(len + 1, '\0');
    REQUIRE(vkllm_session_get_tool_calls(session.s, buf.data(), buf.size(), &len) == VKLLM_OK);
    buf.resize(len);
    INFO(buf);
    const auto calls = nlohmann::json::parse(buf);
    REQUIRE(calls.size() == 1);
    CHECK(calls[0]["function"]["name"] == "get_weather");
    const auto args = nlohmann::json::parse(calls[0]["function"]["arguments"].get<std::string>());
    CHECK(args.size() == 1);
    CHECK(args.at("city").is_string());

    // The next turn: the call and its result go back in; arguments as OpenAI's JSON text are fine.
    nlohmann::json turn = nlohmann::json::parse(std::string(p.messages));
    turn.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", calls}});
    turn.push_back({{"role", "tool"}, {"tool_call_id", calls[0]["id"]}, {"content", R"({"temp": 21})"}});
    const std::string next = turn.dump();
    p.messages = next.c_str();
    p.tool_choice = "none";
    s.n_predict = 4;
    REQUIRE(vkllm_chat_json(session.s, &p, &s, nullptr, nullptr) == VKLLM_OK);
    REQUIRE(vkllm_session_get_tool_calls(session.s, buf.data(), buf.size(), &len) == VKLLM_OK);
    CHECK(std::string(buf.data(), len) == "[]");

    p.messages = "[{";
    CHECK(vkllm_chat_json(session.s, &p, &s, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "messages"));
    // Messages are read as the server reads them: text parts joined, other parts refused by name.
    p.tools = nullptr;
    p.tool_choice = nullptr;
    p.messages = R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])";
    CHECK(vkllm_chat_json(session.s, &p, &s, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "messages[0].content[0].type"));
    p.messages = R"([{"role":"user"}])";
    CHECK(vkllm_chat_json(session.s, &p, &s, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "messages[0].content"));
    {
        // The same prompt as the joined text: the same greedy answer.
        vkllm_sampling g = greedy(12);
        Collected parts, joined;
        p.messages = R"([{"role":"user","content":[{"type":"text","text":"Tell me"},{"type":"text","text":"a story."}]}])";
        REQUIRE(vkllm_chat_json(session.s, &p, &g, collect, &parts) == VKLLM_OK);
        p.messages = R"([{"role":"user","content":"Tell me\na story."}])";
        REQUIRE(vkllm_chat_json(session.s, &p, &g, collect, &joined) == VKLLM_OK);
        CHECK(parts.text == joined.text);
        CHECK(!parts.text.empty());
    }
    p.tools = tools;
    p.messages = R"([{"role":"user","content":"x"}])";
    p.tools = R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","not":{}}}}])";
    p.tool_choice = "required";
    CHECK(vkllm_chat_json(session.s, &p, &s, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "'not'"));
    p.tools = tools;
    p.tool_choice = "no_such_tool";
    CHECK(vkllm_chat_json(session.s, &p, &s, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "no_such_tool"));
    p.tool_choice = "required";
    const char* stop[] = {"}"};
    s.stop = stop;
    s.n_stop = 1;
    CHECK(vkllm_chat_json(session.s, &p, &s, nullptr, nullptr) == VKLLM_ERR_INVALID_ARGUMENT);
    CHECK(contains(vkllm_last_error(), "stop"));
}

TEST_CASE("capi: forced calls in the formats that name the tool in text markup or between control tokens") {
    // Each real template's format: the reply starts inside the call and the grammar writes the rest,
    // so stories260K (which never calls a tool) still answers with valid calls, none of it content.
    const std::string templates = std::string(VKLLM_MODELS_DIR) + "/../templates/templates/";
    // With descriptions: Command R+'s template writes them into the prompt.
    const char* tools = R"([{"type":"function","function":{"name":"get_weather","description":"The weather",)"
                        R"("parameters":{"type":"object","properties":{)"
                        R"("city":{"type":"string","enum":["Paris","Oslo"],"description":"A city"},)"
                        R"("days":{"type":"integer","minimum":1,"maximum":7,"description":"Days ahead"}},)"
                        R"("required":["city"],"additionalProperties":false}}},)"
                        R"({"type":"function","function":{"name":"get_time","description":"The time",)"
                        R"("parameters":{"type":"object","properties":{)"
                        R"("timezone":{"type":"string","const":"UTC","description":"A time zone"}},)"
                        R"("required":["timezone"],"additionalProperties":false}}}])";
    struct Case {
        const char* file;
        const char* choice;  // gpt-oss names the tool in the header the prompt holds: a named one
    };
    for (const Case& c : {Case{"Qwen3-Coder", "required"}, Case{"GLM-4.6", "required"},
                          Case{"meetkai-functionary-medium-v3.2", "required"},
                          Case{"CohereForAI-c4ai-command-r-plus-tool_use", "required"}, Case{"moonshotai-Kimi-K2", "required"},
                          Case{"Mistral-Small-3.2-24B-Instruct-2506", "required"}, Case{"deepseek-ai-DeepSeek-V3.1", "required"},
                          Case{"openai-gpt-oss-120b", "get_weather"}}) {
        const std::string file = c.file;
        CAPTURE(file);
        const std::string path = templates + file + ".jinja";
        if (!std::filesystem::exists(path)) {
            MESSAGE("skipped: no " << path);
            continue;
        }
        vkllm_model_params mp = test_params();
        mp.chat_template = path.c_str();
        Model model("stories260K.gguf", mp);
        Session session(model.m);
        vkllm_chat_json_params p = vkllm_chat_json_default_params();
        p.messages = R"([{"role":"user","content":"What is the weather in Oslo?"}])";
        p.tools = tools;
        p.tool_choice = c.choice;
        // One call: stories260K would go on writing calls as long as the grammar lets it.
        p.parallel_tool_calls = false;
        for (uint64_t seed : {1u, 2u, 3u}) {
            CAPTURE(seed);
            vkllm_sampling s = vkllm_sampling_default();
            s.temperature = 1.0f;
            s.seed = seed;
            s.n_predict = 300;
            Collected out;
            const vkllm_status st = vkllm_chat_json(session.s, &p, &s, collect, &out);
            const std::string error = st == VKLLM_OK ? "" : vkllm_last_error();
            CAPTURE(error);
            REQUIRE(st == VKLLM_OK);
            CAPTURE(out.text);
            CHECK(out.text.empty());
            CHECK(stats_of(session.s).finish == VKLLM_FINISH_STOP);
            const std::string text = session_text(vkllm_session_get_tool_calls, session.s);
            INFO(text);
            const auto calls = nlohmann::json::parse(text);
            REQUIRE(calls.size() == 1);
            for (const auto& call : calls) {
                const std::string name = call["function"]["name"];
                const auto args = nlohmann::json::parse(call["function"]["arguments"].get<std::string>());
                if (std::string(c.choice) != "required") CHECK(name == c.choice);
                if (name == "get_weather") {
                    CHECK((args.at("city") == "Paris" || args.at("city") == "Oslo"));
                    if (args.contains("days")) CHECK((args["days"].is_number_integer() && args["days"] >= 1 && args["days"] <= 7));
                    CHECK(args.size() <= 2);
                } else {
                    CHECK(name == "get_time");
                    CHECK(args == nlohmann::json{{"timezone", "UTC"}});
                }
            }
        }
    }
}
