// The OpenAI request bodies on plain JSON: every request field checked (400 naming the field),
// unknown fields ignored; structured output, tools and tool_choice, and logit_bias.
#include "serving/server/openai_requests.h"

#include "model/grammar/grammar.h"
#include "support/openai_testing.h"

#include <doctest/doctest.h>

using namespace vkllm;
using namespace vkllm::server;
using namespace vkllm::server::openai_testing;

TEST_CASE("protocol: a minimal chat request takes the defaults") {
    ParsedRequest r = parse_chat_request(chat_body(), 42);
    CHECK(r.endpoint == Endpoint::Chat);
    CHECK(r.model == "m");
    CHECK_FALSE(r.stream);
    CHECK(r.messages.size() == 1);
    CHECK(r.messages[0]["content"] == "Hi");
    CHECK(r.tools.is_null());
    CHECK(r.template_kwargs.is_null());
    CHECK(r.engine.max_tokens == -1);
    CHECK(r.engine.sampler.seed == 42);
    CHECK(r.engine.sampler.temperature == SamplerParams{}.temperature);
    CHECK(r.engine.stop.empty());
    CHECK_FALSE(r.engine.logprobs);
}

TEST_CASE("protocol: every sampling field is read") {
    json extra = {{"temperature", 0},
                  {"top_p", 0.5},
                  {"top_k", 7},
                  {"min_p", 0.1},
                  {"seed", 1234},
                  {"presence_penalty", 1.5},
                  {"frequency_penalty", -0.5},
                  {"repeat_penalty", 1.1},
                  {"max_tokens", 10},
                  {"stop", json::array({"a", "b"})},
                  {"user", "u1"},
                  {"n", 1},
                  {"logprobs", true},
                  {"top_logprobs", 3},
                  {"stream", true},
                  {"stream_options", {{"include_usage", true}}},
                  {"tools", json::array({json{{"type", "function"}, {"function", {{"name", "f"}}}}})},
                  {"chat_template_kwargs", {{"enable_thinking", false}}},
                  {"some_future_field", {{"x", 1}}}};
    ParsedRequest r = parse_chat_request(chat_body(extra), 1);
    CHECK(r.engine.sampler.temperature == 0.0f);
    CHECK(r.engine.sampler.greedy());
    CHECK(r.engine.sampler.top_p == 0.5f);
    CHECK(r.engine.sampler.top_k == 7);
    CHECK(r.engine.sampler.min_p == doctest::Approx(0.1));
    CHECK(r.engine.sampler.seed == 1234);
    CHECK(r.engine.sampler.presence_penalty == 1.5f);
    CHECK(r.engine.sampler.frequency_penalty == -0.5f);
    CHECK(r.engine.sampler.repeat_penalty == doctest::Approx(1.1));
    CHECK(r.engine.max_tokens == 10);
    CHECK(r.engine.stop == std::vector<std::string>{"a", "b"});
    CHECK(r.engine.logprobs);
    CHECK(r.engine.top_logprobs == 3);
    CHECK(r.stream);
    CHECK(r.include_usage);
    CHECK(r.tools.size() == 1);
    CHECK(r.template_kwargs["enable_thinking"] == false);

    // max_completion_tokens is the newer name and wins; a single stop string; null is "not given".
    r = parse_chat_request(
        chat_body({{"max_tokens", 5}, {"max_completion_tokens", 9}, {"stop", "END"}, {"temperature", nullptr}}), 1);
    CHECK(r.engine.max_tokens == 9);
    CHECK(r.engine.stop == std::vector<std::string>{"END"});
    CHECK(r.engine.sampler.temperature == SamplerParams{}.temperature);
    // A negative seed is a seed too (OpenAI takes any integer).
    r = parse_chat_request(chat_body({{"seed", -1}}), 1);
    CHECK(r.engine.sampler.seed == ~uint64_t(0));
}

