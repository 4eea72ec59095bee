// Tool calls: how each family's replies are parsed into content and calls, whole and streamed:
// text around calls, malformed calls coming back as content, the details of each format, the
// values of parameters listed in markup, and hostile inputs.
#include "support/tool_call_testing.h"

using namespace vkllm::tool_call_testing;

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
    for (const ToolFormat& f : vkllm::answer::tool_formats()) check_reply(f, tools, "", "", {});
}

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
    const auto kimi = vkllm::answer::parse_reply(tool_format(ToolFamily::KimiK2), tools,
                                               shaped_reply(ToolFamily::KimiK2, {weather_call(), time_call()}));
    const Json out = vkllm::answer::tool_calls_json(kimi.calls, ToolFamily::KimiK2, false);
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

// --- hostile and edge inputs (from review) ------------------------------------------------------

TEST_CASE("tool calls: JSON nested past 64 levels is refused, never built") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    CHECK(vkllm::answer::parse_json_bounded(deep).is_discarded());
    CHECK(vkllm::answer::parse_json_bounded(std::string(64, '[') + std::string(64, ']')).is_array());
    // Follow-up arguments that deep stay the client's text.
    Json msg = {{"role", "assistant"}, {"tool_calls", Json::array({Json{{"function", {{"name", "f"}, {"arguments", deep}}}}})}};
    vkllm::answer::arguments_as_objects(msg);
    CHECK(msg["tool_calls"][0]["function"]["arguments"].is_string());
    // A model that writes them: content, not a call.
    const std::string reply = "<tool_call>{\"name\": \"f\", \"arguments\": " + std::string(200, '[') + std::string(200, ']') + "}</tool_call>";
    const ReplyStream::Rest r = vkllm::answer::parse_reply(tool_format(ToolFamily::Hermes), one_tool(Json::object()), reply);
    CHECK(r.calls.empty());
    CHECK(r.content == reply);
}

TEST_CASE("tool calls: Qwen3-Coder values with property schemas that are not objects") {
    const Json tools = one_tool(Json{{"type", "object"}, {"properties", {{"q", true}, {"r", "string"}}}});
    const ReplyStream::Rest r = vkllm::answer::parse_reply(
        tool_format(ToolFamily::QwenCoder), tools,
        "<tool_call>\n<function=f>\n<parameter=q>\n5\n</parameter>\n<parameter=r>\nx\n</parameter>\n</function>\n</tool_call>");
    REQUIRE(r.calls.size() == 1);
    CHECK(Json::parse(r.calls[0].arguments) == Json{{"q", 5}, {"r", "x"}});
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

TEST_CASE("tool calls: a bare Qwen3-Coder value that is not UTF-8 (fuzz_grammar finding)") {
    const std::string reply = "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar\xbe\x10is\n</parameter>\n</function>\n</tool_call>";
    const Json tools = Json::array({Json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}});
    const ReplyStream::Rest r = vkllm::answer::parse_reply(tool_format(ToolFamily::QwenCoder), tools, reply);
    REQUIRE(r.calls.size() == 1);
    CHECK(Json::parse(r.calls[0].arguments)["city"] == "Par\xef\xbf\xbd\x10is");  // U+FFFD for the stray byte
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
        const auto r = vkllm::answer::parse_reply(tool_format(family), tools, reply);
        REQUIRE(r.calls.size() == 1);
        CHECK(r.content == "");
        const Json want = {{"html", "<b>x</b>" + other_tag}, {"k", Json::array({"a" + own_tag + "b"})}, {"s", "123"}, {"n", 7}, {"b", true}};
        CHECK(nlohmann::json::parse(r.calls[0].arguments) == nlohmann::json::parse(want.dump()));
        // The forced and lazy grammars take the same reply, and no bare value holding the tag.
        const auto fc = vkllm::answer::forced_call(tool_format(family), tools, "", false);
        const auto rest = after_prefix(reply, fc.prompt_prefix);
        REQUIRE(rest.has_value());
        const Grammar fg = Grammar::parse(fc.gbnf);
        CHECK(fit(fg, *rest).has_value());
        const auto lazy = vkllm::answer::lazy_call(tool_format(family), tools, false);
        const Grammar lg = Grammar::parse(lazy.gbnf);
        Matcher lm(lg);
        CHECK(lm.accept(reply));
        CHECK(lm.can_end());
        const std::string tagged = call(arg("html", "a" + own_tag + "b"));
        REQUIRE(starts_with(tagged, fc.prompt_prefix));
        CHECK_FALSE(Matcher(fg).accept(tagged.substr(fc.prompt_prefix.size())));
        CHECK(Matcher(fg).accept(reply.substr(fc.prompt_prefix.size())));
        // A value the schema types that is not JSON (or nests past what the parser reads): no call.
        CHECK(vkllm::answer::parse_reply(tool_format(family), tools, call(arg("n", "seven"))).calls.empty());
        CHECK(vkllm::answer::parse_reply(tool_format(family), tools, call(arg("k", std::string(70, '[') + std::string(70, ']'))))
                  .calls.empty());
        // Names the markup cannot hold as they are: refused when forcing.
        Json spaced_name = tools;
        spaced_name[0]["function"]["parameters"]["properties"][" html"] = Json{{"type", "string"}};
        CHECK_THROWS_AS(vkllm::answer::forced_call(tool_format(family), spaced_name, "", false), ToolError);
        Json tagged_enum = tools;
        tagged_enum[0]["function"]["parameters"]["properties"]["e"] = Json{{"enum", Json::array({"x" + own_tag})}};
        CHECK_THROWS_AS(vkllm::answer::forced_call(tool_format(family), tagged_enum, "", false), ToolError);
    }
    // A property named "$id" is a subschema the compiler refuses: the error names the tool.
    Json id_prop = tools;
    id_prop[0]["function"]["parameters"]["properties"]["$id"] = Json{{"type", "integer"}};
    try {
        vkllm::answer::forced_call(tool_format(ToolFamily::QwenCoder), id_prop, "", false);
        FAIL_CHECK("a property named $id was accepted");
    } catch (const ToolError& e) {
        CHECK(starts_with(e.param(), "tools[0]"));
    }
    // Functionary v3.2 keeps "all" for its answers to the user: no tool of that name can be forced.
    const Json all = Json::parse(R"([{"type": "function", "function": {"name": "all"}}])");
    CHECK_THROWS_AS(vkllm::answer::forced_call(tool_format(ToolFamily::FunctionaryV32), all, "", false), ToolError);
}
