// From chat messages to a prompt's token ids, the rules every front end shares (`vkllm serve`,
// `vkllm chat`, the C API): the variables a template gets, and how its text becomes tokens.
#pragma once

#include "model/tokenizer/tokenizer.h"
#include "serving/template/chat_template.h"
#include "serving/template/tool_calls.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace vkllm::chat {

// The variables a template gets: the messages, tools and extra keyword arguments (null when
// none), the vocabulary's BOS / EOS texts, and the generation prompt.
ChatInputs chat_inputs(const Tokenizer& tok, const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                       const nlohmann::ordered_json& extra);

// Token ids of a prompt text: control-token texts become control tokens (a rendered chat prompt is
// full of them), BOS / EOS as the vocabulary asks, and one BOS only when the text already starts
// with the BOS text (templates such as Llama 3's write it themselves). "" gives BOS alone.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text);

// The control tokens of the vocabulary that are markers of the tool-call format (sorted ids):
// generated text shows them so the parser can read the calls.
std::vector<int32_t> tool_control_tokens(const Tokenizer& tok, const ToolFormat& format);

}  // namespace vkllm::chat