TEST_CASE("protocol: wrong types and out-of-range values are 400s naming the field") {
    struct Case {
        json extra;
        std::string param, says;
    };
    const std::vector<Case> cases = {
        {{{"temperature", 3}}, "temperature", "between 0 and 2"},
        {{{"temperature", -0.1}}, "temperature", "between 0 and 2"},
        {{{"temperature", "hot"}}, "temperature", "expected a number, but got a string"},
        {{{"top_p", 1.5}}, "top_p", "between 0 and 1"},
        {{{"top_p", 0}}, "top_p", "above 0"},
        {{{"top_k", -1}}, "top_k", "between 0 and"},
        {{{"top_k", 2.5}}, "top_k", "expected an integer, but got a decimal"},
        {{{"min_p", 1}}, "min_p", "below 1"},
        {{{"presence_penalty", 2.5}}, "presence_penalty", "between -2 and 2"},
        {{{"frequency_penalty", "x"}}, "frequency_penalty", "expected a number"},
        {{{"repeat_penalty", 0}}, "repeat_penalty", "above 0"},
        {{{"max_tokens", 0}}, "max_tokens", "between 1 and"},
        {{{"max_tokens", "10"}}, "max_tokens", "expected an integer, but got a string"},
        {{{"max_completion_tokens", -5}}, "max_completion_tokens", "between 1 and"},
        {{{"seed", "abc"}}, "seed", "expected an integer"},
        {{{"stop", 5}}, "stop", "a string or an array of strings"},
        {{{"stop", json::array({"a", 1})}}, "stop", "a string or an array of strings"},
        {{{"stop", json::array({"a", "b", "c", "d", "e"})}}, "stop", "at most 4"},
        {{{"n", 9}}, "n", "between 1 and 8"},
        {{{"n", 0}}, "n", "between 1 and 8"},
        {{{"n", "1"}}, "n", "expected an integer"},
        {{{"stream", "yes"}}, "stream", "expected a boolean"},
        {{{"stream_options", {{"include_usage", true}}}}, "stream_options", "only allowed when 'stream' is enabled"},
        {{{"stream", true}, {"stream_options", {{"include_usage", 1}}}}, "stream_options.include_usage", "a boolean"},
        {{{"logprobs", 1}}, "logprobs", "expected a boolean"},
        {{{"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs", "between 0 and 20"},
        {{{"top_logprobs", 2}}, "top_logprobs", "'logprobs' must be set to true"},
        {{{"model", 5}}, "model", "expected a string"},
        {{{"user", json::array()}}, "user", "expected a string"},
        {{{"tools", "f"}}, "tools", "expected an array"},
        {{{"tools", json::array({1})}}, "tools[0]", "expected an object"},
        {{{"chat_template_kwargs", json::array()}}, "chat_template_kwargs", "expected an object"},
        {{{"messages", "Hi"}}, "messages", "expected an array, but got a string"},
        {{{"messages", json::array()}}, "messages", "empty array"},
        {{{"messages", json::array({"Hi"})}}, "messages[0]", "expected an object"},
        {{{"messages", json::array({json{{"content", "Hi"}}})}}, "messages[0].role", "Missing required parameter"},
        {{{"messages", json::array({json{{"role", 1}, {"content", "Hi"}}})}}, "messages[0].role", "non-empty string"},
        {{{"messages", json::array({json{{"role", "user"}}})}}, "messages[0].content", "Missing required parameter"},
        {{{"messages", json::array({json{{"role", "user"}, {"content", 5}}})}}, "messages[0].content", "content parts"},
        {{{"messages",
           json::array(
               {json{{"role", "user"}, {"content", json::array({json{{"type", "image_url"}, {"image_url", "x"}}})}}})}},
         "messages[0].content[0].type",
         "takes no images"},
        {{{"messages",
           json::array({json{{"role", "user"}, {"content", json::array({json{{"type", "input_audio"}}})}}})}},
         "messages[0].content[0].type",
         "content parts of type 'text'"},
        {{{"messages", json::array({json{{"role", "user"}, {"content", json::array({json{{"type", "text"}}})}}})}},
         "messages[0].content[0].text",
         "Missing required parameter"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.extra.dump());
        ApiError e = chat_error(c.extra);
        CHECK(e.status() == 400);
        CHECK(e.type() == "invalid_request_error");
        CHECK(e.param() == c.param);
        CHECK(std::string(e.what()).find(c.says) != std::string::npos);
        CAPTURE(e.what());
    }
    ApiError e = error_of([] { parse_chat_request(json{{"model", "m"}}, 1); });
    CHECK(e.param() == "messages");
}

TEST_CASE("protocol: content parts are flattened, tool-calling assistant turns may lack content") {
    json msgs = json::array(
        {json{{"role", "system"},
              {"content", json::array({json{{"type", "text"}, {"text", "A"}}, json{{"type", "text"}, {"text", "B"}}})}},
         json{{"role", "user"}, {"content", "Q"}},
         json{{"role", "assistant"},
              {"content", nullptr},
              {"tool_calls",
               json::array({json{
                   {"id", "1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", R"({"a":"b"})"}}}}})}},
         json{{"role", "tool"}, {"tool_call_id", "1"}, {"content", "42"}}});
    json out = parse_messages(msgs);
    CHECK(out[0]["content"] == "A\nB");
    CHECK(out[1]["content"] == "Q");
    CHECK(out[2]["content"].is_null());
    CHECK(out[2]["tool_calls"].size() == 1);
    // Templates read the arguments as an object (Hugging Face's convention), not OpenAI's JSON string.
    CHECK(out[2]["tool_calls"][0]["function"]["arguments"] == json{{"a", "b"}});
    CHECK(out[3]["tool_call_id"] == "1");
}

