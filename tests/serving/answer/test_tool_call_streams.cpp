// Tool calls streamed: text released as it comes, a stream moved mid-reply, argument fragments
// that add up to the whole reply's arguments, and the answer stream every front end reads.
#include "support/tool_call_testing.h"

using namespace vkllm::tool_call_testing;

TEST_CASE("tool calls: a stream moved mid-reply goes on where it was") {
    const Json tools = both_tools();
    const std::string text =
        "Checking.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"timezone\": "
        "\"Europe/Paris\"}}\n</tool_call>";
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
    for (const ToolFormat& f : vkllm::answer::tool_formats()) {
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

TEST_CASE("tool calls: streamed argument fragments add up to the whole reply's arguments, in any split") {
    const Json tools = both_tools();
    struct Case {
        ToolFamily family;
        std::string prefix, text;
        size_t calls;
    };
    const std::vector<Case> cases = {
        {ToolFamily::Hermes, "",
         "Let me look.\n<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, "
         "\\\"FR\\\"\", \"unit\": "
         "\"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"timezone\":\"Europe/Paris "
         "☀\"}}\n</tool_call>",
         2},
        {ToolFamily::Hermes, "<tool_call>\n",
         "{\"name\": \"get_time\", \"arguments\": {\n  \"timezone\": \"UTC\"\n}}\n</tool_call>", 1},
        {ToolFamily::Generic, "",
         "{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"UTC\"}}, {\"name\": "
         "\"get_current_weather\", \"arguments\": {\"location\": \"Oslo {x}\"}}]}",
         2},
        {ToolFamily::Llama3, "", "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"timezone\": \"UTC\"}}", 1},
        {ToolFamily::MistralNemo, "",
         "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"UTC\"}, \"id\": \"abc123XYZ\"}]", 1},
        {ToolFamily::Granite, "<|tool_call|>",
         "[{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"UTC\"}}, {\"name\": \"get_time\", \"arguments\": "
         "{}}]",
         2},
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
            auto take = [&](const std::vector<vkllm::answer::CallDelta>& ds) {
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
    const auto r = vkllm::answer::parse_reply(
        tool_format(ToolFamily::Hermes), tools,
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
             {ToolFamily::Granite,
              "<|tool_call|>[{\"name\": \"get_time\", \"arguments\": {}}] Sure. {\"name\": \"get_time\", "
              "\"arguments\": {\"a\": 1}}"},
             {ToolFamily::Hermes,
              "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call> then {\"name\": \"get_time\", "
              "\"arguments\": {}}"},
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
        const auto whole = vkllm::answer::parse_reply(tool_format(family), tools, text);
        CHECK(begun == whole.calls.size());
        CHECK(content + rest.content == whole.content);
    }

    // A call written whole that the parser still refuses (nested deeper than it takes) is content,
    // as in a whole reply; only a call cut short is not.
    {
        const Json any =
            Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
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

TEST_CASE("tool calls: a reply cut inside a call (max_tokens) keeps the calls written whole, whole and streamed") {
    const Json tools = both_tools();
    const std::string time_args = R"({"timezone": "Europe/Paris"})";
    const std::string hermes_call =
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": " + time_args + "}\n</tool_call>\n";
    const std::string coder_call =
        "<tool_call>\n<function=get_time>\n<parameter=timezone>\nEurope/Paris\n</parameter>\n"
        "</function>\n</tool_call>\n";
    const std::string json_call = "{\"name\": \"get_time\", \"arguments\": " + time_args + "}";
    struct Case {
        ToolFamily family;
        std::string text;  // two calls written whole, then a third cut short
        bool malformed = true;  // read as malformed markup when the model itself ended there
    };
    const std::vector<Case> cases = {
        {ToolFamily::Hermes, hermes_call + hermes_call + "<tool_call>\n{\"name\": \"get_time\", \"argum"},
        {ToolFamily::Hermes, hermes_call + hermes_call + "<tool_", false},  // a marker's start: text after the calls
        {ToolFamily::QwenCoder, coder_call + coder_call + "<tool_call>\n<function=get_time>\n<parameter=time"},
        {ToolFamily::MistralNemo, "[TOOL_CALLS][" + json_call + ", " + json_call + ", {\"name\": \"get_ti"},
        {ToolFamily::Generic,
         "{\"tool_calls\": [" + json_call + ", " + json_call + ", {\"name\": \"get_time\", \"arguments\": {\"time"},
    };
    for (const Case& c : cases) {
        const ToolFormat& format = tool_format(c.family);
        CAPTURE(std::string(format.name));
        CAPTURE(c.text);
        // Not cut (the model stopped there): malformed markup is content, as before.
        ReplyStream ended(format, tools);
        std::string content = ended.push(c.text);
        auto rest = ended.finish(false);
        if (c.malformed) {
            CHECK(rest.calls.empty());
            CHECK(content + rest.content == c.text);
        }
        // Cut: the two whole calls, no markup in the content.
        ReplyStream cut(format, tools);
        content = cut.push(c.text);
        rest = cut.finish(true);
        CHECK(content + rest.content == "");
        check_calls(rest.calls, {time_call(), time_call()});
        // Streamed with argument fragments: the same calls, whatever went out before the cut.
        ReplyStream streamed(format, tools);
        streamed.stream_arguments();
        content.clear();
        for (char ch : c.text) {
            content += streamed.push(std::string(1, ch));
            streamed.take_deltas();
        }
        rest = streamed.finish(true);
        CHECK(content + rest.content == "");
        check_calls(rest.calls, {time_call(), time_call()});
    }
    // parallel_tool_calls false: the first.
    ReplyStream one(tool_format(ToolFamily::Hermes), tools, "", false);
    one.push(cases[0].text);
    CHECK(one.finish(true).calls.size() == 1);
    // Cut inside the first call: nothing to keep, the markup stays out of the content only where it streamed.
    ReplyStream first(tool_format(ToolFamily::Hermes), tools);
    const std::string early = "<tool_call>\n{\"name\": \"get_ti";
    const std::string c0 = first.push(early);
    const auto r0 = first.finish(true);
    CHECK(r0.calls.empty());
    CHECK(c0 + r0.content == early);
}

TEST_CASE("answer stream: reasoning, content and calls, the same whole and in pieces, for every front end") {
    const Json tools = both_tools();
    vkllm::answer::ToolPlan plan;
    plan.parse_as = &tool_format(ToolFamily::Hermes);
    vkllm::answer::AnswerFormat f;
    f.split_reasoning = &vkllm::answer::think_tags();
    f.plan = &plan;
    f.tools = tools;
    const std::string answer = "<think>Weather needs a tool.</think>\nLet me look.\n<tool_call>\n" +
                               std::string(R"({"name": "get_time", "arguments": {"timezone": "Europe/Paris"}})") +
                               "\n</tool_call>";
    for (size_t piece : {answer.size(), size_t(1), size_t(5)}) {
        CAPTURE(piece);
        const auto rest = read_answer(f, answer, piece);
        CHECK(rest.reasoning == "Weather needs a tool.");
        CHECK(rest.content == "Let me look.");
        check_calls(rest.calls, {time_call()});
    }
    CHECK(vkllm::answer::AnswerStream(f).family() == ToolFamily::Hermes);
    // Without a plan that reads calls, and without splitting, the text passes through.
    vkllm::answer::AnswerStream plain(vkllm::answer::AnswerFormat{});
    CHECK(plain.push(answer).content == answer);
    CHECK(plain.finish().calls.empty());
    CHECK(plain.family() == ToolFamily::Generic);
    // Harmony: analysis is reasoning, or stays in the content when asked (reasoning_format "none").
    vkllm::answer::AnswerFormat h;
    h.harmony = true;
    const std::string harmony =
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi.";
    vkllm::answer::AnswerStream split(h);
    auto p = split.push(harmony);
    auto r = split.finish();
    CHECK(p.reasoning + r.reasoning == "Think.");
    CHECK(p.content + r.content == "Hi.");
    h.inline_reasoning = true;
    vkllm::answer::AnswerStream inline_stream(h);
    p = inline_stream.push(harmony);
    r = inline_stream.finish();
    CHECK(p.reasoning + r.reasoning == "");
    CHECK(p.content + r.content == "Think.Hi.");
}
