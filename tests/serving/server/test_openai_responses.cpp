// OpenAI's response shapes on plain JSON: whole responses, stream chunks and errors in OpenAI's
// exact shapes, with logprobs, tool calls, reasoning and n choices.
#include "serving/server/openai_responses.h"

#include "support/openai_testing.h"

#include <doctest/doctest.h>

#include <map>

using namespace vkllm;
using namespace vkllm::server;
using namespace vkllm::server::openai_testing;

TEST_CASE("protocol: errors in OpenAI's shape") {
    json e = error_json(ApiError(400, "bad", "invalid_request_error", "temperature"));
    CHECK(e.dump() ==
          R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":null}})");
    ApiError ctx = context_length_error(Endpoint::Chat, 600, 512);
    CHECK(ctx.status() == 400);
    CHECK(ctx.code() == "context_length_exceeded");
    CHECK(ctx.param() == "messages");
    CHECK(std::string(ctx.what()).find("maximum context length is 512 tokens") != std::string::npos);
    CHECK(std::string(ctx.what()).find("600") != std::string::npos);
    CHECK(context_length_error(Endpoint::Completion, 600, 512).param() == "prompt");
    CHECK(ResponseBuilder::stream_error(ApiError(500, "boom", "server_error")) ==
          "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n");
}

TEST_CASE("protocol: a whole chat.completion") {
    ParsedRequest req = parse_chat_request(chat_body(), 1);
    ResponseBuilder rb(req, "chatcmpl-abc", "m", 1700000000);
    rb.add(text_event("Hello"));
    rb.add(text_event(", world"));
    json r = rb.response(done_event(engine::FinishReason::Length, 12, 3, 4));
    CHECK(
        r.dump() ==
        R"({"id":"chatcmpl-abc","object":"chat.completion","created":1700000000,"model":"m","system_fingerprint":"vkllm",)"
        R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hello, world","refusal":null},"logprobs":null,)"
        R"("finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,)"
        R"("prompt_tokens_details":{"cached_tokens":4}}})");
    CHECK(std::string(openai_finish_reason(engine::FinishReason::Stop)) == "stop");
    CHECK(std::string(openai_finish_reason(engine::FinishReason::Timeout)) == "length");
}

TEST_CASE("protocol: a chat stream: role chunk, content chunks, finish chunk, usage chunk, [DONE]") {
    ParsedRequest req =
        parse_chat_request(chat_body({{"stream", true}, {"stream_options", {{"include_usage", true}}}}), 1);
    ResponseBuilder rb(req, "chatcmpl-x", "m", 5);
    std::string s = rb.stream_start() + rb.stream_text(text_event("Hi")) + rb.stream_text(text_event("")) +
                    rb.stream_text(text_event(" there")) + rb.stream_done(done_event(engine::FinishReason::Stop, 7, 2));
    bool done = false;
    std::vector<json> ev = sse_objects(s, &done);
    CHECK(done);
    REQUIRE(ev.size() == 5);  // the empty text event sends nothing
    for (const json& e : ev) {
        CHECK(e["id"] == "chatcmpl-x");
        CHECK(e["object"] == "chat.completion.chunk");
        CHECK(e["created"] == 5);
        CHECK(e["model"] == "m");
        CHECK(e.contains("usage"));
    }
    CHECK(ev[0]["choices"][0]["delta"] == json{{"role", "assistant"}, {"content", ""}});
    CHECK(ev[0]["choices"][0]["finish_reason"].is_null());
    CHECK(ev[0]["usage"].is_null());
    CHECK(ev[1]["choices"][0]["delta"] == json{{"content", "Hi"}});
    CHECK(ev[2]["choices"][0]["delta"] == json{{"content", " there"}});
    CHECK(ev[3]["choices"][0]["delta"] == json::object());
    CHECK(ev[3]["choices"][0]["finish_reason"] == "stop");
    CHECK(ev[4]["choices"] == json::array());
    CHECK(ev[4]["usage"] == json{{"prompt_tokens", 7},
                                 {"completion_tokens", 2},
                                 {"total_tokens", 9},
                                 {"prompt_tokens_details", {{"cached_tokens", 0}}}});

    // Without include_usage: no usage key at all, no usage chunk.
    ParsedRequest plain = parse_chat_request(chat_body({{"stream", true}}), 1);
    ResponseBuilder rb2(plain, "chatcmpl-y", "m", 5);
    ev = sse_objects(rb2.stream_start() + rb2.stream_done(done_event(engine::FinishReason::Length, 1, 0)), &done);
    CHECK(done);
    REQUIRE(ev.size() == 2);
    CHECK_FALSE(ev[0].contains("usage"));
    CHECK(ev[1]["choices"][0]["finish_reason"] == "length");
}