TEST_CASE("protocol: a tool call in the history whose arguments are not a JSON object is a 400 naming it") {
    auto with_args = [](json args) {
        json call = {{"id", "1"}, {"type", "function"}, {"function", {{"name", "f"}}}};
        if (!args.is_discarded()) call["function"]["arguments"] = std::move(args);
        return json::array({json{{"role", "user"}, {"content", "Q"}},
                            json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}}});
    };
    const std::string param = "messages[1].tool_calls[0].function.arguments";
    for (json bad :
         {json("{"), json("{\"a\": }"), json("not json"), json("[1, 2]"), json("5"), json(5), json::array({1})}) {
        CAPTURE(bad.dump());
        ApiError e = error_of([&] { parse_messages(with_args(bad)); });
        CHECK(e.status() == 400);
        CHECK(e.param() == param);
        CHECK(std::string(e.what()).find(param) != std::string::npos);
    }
    // Accepted: a JSON object as a string or as an object, none, null, and "" (a call without arguments).
    for (json good : {json(R"({"a": 1})"), json{{"a", 1}}, json(nullptr), json(""), json::object(),
                      json(json::value_t::discarded)}) {
        CAPTURE(good.dump());
        json out = parse_messages(with_args(good));
        CHECK(out[1]["tool_calls"][0]["function"]["arguments"].is_object());
    }
}

