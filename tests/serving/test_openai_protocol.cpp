// The OpenAI protocol layer on plain JSON: every request field checked (400 naming the field),
// unknown fields ignored, and responses, stream chunks and errors in OpenAI's exact shapes.
#include "serving/server/http_server.h"
#include "serving/server/metrics.h"
#include "serving/server/openai_protocol.h"

#include "model/grammar/grammar.h"

#include <doctest/doctest.h>

#include <map>

using namespace vkllm;
using namespace vkllm::server;

namespace {

json chat_body(json extra = json::object()) {
    json b = {{"model", "m"}, {"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
}

// The ApiError a parse throws, or a failed check when it throws none.
template <class Fn>
ApiError error_of(Fn&& fn) {
    try {
        fn();
    } catch (const ApiError& e) {
        return e;
    }
    FAIL("expected an ApiError");
    return ApiError(0, "");
}

ApiError chat_error(json extra) {
    return error_of([&] { parse_chat_request(chat_body(std::move(extra)), 1); });
}

serving::Event text_event(std::string text, std::vector<serving::TokenLogprob> lps = {}) {
    serving::Event ev;
    ev.kind = serving::Event::Kind::Text;
    ev.text = std::move(text);
    ev.logprobs = std::move(lps);
    return ev;
}

serving::Event done_event(serving::FinishReason r, uint32_t prompt, uint32_t completion, uint32_t cached = 0) {
    serving::Event ev;
    ev.kind = serving::Event::Kind::Done;
    ev.finish = r;
    ev.prompt_tokens = prompt;
    ev.completion_tokens = completion;
    ev.cached_tokens = cached;
    return ev;
}

// The JSON objects of an SSE byte stream, and whether it ended with [DONE].
std::vector<json> sse_objects(const std::string& s, bool* done = nullptr) {
    std::vector<json> out;
    size_t pos = 0;
    if (done) *done = false;
    while ((pos = s.find("data: ", pos)) != std::string::npos) {
        size_t end = s.find("\n\n", pos);
        REQUIRE(end != std::string::npos);
        std::string payload = s.substr(pos + 6, end - pos - 6);
        if (payload == "[DONE]") {
            if (done) *done = true;
        } else {
            out.push_back(json::parse(payload));
        }
        pos = end + 2;
    }
    return out;
}

}  // namespace

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
    json extra = {{"temperature", 0},         {"top_p", 0.5},     {"top_k", 7},
                  {"min_p", 0.1},             {"seed", 1234},     {"presence_penalty", 1.5},
                  {"frequency_penalty", -0.5}, {"repeat_penalty", 1.1}, {"max_tokens", 10},
                  {"stop", json::array({"a", "b"})}, {"user", "u1"}, {"n", 1},
                  {"logprobs", true},         {"top_logprobs", 3}, {"stream", true},
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
    r = parse_chat_request(chat_body({{"max_tokens", 5}, {"max_completion_tokens", 9}, {"stop", "END"}, {"temperature", nullptr}}), 1);
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
        {{{"messages", json::array({json{{"role", "user"},
                                         {"content", json::array({json{{"type", "image_url"}, {"image_url", "x"}}})}}})}},
         "messages[0].content[0].type", "only content parts of type 'text'"},
        {{{"messages", json::array({json{{"role", "user"}, {"content", json::array({json{{"type", "text"}}})}}})}},
         "messages[0].content[0].text", "Missing required parameter"},
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
    json msgs = json::array({json{{"role", "system"}, {"content", json::array({json{{"type", "text"}, {"text", "A"}},
                                                                               json{{"type", "text"}, {"text", "B"}}})}},
                             json{{"role", "user"}, {"content", "Q"}},
                             json{{"role", "assistant"}, {"content", nullptr},
                                  {"tool_calls", json::array({json{{"id", "1"}, {"type", "function"},
                                                                   {"function", {{"name", "f"}, {"arguments", R"({"a":"b"})"}}}}})}},
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

TEST_CASE("protocol: completions requests") {
    ParsedRequest r = parse_completion_request(json{{"prompt", "Once upon a time"}}, 3);
    CHECK(r.endpoint == Endpoint::Completion);
    CHECK(r.prompt_text == "Once upon a time");
    CHECK_FALSE(r.prompt_is_tokens);
    CHECK(r.engine.max_tokens == 16);  // OpenAI's default for the legacy endpoint
    CHECK_FALSE(r.logprobs);

    r = parse_completion_request(json{{"prompt", json::array({"x"})}, {"max_tokens", 100}, {"logprobs", 2}}, 3);
    CHECK(r.prompt_text == "x");
    CHECK(r.engine.max_tokens == 100);
    CHECK(r.logprobs);
    CHECK(r.engine.logprobs);
    CHECK(r.engine.top_logprobs == 2);

    r = parse_completion_request(json{{"prompt", json::array({1, 2, 3})}}, 3);
    CHECK(r.prompt_is_tokens);
    CHECK(r.prompt_tokens == std::vector<int32_t>{1, 2, 3});

    auto err = [](json body) { return error_of([&] { parse_completion_request(body, 1); }); };
    CHECK(err(json{{"max_tokens", 5}}).param() == "prompt");
    CHECK(err(json{{"prompt", json::array({"a", "b"})}}).param() == "prompt");
    CHECK(std::string(err(json{{"prompt", json::array({"a", "b"})}}).what()).find("one prompt per request") != std::string::npos);
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
    const std::string deep = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"x\": " +
                             std::string(100000, '[') + std::string(100000, ']') + "}]}";
    ApiError e = error_of([&] { parse_body(deep); });
    CHECK(e.status() == 400);
    CHECK(std::string(e.what()).find("nested") != std::string::npos);
    // Sixty levels are still fine.
    const std::string ok = "{\"x\": " + std::string(60, '[') + std::string(60, ']') + "}";
    CHECK(parse_body(ok).contains("x"));
}

TEST_CASE("protocol: tokenize, detokenize and apply-template bodies") {
    TokenizeRequest t = parse_tokenize_request(json{{"content", "Hello"}});
    CHECK(t.content == "Hello");
    CHECK_FALSE(t.add_special);
    CHECK(t.parse_special);
    t = parse_tokenize_request(json{{"content", "x"}, {"add_special", true}, {"parse_special", false}});
    CHECK(t.add_special);
    CHECK_FALSE(t.parse_special);
    CHECK(error_of([] { parse_tokenize_request(json{{"content", 5}}); }).param() == "content");
    CHECK(error_of([] { parse_tokenize_request(json::object()); }).param() == "content");

    CHECK(parse_detokenize_request(json{{"tokens", {1, 2}}}, 10) == std::vector<int32_t>{1, 2});
    CHECK(error_of([] { parse_detokenize_request(json{{"tokens", {1, 10}}}, 10); }).param() == "tokens[1]");
    CHECK(error_of([] { parse_detokenize_request(json{{"tokens", {-1}}}, 10); }).param() == "tokens[0]");
    CHECK(error_of([] { parse_detokenize_request(json{{"tokens", {"a"}}}, 10); }).param() == "tokens[0]");
    CHECK(error_of([] { parse_detokenize_request(json{{"tokens", "1 2"}}, 10); }).param() == "tokens");

    TemplateRequest a = parse_apply_template_request(chat_body({{"chat_template_kwargs", {{"enable_thinking", true}}}}));
    CHECK(a.messages.size() == 1);
    CHECK(a.template_kwargs["enable_thinking"] == true);
    CHECK(error_of([] { parse_apply_template_request(json::object()); }).param() == "messages");
}

TEST_CASE("protocol: errors in OpenAI's shape") {
    json e = error_json(ApiError(400, "bad", "invalid_request_error", "temperature"));
    CHECK(e.dump() == R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":null}})");
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
    json r = rb.response(done_event(serving::FinishReason::Length, 12, 3, 4));
    CHECK(r.dump() ==
          R"({"id":"chatcmpl-abc","object":"chat.completion","created":1700000000,"model":"m","system_fingerprint":"vkllm",)"
          R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hello, world","refusal":null},"logprobs":null,)"
          R"("finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,)"
          R"("prompt_tokens_details":{"cached_tokens":4}}})");
    CHECK(std::string(openai_finish_reason(serving::FinishReason::Stop)) == "stop");
    CHECK(std::string(openai_finish_reason(serving::FinishReason::Timeout)) == "length");
}

TEST_CASE("protocol: a chat stream: role chunk, content chunks, finish chunk, usage chunk, [DONE]") {
    ParsedRequest req = parse_chat_request(chat_body({{"stream", true}, {"stream_options", {{"include_usage", true}}}}), 1);
    ResponseBuilder rb(req, "chatcmpl-x", "m", 5);
    std::string s = rb.stream_start() + rb.stream_text(text_event("Hi")) + rb.stream_text(text_event("")) +
                    rb.stream_text(text_event(" there")) + rb.stream_done(done_event(serving::FinishReason::Stop, 7, 2));
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
    CHECK(ev[4]["usage"] == json{{"prompt_tokens", 7}, {"completion_tokens", 2}, {"total_tokens", 9},
                                 {"prompt_tokens_details", {{"cached_tokens", 0}}}});

    // Without include_usage: no usage key at all, no usage chunk.
    ParsedRequest plain = parse_chat_request(chat_body({{"stream", true}}), 1);
    ResponseBuilder rb2(plain, "chatcmpl-y", "m", 5);
    ev = sse_objects(rb2.stream_start() + rb2.stream_done(done_event(serving::FinishReason::Length, 1, 0)), &done);
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
    json r = rb.response(done_event(serving::FinishReason::Stop, 2, 2));
    CHECK(r.dump() ==
          R"({"id":"cmpl-1","object":"text_completion","created":9,"model":"m","system_fingerprint":"vkllm",)"
          R"("choices":[{"index":0,"text":" a b","logprobs":null,"finish_reason":"stop"}],)"
          R"("usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":0}}})");

    ParsedRequest sreq = parse_completion_request(json{{"prompt", "x"}, {"stream", true}}, 1);
    ResponseBuilder srb(sreq, "cmpl-2", "m", 9);
    CHECK(srb.stream_start().empty());
    bool done = false;
    std::vector<json> ev = sse_objects(srb.stream_text(text_event(" a")) + srb.stream_done(done_event(serving::FinishReason::Length, 2, 1)), &done);
    CHECK(done);
    REQUIRE(ev.size() == 2);
    CHECK(ev[0]["object"] == "text_completion");
    CHECK(ev[0]["choices"][0] == json{{"index", 0}, {"text", " a"}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
    CHECK(ev[1]["choices"][0] == json{{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", "length"}});
}

TEST_CASE("protocol: logprobs in chat and completions shapes, and token bytes that are not UTF-8") {
    serving::TokenLogprob a{5, "Hi", -0.5f, {{"Hi", -0.5f}, {"Ho", -1.5f}}};
    serving::TokenLogprob b{6, "\xE2\x82", -0.25f, {}};  // the first two bytes of a 3-byte character
    ParsedRequest req = parse_chat_request(chat_body({{"logprobs", true}, {"top_logprobs", 2}}), 1);
    ResponseBuilder rb(req, "chatcmpl-l", "m", 1);
    rb.add(text_event("Hi", {a}));
    rb.add(text_event("", {b}));
    json r = json::parse(dump_json(rb.response(done_event(serving::FinishReason::Stop, 1, 2))));
    json content = r["choices"][0]["logprobs"]["content"];
    REQUIRE(content.size() == 2);
    CHECK(content[0] == json{{"token", "Hi"}, {"logprob", -0.5}, {"bytes", {72, 105}},
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
    crb.add(text_event(" you", {serving::TokenLogprob{7, " you", -2.0f, {{" you", -2.0f}}}}));
    json lp = crb.response(done_event(serving::FinishReason::Stop, 1, 2))["choices"][0]["logprobs"];
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

TEST_CASE("metrics: Prometheus text with HELP and TYPE for every family") {
    serving::EngineMetrics m;
    m.slots = 4;
    m.slots_busy = 1;
    m.requests_total = 10;
    m.generated_tokens_total = 1234;
    m.prompt_seconds_total = 0.5;
    ServerCounters c;
    c.ready = true;
    c.http_by_status = {{200, 9}, {400, 2}};
    c.streams_open = 1;
    std::string t = prometheus_text(m, c);
    CHECK(t.find("# TYPE vkllm_slots_busy gauge\nvkllm_slots_busy 1\n") != std::string::npos);
    CHECK(t.find("# TYPE vkllm_generated_tokens_total counter\nvkllm_generated_tokens_total 1234\n") != std::string::npos);
    CHECK(t.find("vkllm_prompt_seconds_total 0.5\n") != std::string::npos);
    CHECK(t.find("vkllm_http_requests_total{status=\"400\"} 2\n") != std::string::npos);
    CHECK(t.find("vkllm_ready 1\n") != std::string::npos);
    // While loading: the server's families only.
    std::string loading = prometheus_text(std::nullopt, ServerCounters{});
    CHECK(loading.find("vkllm_ready 0\n") != std::string::npos);
    CHECK(loading.find("vkllm_slots") == std::string::npos);
    // Every sample line belongs to a family declared just before it.
    for (size_t pos = 0; pos < t.size();) {
        size_t end = t.find('\n', pos);
        std::string line = t.substr(pos, end - pos);
        if (line.rfind("# TYPE ", 0) == 0) {
            std::string name = line.substr(7, line.find(' ', 7) - 7);
            CHECK(t.find("# HELP " + name + " ") != std::string::npos);
        }
        pos = end + 1;
    }
}

TEST_CASE("auth: the key comparison (written to take the same time for every mismatch position)") {
    CHECK(constant_time_equal("secret", "secret"));
    CHECK_FALSE(constant_time_equal("secret", "secreT"));
    CHECK_FALSE(constant_time_equal("secret", "secret2"));
    CHECK_FALSE(constant_time_equal("", "x"));
    CHECK(constant_time_equal("", ""));
}

TEST_CASE("protocol: response_format, grammar and json_schema become the request's grammar; what cannot be enforced is a 400") {
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
    for (const json& rf : {json{{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"strict", true}, {"schema", schema}}}},
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
    ApiError e = chat_error({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema",
                              {{"type", "object"}, {"properties", {{"a", {{"not", {{"type", "null"}}}}}}}}}}}}}});
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
    CHECK(chat_error({{"response_format", {{"type", "json_object"}}}, {"grammar", "root ::= \"a\""}}).param() == "grammar");
    CHECK(chat_error({{"json_schema", "not a schema"}}).param() == "json_schema");
    // A stop string could cut the structure: refused.
    CHECK(chat_error({{"response_format", {{"type", "json_object"}}}, {"stop", "}"}}).param() == "stop");
    // A call cannot be required without tools to call.
    for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "f"}}}}}) {
        ApiError e = error_of([&] {
            ParsedRequest q = parse_chat_request(chat_body({{"tool_choice", choice}}), 1);
            apply_tool_format(q, vkllm::chat::tool_format(vkllm::chat::ToolFamily::Hermes), true);
        });
        CHECK(e.param() == "tool_choice");
    }
    CHECK(chat_error({{"tool_choice", "sometimes"}}).param() == "tool_choice");
    CHECK_NOTHROW(parse_chat_request(chat_body({{"tool_choice", "auto"}}), 1));
}

namespace {

json weather_tools() {
    return json::array({json{{"type", "function"},
                             {"function", {{"name", "get_weather"},
                                           {"parameters", {{"type", "object"},
                                                           {"properties", {{"city", {{"type", "string"}}}}},
                                                           {"required", {"city"}}}}}}}});
}

}  // namespace

TEST_CASE("protocol: tools and tool_choice are checked, and forced calls get a prefix and a grammar") {
    using vkllm::chat::ToolFamily;
    using vkllm::chat::tool_format;
    CHECK(chat_error({{"tools", json::array({json{{"type", "function"}, {"function", {{"name", "a b"}}}}})}}).param() ==
          "tools[0].function.name");
    CHECK(chat_error({{"tools", weather_tools()}, {"tool_choice", {{"type", "function"}}}}).param() == "tool_choice.function.name");

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
    REQUIRE(m.accept(R"({"name": "get_weather", "arguments": {"city": "Paris"}})" "\n</tool_call>"));
    CHECK(m.can_end());

    auto tool_error = [](json extra, const vkllm::chat::ToolFormat& f) {
        return error_of([&] {
            ParsedRequest q = parse_chat_request(chat_body(extra), 1);
            apply_tool_format(q, f, true);
        });
    };
    const json named = {{"type", "function"}, {"function", {{"name", "nope"}}}};
    CHECK(tool_error({{"tools", weather_tools()}, {"tool_choice", named}}, tool_format(ToolFamily::Hermes)).param() == "tool_choice");
    CHECK(tool_error({{"tools", weather_tools()}, {"tool_choice", "required"}, {"stop", "x"}}, tool_format(ToolFamily::Hermes))
              .param() == "stop");
    CHECK(tool_error({{"tools", weather_tools()}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}},
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

TEST_CASE("protocol: tool calls in whole and streamed chat responses") {
    using vkllm::chat::ToolFamily;
    using vkllm::chat::tool_format;
    const std::string reply = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    ParsedRequest r = parse_chat_request(chat_body({{"tools", weather_tools()}}), 1);
    apply_tool_format(r, tool_format(ToolFamily::Hermes), true);

    ResponseBuilder whole(r, "chatcmpl-t", "m", 1);
    for (char c : reply) whole.add(text_event(std::string(1, c)));
    json w = whole.response(done_event(serving::FinishReason::Stop, 3, 20));
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
    auto stream = [&](ParsedRequest q, const std::string& text, serving::FinishReason why) {
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
                    out.calls[i]["arguments"] = out.calls[i]["arguments"].get<std::string>() +
                                                c["function"]["arguments"].get<std::string>();
                }
            if (!ch["finish_reason"].is_null()) out.finish = ch["finish_reason"].get<std::string>();
        }
        return out;
    };
    Streamed st = stream(r, reply, serving::FinishReason::Stop);
    CHECK(st.content == "Checking.");  // no markup, not even its first '<'
    REQUIRE(st.calls.size() == 1);
    CHECK(st.calls[0]["name"] == "get_weather");
    CHECK(st.calls[0]["arguments"] == msg["tool_calls"][0]["function"]["arguments"]);  // fragments add up to the whole
    CHECK(st.calls[0]["arguments"] == R"({"city":"Paris"})");
    CHECK(st.deltas > 5);  // fed byte by byte, the arguments went out in pieces
    CHECK(st.finish == "tool_calls");

    // Two calls, each with its index.
    const std::string two = reply + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
    st = stream(r, two, serving::FinishReason::Stop);
    REQUIRE(st.calls.size() == 2);
    CHECK(st.calls[1]["arguments"] == R"({"city":"Oslo"})");

    // Cut inside a call (max_tokens): what was sent stays sent, the finish reason says why.
    st = stream(r, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", serving::FinishReason::Length);
    CHECK(st.content.empty());
    REQUIRE(st.calls.size() == 1);
    CHECK(st.calls[0]["arguments"] == R"({"city":"Par)");
    CHECK(st.finish == "length");

    // A grammar that skips a reasoning block the parser sees (reasoning_format none on a template
    // that thinks): calls are sent whole, since the parser may read one the model only thought about.
    ParsedRequest inline_think = r;
    vkllm::chat::skip_reasoning(inline_think.engine.grammar_start, false, vkllm::chat::think_tags());
    inline_think.split_reasoning = nullptr;
    st = stream(inline_think, reply, serving::FinishReason::Stop);
    REQUIRE(st.calls.size() == 1);
    CHECK(st.deltas == 1);

    // No grammar holding the calls: sent whole, once known to be well formed.
    ParsedRequest ds = parse_chat_request(chat_body({{"tools", weather_tools()}}), 1);
    apply_tool_format(ds, tool_format(ToolFamily::DeepSeekV31), true);
    st = stream(ds, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                serving::FinishReason::Stop);
    CHECK(st.content.empty());
    REQUIRE(st.calls.size() == 1);
    CHECK(st.deltas == 1);
    CHECK(json::parse(st.calls[0]["arguments"].get<std::string>()) == json{{"city", "Paris"}});
    CHECK(st.finish == "tool_calls");

    // A malformed call is content, with finish_reason stop.
    ResponseBuilder bad(r, "chatcmpl-t", "m", 1);
    bad.add(text_event("<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>"));
    json b = bad.response(done_event(serving::FinishReason::Stop, 3, 20));
    CHECK(b["choices"][0]["message"]["content"] == "<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>");
    CHECK_FALSE(b["choices"][0]["message"].contains("tool_calls"));
    CHECK(b["choices"][0]["finish_reason"] == "stop");
}

TEST_CASE("protocol: a gpt-oss (Harmony) answer: analysis as reasoning_content, final as content, calls") {
    using vkllm::chat::ToolFamily;
    using vkllm::chat::tool_format;
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
            const json w = rb.response(done_event(serving::FinishReason::Stop, 3, 20));
            const json& m = w["choices"][0]["message"];
            seen.reasoning = m.value("reasoning_content", "");
            seen.content = m["content"].is_null() ? "" : m["content"].get<std::string>();
            if (m.contains("tool_calls")) seen.calls = m["tool_calls"];
            seen.finish = w["choices"][0]["finish_reason"];
            return seen;
        }
        std::string sse = rb.stream_start();
        for (char c : reply) sse += rb.stream_text(text_event(std::string(1, c)));
        sse += rb.stream_done(done_event(serving::FinishReason::Stop, 3, 20));
        for (const json& ev : sse_objects(sse)) {
            const json& ch = ev["choices"][0];
            if (ch["delta"].contains("reasoning_content")) seen.reasoning += ch["delta"]["reasoning_content"].get<std::string>();
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
    CHECK(forced.tool_plan.reply_prefix == "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>");
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
    r.split_reasoning = &vkllm::chat::think_tags();
    const std::string reply = "<think>Cats like fish.</think>\n\nA cat.";
    ResponseBuilder whole(r, "chatcmpl-r", "m", 1);
    for (char c : reply) whole.add(text_event(std::string(1, c)));
    json msg = whole.response(done_event(serving::FinishReason::Stop, 3, 20))["choices"][0]["message"];
    CHECK(msg["reasoning_content"] == "Cats like fish.");
    CHECK(msg["content"] == "A cat.");

    r.stream = true;
    ResponseBuilder streamed(r, "chatcmpl-r", "m", 1);
    std::string sse = streamed.stream_start();
    for (char c : reply) sse += streamed.stream_text(text_event(std::string(1, c)));
    sse += streamed.stream_done(done_event(serving::FinishReason::Stop, 3, 20));
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
    msg = inline_rb.response(done_event(serving::FinishReason::Stop, 3, 20))["choices"][0]["message"];
    CHECK(msg["content"] == reply);
    CHECK_FALSE(msg.contains("reasoning_content"));
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

TEST_CASE("protocol: n choices: each builder writes its index, usage adds the completions up") {
    ParsedRequest r = parse_chat_request(chat_body({{"n", 2}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}), 1);
    CHECK(r.n == 2);
    ResponseBuilder a(r, "chatcmpl-n", "m", 1, 0), b(r, "chatcmpl-n", "m", 1, 1);
    std::string sse = a.stream_start() + b.stream_start() + a.stream_text(text_event("x")) + b.stream_text(text_event("y"));
    const serving::Event da = done_event(serving::FinishReason::Stop, 5, 2), db = done_event(serving::FinishReason::Length, 5, 3);
    sse += a.stream_finish(da) + b.stream_finish(db) + a.stream_end(combined_usage({da, db}));
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
    json merged = merge_choices({wa.response(da), wb.response(db)}, {da, db});
    REQUIRE(merged["choices"].size() == 2);
    CHECK(merged["choices"][1]["index"] == 1);
    CHECK(merged["choices"][1]["message"]["content"] == "y");
    CHECK(merged["usage"]["completion_tokens"] == 5);
}

TEST_CASE("protocol: embeddings requests: every input form, encodings, dimensions and the 400s") {
    auto parse = [](json body) { return parse_embeddings_request(body, 1000, 384); };
    EmbeddingsRequest r = parse({{"input", "hello"}, {"model", "m"}});
    CHECK(r.texts == std::vector<std::string>{"hello"});
    CHECK(r.token_ids.empty());
    CHECK_FALSE(r.base64);
    CHECK(r.model == "m");
    r = parse({{"input", {"a", "b", "c"}}, {"encoding_format", "base64"}, {"dimensions", 384}});
    CHECK(r.size() == 3);
    CHECK(r.base64);
    r = parse({{"input", {101, 5, 102}}});
    CHECK(r.token_ids == std::vector<std::vector<int32_t>>{{101, 5, 102}});
    r = parse({{"input", {{1, 2}, {3}}}});
    CHECK(r.token_ids == std::vector<std::vector<int32_t>>{{1, 2}, {3}});

    auto err = [&](json body) { return error_of([&] { parse(std::move(body)); }); };
    ApiError e = err({{"model", "m"}});
    CHECK(e.param() == "input");
    CHECK(err({{"input", ""}}).param() == "input");
    CHECK(err({{"input", json::array()}}).param() == "input");
    CHECK(std::string(err({{"input", {"a", ""}}}).what()).find("input[1]") != std::string::npos);
    CHECK(err({{"input", {"a", 3}}}).param() == "input[1]");
    CHECK(std::string(err({{"input", {1, 1000}}}).what()).find("1000 is not a token id (the vocabulary has 1000 tokens)") != std::string::npos);
    CHECK(std::string(err({{"input", {{1}, json::array()}}}).what()).find("input[1]") != std::string::npos);
    CHECK(err({{"input", 5}}).param() == "input");
    CHECK(std::string(err({{"input", std::vector<std::string>(2049, "x")}}).what()).find("at most 2048") != std::string::npos);
    CHECK(err({{"input", "x"}, {"encoding_format", "int8"}}).param() == "encoding_format");
    e = err({{"input", "x"}, {"dimensions", 256}});
    CHECK(e.param() == "dimensions");
    CHECK(std::string(e.what()).find("have 384 dimensions and cannot be shortened") != std::string::npos);
    CHECK(embedding_length_error(2, 600, 512).code() == "context_length_exceeded");
}

TEST_CASE("protocol: embeddings responses, float and base64 (little-endian f32, RFC 4648)") {
    CHECK(base64_floats({1.0f}) == "AACAPw==");              // 00 00 80 3f
    CHECK(base64_floats({1.0f, -2.0f}) == "AACAPwAAAMA=");   // + 00 00 00 c0
    CHECK(base64_floats({0.0f, 0.0f, 0.0f}) == "AAAAAAAAAAAAAAAA");
    CHECK(base64_floats({}).empty());
    const json f = embeddings_response({{0.5f, -1.0f}, {2.0f, 0.0f}}, false, "bge", 7);
    CHECK(f["object"] == "list");
    CHECK(f["model"] == "bge");
    CHECK(f["data"][1]["index"] == 1);
    CHECK(f["data"][1]["object"] == "embedding");
    CHECK(f["data"][0]["embedding"] == json({0.5, -1.0}));
    CHECK(f["usage"] == json({{"prompt_tokens", 7}, {"total_tokens", 7}}));
    const json b = embeddings_response({{1.0f}}, true, "bge", 3);
    CHECK(b["data"][0]["embedding"] == "AACAPw==");
}

TEST_CASE("protocol: rerank requests (Jina / llama-server shape) and their 400s") {
    RerankRequest r = parse_rerank_request({{"query", "q"}, {"documents", {"a", "b"}}, {"model", "m"}});
    CHECK(r.query == "q");
    CHECK(r.documents == std::vector<std::string>{"a", "b"});
    CHECK(r.top_n == 0);
    CHECK_FALSE(r.return_documents);
    CHECK(r.model == "m");
    // llama-server's `texts`, Jina's {"text": ...} objects, top_n past the count, return_documents
    r = parse_rerank_request({{"query", "q"}, {"texts", json::array({"a", {{"text", "b"}}})}, {"top_n", 5},
                              {"return_documents", true}});
    CHECK(r.documents == std::vector<std::string>{"a", "b"});
    CHECK(r.top_n == 2);
    CHECK(r.return_documents);

    auto err = [&](json body) { return error_of([&] { parse_rerank_request(std::move(body)); }); };
    CHECK(err({{"documents", {"a"}}}).param() == "query");
    CHECK(err({{"query", ""}, {"documents", {"a"}}}).param() == "query");
    CHECK(err({{"query", 3}, {"documents", {"a"}}}).param() == "query");
    CHECK(err({{"query", "q"}}).param() == "documents");
    CHECK(err({{"query", "q"}, {"documents", "a"}}).param() == "documents");
    CHECK(err({{"query", "q"}, {"documents", json::array()}}).param() == "documents");
    CHECK(err({{"query", "q"}, {"documents", {"a", ""}}}).param() == "documents[1]");
    CHECK(err({{"query", "q"}, {"documents", {"a", 7}}}).param() == "documents[1]");
    CHECK(err({{"query", "q"}, {"documents", json::array({{{"txt", "a"}}})}}).param() == "documents[0]");
    CHECK(std::string(err({{"query", "q"}, {"documents", std::vector<std::string>(2049, "x")}}).what())
              .find("at most 2048") != std::string::npos);
    CHECK(err({{"query", "q"}, {"documents", {"a"}}, {"top_n", 0}}).param() == "top_n");
    CHECK(err({{"query", "q"}, {"documents", {"a"}}, {"top_n", -1}}).param() == "top_n");
    CHECK(err({{"query", "q"}, {"documents", {"a"}}, {"top_n", 1.5}}).param() == "top_n");
    CHECK(parse_rerank_request({{"query", "q"}, {"documents", {"a"}}, {"top_n", UINT64_MAX}}).top_n == 1);
    // As a request body parses them: 0 and 2 are unsigned numbers there.
    CHECK(err(json::parse(R"({"query":"q","documents":["a"],"top_n":0})")).param() == "top_n");
    CHECK(parse_rerank_request(json::parse(R"({"query":"q","documents":["a","b","c"],"top_n":2})")).top_n == 2);
    CHECK(err({{"query", "q"}, {"documents", {"a"}}, {"return_documents", "yes"}}).param() == "return_documents");
    CHECK(rerank_length_error(1, 600, 512).code() == "context_length_exceeded");
}

TEST_CASE("protocol: rerank responses: by descending score, ties in input order, top_n, documents") {
    RerankRequest req;
    req.documents = {"a", "b", "c", "d"};
    const json all = rerank_response(req, {0.5f, 2.0f, -1.0f, 0.5f}, "rr", 11);
    CHECK(all["object"] == "list");
    CHECK(all["model"] == "rr");
    CHECK(all["usage"] == json({{"prompt_tokens", 11}, {"total_tokens", 11}}));
    REQUIRE(all["results"].size() == 4);
    std::vector<int> order;
    for (const json& x : all["results"]) order.push_back(x["index"].get<int>());
    CHECK(order == std::vector<int>{1, 0, 3, 2});
    CHECK(all["results"][0]["relevance_score"] == 2.0);
    CHECK_FALSE(all["results"][0].contains("document"));
    req.top_n = 2;
    req.return_documents = true;
    const json top = rerank_response(req, {0.5f, 2.0f, -1.0f, 0.5f}, "rr", 11);
    REQUIRE(top["results"].size() == 2);
    CHECK(top["results"][1]["index"] == 0);
    CHECK(top["results"][1]["document"] == json({{"text", "a"}}));
}
