// Helpers shared by the OpenAI protocol tests (test_openai_requests, test_openai_responses,
// test_openai_embeddings): request bodies, the ApiError a parse throws, engine events, and the JSON
// objects of an SSE byte stream.
#pragma once

#include "serving/server/openai_requests.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace vkllm::server::openai_testing {

inline json chat_body(json extra = json::object()) {
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

inline ApiError chat_error(json extra) {
    return error_of([&] { parse_chat_request(chat_body(std::move(extra)), 1); });
}

inline engine::Event text_event(std::string text, std::vector<engine::TokenLogprob> lps = {}) {
    engine::Event ev;
    ev.kind = engine::Event::Kind::Text;
    ev.text = std::move(text);
    ev.logprobs = std::move(lps);
    return ev;
}

inline engine::Event done_event(engine::FinishReason r, uint32_t prompt, uint32_t completion, uint32_t cached = 0) {
    engine::Event ev;
    ev.kind = engine::Event::Kind::Done;
    ev.finish = r;
    ev.prompt_tokens = prompt;
    ev.completion_tokens = completion;
    ev.cached_tokens = cached;
    return ev;
}

// The JSON objects of an SSE byte stream, and whether it ended with [DONE].
inline std::vector<json> sse_objects(const std::string& s, bool* done = nullptr) {
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

inline json weather_tools() {
    return json::array({json{{"type", "function"},
                             {"function", {{"name", "get_weather"},
                                           {"parameters", {{"type", "object"},
                                                           {"properties", {{"city", {{"type", "string"}}}}},
                                                           {"required", {"city"}}}}}}}});
}

}  // namespace vkllm::server::openai_testing
