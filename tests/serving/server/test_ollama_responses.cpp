// Ollama's response bodies on plain data: streamed NDJSON objects and whole ones agree, the final
// object's statistics in nanoseconds, thinking and tool calls (arguments as objects), a generate's
// context, logprobs, and the embed bodies.
#include "serving/server/ollama_responses.h"

#include "serving/answer/tool_calls.h"
#include "support/openai_testing.h"

#include <doctest/doctest.h>

#include <regex>
#include <sstream>

using namespace vkllm;
using namespace vkllm::server;
using namespace vkllm::server::ollama;
using vkllm::server::openai_testing::done_event;
using vkllm::server::openai_testing::text_event;

namespace {

std::vector<json> lines(const std::string& s) {
    std::vector<json> out;
    std::istringstream in(s);
    std::string line;
    while (std::getline(in, line)) {
        REQUIRE_FALSE(line.empty());
        out.push_back(json::parse(line));
    }
    CHECK((s.empty() || s.back() == '\n'));
    return out;
}

engine::Event done_with_times(engine::FinishReason r, uint32_t prompt, uint32_t completion) {
    engine::Event d = done_event(r, prompt, completion);
    d.prompt_ms = 1.5;
    d.generate_ms = 20;
    d.tokens = {9};
    return d;
}

Request chat_request(json extra = json::object()) {
    json b = {{"model", "m"}, {"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return parse_chat(b, 1);
}

}  // namespace

TEST_CASE("ollama: created_at is RFC 3339 in UTC with nanoseconds") {
    using namespace std::chrono;
    const system_clock::time_point t{duration_cast<system_clock::duration>(nanoseconds(1700000000123456789LL))};
    CHECK(timestamp(t) == "2023-11-14T22:13:20.123456789Z");
    CHECK(
        std::regex_match(timestamp(system_clock::now()), std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z)")));
}

TEST_CASE("ollama: a streamed chat and the whole one carry the same text and statistics") {
    Request req = chat_request();
    const auto start = std::chrono::steady_clock::now();
    Responder streamed(req, {1, 2, 3}, start);
    std::string out;
    for (const char* piece : {"Hel", "lo", "!"}) out += streamed.stream_text(text_event(piece));
    out += streamed.stream_done(done_with_times(engine::FinishReason::Stop, 3, 4));
    std::vector<json> objs = lines(out);
    REQUIRE(objs.size() == 4);
    std::string text;
    for (size_t i = 0; i + 1 < objs.size(); ++i) {
        CHECK(objs[i]["model"] == "m");
        CHECK(objs[i]["done"] == false);
        CHECK(objs[i]["message"]["role"] == "assistant");
        text += objs[i]["message"]["content"].get<std::string>();
    }
    CHECK(text == "Hello!");
    const json& last = objs.back();
    CHECK(last["done"] == true);
    CHECK(last["done_reason"] == "stop");
    CHECK(last["message"]["content"] == "");
    CHECK(last["prompt_eval_count"] == 3);
    CHECK(last["prompt_eval_duration"] == 1500000);
    CHECK(last["eval_count"] == 4);
    CHECK(last["eval_duration"] == 20000000);
    CHECK(last["load_duration"] == 0);
    CHECK(last["total_duration"].get<int64_t>() >= 0);
    CHECK_FALSE(last.contains("context"));  // a chat has none
    // Ollama's key order for a chat: done_reason before done.
    std::vector<std::string> keys;
    for (const auto& [k, v] : last.items()) keys.push_back(k);
    CHECK(keys == std::vector<std::string>{"model", "created_at", "message", "done_reason", "done", "total_duration",
                                           "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
                                           "eval_duration"});

    Responder whole(req, {1, 2, 3}, start);
    for (const char* piece : {"Hel", "lo", "!"}) whole.add(text_event(piece));
    json w = whole.response(done_with_times(engine::FinishReason::Length, 3, 4));
    CHECK(w["message"] == json{{"role", "assistant"}, {"content", "Hello!"}});
    CHECK(w["done"] == true);
    CHECK(w["done_reason"] == "length");
    CHECK(w["eval_count"] == 4);
}

TEST_CASE("ollama: a generate answers in `response` and returns its context") {
    json body = {{"model", "m"}, {"prompt", "Once"}};
    Request req = parse_generate(body, 1);
    Responder r(req, {1, 5, 6}, std::chrono::steady_clock::now());
    engine::Event a = text_event(" upon");
    a.tokens = {7};
    engine::Event b = text_event(" a");
    b.tokens = {8};
    r.add(a);
    r.add(b);
    json w = r.response(done_with_times(engine::FinishReason::Stop, 3, 3));
    CHECK(w["response"] == " upon a");
    CHECK(w["context"] == json{1, 5, 6, 7, 8, 9});
    CHECK(w["done"] == true);
    CHECK(w["done_reason"] == "stop");
    CHECK_FALSE(w.contains("message"));

    // Streamed, the last object has the context; raw mode has none, as Ollama's.
    Responder s(req, {1}, std::chrono::steady_clock::now());
    std::string out = s.stream_text(a);
    out += s.stream_done(done_with_times(engine::FinishReason::Stop, 1, 1));
    std::vector<json> objs = lines(out);
    REQUIRE(objs.size() == 2);
    CHECK(objs[0]["response"] == " upon");
    CHECK(objs[1]["response"] == "");
    CHECK(objs[1]["context"] == json{1, 7, 9});
    body["raw"] = true;
    Responder raw(parse_generate(body, 1), {1}, std::chrono::steady_clock::now());
    CHECK_FALSE(raw.response(done_with_times(engine::FinishReason::Stop, 1, 0)).contains("context"));
}

TEST_CASE("ollama: reasoning goes to thinking, whole and streamed") {
    Request req = chat_request();
    req.parsed.split_reasoning = &vkllm::answer::think_tags();
    const std::string reply = "<think>Two and two.</think>Four.";
    Responder whole(req, {1}, std::chrono::steady_clock::now());
    for (char c : reply) whole.add(text_event(std::string(1, c)));
    json w = whole.response(done_event(engine::FinishReason::Stop, 1, 5));
    CHECK(w["message"]["thinking"] == "Two and two.");
    CHECK(w["message"]["content"] == "Four.");

    Responder streamed(req, {1}, std::chrono::steady_clock::now());
    std::string out;
    for (char c : reply) out += streamed.stream_text(text_event(std::string(1, c)));
    out += streamed.stream_done(done_event(engine::FinishReason::Stop, 1, 5));
    std::string thinking, content;
    for (const json& o : lines(out)) {
        thinking += o["message"].value("thinking", "");
        content += o["message"]["content"].get<std::string>();
    }
    CHECK(thinking == "Two and two.");
    CHECK(content == "Four.");
}

TEST_CASE("ollama: tool calls with arguments as objects") {
    using vkllm::answer::tool_format;
    using vkllm::answer::ToolFamily;
    json tools = json::array(
        {json{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}});
    Request req = chat_request({{"tools", tools}});
    apply_tool_format(req.parsed, tool_format(ToolFamily::Hermes), true);
    const std::string reply =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

    Responder whole(req, {1}, std::chrono::steady_clock::now());
    for (char c : reply) whole.add(text_event(std::string(1, c)));
    json w = whole.response(done_event(engine::FinishReason::Stop, 1, 9));
    REQUIRE(w["message"]["tool_calls"].size() == 1);
    const json& call = w["message"]["tool_calls"][0];
    CHECK(call["id"].get<std::string>().starts_with("call_"));
    CHECK(call["function"]["index"] == 0);
    CHECK(call["function"]["name"] == "get_weather");
    CHECK(call["function"]["arguments"] == json{{"city", "Paris"}});
    CHECK(w["message"]["content"] == "");
    CHECK(w["done_reason"] == "stop");

    Responder streamed(req, {1}, std::chrono::steady_clock::now());
    std::string out;
    for (char c : reply) out += streamed.stream_text(text_event(std::string(1, c)));
    out += streamed.stream_done(done_event(engine::FinishReason::Stop, 1, 9));
    std::vector<json> objs = lines(out);
    REQUIRE(objs.size() >= 2);
    const json& calls = objs[objs.size() - 2]["message"]["tool_calls"];
    REQUIRE(calls.size() == 1);
    CHECK(calls[0]["function"]["arguments"] == json{{"city", "Paris"}});
    CHECK(objs.back()["done"] == true);
}

TEST_CASE("ollama: logprobs, the load answer, errors and embeddings") {
    Request req = chat_request({{"logprobs", true}, {"top_logprobs", 1}});
    Responder r(req, {1}, std::chrono::steady_clock::now());
    engine::TokenLogprob lp;
    lp.text = "Hi";
    lp.logprob = -0.5f;
    lp.top = {{"Hi", -0.5f}};
    std::vector<json> objs = lines(r.stream_text(text_event("Hi", {lp})));
    REQUIRE(objs.size() == 1);
    CHECK(objs[0]["logprobs"][0]["token"] == "Hi");
    CHECK(objs[0]["logprobs"][0]["logprob"] == doctest::Approx(-0.5));
    CHECK(objs[0]["logprobs"][0]["bytes"] == json{72, 105});
    CHECK(objs[0]["logprobs"][0]["top_logprobs"][0]["token"] == "Hi");

    json load = load_response(chat_request({{"messages", json::array()}}));
    CHECK(load["done_reason"] == "load");
    CHECK(load["done"] == true);
    CHECK(load["message"]["content"] == "");
    CHECK(load_response(parse_generate(json{{"model", "m"}}, 1))["response"] == "");

    CHECK(error_json("model 'x' not found") == json{{"error", "model 'x' not found"}});
    CHECK(ndjson(json{{"a", 1}}) == "{\"a\":1}\n");
    CHECK(std::string(done_reason(engine::FinishReason::Timeout)) == "length");

    json e = embed_response("e", {{0.5f, -0.5f}, {1.0f, 0.0f}}, 7, 1234);
    CHECK(e["model"] == "e");
    CHECK(e["embeddings"].size() == 2);
    CHECK(e["embeddings"][0][1] == doctest::Approx(-0.5));
    CHECK(e["prompt_eval_count"] == 7);
    CHECK(e["total_duration"] == 1234);
    CHECK(embeddings_response({0.25f})["embedding"] == json{0.25});
    CHECK(embeddings_response({})["embedding"] == json::array());
}