TEST_CASE("protocol: text_completion, whole and streamed") {
    ParsedRequest req = parse_completion_request(json{{"prompt", "x"}}, 1);
    ResponseBuilder rb(req, "cmpl-1", "m", 9);
    rb.add(text_event(" a"));
    rb.add(text_event(" b"));
    json r = rb.response(done_event(engine::FinishReason::Stop, 2, 2));
    CHECK(
        r.dump() ==
        R"({"id":"cmpl-1","object":"text_completion","created":9,"model":"m","system_fingerprint":"vkllm",)"
        R"("choices":[{"index":0,"text":" a b","logprobs":null,"finish_reason":"stop"}],)"
        R"("usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":0}}})");

    ParsedRequest sreq = parse_completion_request(json{{"prompt", "x"}, {"stream", true}}, 1);
    ResponseBuilder srb(sreq, "cmpl-2", "m", 9);
    CHECK(srb.stream_start().empty());
    bool done = false;
    std::vector<json> ev = sse_objects(
        srb.stream_text(text_event(" a")) + srb.stream_done(done_event(engine::FinishReason::Length, 2, 1)), &done);
    CHECK(done);
    REQUIRE(ev.size() == 2);
    CHECK(ev[0]["object"] == "text_completion");
    CHECK(ev[0]["choices"][0] == json{{"index", 0}, {"text", " a"}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
    CHECK(ev[1]["choices"][0] == json{{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", "length"}});
}

TEST_CASE("protocol: logprobs in chat and completions shapes, and token bytes that are not UTF-8") {
    engine::TokenLogprob a{5, "Hi", -0.5f, {{"Hi", -0.5f}, {"Ho", -1.5f}}};
    engine::TokenLogprob b{6, "\xE2\x82", -0.25f, {}};  // the first two bytes of a 3-byte character
    ParsedRequest req = parse_chat_request(chat_body({{"logprobs", true}, {"top_logprobs", 2}}), 1);
    ResponseBuilder rb(req, "chatcmpl-l", "m", 1);
    rb.add(text_event("Hi", {a}));
    rb.add(text_event("", {b}));
    json r = json::parse(dump_json(rb.response(done_event(engine::FinishReason::Stop, 1, 2))));
    json content = r["choices"][0]["logprobs"]["content"];
    REQUIRE(content.size() == 2);
    CHECK(content[0] ==
          json{{"token", "Hi"},
               {"logprob", -0.5},
               {"bytes", {72, 105}},
               {"top_logprobs", json::array({json{{"token", "Hi"}, {"logprob", -0.5}, {"bytes", {72, 105}}},
                                             json{{"token", "Ho"}, {"logprob", -1.5}, {"bytes", {72, 111}}}})}});
    CHECK(content[1]["bytes"] == json{0xE2, 0x82});
    CHECK(content[1]["token"] == "\xEF\xBF\xBD");  // replaced: the JSON stays valid; bytes tell the truth
    CHECK(r["choices"][0]["logprobs"]["refusal"].is_null());

    // A stream chunk carries the logprobs of the tokens its event completes.
    ParsedRequest sreq = parse_chat_request(chat_body({{"logprobs", true}, {"stream", true}}), 1);
    ResponseBuilder srb(sreq, "chatcmpl-s", "m", 1);
    std::vector<json> ev = sse_objects(srb.stream_text(text_event("", {b})));
    REQUIRE(ev.size() == 1);
    CHECK(ev[0]["choices"][0]["delta"]["content"] == "");
    CHECK(ev[0]["choices"][0]["logprobs"]["content"].size() == 1);

    ParsedRequest creq = parse_completion_request(json{{"prompt", "x"}, {"logprobs", 2}}, 1);
    ResponseBuilder crb(creq, "cmpl-l", "m", 1);
    crb.add(text_event("Hi", {a}));
    crb.add(text_event(" you", {engine::TokenLogprob{7, " you", -2.0f, {{" you", -2.0f}}}}));
    json lp = crb.response(done_event(engine::FinishReason::Stop, 1, 2))["choices"][0]["logprobs"];
    CHECK(lp["tokens"] == json{"Hi", " you"});
    CHECK(lp["token_logprobs"] == json{-0.5, -2.0});
    CHECK(lp["top_logprobs"][0] == json{{"Hi", -0.5}, {"Ho", -1.5}});
    CHECK(lp["text_offset"] == json{0, 2});
}

TEST_CASE("protocol: response ids") {
    std::string a = new_response_id(Endpoint::Chat), b = new_response_id(Endpoint::Chat);
    CHECK(a.rfind("chatcmpl-", 0) == 0);
    CHECK(a.size() == 9 + 24);
    CHECK(a != b);
    CHECK(new_response_id(Endpoint::Completion).rfind("cmpl-", 0) == 0);
}

TEST_CASE("protocol: tool calls in whole and streamed chat responses") {
    using vkllm::answer::tool_format;
    using vkllm::answer::ToolFamily;
    const std::string reply =
        "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    ParsedRequest r = parse_chat_request(chat_body({{"tools", weather_tools()}}), 1);
    apply_tool_format(r, tool_format(ToolFamily::Hermes), true);

    ResponseBuilder whole(r, "chatcmpl-t", "m", 1);
    for (char c : reply) whole.add(text_event(std::string(1, c)));
    json w = whole.response(done_event(engine::FinishReason::Stop, 3, 20));
    const json& msg = w["choices"][0]["message"];
    CHECK(msg["content"] == "Checking.");
    REQUIRE(msg["tool_calls"].size() == 1);
    CHECK(msg["tool_calls"][0]["type"] == "function");
    CHECK(msg["tool_calls"][0]["id"].get<std::string>().starts_with("call_"));
    CHECK(msg["tool_calls"][0]["function"]["name"] == "get_weather");
    CHECK(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()) == json{{"city", "Paris"}});
    CHECK_FALSE(msg["tool_calls"][0].contains("index"));
    CHECK(w["choices"][0]["finish_reason"] == "tool_calls");

    // Streamed: OpenAI's deltas. Where the grammar holds the calls (here the lazy one of 'auto'),
    // the first delta of a call has its id and name, later ones add argument fragments as they come;
    // without a grammar holding them (a DeepSeek template), each call is sent whole once complete.
    struct Streamed {
        std::string content, finish;
        json calls = json::array();  // per index: the deltas added up
        size_t deltas = 0;
    };
    auto stream = [&](ParsedRequest q, const std::string& text, engine::FinishReason why) {
        q.stream = true;
        ResponseBuilder rb(q, "chatcmpl-t", "m", 1);
        std::string sse = rb.stream_start();
        for (char c : text) sse += rb.stream_text(text_event(std::string(1, c)));
        sse += rb.stream_done(done_event(why, 3, 20));
        Streamed out;
        for (const json& ev : sse_objects(sse)) {
            const json& ch = ev["choices"][0];
            if (ch["delta"].contains("content")) out.content += ch["delta"]["content"].get<std::string>();
            if (ch["delta"].contains("tool_calls"))
                for (const json& c : ch["delta"]["tool_calls"]) {
                    ++out.deltas;
                    const size_t i = c["index"].get<size_t>();
                    if (i == out.calls.size()) {
                        // A call's first delta: id, type and name.
                        CHECK(c["id"].get<std::string>().starts_with("call_"));
                        CHECK(c["type"] == "function");
                        out.calls.push_back({{"name", c["function"]["name"]}, {"arguments", ""}});
                    } else {
                        REQUIRE(i < out.calls.size());
                        CHECK_FALSE(c.contains("id"));
                        CHECK_FALSE(c["function"].contains("name"));
                    }
                    out.calls[i]["arguments"] =
                        out.calls[i]["arguments"].get<std::string>() + c["function"]["arguments"].get<std::string>();
                }
            if (!ch["finish_reason"].is_null()) out.finish = ch["finish_reason"].get<std::string>();
        }
        return out;
    };
    Streamed st = stream(r, reply, engine::FinishReason::Stop);
    CHECK(st.content == "Checking.");  // no markup, not even its first '<'
    REQUIRE(st.calls.size() == 1);
    CHECK(st.calls[0]["name"] == "get_weather");
    CHECK(st.calls[0]["arguments"] == msg["tool_calls"][0]["function"]["arguments"]);  // fragments add up to the whole
    CHECK(st.calls[0]["arguments"] == R"({"city":"Paris"})");
    CHECK(st.deltas > 5);  // fed byte by byte, the arguments went out in pieces
    CHECK(st.finish == "tool_calls");

    // Two calls, each with its index.
    const std::string two =
        reply + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
    st = stream(r, two, engine::FinishReason::Stop);
    REQUIRE(st.calls.size() == 2);
    CHECK(st.calls[1]["arguments"] == R"({"city":"Oslo"})");

    // Cut inside a call (max_tokens): what was sent stays sent, the finish reason says why.
    st = stream(r, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
                engine::FinishReason::Length);
    CHECK(st.content.empty());
    REQUIRE(st.calls.size() == 1);
    CHECK(st.calls[0]["arguments"] == R"({"city":"Par)");
    CHECK(st.finish == "length");

    // Parallel calls cut by max_tokens inside the third: whole, the two complete calls and no markup;
    // streamed, the same two (the third's beginning went out as it was written); "length" both ways.
    const std::string cut3 = two + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci";
    ResponseBuilder cut_whole(r, "chatcmpl-t", "m", 1);
    for (char c : cut3) cut_whole.add(text_event(std::string(1, c)));
    json cw = cut_whole.response(done_event(engine::FinishReason::Length, 3, 20));
    const json& cmsg = cw["choices"][0]["message"];
    CHECK(cmsg["content"] == "Checking.");
    REQUIRE(cmsg["tool_calls"].size() == 2);
    CHECK(cmsg["tool_calls"][1]["function"]["arguments"] == R"({"city":"Oslo"})");
    CHECK(cw["choices"][0]["finish_reason"] == "length");
    st = stream(r, cut3, engine::FinishReason::Length);
    CHECK(st.content == "Checking.");
    REQUIRE(st.calls.size() == 3);
    for (size_t i = 0; i < 2; ++i) CHECK(st.calls[i]["arguments"] == cmsg["tool_calls"][i]["function"]["arguments"]);
    CHECK(st.finish == "length");
    // Without argument streaming (no grammar holds the calls) a call is sent once whole: both agree exactly.
    ParsedRequest unheld = r;
    vkllm::answer::skip_reasoning(unheld.engine.grammar_start, false, vkllm::answer::think_tags());
    unheld.split_reasoning = nullptr;
    st = stream(unheld, cut3, engine::FinishReason::Length);
    CHECK(st.content == "Checking.");
    REQUIRE(st.calls.size() == 2);
    CHECK(st.finish == "length");

    // A grammar that skips a reasoning block the parser sees (reasoning_format none on a template
    // that thinks): calls are sent whole, since the parser may read one the model only thought about.
    ParsedRequest inline_think = r;
    vkllm::answer::skip_reasoning(inline_think.engine.grammar_start, false, vkllm::answer::think_tags());
    inline_think.split_reasoning = nullptr;
    st = stream(inline_think, reply, engine::FinishReason::Stop);
    REQUIRE(st.calls.size() == 1);
    CHECK(st.deltas == 1);

    // No grammar holding the calls: sent whole, once known to be well formed.
    ParsedRequest ds = parse_chat_request(chat_body({{"tools", weather_tools()}}), 1);
    apply_tool_format(ds, tool_format(ToolFamily::DeepSeekV31), true);
    st = stream(ds,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
                "\"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                engine::FinishReason::Stop);
    CHECK(st.content.empty());
    REQUIRE(st.calls.size() == 1);
    CHECK(st.deltas == 1);
    CHECK(json::parse(st.calls[0]["arguments"].get<std::string>()) == json{{"city", "Paris"}});
    CHECK(st.finish == "tool_calls");

    // A malformed call is content, with finish_reason stop.
    ResponseBuilder bad(r, "chatcmpl-t", "m", 1);
    bad.add(text_event("<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>"));
    json b = bad.response(done_event(engine::FinishReason::Stop, 3, 20));
    CHECK(b["choices"][0]["message"]["content"] ==
          "<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>");
    CHECK_FALSE(b["choices"][0]["message"].contains("tool_calls"));
    CHECK(b["choices"][0]["finish_reason"] == "stop");
}

TEST_CASE("protocol: a gpt-oss (Harmony) answer: analysis as reasoning_content, final as content, calls") {
    using vkllm::answer::tool_format;
    using vkllm::answer::ToolFamily;
    const std::string call_reply =
        "<|channel|>analysis<|message|>Weather needs a tool.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
    const std::string answer_reply =
        "<|channel|>analysis<|message|>Say hi.<|end|><|start|>assistant<|channel|>final<|message|>Hello!";
    struct Seen {
        std::string reasoning, content, finish;
        json calls = json::array();
    };
    auto run = [](ParsedRequest q, const std::string& reply, bool stream) {
        q.harmony = true;
        q.stream = stream;
        ResponseBuilder rb(q, "chatcmpl-h", "m", 1);
        Seen seen;
        if (!stream) {
            for (char c : reply) rb.add(text_event(std::string(1, c)));
            const json w = rb.response(done_event(engine::FinishReason::Stop, 3, 20));
            const json& m = w["choices"][0]["message"];
            seen.reasoning = m.value("reasoning_content", "");
            seen.content = m["content"].is_null() ? "" : m["content"].get<std::string>();
            if (m.contains("tool_calls")) seen.calls = m["tool_calls"];
            seen.finish = w["choices"][0]["finish_reason"];
            return seen;
        }
        std::string sse = rb.stream_start();
        for (char c : reply) sse += rb.stream_text(text_event(std::string(1, c)));
        sse += rb.stream_done(done_event(engine::FinishReason::Stop, 3, 20));
        for (const json& ev : sse_objects(sse)) {
            const json& ch = ev["choices"][0];
            if (ch["delta"].contains("reasoning_content"))
                seen.reasoning += ch["delta"]["reasoning_content"].get<std::string>();
            if (ch["delta"].contains("content")) seen.content += ch["delta"]["content"].get<std::string>();
            if (ch["delta"].contains("tool_calls"))
                for (const json& c : ch["delta"]["tool_calls"]) seen.calls.push_back(c);
            if (!ch["finish_reason"].is_null()) seen.finish = ch["finish_reason"];
        }
        return seen;
    };
    ParsedRequest with_tools = parse_chat_request(chat_body({{"tools", weather_tools()}}), 1);
    apply_tool_format(with_tools, tool_format(ToolFamily::Harmony), true);  // parsed, not refused
    // A lazy grammar holds a call from its recipient on.
    CHECK(with_tools.engine.grammar);
    REQUIRE(with_tools.engine.grammar_start.triggers.size() == 1);
    CHECK(with_tools.engine.grammar_start.triggers[0].text == "to=functions.");
    for (bool stream : {false, true}) {
        CAPTURE(stream);
        Seen a = run(with_tools, call_reply, stream);
        CHECK(a.reasoning == "Weather needs a tool.");
        CHECK(a.content.empty());
        REQUIRE(a.calls.size() == 1);
        CHECK(a.calls[0]["function"]["name"] == "get_weather");
        CHECK(json::parse(a.calls[0]["function"]["arguments"].get<std::string>()) == json{{"city", "Paris"}});
        CHECK(a.finish == "tool_calls");

        // Without tools: the final channel is the content, and no marker reaches anything.
        Seen b = run(parse_chat_request(chat_body(), 1), answer_reply, stream);
        CHECK(b.reasoning == "Say hi.");
        CHECK(b.content == "Hello!");
        CHECK(b.calls.empty());
        CHECK(b.finish == "stop");
        // A call without tools offered is not a call: its body is content.
        Seen c = run(parse_chat_request(chat_body(), 1), call_reply, stream);
        CHECK(c.calls.empty());
        CHECK(c.content == "{\"city\": \"Paris\"}");
    }
    // reasoning_format none: the analysis stays in the content (its markers do not).
    Seen inline_seen = run(parse_chat_request(chat_body({{"reasoning_format", "none"}}), 1), answer_reply, false);
    CHECK(inline_seen.reasoning.empty());
    CHECK(inline_seen.content == "Say hi.Hello!");
    // A required call: the prompt opens the call's message (its header names the tool), the grammar
    // holds the arguments, and the reply is read from that prefix on.
    ParsedRequest forced = parse_chat_request(chat_body({{"tools", weather_tools()}, {"tool_choice", "required"}}), 1);
    apply_tool_format(forced, tool_format(ToolFamily::Harmony), true);
    CHECK(forced.tool_plan.forced);
    CHECK(forced.tool_plan.reply_prefix ==
          "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>");
    REQUIRE(forced.engine.grammar);
    for (bool stream : {false, true}) {
        CAPTURE(stream);
        Seen f = run(forced, "{\"city\": \"Lyon\"}", stream);
        CHECK(f.reasoning.empty());
        CHECK(f.content.empty());
        REQUIRE(f.calls.size() == 1);
        CHECK(f.calls[0]["function"]["name"] == "get_weather");
        CHECK(json::parse(f.calls[0]["function"]["arguments"].get<std::string>()) == json{{"city", "Lyon"}});
        CHECK(f.finish == "tool_calls");
    }
    // With two tools only a named choice can be forced (the name is in the header): a 400 naming tool_choice.
    json two = weather_tools();
    two.push_back(json{{"type", "function"}, {"function", {{"name", "get_time"}}}});
    CHECK(error_of([&] {
              ParsedRequest q = parse_chat_request(chat_body({{"tools", two}, {"tool_choice", "required"}}), 1);
              apply_tool_format(q, tool_format(ToolFamily::Harmony), true);
          }).param() == "tool_choice");
}

TEST_CASE("protocol: reasoning_content, whole and streamed, and reasoning_format none") {
    ParsedRequest r = parse_chat_request(chat_body(), 1);
    r.split_reasoning = &vkllm::answer::think_tags();
    const std::string reply = "<think>Cats like fish.</think>\n\nA cat.";
    ResponseBuilder whole(r, "chatcmpl-r", "m", 1);
    for (char c : reply) whole.add(text_event(std::string(1, c)));
    json msg = whole.response(done_event(engine::FinishReason::Stop, 3, 20))["choices"][0]["message"];
    CHECK(msg["reasoning_content"] == "Cats like fish.");
    CHECK(msg["content"] == "A cat.");

    r.stream = true;
    ResponseBuilder streamed(r, "chatcmpl-r", "m", 1);
    std::string sse = streamed.stream_start();
    for (char c : reply) sse += streamed.stream_text(text_event(std::string(1, c)));
    sse += streamed.stream_done(done_event(engine::FinishReason::Stop, 3, 20));
    std::string reasoning, content;
    for (const json& ev : sse_objects(sse)) {
        const json& d = ev["choices"][0]["delta"];
        if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
        if (d.contains("content")) content += d["content"].get<std::string>();
    }
    CHECK(reasoning == "Cats like fish.");
    CHECK(content == "A cat.");

    CHECK(parse_chat_request(chat_body({{"reasoning_format", "none"}}), 1).reasoning_format == "none");
    CHECK(chat_error({{"reasoning_format", "hidden"}}).param() == "reasoning_format");
    // Not split: the block stays in the content.
    ParsedRequest plain = parse_chat_request(chat_body(), 1);
    ResponseBuilder inline_rb(plain, "chatcmpl-r", "m", 1);
    inline_rb.add(text_event(reply));
    msg = inline_rb.response(done_event(engine::FinishReason::Stop, 3, 20))["choices"][0]["message"];
    CHECK(msg["content"] == reply);
    CHECK_FALSE(msg.contains("reasoning_content"));
}

TEST_CASE("protocol: n choices: each builder writes its index, usage adds the completions up") {
    ParsedRequest r =
        parse_chat_request(chat_body({{"n", 2}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}), 1);
    CHECK(r.n == 2);
    ResponseBuilder a(r, "chatcmpl-n", "m", 1, 0), b(r, "chatcmpl-n", "m", 1, 1);
    std::string sse =
        a.stream_start() + b.stream_start() + a.stream_text(text_event("x")) + b.stream_text(text_event("y"));
    const engine::Event da = done_event(engine::FinishReason::Stop, 5, 2),
                        db = done_event(engine::FinishReason::Length, 5, 3);
    sse += a.stream_finish(da) + b.stream_finish(db) + a.stream_end(combined_usage({da, db}, 2));
    bool done = false;
    std::vector<json> ev = sse_objects(sse, &done);
    CHECK(done);
    std::map<int, std::string> text, finish;
    json usage;
    for (const json& e : ev) {
        if (!e["usage"].is_null()) usage = e["usage"];
        for (const json& c : e["choices"]) {
            if (c["delta"].contains("content")) text[c["index"].get<int>()] += c["delta"]["content"].get<std::string>();
            if (!c["finish_reason"].is_null()) finish[c["index"].get<int>()] = c["finish_reason"].get<std::string>();
        }
    }
    CHECK(text[0] == "x");
    CHECK(text[1] == "y");
    CHECK(finish[0] == "stop");
    CHECK(finish[1] == "length");
    CHECK(usage["prompt_tokens"] == 5);
    CHECK(usage["completion_tokens"] == 5);
    CHECK(usage["total_tokens"] == 10);

    r.stream = false;
    ResponseBuilder wa(r, "chatcmpl-n", "m", 1, 0), wb(r, "chatcmpl-n", "m", 1, 1);
    wa.add(text_event("x"));
    wb.add(text_event("y"));
    json merged = merge_choices({wa.response(da), wb.response(db)}, {da, db}, 2);
    REQUIRE(merged["choices"].size() == 2);
    CHECK(merged["choices"][1]["index"] == 1);
    CHECK(merged["choices"][1]["message"]["content"] == "y");
    CHECK(merged["usage"]["prompt_tokens"] == 5);
    CHECK(merged["usage"]["completion_tokens"] == 5);
}

TEST_CASE("protocol: a batch of prompts: each prompt's tokens count once, whatever n") {
    // Two prompts (5 and 7 tokens), n = 2: choices 0, 1 are the first prompt's, 2, 3 the second's.
    const std::vector<engine::Event> d = {
        done_event(engine::FinishReason::Stop, 5, 1), done_event(engine::FinishReason::Stop, 5, 2),
        done_event(engine::FinishReason::Stop, 7, 3), done_event(engine::FinishReason::Stop, 7, 4)};
    engine::Event sum = combined_usage(d, 2);
    CHECK(sum.prompt_tokens == 12);
    CHECK(sum.completion_tokens == 10);
    sum = combined_usage({d[0], d[2]}, 1);
    CHECK(sum.prompt_tokens == 12);
    CHECK(sum.completion_tokens == 4);
    ParsedRequest r = parse_completion_request(json{{"prompt", json::array({"a", "b"})}}, 1);
    std::vector<json> whole;
    for (uint32_t i = 0; i < 2; ++i) {
        ResponseBuilder rb(r, "cmpl-b", "m", 1, i);
        rb.add(text_event(i == 0 ? "A" : "B"));
        whole.push_back(rb.response(d[2 * i]));
    }
    json merged = merge_choices(whole, {d[0], d[2]}, 1);
    REQUIRE(merged["choices"].size() == 2);
    CHECK(merged["choices"][0]["text"] == "A");
    CHECK(merged["choices"][1]["text"] == "B");
    CHECK(merged["choices"][1]["index"] == 1);
    CHECK(merged["usage"]["prompt_tokens"] == 12);
    CHECK(merged["usage"]["total_tokens"] == 16);
}
