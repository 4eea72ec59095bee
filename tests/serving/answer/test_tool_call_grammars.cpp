// Tool calls: the grammars of forced calls (tool_choice required or named) and of lazy ones
// (tool_choice auto), which must accept the calls the parser reads and refuse the ones it must
// not; forcing refused where a format cannot do it; the checks on `tools`.
#include "support/tool_call_testing.h"

using namespace vkllm::tool_call_testing;

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
            vkllm::answer::ForcedCall fc;
            REQUIRE_NOTHROW(fc = vkllm::answer::forced_call(format, tools, "", parallel));
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
                const auto r = vkllm::answer::parse_reply(format, tools, fc.prompt_prefix + *text);
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
            vkllm::answer::ForcedCall named;
            REQUIRE_NOTHROW(named = vkllm::answer::forced_call(format, tools, "get_time", parallel));
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
    for (const ToolFormat& row : vkllm::answer::tool_formats()) {
        // tool_formats() holds copies of the rows: the family's own row is told by its name.
        if (row.force != ForceKind::NamedPrefix || std::string_view(tool_format(row.family).name) != row.name) continue;
        ++checked;
        const ToolFormat& format = tool_format(row.family);
        INFO("family: " << std::string(format.name));
        CHECK_THROWS_AS(vkllm::answer::forced_call(format, tools, "", false), ToolError);
        vkllm::answer::ForcedCall fc;
        REQUIRE_NOTHROW(fc = vkllm::answer::forced_call(format, tools, "get_current_weather", false));
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
    CHECK_THROWS_AS(vkllm::answer::forced_call(tool_format(ToolFamily::Hermes), tools, "no_such_tool", false), ToolError);
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
                vkllm::answer::forced_call(tool_format(family), t, "", false);
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
            vkllm::answer::forced_call(tool_format(family), t, "", false);
            FAIL_CHECK("minProperties was accepted");
        } catch (const ToolError& e) {
            CHECK(e.param() == "tools[0].function.parameters");
            CHECK(std::string(e.what()).find("minProperties") != std::string::npos);
        }
        // A non-string parameter is JSON, held by the schema compiler (its errors name the tool).
        t = both_tools();
        t[1]["function"]["parameters"]["properties"]["timezone"] = Json::parse(R"({"type": "integer", "not": {}})");
        try {
            vkllm::answer::forced_call(tool_format(family), t, "", false);
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
            vkllm::answer::forced_call(tool_format(family), odd, only, false);
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
            vkllm::answer::forced_call(tool_format(family), tools, "get_stock_price", false);
            FAIL_CHECK("an unknown tool was forced");
        } catch (const ToolError& e) {
            CHECK(e.param() == "tool_choice");
        }
    }
}

