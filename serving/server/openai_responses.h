// The OpenAI API's response bodies as data: whole chat.completion and text_completion responses,
// their streamed chunks as server-sent events, and errors, in OpenAI's exact shapes. No HTTP and no
// model here, so all of it is unit-tested on plain JSON (tests/serving/server/test_openai_responses.cpp).
#pragma once

#include "serving/server/openai_requests.h"

#include "serving/answer/answer_stream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace vkllm::server {

json error_json(const ApiError& e);

// Serializes with invalid UTF-8 replaced by U+FFFD: a token may be part of a character, and a
// response must always be valid JSON.
std::string dump_json(const json& j);
// One server-sent event: "data: <json>\n\n".
std::string sse_data(const json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// "stop" / "length" for the reasons a response reports; Timeout reads as "length" (the output was
// cut by a server limit, as llama-server reports its generation time limit).
const char* openai_finish_reason(engine::FinishReason r);

// How a request's answer is read: reasoning split off, tool calls parsed, Harmony (every API's
// responses read the generated text through an AnswerStream made with it).
answer::AnswerFormat answer_format(const ParsedRequest& req);

// Builds the response of one request, streamed or whole: the same text and logprobs either way.
class ResponseBuilder {
public:
    // `id` like "chatcmpl-..." / "cmpl-..." (new_response_id), `model` as echoed, `created` in
    // Unix seconds.
    // `index`: the choice this builder writes (requests with n > 1 have one builder per choice).
    ResponseBuilder(const ParsedRequest& req, std::string id, std::string model, int64_t created, uint32_t index = 0);

    // Streaming: the SSE bytes for the start of the stream (chat: the chunk whose delta has the
    // role), for each Text event, and for the Done event (the chunk with finish_reason, the usage
    // chunk when asked, then [DONE]).
    std::string stream_start() const;
    std::string stream_text(const engine::Event& ev);
    std::string stream_done(const engine::Event& done);
    // stream_done in two: the choice's last chunks (held-back content, tool calls, finish_reason),
    // then, once per stream, the usage chunk when asked and [DONE] (usage_of: combined_usage of
    // every choice).
    std::string stream_finish(const engine::Event& done);
    std::string stream_end(const engine::Event& usage_of) const;
    // A stream that cannot finish (server error, shutdown): one event with the error object.
    static std::string stream_error(const ApiError& e);

    // Whole responses: add every Text event, then the body for the Done event.
    void add(const engine::Event& ev);
    json response(const engine::Event& done);

private:
    json chunk_base() const;
    json chat_logprobs(const std::vector<engine::TokenLogprob>& lps) const;
    json completion_logprobs(const std::vector<engine::TokenLogprob>& lps, size_t text_offset) const;
    json usage(const engine::Event& done) const;
    // A chunk of tool-call deltas ("" for none).
    std::string calls_chunk(const std::vector<answer::CallDelta>& deltas) const;

    Endpoint endpoint_;
    bool logprobs_, include_usage_;
    std::string id_, model_;
    int64_t created_;
    uint32_t index_;
    std::string text_;  // whole responses: the content so far
    answer::AnswerStream answer_;  // generated text split into reasoning, content and calls
    std::string reasoning_text_;  // whole responses: the reasoning so far
    std::vector<engine::TokenLogprob> lps_;  // whole responses: every token's logprob
    size_t streamed_bytes_ = 0;  // completions stream: text_offset of the next token
};

// Several choices as one, `n` choices per prompt (a batch of prompts has n for each, prompt by
// prompt): each prompt counts once, completion tokens add up.
engine::Event combined_usage(const std::vector<engine::Event>& done, uint32_t n);
// The whole responses of the choices as one response: every choice, the combined usage.
json merge_choices(std::vector<json> responses, const std::vector<engine::Event>& done, uint32_t n);

// "chatcmpl-" or "cmpl-" and 24 random letters and digits.
std::string new_response_id(Endpoint ep);

}  // namespace vkllm::server
