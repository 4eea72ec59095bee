#include "model/mmproj/image_prompt.h"

#include <fmt/format.h>

#include <stdexcept>

namespace vkllm {

namespace {

// Idefics3's layout tokens (mtmd looks them up by text): after a row of slices, before the global
// image, around the global image, and its name.
constexpr std::string_view kRowEnd = "\n", kGlobalBreak = "\n\n", kAround = "<fake_token_around_image>",
                           kGlobal = "<global-img>";
constexpr std::string_view kIdefics3Tokens[] = {kRowEnd, kGlobalBreak, kAround, kGlobal};

// One row per projector type: the markers mtmd (build 9749) writes around an image.
struct PromptDesc {
    ProjectorType type;
    std::string_view begin, end;  // Text around the whole image ("" none)
    bool sliced;  // idefics3's slices and global image
    std::span<const std::string_view> tokens;  // the Token pieces' texts
};

constexpr PromptDesc kPrompts[] = {
    {ProjectorType::Gemma3, "<start_of_image>", "<end_of_image>", false, {}},
    {ProjectorType::Idefics3, "", "", true, kIdefics3Tokens},
    {ProjectorType::Mlp, "", "", false, {}},
    {ProjectorType::Qwen2Vl, "<|vision_start|>", "<|vision_end|>", false, {}},
    {ProjectorType::Qwen25Vl, "<|vision_start|>", "<|vision_end|>", false, {}},
};

const PromptDesc& prompt_desc(ProjectorType t) {
    for (const auto& d : kPrompts)
        if (d.type == t) return d;
    throw std::logic_error("image_prompt: a ProjectorType without its row");
}

ImagePiece token(std::string_view s) { return {ImagePiece::Kind::Token, std::string(s), 0, 1, {}}; }
ImagePiece text(std::string s) { return {ImagePiece::Kind::Text, std::move(s), 0, 0, {}}; }

}  // namespace

std::vector<ImagePiece> image_prompt(const VisionConfig& cfg, const PreprocessedImage& image) {
    const PromptDesc& d = prompt_desc(cfg.type);
    const size_t n_tiles = image.tiles.size();
    const size_t n_slices = size_t(image.grid_rows) * image.grid_cols;
    if (d.sliced ? n_tiles != n_slices + 1 : (n_tiles != 1 || n_slices != 0))
        throw std::invalid_argument(fmt::format("image_prompt: {} tiles in a {} x {} grid, projector '{}' takes {}",
                                                n_tiles, image.grid_cols, image.grid_rows, cfg.desc->name,
                                                d.sliced ? "one per slice and a global one" : "one tile"));
    auto tile = [&](size_t i) {
        const ImageTile& t = image.tiles[i];
        const TileGrid g = tile_grid(cfg, t.nx, t.ny);
        return ImagePiece{ImagePiece::Kind::Tile, {}, uint32_t(i), g.tokens(), g};
    };
    std::vector<ImagePiece> out;
    if (!d.begin.empty()) out.push_back(text(std::string(d.begin)));
    if (d.sliced) {
        for (uint32_t r = 0; r < image.grid_rows; ++r) {
            for (uint32_t c = 0; c < image.grid_cols; ++c) {
                out.push_back(text(fmt::format("{}<row_{}_col_{}>", kAround, r + 1, c + 1)));
                out.push_back(tile(size_t(r) * image.grid_cols + c));
            }
            if (r + 1 < image.grid_rows) out.push_back(token(kRowEnd));
        }
        for (std::string_view t : {kGlobalBreak, kAround, kGlobal}) out.push_back(token(t));
        out.push_back(tile(n_slices));
        out.push_back(token(kAround));
    } else {
        out.push_back(tile(0));
    }
    if (!d.end.empty()) out.push_back(text(std::string(d.end)));
    return out;
}

std::span<const std::string_view> image_layout_tokens(ProjectorType type) { return prompt_desc(type).tokens; }

uint32_t image_prompt_rows(const std::vector<ImagePiece>& pieces) {
    uint32_t n = 0;
    for (const ImagePiece& p : pieces) n += p.n_tokens;
    return n;
}

}  // namespace vkllm
