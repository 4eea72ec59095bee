#include "serving/server/image_prompt.h"

#include "serving/server/openai_requests.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace vkllm::server {

std::vector<int32_t> image_prompt_tokens(const ImagePromptInput& in, const ImagePrompter& prompter,
                                         const ImageInputOptions& opts, uint32_t n_ctx,
                                         std::vector<PromptEmbeddings>& images) {
    const std::vector<chat_template::ImageRef>& refs = *in.refs;
    const bool chat = in.source == ImagePromptSource::Chat;
    auto refuse = [&](const std::string& message) { return ApiError(400, message, "invalid_request_error", in.param); };
    if (!prompter) throw refuse("This model takes no images: it is served without a vision encoder (--mmproj).");
    if (refs.size() > kMaxImages || refs.size() >= n_ctx)
        throw refuse(
            fmt::format("This request has {} images; a request may have at most {} (and fewer than its "
                        "context of {} tokens).",
                        refs.size(), std::min<size_t>(kMaxImages, n_ctx - 1), n_ctx));
    // A chat: the parser put one marker per image into the messages; a template that drops a
    // message's content (or writes it twice) would put the images in the wrong places.
    const size_t markers = count_media_markers(*in.text, in.marker);
    if (markers != refs.size())
        throw refuse(chat ? fmt::format("The chat template '{}' rendered {} image markers for the {} images of these "
                                        "messages (it drops or repeats message content), so the images cannot be "
                                        "placed in the prompt.",
                                        in.template_name, markers, refs.size())
                          : fmt::format("Invalid '{}': prompt_string has {} media markers ({}, from GET /props) for "
                                        "{} images in multimodal_data; give one marker per image.",
                                        in.param, markers, in.marker, refs.size()));
    std::vector<RgbImage> pixels;
    pixels.reserve(refs.size());
    for (const chat_template::ImageRef& ref : refs) pixels.push_back(load_image(ref, opts));
    ImagePrompt p;
    try {
        p = prompter(*in.text, pixels, in.source);
    } catch (const std::invalid_argument& e) {
        throw refuse(fmt::format("The images cannot be put into the prompt: {}", e.what()));
    }
    if (p.tokens.empty()) throw invalid_field(in.param, "The prompt encodes to no tokens.");
    if (p.tokens.size() >= n_ctx) {
        uint64_t image_tokens = 0;
        for (const PromptEmbeddings& e : p.images) image_tokens += e.n_rows;
        const std::string images_part =
            fmt::format("{} of them for {} image{}", image_tokens, refs.size(), refs.size() == 1 ? "" : "s");
        if (!chat)  // llama-server's /completion refusal
            throw ApiError(400,
                           fmt::format("request ({} tokens, {}) exceeds the available context size ({} tokens), try "
                                       "increasing it",
                                       p.tokens.size(), images_part, n_ctx),
                           "exceed_context_size_error", in.param, "context_length_exceeded");
        const ApiError e = context_length_error(Endpoint::Chat, p.tokens.size(), n_ctx);
        throw ApiError(e.status(),
                       fmt::format("This model's maximum context length is {} tokens. However, your messages resulted "
                                   "in {} tokens, {}. Please reduce the length of the messages or the number of "
                                   "images.",
                                   n_ctx, p.tokens.size(), images_part),
                       e.type(), e.param(), e.code());
    }
    images = std::move(p.images);
    return std::move(p.tokens);
}

}  // namespace vkllm::server
