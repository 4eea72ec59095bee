// From a checked request to the prompt's token ids: the chat template renders the messages, the
// vocabulary tokenizes the text. Kept apart from HTTP so the BOS and special-token rules are
// unit-tested with a real vocabulary and a stand-in template.
#pragma once

#include "model/tokenizer/tokenizer.h"
#include "serving/server/openai_requests.h"
#include "serving/chat_template/chat_prompt.h"
#include "serving/chat_template/chat_template.h"

#include <functional>
#include <string>
#include <vector>

namespace vkllm::server {

using ChatRenderer = std::function<std::string(const chat_template::ChatInputs&)>;

// Renders with `render`; a chat_template::TemplateError (a template's raise_exception, usually about the
// conversation's shape) is the client's 400, any other exception propagates.
std::string render_chat(const ChatRenderer& render, const chat_template::ChatInputs& in);

// The text of a chat request's prompt: its messages rendered, and a forced tool call's start after them.
std::string chat_prompt_text(const Tokenizer& tok, const ChatRenderer& render, const ParsedRequest& req);

// Where prompt_tokens splits a text prompt into documents (encode_documents) and where their spans go.
struct DocumentMarks {
    std::string_view separator;  // "": no split
    std::vector<engine::DocumentSpan>* spans = nullptr;
};

// The prompt of a request: rendered and encoded for chat, encoded (or the client's ids, checked
// against the vocabulary) for completions (req.prompts[index]). 400 when it does not fit `n_ctx`
// with room for one token. `rendered`, when given, receives the chat prompt's text (what the reply
// continues); `documents`, the spans of the documents its separator marks in a text prompt.
std::vector<int32_t> prompt_tokens(const Tokenizer& tok, const ChatRenderer& render, const ParsedRequest& req,
                                   uint32_t n_ctx, std::string* rendered = nullptr, size_t index = 0,
                                   const DocumentMarks& documents = {});

// CacheBlend's separator (LMCache's form): "prefix SEP doc SEP doc ... SEP question". Each piece is
// tokenized on its own, so that a document has the same tokens wherever it appears: the prefix as
// encode_prompt tokenizes a prompt (BOS), the others without BOS, special tokens parsed in all; the
// separators are dropped. The pieces between the first and the last separator are the documents
// (`spans`; an empty one is skipped). Without a separator in the text: encode_prompt's tokens.
std::vector<int32_t> encode_documents(const Tokenizer& tok, const std::string& text, std::string_view separator,
                                      std::vector<engine::DocumentSpan>& spans);
// A completions prompt's token ids: the client's (checked against the vocabulary; `param` names it
// in errors) or its text encoded.
std::vector<int32_t> completion_prompt_tokens(const Tokenizer& tok, const PromptInput& p, const std::string& param);

}  // namespace vkllm::server