TEST_CASE("protocol: completions requests") {
    ParsedRequest r = parse_completion_request(json{{"prompt", "Once upon a time"}}, 3);
    CHECK(r.endpoint == Endpoint::Completion);
    REQUIRE(r.prompts.size() == 1);
    CHECK(r.prompts[0].text == "Once upon a time");
    CHECK_FALSE(r.prompts[0].is_tokens);
    CHECK(r.engine.max_tokens == 16);  // OpenAI's default for the legacy endpoint
    CHECK_FALSE(r.logprobs);

    r = parse_completion_request(json{{"prompt", json::array({"x"})}, {"max_tokens", 100}, {"logprobs", 2}}, 3);
    REQUIRE(r.prompts.size() == 1);
    CHECK(r.prompts[0].text == "x");
    CHECK(r.engine.max_tokens == 100);
    CHECK(r.logprobs);
    CHECK(r.engine.logprobs);
    CHECK(r.engine.top_logprobs == 2);

    r = parse_completion_request(json{{"prompt", json::array({1, 2, 3})}}, 3);
    REQUIRE(r.prompts.size() == 1);
    CHECK(r.prompts[0].is_tokens);
    CHECK(r.prompts[0].tokens == std::vector<int32_t>{1, 2, 3});

    // A batch: strings and token arrays, one entry each.
    r = parse_completion_request(json{{"prompt", json::array({"a", json::array({4, 5}), "c"})}, {"n", 2}}, 3);
    REQUIRE(r.prompts.size() == 3);
    CHECK(r.prompts[0].text == "a");
    CHECK(r.prompts[1].is_tokens);
    CHECK(r.prompts[1].tokens == std::vector<int32_t>{4, 5});
    CHECK(r.prompts[2].text == "c");
    CHECK(r.n == 2);

    auto err = [](json body) { return error_of([&] { parse_completion_request(body, 1); }); };
    CHECK(err(json{{"max_tokens", 5}}).param() == "prompt");
    CHECK(err(json{{"prompt", json::array({"a", 5})}}).param() == "prompt[1]");
    CHECK(err(json{{"prompt", json::array({"a", json::array()})}}).param() == "prompt[1]");
    CHECK(err(json{{"prompt", json::array({json::array({1, -1})})}}).param() == "prompt[0]");
    CHECK(err(json{{"prompt", json(std::vector<std::string>(kMaxPrompts + 1, "x"))}}).param() == "prompt");
    CHECK(err(json{{"prompt", json(std::vector<std::string>(kMaxPrompts / 2 + 1, "x"))}, {"n", 2}}).param() == "n");
    CHECK(err(json{{"prompt", json::array()}}).param() == "prompt");
    CHECK(err(json{{"prompt", 5}}).param() == "prompt");
    CHECK(err(json{{"prompt", json::array({1, -2})}}).param() == "prompt");
    CHECK(err(json{{"prompt", "x"}, {"logprobs", true}}).param() == "logprobs");
    CHECK(err(json{{"prompt", "x"}, {"logprobs", 21}}).param() == "logprobs");
    CHECK(err(json{{"prompt", "x"}, {"echo", true}}).param() == "echo");
    CHECK(err(json{{"prompt", "x"}, {"best_of", 3}}).param() == "best_of");
    CHECK(err(json{{"prompt", "x"}, {"n", 9}}).param() == "n");
}

TEST_CASE("protocol: bodies that are not a JSON object are 400s") {
    for (const char* body : {"{bad", "", "[1,2]", "\"x\"", "{\"a\": 1,}", "{\"messages\": [}"}) {
        CAPTURE(body);
        ApiError e = error_of([&] { parse_body(body); });
        CHECK(e.status() == 400);
        CHECK(e.type() == "invalid_request_error");
    }
    CHECK(parse_body("{\"a\": 1}")["a"] == 1);
}

TEST_CASE("protocol: JSON nested 100,000 deep is a 400, not a stack overflow") {
    // Copying or rendering such a value recursively would overflow the stack and kill the server.
    const std::string deep =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"x\": " + std::string(100000, '[') +
        std::string(100000, ']') + "}]}";
    ApiError e = error_of([&] { parse_body(deep); });
    CHECK(e.status() == 400);
    CHECK(std::string(e.what()).find("nested") != std::string::npos);
    // Sixty levels are still fine.
    const std::string ok = "{\"x\": " + std::string(60, '[') + std::string(60, ']') + "}";
    CHECK(parse_body(ok).contains("x"));
}

