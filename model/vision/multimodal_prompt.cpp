#include "model/vision/multimodal_prompt.h"

#include <fmt/format.h>

#include <random>
#include <stdexcept>

namespace vkllm {

const std::string& private_media_marker() {
    static const std::string marker = [] {
        static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        std::random_device rd;
        std::string m = "<__media_";
        for (int i = 0; i < 24; ++i) m += kChars[rd() % (sizeof(kChars) - 1)];
        return m + "__>";
    }();
    return marker;
}

MultimodalPrompt build_multimodal_prompt(const Tokenizer& tok, VisionModel* vision, std::string_view text,
                                         std::span<const RgbImage> images, bool add_bos, bool parse_special,
                                         const PieceEncoder& encode_first, std::string_view marker) {
    MultimodalPrompt out;
    if (images.empty()) {
        out.tokens = encode_first ? encode_first(text) : tok.encode(text, add_bos, parse_special);
        return out;
    }
    if (!vision) throw std::invalid_argument("the model takes no images: give it a vision encoder (--mmproj)");
    if (marker.empty()) throw std::invalid_argument("build_multimodal_prompt: an empty media marker");
    // The text's pieces around the markers.
    std::vector<std::string_view> parts;
    for (size_t at = 0;;) {
        const size_t m = text.find(marker, at);
        parts.push_back(text.substr(at, m == std::string_view::npos ? std::string_view::npos : m - at));
        if (m == std::string_view::npos) break;
        at = m + marker.size();
    }
    std::string prefixed;
    if (parts.size() == 1) {  // no marker: the images first, as llama.cpp's mtmd-cli puts them
        for (size_t i = 0; i < images.size(); ++i) prefixed += marker;
        prefixed += text;
        return build_multimodal_prompt(tok, vision, prefixed, images, add_bos, parse_special, encode_first, marker);
    }
    if (parts.size() - 1 != images.size())
        throw std::invalid_argument(
            fmt::format("the prompt has {} image markers ({}) for {} images", parts.size() - 1, marker, images.size()));
    bool first = true;
    auto add_text = [&](std::string_view piece, bool special) {
        const std::vector<int32_t> t =
            first && encode_first ? encode_first(piece) : tok.encode(piece, add_bos && first, special);
        first = false;
        out.tokens.insert(out.tokens.end(), t.begin(), t.end());
    };
    for (size_t i = 0; i < parts.size(); ++i) {
        add_text(parts[i], parse_special);
        if (i == images.size()) break;
        bool cached = false;
        const std::shared_ptr<const EncodedImage> im = vision->encode(images[i], &cached);
        if (!cached) out.encode_ms += im->encode_ms;
        for (const ImagePiece& p : im->pieces) {
            if (p.kind == ImagePiece::Kind::Text) {
                add_text(p.text, true);  // the layout's markers are control tokens
                continue;
            }
            if (p.kind == ImagePiece::Kind::Token) {  // one vocabulary token, looked up as mtmd does
                const int32_t id = tok.find_token(p.text);
                if (id < 0)
                    throw std::invalid_argument(
                        fmt::format("the vocabulary has no token '{}', which the {} projector's "
                                    "image layout needs (an mmproj for another model?)",
                                    p.text, vision->config().desc->name));
                out.tokens.push_back(id);
                continue;
            }
            const uint64_t tile_hash = im->hash ^ (uint64_t(p.tile) * 0x9E3779B97F4A7C15ull);
            // The grid places the rows for an M-RoPE text model (Qwen2-VL), as mtmd places any image's
            // rows for one; other models take them in sequence.
            PromptEmbeddings e{uint32_t(out.tokens.size()), p.n_tokens, im->tiles.at(p.tile), vision->bidirectional(),
                               ImageGrid{p.grid.cols, p.grid.rows}};
            for (uint32_t r = 0; r < p.n_tokens; ++r) out.tokens.push_back(image_token_id(tile_hash, r));
            out.images.push_back(std::move(e));
        }
    }
    return out;
}

}  // namespace vkllm
