// What llama.cpp's mtmd puts into a prompt in place of one image, per projector type, as data: the
// text or tokens before, between and after the image's tiles, and each tile's embedding rows. The
// prompt marks an image's place with kMediaMarker; the caller splices these pieces there, tokenizes
// the Text pieces (special tokens parsed, as mtmd does), looks Token pieces up as single vocabulary
// tokens and feeds each Tile's embeddings (model/vision) in its rows.
//
//   gemma3    Text "<start_of_image>", the tile, Text "<end_of_image>"
//   idefics3  per slice, row by row: Text "<fake_token_around_image><row_R_col_C>" (1-based), the
//             slice, and after every row but the last Token "\n"; then Token "\n\n",
//             Token "<fake_token_around_image>", Token "<global-img>", the global tile,
//             Token "<fake_token_around_image>"
//   mlp       the tile alone
//   qwen2vl_merger, qwen2.5vl_merger  Text "<|vision_start|>", the tile, Text "<|vision_end|>"
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/mmproj/mmproj_config.h"

namespace vkllm {

// mtmd's default media marker (mtmd_default_marker()).
inline constexpr std::string_view kMediaMarker = "<__media__>";

// How many times `marker` occurs in `text`, without overlaps (the images a prompt places);
// std::invalid_argument for an empty marker (it would occur everywhere).
inline size_t count_media_markers(std::string_view text, std::string_view marker = kMediaMarker) {
    if (marker.empty()) throw std::invalid_argument("count_media_markers: an empty media marker");
    size_t n = 0;
    for (size_t at = text.find(marker); at != std::string_view::npos; at = text.find(marker, at + marker.size())) ++n;
    return n;
}

struct ImagePiece {
    enum class Kind {
        Text,  // text, tokenized with special tokens parsed
        Token,  // one vocabulary token whose text is exactly `text` (mtmd looks these up; it does not tokenize them)
        Tile,  // the embeddings of PreprocessedImage::tiles[tile], n_tokens rows
    } kind;
    std::string text;
    uint32_t tile = 0;
    uint32_t n_tokens = 0;
    TileGrid grid{};  // a Tile's rows as a grid (tile_grid)
};

// The pieces of one image. The tiles are PreprocessedImage's: for idefics3 the slices row by row
// (grid_rows x grid_cols of them) and then the global image (so one more tile than slices; a grid
// of 0 x 0 is the global image alone). std::invalid_argument when the tile count does not fit the
// grid or a tile's size is not one the encoder takes.
std::vector<ImagePiece> image_prompt(const VisionConfig& cfg, const PreprocessedImage& image);

// The vocabulary tokens a projector's layout looks up by text (the Token pieces image_prompt makes:
// Idefics3's "\n", "\n\n", "<fake_token_around_image>", "<global-img>"; none for the others), so
// that a random vocabulary for tests can hold them.
std::span<const std::string_view> image_layout_tokens(ProjectorType type);

// Rows of the text model's input the image takes (its tiles' rows plus the Token pieces; Text pieces
// are counted by the caller's tokenizer).
uint32_t image_prompt_rows(const std::vector<ImagePiece>& pieces);

}  // namespace vkllm
