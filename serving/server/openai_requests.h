// The OpenAI API's request bodies as data: /v1/chat/completions and /v1/completions (and the
// apply-template extra, which reads a chat's messages and tools) parsed and checked into engine
// requests, and the errors a client sees when they are wrong. No HTTP and no model here, so all of
// it is unit-tested on plain JSON (tests/serving/server/test_openai_requests.cpp). Responses are in
// openai_responses.h, the embeddings, rerank and tokenize bodies in openai_embeddings.h.
#pragma once

#include "serving/engine/engine.h"
#include "serving/answer/reasoning.h"
#include "serving/answer/tool_calls.h"
#include "serving/chat_template/chat_prompt.h"
#include "serving/chat_template/reasoning_switch.h"

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
    ApiError(int status, const std::string& message, std::string type = "invalid_request_error", std::string param = {},
             std::string code = {});
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

// A request body as a JSON object; 400 for malformed JSON or another top-level value.
json parse_body(const std::string& body);

enum class Endpoint { Chat, Completion };

using answer::ToolChoice;

// Everything a completion request asks for, checked. The prompt is still text (or, for
// /v1/completions, token ids): the server renders and tokenizes it with the model's vocabulary.
// Choices per request (`n`): each is a request of its own to the engine.
inline constexpr int64_t kMaxChoices = 8;
// Prompts of one /v1/completions request, and their choices in all (each an engine request).
inline constexpr size_t kMaxPrompts = 64;

// One prompt of a completions request: text, or token ids as the client sent them.
struct PromptInput {
    std::string text;
    std::vector<int32_t> tokens;
    bool is_tokens = false;
};

struct ParsedRequest {
    Endpoint endpoint = Endpoint::Chat;
    uint32_t n = 1;  // choices; choice i samples with seed + i (greedy choices are equal)
    std::string model;  // as the client named it ("" when absent); echoed in the response
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage

    // Chat: the messages (content flattened to strings), tools (null when none) and
    // chat_template_kwargs (null or an object).
    json messages, tools, template_kwargs;
    // Chat: the images of the messages' image_url parts, in order (each is an image marker in the
    // messages' text); only a model that takes images gets any.
    std::vector<chat_template::ImageRef> images;
    // Completions: the prompts (a batch answers with n choices per prompt, prompt by prompt).
    std::vector<PromptInput> prompts;
    // Completions: the text after the insertion point (fill-in-the-middle with the model's FIM tokens).
    std::optional<std::string> suffix;

    // Chat with tools: the choice, the function a Named choice names, parallel_tool_calls.
    ToolChoice tool_choice = ToolChoice::Auto;
    std::string tool_name;
    bool parallel_tool_calls = true;
    // Set by apply_tool_format: the family replies are parsed in (null: plain content), and for a
    // forced call the text the prompt ends with inside the reply and the call's grammar.
    answer::ToolPlan tool_plan;
    // reasoning_format: "auto" (default) and "deepseek" split a reasoning block off into
    // reasoning_content where the template writes them; "none" leaves it in the content. The server
    // sets split_reasoning from it and the template (the tags of the block split off; null: none),
    // reply_in_reasoning from the rendered prompt.
    std::string reasoning_format = "auto";
    // Chat: reasoning turned on or off (Ollama's `think`; Auto: the server's --reasoning) and
    // OpenAI's `reasoning_effort` ("" when absent), mapped onto the template's variables.
    chat_template::Reasoning reasoning = chat_template::Reasoning::Auto;
    std::string reasoning_effort;
    const answer::ReasoningTags* split_reasoning = nullptr;
    bool reply_in_reasoning = false;
    // A chat answer in gpt-oss' Harmony format (the server sets it from the template): read by a
    // HarmonyStream, which splits reasoning, content and calls at once.
    bool harmony = false;

    // Chat: top_logprobs alternatives with logprobs=true; completions: the integer logprobs.
    bool logprobs = false;
    uint32_t top_logprobs = 0;

    // Sampling and stopping, everything but CompletionRequest::prompt. max_tokens is -1 when
    // the client gave none (completions: OpenAI's default of 16 is already applied).
    engine::CompletionRequest engine;
    // Per prompt (prepare_generation): the documents the server's --blend-separator marked in it.
    std::vector<std::vector<engine::DocumentSpan>> prompt_documents;
};

// Throw ApiError (400, naming the field) for wrong types, out-of-range values, n != 1 and the like.
// Unknown fields are ignored. `seed` is the one used when the request gives none. A chat's image
// parts are read into `images` when the model `takes_images`, else refused.
ParsedRequest parse_chat_request(const json& body, uint64_t seed, bool takes_images = false);
ParsedRequest parse_completion_request(const json& body, uint64_t seed);
// The `prompt` of a completions request: a string, token ids, or a batch of either (at most
// kMaxPrompts); 400s name the prompt ("prompt[2]").
std::vector<PromptInput> parse_prompts(const json& prompt);

// Tools for the model's template: with tools and a choice other than 'none', replies are parsed in
// `format`'s family (a 400 naming 'tools' when this server cannot parse it); a required or named
// choice forces the call (a prompt prefix and a grammar; a 400 when the family cannot force it, or with
// response_format / grammar / stop); the Generic family gets the tools described in a system message
// when the template does not render them itself.
void apply_tool_format(ParsedRequest& req, const answer::ToolFormat& format, bool template_renders_tools);

// OpenAI-style messages checked and normalized for a chat template (chat_template::parse_messages):
// content given as an array of parts becomes one string, image parts the image marker (refused
// without `images`); an assistant's tool_calls are checked, and their function.arguments (a JSON
// string in OpenAI's API) become the object templates expect, as Hugging Face's convention has it.
json parse_messages(const json& messages, std::vector<chat_template::ImageRef>* images = nullptr);

struct TemplateRequest {
    json messages, tools, template_kwargs;
};
// `takes_images`: image parts render as the marker (the images are not read), as llama-server's
// /apply-template shows them; otherwise they are refused as in a chat.
TemplateRequest parse_apply_template_request(const json& body, bool takes_images = false);

// 400 naming logit_bias when a biased token id is not in the vocabulary.
void check_logit_bias(const ParsedRequest& req, size_t n_vocab);

// The 400 OpenAI gives for a prompt that does not fit the context (code context_length_exceeded).
ApiError context_length_error(Endpoint ep, size_t prompt_tokens, uint32_t n_ctx);

namespace detail {

// Field readers, shared by the request parsers of every endpoint: absent or null means "not given";
// a wrong type or range is a 400 naming the field, worded as OpenAI words it ("Invalid type for
// 'temperature': expected a number, but got a string instead.").
[[noreturn]] void wrong_type(const std::string& name, const char* expected, const json& v);
const json* field(const json& body, const char* name);
std::optional<double> get_number(const json& body, const char* name, double lo, double hi);
std::optional<int64_t> get_integer(const json& body, const char* name, int64_t lo, int64_t hi);
std::optional<bool> get_bool(const json& body, const char* name);
std::optional<std::string> get_string(const json& body, const char* name);
// The structure the output must have: response_format (json_object, json_schema), or llama-server's
// grammar / json_schema fields, compiled into e.grammar. At most one; a schema or grammar that cannot
// be enforced exactly is a 400 naming the keyword or the line and column, never free text with a 200.
void parse_structure(const json& body, engine::CompletionRequest& e);

}  // namespace detail

}  // namespace vkllm::server
