// Ollama's API response bodies as data: the objects of /api/chat and /api/generate, streamed as
// newline-delimited JSON or whole, with their final object's statistics (durations in
// nanoseconds), message.thinking and message.tool_calls (arguments as objects), a generate's
// `context`; and the bodies of /api/embed and /api/embeddings. No HTTP and no model here, so all of
// it is unit-tested on plain JSON (tests/serving/server/test_ollama_responses.cpp).
#pragma once

#include "serving/server/ollama_requests.h"

#include "serving/answer/answer_stream.h"
#include "serving/engine/engine.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace vkllm::server::ollama {

// RFC 3339 in UTC with nanoseconds, as Ollama writes created_at: "2024-07-22T20:33:28.123648123Z".
std::string timestamp(std::chrono::system_clock::time_point t);

// One line of a stream: the object and "\n" (invalid UTF-8 replaced, as every response).
std::string ndjson(const json& j);

// {"error": "message"}: Ollama's error body, in a stream too.
json error_json(const std::string& message);

// "stop" or "length" (a server limit such as the generation timeout reads as "length").
const char* done_reason(engine::FinishReason r);

// The answer to a request that only loads the model (no messages, an empty prompt).
json load_response(const Request& req);

// Builds the response of one /api/chat or /api/generate request, streamed or whole: the same text,
// reasoning, calls and statistics either way.
class Responder {
public:
    // `prompt`: the prompt's token ids (a generate's `context` starts with them); `start`: when the
    // request arrived (total_duration counts from it).
    Responder(const Request& req, std::vector<int32_t> prompt, std::chrono::steady_clock::time_point start);

    // Streaming: the line for a Text event ("" when it carries nothing to show yet), then for the
    // Done event the lines of the text held back and the tool calls, and the final object.
    std::string stream_text(const engine::Event& ev);
    std::string stream_done(const engine::Event& done);

    // Whole: add every Text event, then the one object.
    void add(const engine::Event& ev);
    json response(const engine::Event& done);

private:
    json object() const;  // model and created_at
    // An object of the route's shape with this content, thinking, calls and logprobs.
    json piece(const std::string& content, const std::string& thinking, const std::vector<answer::ToolCall>& calls,
               const std::vector<engine::TokenLogprob>& lps) const;
    void finish_object(json& j, const engine::Event& done) const;  // done, done_reason, statistics, context

    Route route_;
    std::string model_;
    bool logprobs_;
    bool with_context_;  // a templated generate returns its context
    std::vector<int32_t> context_;  // the prompt, then every token generated
    std::chrono::steady_clock::time_point start_;
    answer::AnswerStream answer_;
    std::string content_, thinking_;  // whole: the text so far
    std::vector<engine::TokenLogprob> lps_;  // whole: every token's logprob
};

// Ollama's tool calls: [{"id": "call_...", "function": {"index", "name", "arguments": {...}}}].
json tool_calls_json(const std::vector<answer::ToolCall>& calls);

// Logprobs as Ollama gives them: [{"token", "logprob", "bytes", "top_logprobs": [...]}].
json logprobs_json(const std::vector<engine::TokenLogprob>& lps);

// /api/embed: {"model", "embeddings", "total_duration", "load_duration", "prompt_eval_count"}.
json embed_response(const std::string& model, const std::vector<std::vector<float>>& vectors, uint64_t tokens,
                    int64_t total_ns);
// /api/embeddings: {"embedding": [...]} (empty for an empty prompt).
json embeddings_response(const std::vector<float>& vector);

}  // namespace vkllm::server::ollama
