// From chat messages to a prompt's token ids, the rules every front end shares (`vkllm serve`,
// `vkllm chat`, the C API): the variables a template gets, and how its text becomes tokens.
#pragma once

#include "model/mmproj/image_prompt.h"
#include "model/tokenizer/tokenizer.h"
#include "serving/chat_template/chat_template.h"
#include "serving/answer/tool_calls.h"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::chat_template {

class MessageError : public std::invalid_argument {
public:
    // param: the field at fault ("messages[2].content[0].type"), worded as OpenAI words its 400s.
    MessageError(const std::string& what, std::string param) : std::invalid_argument(what), param_(std::move(param)) {}
    const std::string& param() const { return param_; }

private:
    std::string param_;
};

// A JSON value's type as OpenAI's errors word it ("a string", "an integer", "a decimal", ...).
const char* json_type_name(const nlohmann::ordered_json& v);

// Where an image goes in a prompt: llama.cpp's mtmd marker, one per image, in the text the template
// renders (model/vision splits the rendered prompt there).
inline constexpr std::string_view kImageMarker = kMediaMarker;  // model/mmproj/image_prompt.h

// An image a chat message refers to: its URL as the client sent it (a data URL, http(s), ...) and
// the field it came from ("messages[1].content[0].image_url"), for the errors about it.
struct ImageRef {
    std::string url;
    std::string param;
};

// OpenAI's chat messages checked and made ready for a template, for every front end (the server's
// request body, the C API's and Java's JSON): a non-empty array of objects with a string role;
// content a string, or parts joined by newlines, absent or null only on an assistant turn;
// tool_calls with function names, their arguments (OpenAI's JSON text) made objects as templates
// expect (arguments_as_objects). MessageError naming the field otherwise.
//
// Parts are text, or, when `images` is given (the model has a vision encoder), image_url parts
// ({"url": ...} or the URL as a string; "detail" ignored): each becomes kImageMarker where the part
// was, without the newline that joins text parts (as llama-server joins them), and its reference is
// appended to `images`, so the images come in message order. Without
// `images` an image part is refused, saying the model takes no images. With images, a text that
// holds the marker itself is refused: it would move every image after it.
nlohmann::ordered_json parse_messages(const nlohmann::ordered_json& messages, std::vector<ImageRef>* images = nullptr);

// The variables a template gets: the messages, tools and extra keyword arguments (null when
// none), the vocabulary's BOS / EOS texts, and the generation prompt.
ChatInputs chat_inputs(const Tokenizer& tok, const nlohmann::ordered_json& messages,
                       const nlohmann::ordered_json& tools, const nlohmann::ordered_json& extra);

// Token ids of a prompt text: control-token texts become control tokens (a rendered chat prompt is
// full of them), BOS / EOS as the vocabulary asks, and one BOS only when the text already starts
// with the BOS text (templates such as Llama 3's write it themselves). "" gives BOS alone.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text);

// The control tokens of the vocabulary that are markers of the tool-call format (sorted ids):
// generated text shows them so the parser can read the calls.
std::vector<int32_t> tool_control_tokens(const Tokenizer& tok, const answer::ToolFormat& format);

}  // namespace vkllm::chat_template
