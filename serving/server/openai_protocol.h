// The OpenAI API as data: request bodies of /v1/chat/completions and /v1/completions (and the
// tokenize / detokenize / apply-template extras) parsed and checked into engine requests, and the
// response bodies, stream chunks and errors built in OpenAI's exact shapes. No HTTP and no model
// here, so all of it is unit-tested on plain JSON (tests/serving/test_openai_protocol.cpp).
#pragma once

#include "serving/engine/engine.h"
#include "serving/answer/answer_stream.h"
#include "serving/answer/tool_calls.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace vkllm::server {

using json = nlohmann::ordered_json;

// An error the client sees: the HTTP status and OpenAI's {"error": {"message", "type", "param",
// "code"}} (param and code are null when empty).
class ApiError : public std::runtime_error {
public:
    ApiError(int status, const std::string& message, std::string type = "invalid_request_error",
             std::string param = {}, std::string code = {});
    int status() const { return status_; }
    const std::string& type() const { return type_; }
    const std::string& param() const { return param_; }
    const std::string& code() const { return code_; }

private:
    int status_;
    std::string type_, param_, code_;
};

// 400 invalid_request_error naming the field.
ApiError invalid_field(const std::string& param, const std::string& message);
json error_json(const ApiError& e);

// Serializes with invalid UTF-8 replaced by U+FFFD: a token may be part of a character, and a
// response must always be valid JSON.
std::string dump_json(const json& j);
// One server-sent event: "data: <json>\n\n".
std::string sse_data(const json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// A request body as a JSON object; 400 for malformed JSON or another top-level value.
json parse_body(const std::string& body);

enum class Endpoint { Chat, Completion };

using chat::ToolChoice;

// Everything a completion request asks for, checked. The prompt is still text (or, for
// /v1/completions, token ids): the server renders and tokenizes it with the model's vocabulary.
// Choices per request (`n`): each is a request of its own to the engine.
inline constexpr int64_t kMaxChoices = 8;

struct ParsedRequest {
    Endpoint endpoint = Endpoint::Chat;
    uint32_t n = 1;  // choices; choice i samples with seed + i (greedy choices are equal)
    std::string model;  // as the client named it ("" when absent); echoed in the response
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage

    // Chat: the messages (content flattened to strings), tools (null when none) and
    // chat_template_kwargs (null or an object).
    json messages, tools, template_kwargs;
    // Completions: the prompt as text, or as token ids when the client sent ids.
    std::string prompt_text;
    std::vector<int32_t> prompt_tokens;
    bool prompt_is_tokens = false;

    // Chat with tools: the choice, the function a Named choice names, parallel_tool_calls.
    ToolChoice tool_choice = ToolChoice::Auto;
    std::string tool_name;
    bool parallel_tool_calls = true;
    // Set by apply_tool_format: the family replies are parsed in (null: plain content), and for a
    // forced call the text the prompt ends with inside the reply and the call's grammar.
    chat::ToolPlan tool_plan;
    // reasoning_format: "auto" (default) and "deepseek" split a reasoning block off into
    // reasoning_content where the template writes them; "none" leaves it in the content. The server
    // sets split_reasoning from it and the template (the tags of the block split off; null: none),
    // reply_in_reasoning from the rendered prompt.
    std::string reasoning_format = "auto";
    const chat::ReasoningTags* split_reasoning = nullptr;
    bool reply_in_reasoning = false;
    // A chat answer in gpt-oss' Harmony format (the server sets it from the template): read by a
    // HarmonyStream, which splits reasoning, content and calls at once.
    bool harmony = false;

    // Chat: top_logprobs alternatives with logprobs=true; completions: the integer logprobs.
    bool logprobs = false;
    uint32_t top_logprobs = 0;

    // Sampling and stopping, everything but CompletionRequest::prompt. max_tokens is -1 when
    // the client gave none (completions: OpenAI's default of 16 is already applied).
    serving::CompletionRequest engine;
};

// Throw ApiError (400, naming the field) for wrong types, out-of-range values, n != 1 and the like.
// Unknown fields are ignored. `seed` is the one used when the request gives none.
ParsedRequest parse_chat_request(const json& body, uint64_t seed);
ParsedRequest parse_completion_request(const json& body, uint64_t seed);

// Tools for the model's template: with tools and a choice other than 'none', replies are parsed in
// `format`'s family (a 400 naming 'tools' when this server cannot parse it); a required or named
// choice forces the call (a prompt prefix and a grammar; a 400 when the family cannot force it, or with
// response_format / grammar / stop); the Generic family gets the tools described in a system message
// when the template does not render them itself.
void apply_tool_format(ParsedRequest& req, const chat::ToolFormat& format, bool template_renders_tools);

// OpenAI-style messages checked and normalized for a chat template: content given as an array of
// text parts becomes one string; other part types (images, audio) are refused; an assistant's
// tool_calls are checked, and their function.arguments (a JSON string in OpenAI's API) become the
// object templates expect, as Hugging Face's convention has it (a string that is not JSON stays).
json parse_messages(const json& messages);

struct TokenizeRequest {
    std::string content;
    bool add_special = false;   // BOS / EOS as the vocabulary asks
    bool parse_special = true;  // control-token texts become those tokens
};
TokenizeRequest parse_tokenize_request(const json& body);
// Token ids, each checked against the vocabulary size.
std::vector<int32_t> parse_detokenize_request(const json& body, size_t n_vocab);

struct TemplateRequest {
    json messages, tools, template_kwargs;
};
TemplateRequest parse_apply_template_request(const json& body);

// POST /v1/embeddings. `input`: a string, an array of strings, an array of token ids, or an array of
// arrays of token ids (at most 2048 inputs, none empty); `encoding_format` "float" (default) or
// "base64" (little-endian f32 bytes, what the official clients ask for by default); `dimensions`
// only equal to the model's width: it cannot truncate, so any other value is a 400 naming it.
struct EmbeddingsRequest {
    std::vector<std::string> texts;               // string inputs, or
    std::vector<std::vector<int32_t>> token_ids;  // token-id inputs (checked against the vocabulary)
    bool base64 = false;
    std::string model;
    size_t size() const { return texts.empty() ? token_ids.size() : texts.size(); }
};
EmbeddingsRequest parse_embeddings_request(const json& body, size_t n_vocab, uint32_t width);
// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}.
json embeddings_response(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                         uint64_t prompt_tokens);
// Standard base64 (RFC 4648, padded) of the vector's little-endian f32 bytes.
std::string base64_floats(const std::vector<float>& v);
// The 400 for an embedding input longer than the model takes (code context_length_exceeded).
ApiError embedding_length_error(size_t index, size_t tokens, uint32_t limit);

// POST /v1/rerank (Jina's and llama-server's shape): `query` a non-empty string; `documents` (or
// llama-server's `texts`) 1..2048 non-empty strings or {"text": string} objects; `top_n` a positive
// integer (default all); `return_documents` (default false) adds each document's text.
struct RerankRequest {
    std::string query;
    std::vector<std::string> documents;
    size_t top_n = 0;  // 0: every document
    bool return_documents = false;
    std::string model;
};
RerankRequest parse_rerank_request(const json& body);
// {"object": "list", "results": [{"index", "relevance_score"(, "document": {"text"})}] by descending
// score (ties in input order), at most top_n of them, "model", "usage"}.
json rerank_response(const RerankRequest& req, const std::vector<float>& scores, const std::string& model,
                     uint64_t prompt_tokens);
// The 400 for a query and document longer together than the model takes (context_length_exceeded).
ApiError rerank_length_error(size_t index, size_t tokens, uint32_t limit);

// 400 naming logit_bias when a biased token id is not in the vocabulary.
void check_logit_bias(const ParsedRequest& req, size_t n_vocab);

// The 400 OpenAI gives for a prompt that does not fit the context (code context_length_exceeded).
ApiError context_length_error(Endpoint ep, size_t prompt_tokens, uint32_t n_ctx);

// "stop" / "length" for the reasons a response reports; Timeout reads as "length" (the output was
// cut by a server limit, as llama-server reports its generation time limit).
const char* openai_finish_reason(serving::FinishReason r);

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
    std::string stream_text(const serving::Event& ev);
    std::string stream_done(const serving::Event& done);
    // stream_done in two: the choice's last chunks (held-back content, tool calls, finish_reason),
    // then, once per stream, the usage chunk when asked and [DONE] (usage_of: combined_usage of
    // every choice).
    std::string stream_finish(const serving::Event& done);
    std::string stream_end(const serving::Event& usage_of) const;
    // A stream that cannot finish (server error, shutdown): one event with the error object.
    static std::string stream_error(const ApiError& e);

    // Whole responses: add every Text event, then the body for the Done event.
    void add(const serving::Event& ev);
    json response(const serving::Event& done);

private:
    json chunk_base() const;
    json chat_logprobs(const std::vector<serving::TokenLogprob>& lps) const;
    json completion_logprobs(const std::vector<serving::TokenLogprob>& lps, size_t text_offset) const;
    json usage(const serving::Event& done) const;
    // A chunk of tool-call deltas ("" for none).
    std::string calls_chunk(const std::vector<chat::CallDelta>& deltas) const;

    Endpoint endpoint_;
    bool logprobs_, include_usage_;
    std::string id_, model_;
    int64_t created_;
    uint32_t index_;
    std::string text_;                           // whole responses: the content so far
    chat::AnswerStream answer_;                  // generated text split into reasoning, content and calls
    std::string reasoning_text_;                 // whole responses: the reasoning so far
    std::vector<serving::TokenLogprob> lps_;     // whole responses: every token's logprob
    size_t streamed_bytes_ = 0;                  // completions stream: text_offset of the next token
};

// Several choices as one: the first's prompt counts once, completion tokens add up.
serving::Event combined_usage(const std::vector<serving::Event>& done);
// The whole responses of the choices as one response: every choice, the combined usage.
json merge_choices(std::vector<json> responses, const std::vector<serving::Event>& done);

// "chatcmpl-" or "cmpl-" and 24 random letters and digits.
std::string new_response_id(Endpoint ep);

}  // namespace vkllm::server
