// The prompt of a chat request with images: the rendered text, which holds one
// chat_template::kImageMarker per image, and the images read from their URLs (image_input.h) become
// token ids with each image's placeholder tokens and the images' embeddings over them, through the
// model's vision encoder (ServedModel::image_prompt, model/vision in `vkllm serve`). Kept apart from
// HTTP and from the encoder so that its checks are unit-tested with a stand-in encoder.
#pragma once

#include "model/forward/sequence_model.h"
#include "model/image/image_decode.h"
#include "serving/chat_template/chat_prompt.h"
#include "serving/server/image_input.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace vkllm::server {

// A prompt with its images in place: the token ids (each image's placeholder ids included, as
// engine::CompletionRequest::prompt takes them) and the embeddings over them, in order (an image may
// be several, one per tile).
struct ImagePrompt {
    std::vector<int32_t> tokens;
    std::vector<PromptEmbeddings> images;
};

// Where a prompt with images comes from, which decides its marker and its BOS rule: a chat (the
// template's rendering, chat_template::kImageMarker per image, the chat prompt's own BOS rule) or
// /completion (the client's text with the server's media marker, ServedModel::media_marker, per
// image, tokenized as /completion tokenizes a string).
enum class ImagePromptSource { Chat, Completion };

// The text (one marker per image) and the images' pixels, in order -> the prompt.
// std::invalid_argument for an image the encoder cannot take.
using ImagePrompter =
    std::function<ImagePrompt(const std::string& text, const std::vector<RgbImage>& images, ImagePromptSource source)>;

// Images one request may carry: each is decoded and encoded before the prompt's length is known,
// so their number is bounded apart from the context (a conversation about pictures rarely has more
// than a few; 64 of Gemma 3's 256-row images already need a 16k context).
inline constexpr size_t kMaxImages = 64;

struct ImagePromptInput {
    const std::string* text = nullptr;  // the rendered chat prompt, or /completion's prompt_string
    const std::vector<chat_template::ImageRef>* refs = nullptr;  // the request's images, in order
    std::string template_name;  // Chat: named when the template loses or repeats a marker
    ImagePromptSource source = ImagePromptSource::Chat;
    std::string_view marker = chat_template::kImageMarker;  // what marks an image in `text`
    std::string param = "messages";  // the field errors name
};

// The prompt's token ids, its images in `images`. 400s: more than kMaxImages images, or as many as
// the context has tokens (each takes one at least), before any is read; the text does not hold
// exactly one marker per image (a chat: the template dropped or repeated message content, naming the
// template; /completion: the client's markers); an image cannot be read (naming its field); the encoder refuses one; the prompt with
// its images does not fit `n_ctx` with room for one token (context_length_exceeded with the images'
// share).
std::vector<int32_t> image_prompt_tokens(const ImagePromptInput& in, const ImagePrompter& prompter,
                                         const ImageInputOptions& opts, uint32_t n_ctx,
                                         std::vector<PromptEmbeddings>& images);

}  // namespace vkllm::server