TEST_CASE(
    "protocol: response_format, grammar and json_schema become the request's grammar; what cannot be enforced is a "
    "400") {
    auto accepts = [](const ParsedRequest& r, const std::string& text) {
        REQUIRE(r.engine.grammar);
        grammar::Matcher m(*r.engine.grammar);
        return m.accept(text) && m.can_end();
    };
    ParsedRequest plain = parse_chat_request(chat_body(), 1);
    CHECK(!plain.engine.grammar);
    CHECK(!parse_chat_request(chat_body({{"response_format", {{"type", "text"}}}}), 1).engine.grammar);

    ParsedRequest obj = parse_chat_request(chat_body({{"response_format", {{"type", "json_object"}}}}), 1);
    CHECK(accepts(obj, R"({"a": [1, 2]})"));
    CHECK(!accepts(obj, "hello"));

    const json schema = {{"type", "object"},
                         {"properties", {{"name", {{"type", "string"}}}, {"n", {{"type", "integer"}, {"minimum", 1}}}}},
                         {"required", {"name", "n"}},
                         {"additionalProperties", false}};
    for (const json& rf :
         {json{{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"strict", true}, {"schema", schema}}}},
          json{{"type", "json_schema"}, {"schema", schema}}}) {
        CAPTURE(rf.dump());
        ParsedRequest r = parse_chat_request(chat_body({{"response_format", rf}}), 1);
        CHECK(accepts(r, R"({"name": "x", "n": 3})"));
        CHECK(!accepts(r, R"({"name": "x", "n": 0})"));
    }
    CHECK(accepts(parse_chat_request(chat_body({{"json_schema", schema}}), 1), R"({"name":"y","n":12})"));
    ParsedRequest g = parse_completion_request(json{{"prompt", "x"}, {"grammar", "root ::= \"yes\" | \"no\""}}, 1);
    CHECK(accepts(g, "yes"));
    CHECK(!accepts(g, "maybe"));

    // Refusals name the field and, for schemas, the keyword; for GBNF, the line and column.
    ApiError e =
        chat_error({{"response_format",
                     {{"type", "json_schema"},
                      {"json_schema",
                       {{"name", "x"},
                        {"schema", {{"type", "object"}, {"properties", {{"a", {{"not", {{"type", "null"}}}}}}}}}}}}}});
    CHECK(e.status() == 400);
    CHECK(e.param() == "response_format.json_schema.schema");
    CHECK(std::string(e.what()).find("'not'") != std::string::npos);
    CHECK(std::string(e.what()).find("/properties/a") != std::string::npos);
    e = chat_error({{"grammar", "root ::= \"a\"\nfoo ::= [a-"}});
    CHECK(e.param() == "grammar");
    CHECK(std::string(e.what()).find("line 2") != std::string::npos);
    e = chat_error({{"grammar", "root ::= root \"a\""}});
    CHECK(std::string(e.what()).find("left-recursive") != std::string::npos);
    CHECK(chat_error({{"response_format", {{"type", "xml"}}}}).param() == "response_format.type");
    CHECK(chat_error({{"response_format", {{"type", "json_schema"}}}}).param() == "response_format.json_schema");
    CHECK(chat_error({{"response_format", {{"type", "json_object"}}}, {"grammar", "root ::= \"a\""}}).param() ==
          "grammar");
    CHECK(chat_error({{"json_schema", "not a schema"}}).param() == "json_schema");
    // A stop string could cut the structure: refused.
    CHECK(chat_error({{"response_format", {{"type", "json_object"}}}, {"stop", "}"}}).param() == "stop");
    // A call cannot be required without tools to call.
    for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "f"}}}}}) {
        ApiError e = error_of([&] {
            ParsedRequest q = parse_chat_request(chat_body({{"tool_choice", choice}}), 1);
            apply_tool_format(q, vkllm::answer::tool_format(vkllm::answer::ToolFamily::Hermes), true);
        });
        CHECK(e.param() == "tool_choice");
    }
    CHECK(chat_error({{"tool_choice", "sometimes"}}).param() == "tool_choice");
    CHECK_NOTHROW(parse_chat_request(chat_body({{"tool_choice", "auto"}}), 1));
}