TEST_CASE("tool calls: check_tools refuses malformed tool lists, naming the field") {
    CHECK_NOTHROW(vkllm::answer::check_tools(both_tools()));
    // A function with no parameters is a valid tool.
    CHECK_NOTHROW(vkllm::answer::check_tools(Json::parse(R"([{"type": "function", "function": {"name": "ping"}}])")));

    auto param_of = [](const Json& tools) -> std::string {
        try {
            vkllm::answer::check_tools(tools);
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

TEST_CASE("tool calls: a forced call's errors name the tool, whatever the parameters' own $defs are called") {
    const Json tools = one_tool(Json{{"type", "object"},
                                     {"properties", {{"a", {{"$ref", "#/$defs/tool-x"}}}}},
                                     {"$defs", {{"tool-x", {{"not", Json::object()}}}}}});
    for (ToolFamily f : {ToolFamily::MistralV11, ToolFamily::Hermes}) {
        try {
            vkllm::answer::forced_call(tool_format(f), tools, "f", false);
            FAIL("expected a ToolError");
        } catch (const ToolError& e) {
            CHECK(e.param() == "tools[0].function.parameters");
            CHECK(std::string(e.what()).find("'not'") != std::string::npos);
        }
    }
}

TEST_CASE("tool calls: forced arguments are an object; a named choice needs a name") {
    // "parameters": {} allows any value in JSON Schema; a call's arguments are an object.
    const auto fc = vkllm::answer::forced_call(tool_format(ToolFamily::Hermes), one_tool(Json::object()), "", false);
    const Grammar g = Grammar::parse(fc.gbnf);  // the matchers point into it
    Matcher bad(g);
    CHECK_FALSE(bad.accept(R"({"name": "f", "arguments": 5})"));
    Matcher good(g);
    CHECK(good.accept(R"({"name": "f", "arguments": {"x": 1}})"));
    CHECK_THROWS_AS(vkllm::answer::forced_call(tool_format(ToolFamily::Hermes), one_tool(Json{{"type", "string"}}), "", false),
                    ToolError);
    std::string name;
    CHECK_THROWS_AS(vkllm::answer::parse_tool_choice("", name), ToolError);
    CHECK(vkllm::answer::parse_tool_choice("f", name) == vkllm::answer::ToolChoice::Named);
    CHECK(name == "f");
    CHECK_THROWS_AS(vkllm::answer::plan_tool_use(tool_format(ToolFamily::Hermes), true, one_tool(Json::object()),
                                               vkllm::answer::ToolChoice::Named, "", true),
                    ToolError);
}

TEST_CASE("tool calls: a forced prompt closes a reasoning block the template left open") {
    vkllm::answer::ToolPlan plan;
    plan.forced = true;
    plan.reply_prefix = "<tool_call>\n";
    CHECK(vkllm::answer::forced_prompt("assistant\n<think>\n", plan) == "assistant\n<think>\n\n</think>\n\n<tool_call>\n");
    CHECK(vkllm::answer::forced_prompt("user: what is <think>?\nassistant\n", plan) == "user: what is <think>?\nassistant\n<tool_call>\n");
    plan.reply_prefix.clear();  // Generic and Llama 3 force without a prefix: the block is still closed
    CHECK(vkllm::answer::forced_prompt("assistant\n<think>\n", plan) == "assistant\n<think>\n\n</think>\n\n");
    plan.forced = false;  // not forced: the prompt as rendered
    CHECK(vkllm::answer::forced_prompt("assistant\n<think>\n", plan) == "assistant\n<think>\n");
}

TEST_CASE("tool calls: with tool_choice auto, a call the model begins must follow its tool's parameters") {
    const Json tools = both_tools();
    auto follows = [](const vkllm::answer::LazyCall& lazy, const std::string& text) {
        const size_t at = vkllm::grammar::find_trigger(text, {lazy.triggers});
        if (at == std::string::npos) return false;
        const Grammar g = Grammar::parse(lazy.gbnf);
        Matcher m(g);
        return m.accept(std::string_view(text).substr(at)) && m.can_end();
    };
    const auto hermes = vkllm::answer::lazy_call(tool_format(ToolFamily::Hermes), tools, true);
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
    const auto one = vkllm::answer::lazy_call(tool_format(ToolFamily::Hermes), tools, false);
    CHECK(follows(one, "<tool_call>\n" + weather + "\n</tool_call>"));
    CHECK_FALSE(follows(one, "<tool_call>\n" + weather + "\n</tool_call>\n<tool_call>\n" + time + "\n</tool_call>"));

    // The call is the whole reply: it starts at a leading '{' (or Llama 3's <|python_tag|>).
    const auto generic = vkllm::answer::lazy_call(tool_format(ToolFamily::Generic), tools, true);
    CHECK(follows(generic, " {\"tool_calls\": [" + weather + ", " + time + "]}"));
    CHECK_FALSE(follows(generic, "{\"answer\": 42}"));
    CHECK_FALSE(follows(generic, "Here: {\"tool_calls\": [" + weather + "]}"));  // not at the start: free text
    const auto llama = vkllm::answer::lazy_call(tool_format(ToolFamily::Llama3), tools, true);
    CHECK(follows(llama, R"({"name": "get_time", "parameters": {"timezone": "UTC"}})"));
    CHECK(follows(llama, R"(Sure.<|python_tag|>{"name": "get_time", "parameters": {"timezone": "UTC"}})"));
    const auto nemo = vkllm::answer::lazy_call(tool_format(ToolFamily::MistralNemo), tools, true);
    CHECK(follows(nemo, "[TOOL_CALLS][" + time + "]"));
    CHECK(follows(nemo, R"([TOOL_CALLS][{"name": "get_time", "arguments": {"timezone": "UTC"}, "id": "abc123XYZ"}])"));
    CHECK_FALSE(follows(nemo, R"([TOOL_CALLS][{"name": "get_time", "arguments": {"timezone": "UTC"}, "id": "short"}])"));
    const auto granite = vkllm::answer::lazy_call(tool_format(ToolFamily::Granite), tools, true);
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
    const auto coder = vkllm::answer::lazy_call(tool_format(ToolFamily::QwenCoder), tools, true);
    const std::string coder_time = "<tool_call>\n<function=get_time>\n<parameter=timezone>\nUTC\n</parameter>\n</function>\n</tool_call>";
    CHECK(follows(coder, "I will check.\n" + coder_time));
    CHECK(follows(coder, coder_time + "\n" + coder_time));
    CHECK_FALSE(follows(coder, "<tool_call>\n<function=get_news>\n</function>\n</tool_call>"));
    CHECK_FALSE(follows(coder, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>"));  // timezone is required
    CHECK_FALSE(follows(coder, coder_time + " and prose"));
    const auto glm = vkllm::answer::lazy_call(tool_format(ToolFamily::Glm45), tools, true);
    CHECK(follows(glm, "<tool_call>get_time\n<arg_key>timezone</arg_key>\n<arg_value>UTC</arg_value>\n</tool_call>"));
    CHECK_FALSE(follows(glm, "<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>UTC</arg_value>\n</tool_call>"));
    const auto fn31 = vkllm::answer::lazy_call(tool_format(ToolFamily::FunctionaryV31), tools, true);
    CHECK(follows(fn31, "Checking. <function=get_time>" + std::string(R"({"timezone": "UTC"})") + "</function>"));
    CHECK_FALSE(follows(fn31, "<function=get_time>" + std::string(R"({"timezone": 1})") + "</function>"));
    // Markers that are control tokens (which a request with tools speaks) hold like text.
    const auto kimi = vkllm::answer::lazy_call(tool_format(ToolFamily::KimiK2), tools, true);
    const std::string kimi_time = "<|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{\"timezone\": \"UTC\"}<|tool_call_end|>";
    CHECK(follows(kimi, "Sure. <|tool_calls_section_begin|>" + kimi_time + "<|tool_calls_section_end|>"));
    CHECK(follows(kimi, "<|tool_calls_section_begin|>" + kimi_time + kimi_time));
    CHECK_FALSE(follows(kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_news:0<|tool_call_argument_begin|>{}"
                              "<|tool_call_end|>"));
    const auto v11 = vkllm::answer::lazy_call(tool_format(ToolFamily::MistralV11), tools, true);
    CHECK(follows(v11, R"([TOOL_CALLS]get_time[ARGS]{"timezone": "UTC"}[TOOL_CALLS]get_time[CALL_ID]abc123XYZ[ARGS]{"timezone": "CET"})"));
    CHECK_FALSE(follows(v11, R"([TOOL_CALLS]get_time[ARGS]{"timezone": 3})"));
    const auto v31 = vkllm::answer::lazy_call(tool_format(ToolFamily::DeepSeekV31), tools, true);
    CHECK(follows(v31, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"timezone\": \"UTC\"}<｜tool▁call▁end｜>"
                       "<｜tool▁calls▁end｜>"));
    CHECK_FALSE(follows(v31, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜>"));
    // Functionary v3.2: every part opens with a head; those naming a tool start the grammar, at the
    // reply's start (the prompt ends with ">>>") or after text for the user.
    const auto fn32 = vkllm::answer::lazy_call(tool_format(ToolFamily::FunctionaryV32), tools, true);
    CHECK(follows(fn32, "get_time\n{\"timezone\": \"UTC\"}"));
    CHECK(follows(fn32, "all\nLet me look.>>>get_time\n{\"timezone\": \"UTC\"}>>>get_time\n{\"timezone\": \"CET\"}"));
    CHECK_FALSE(follows(fn32, "get_time\n{\"timezone\": 3}"));
    CHECK_FALSE(follows(fn32, "get_time\n{\"timezone\": \"UTC\"}>>>all\nDone."));  // the calls end the reply
    CHECK_FALSE(follows(fn32, "all\nThe time is get_time\n"));                       // not a head
    CHECK(vkllm::grammar::find_trigger("all\nHello", {fn32.triggers}) == std::string::npos);
    const auto fn32_one = vkllm::answer::lazy_call(tool_format(ToolFamily::FunctionaryV32), tools, false);
    CHECK_FALSE(follows(fn32_one, "get_time\n{\"timezone\": \"UTC\"}>>>get_time\n{\"timezone\": \"CET\"}"));
    // gpt-oss: a message to functions.NAME, its recipient before or after the channel.
    const auto harmony = vkllm::answer::lazy_call(tool_format(ToolFamily::Harmony), tools, true);
    CHECK(follows(harmony, "<|channel|>analysis<|message|>Need the time.<|end|><|start|>assistant<|channel|>commentary "
                           "to=functions.get_time <|constrain|>json<|message|>{\"timezone\": \"UTC\"}"));
    CHECK(follows(harmony, " to=functions.get_time<|channel|>commentary json<|message|>{\"timezone\": \"UTC\"}"));
    CHECK_FALSE(follows(harmony, "<|channel|>commentary to=functions.get_news <|constrain|>json<|message|>{}"));
    CHECK_FALSE(follows(harmony, "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{\"timezone\": 1}"));
    CHECK_FALSE(follows(harmony, "<|channel|>final<|message|>The time."));  // no call: free
    // Command R+: from "Action:" on, fenced or not; the template's own "directly-answer" action is
    // let through (the model says no tool is needed), and is no call.
    const ToolFormat& command_r = tool_format(ToolFamily::CommandRPlus);
    const auto cr = vkllm::answer::lazy_call(command_r, tools, true);
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
    CHECK(vkllm::answer::lazy_call(tool_format(ToolFamily::Hermes), odd, true).gbnf.empty());
    const auto plan = vkllm::answer::plan_tool_use(tool_format(ToolFamily::Hermes), true, odd, vkllm::answer::ToolChoice::Auto, "", true);
    CHECK(plan.grammar == nullptr);
    CHECK(plan.parse_as != nullptr);
    const auto auto_plan =
        vkllm::answer::plan_tool_use(tool_format(ToolFamily::Hermes), true, tools, vkllm::answer::ToolChoice::Auto, "", true);
    CHECK(auto_plan.grammar != nullptr);
    CHECK(!auto_plan.forced);
    CHECK(auto_plan.triggers.size() == 1);
    const auto none_plan =
        vkllm::answer::plan_tool_use(tool_format(ToolFamily::Hermes), true, tools, vkllm::answer::ToolChoice::None, "", true);
    CHECK(none_plan.grammar == nullptr);
}
