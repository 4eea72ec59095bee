// A prompt of text and images as the text model evaluates it: the text's tokens with each image's
// placeholder tokens where mtmd puts them, and the images' rows (model/forward/sequence_model.h's
// PromptEmbeddings). Built as llama.cpp's mtmd builds its chunks: the text split at each image
// marker, every text piece and every marker of the image's layout (Gemma 3's <start_of_image>, ...)
// tokenized on its own, the first piece with BOS.
#pragma once

#include "model/forward/sequence_model.h"
#include "model/tokenizer/tokenizer.h"
#include "model/vision/vision_model.h"

#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace vkllm {

struct MultimodalPrompt {
    std::vector<int32_t> tokens;
    std::vector<PromptEmbeddings> images;  // one per tile, in order
    double encode_ms = 0;  // the images' preprocessing and encoding (0 for cached ones)
};

// `text` with the images in order: at its markers (kMediaMarker) (as many markers as images, or none: then the
// images come first, as llama.cpp's mtmd-cli puts them). Throws
// std::invalid_argument for images without a vision model or a marker count that does not match.
// encode_first, when given, tokenizes the first text piece instead of tok.encode(piece, add_bos,
// parse_special) (a chat prompt's own BOS rule, chat_template::encode_prompt).
using PieceEncoder = std::function<std::vector<int32_t>(std::string_view)>;
// `marker` is what marks the images' places in `text`: kMediaMarker where a user writes them (vkllm
// run), or private_media_marker() where the front end places them in a conversation, so that the
// marker's text anywhere else (an answer that quotes it) stays text, as llama-server's random marker.
MultimodalPrompt build_multimodal_prompt(const Tokenizer& tok, VisionModel* vision, std::string_view text,
                                         std::span<const RgbImage> images, bool add_bos, bool parse_special,
                                         const PieceEncoder& encode_first = {}, std::string_view marker = kMediaMarker);

// "<__media_XXXX__>" with 24 random letters and digits, made once per process.
const std::string& private_media_marker();

}  // namespace vkllm