TEST_CASE("protocol: tools and tool_choice are checked, and forced calls get a prefix and a grammar") {
    using vkllm::answer::tool_format;
    using vkllm::answer::ToolFamily;
    CHECK(chat_error({{"tools", json::array({json{{"type", "function"}, {"function", {{"name", "a b"}}}}})}}).param() ==
          "tools[0].function.name");
    CHECK(chat_error({{"tools", weather_tools()}, {"tool_choice", {{"type", "function"}}}}).param() ==
          "tool_choice.function.name");

    // auto: replies are parsed, nothing is forced; a lazy grammar holds calls from their marker on.
    ParsedRequest r = parse_chat_request(chat_body({{"tools", weather_tools()}}), 1);
    apply_tool_format(r, tool_format(ToolFamily::Hermes), true);
    CHECK(r.tool_plan.parse_as == &tool_format(ToolFamily::Hermes));
    CHECK(r.tool_plan.reply_prefix.empty());
    CHECK_FALSE(r.tool_plan.forced);
    REQUIRE(r.engine.grammar);
    CHECK(r.engine.grammar == r.tool_plan.grammar);
    REQUIRE(r.engine.grammar_start.triggers.size() == 1);
    CHECK(r.engine.grammar_start.triggers[0].text == "<tool_call>");
    // ... also beside stop strings; a grammar the request brings holds the whole reply instead.
    r = parse_chat_request(chat_body({{"tools", weather_tools()}, {"stop", "x"}}), 1);
    apply_tool_format(r, tool_format(ToolFamily::Hermes), true);
    CHECK(r.engine.grammar_start.lazy());
    r = parse_chat_request(chat_body({{"tools", weather_tools()}, {"response_format", {{"type", "json_object"}}}}), 1);
    apply_tool_format(r, tool_format(ToolFamily::Hermes), true);
    REQUIRE(r.engine.grammar);
    CHECK(r.engine.grammar != r.tool_plan.grammar);
    CHECK_FALSE(r.engine.grammar_start.lazy());
    // Other families' triggers.
    struct Triggered {
        ToolFamily family;
        std::vector<vkllm::grammar::Trigger> triggers;
    };
    const Triggered others[] = {
        // A marker that is a control token triggers the grammar too (the request shows it).
        {ToolFamily::DeepSeekV31, {{"<｜tool▁calls▁begin｜>", false}}},
        // The heads that name a tool, at the start (the prompt ends with ">>>") or after text.
        {ToolFamily::FunctionaryV32, {{"get_weather\n", true}, {">>>get_weather\n", false}}},
        {ToolFamily::CommandRPlus, {{"Action:", false}}},
    };
    for (const Triggered& t : others) {
        CAPTURE(std::string(tool_format(t.family).name));
        r = parse_chat_request(chat_body({{"tools", weather_tools()}}), 1);
        apply_tool_format(r, tool_format(t.family), true);
        CHECK(r.tool_plan.parse_as != nullptr);
        REQUIRE(r.engine.grammar);
        REQUIRE(r.engine.grammar_start.triggers.size() == t.triggers.size());
        for (size_t i = 0; i < t.triggers.size(); ++i) {
            CHECK(r.engine.grammar_start.triggers[i].text == t.triggers[i].text);
            CHECK(r.engine.grammar_start.triggers[i].at_start == t.triggers[i].at_start);
        }
    }
    // none: not parsed at all.
    r = parse_chat_request(chat_body({{"tools", weather_tools()}, {"tool_choice", "none"}}), 1);
    apply_tool_format(r, tool_format(ToolFamily::Hermes), true);
    CHECK(r.tool_plan.parse_as == nullptr);

    // required: the call opens in the prompt, the grammar holds the rest.
    r = parse_chat_request(chat_body({{"tools", weather_tools()}, {"tool_choice", "required"}}), 1);
    apply_tool_format(r, tool_format(ToolFamily::Hermes), true);
    CHECK(r.tool_plan.reply_prefix == "<tool_call>\n");
    REQUIRE(r.engine.grammar);
    vkllm::grammar::Matcher m(*r.engine.grammar);
    REQUIRE(m.accept(R"({"name": "get_weather", "arguments": {"city": "Paris"}})"
                     "\n</tool_call>"));
    CHECK(m.can_end());

    auto tool_error = [](json extra, const vkllm::answer::ToolFormat& f) {
        return error_of([&] {
            ParsedRequest q = parse_chat_request(chat_body(extra), 1);
            apply_tool_format(q, f, true);
        });
    };
    const json named = {{"type", "function"}, {"function", {{"name", "nope"}}}};
    CHECK(tool_error({{"tools", weather_tools()}, {"tool_choice", named}}, tool_format(ToolFamily::Hermes)).param() ==
          "tool_choice");
    CHECK(tool_error({{"tools", weather_tools()}, {"tool_choice", "required"}, {"stop", "x"}},
                     tool_format(ToolFamily::Hermes))
              .param() == "stop");
    CHECK(tool_error(
              {{"tools", weather_tools()}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}},
              tool_format(ToolFamily::Hermes))
              .param() == "tool_choice");
    // Parameters outside the schema subset: the 400 names the tool.
    json bad = weather_tools();
    bad[0]["function"]["parameters"]["not"] = json::object();
    ApiError e = tool_error({{"tools", bad}, {"tool_choice", "required"}}, tool_format(ToolFamily::Hermes));
    CHECK(e.param() == "tools[0].function.parameters");
    CHECK(std::string(e.what()).find("'not'") != std::string::npos);

    // A template that cannot show tools: the Generic family describes them in the system message.
    r = parse_chat_request(chat_body({{"tools", weather_tools()}}), 1);
    apply_tool_format(r, tool_format(ToolFamily::Generic), false);
    REQUIRE(r.messages[0]["role"] == "system");
    CHECK(r.messages[0]["content"].get<std::string>().find("get_weather") != std::string::npos);
}

TEST_CASE("protocol: logit_bias is read, checked, and checked against the vocabulary") {
    ParsedRequest r = parse_chat_request(chat_body({{"logit_bias", {{"15", -100}, {"7", 2.5}}}}), 1);
    REQUIRE(r.engine.sampler.logit_bias.size() == 2);
    CHECK(r.engine.sampler.logit_bias[0] == std::pair<int32_t, float>{15, -100.0f});
    CHECK(r.engine.sampler.logit_bias[1] == std::pair<int32_t, float>{7, 2.5f});
    CHECK_NOTHROW(check_logit_bias(r, 16));
    CHECK(error_of([&] { check_logit_bias(r, 15); }).param() == "logit_bias");
    CHECK(chat_error({{"logit_bias", {{"x", 1}}}}).param() == "logit_bias");
    CHECK(chat_error({{"logit_bias", {{"-3", 1}}}}).param() == "logit_bias");
    CHECK(chat_error({{"logit_bias", {{"3", 101}}}}).param() == "logit_bias");
    CHECK(chat_error({{"logit_bias", {{"3", "a"}}}}).param() == "logit_bias");
    CHECK(chat_error({{"logit_bias", json::array()}}).param() == "logit_bias");
}

TEST_CASE("protocol: whatever the sampling fields accept, the engine's sampler accepts too") {
    // Three APIs read sampling fields (OpenAI's here, llama-server's and Ollama's in their files):
    // a value one of them lets through must not fail later in the engine with a 400 naming a CLI flag.
    for (const char* f : {"temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"})
        for (double v : {-1.0, 0.0, 0.5, 0.999, 1.0, 2.0, 100.0}) {
            CAPTURE(f);
            CAPTURE(v);
            try {
                ParsedRequest r = parse_chat_request(chat_body({{f, v}}), 1);
                CHECK_NOTHROW(r.engine.sampler.validate());
            } catch (const ApiError& e) {
                CHECK(e.param() == f);
            }
        }
}
