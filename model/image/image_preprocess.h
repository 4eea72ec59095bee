// RGB images to the normalised float tiles a projector's vision encoder takes, as llama.cpp's mtmd
// prepares them (tools/mtmd/mtmd-image.cpp, with the per-projector settings of clip.cpp's
// load_hparams). Which of mtmd's preprocessors a projector uses, with its filter and padding, is one
// row of a table in image_preprocess.cpp per PreprocessKind; the sizes come from the mmproj file
// through PreprocessSpec (filled by model/mmproj/). Tiles are u8 images resized and cropped first,
// then normalised per channel as (v / 255 - mean) / std in float, as mtmd does.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "model/image/image_decode.h"

namespace vkllm {

enum class PreprocessKind {
    Square,  // Gemma 3 (SigLIP): fitted into image_size x image_size, bilinear, padded black
    PadSquare,  // LLaVA-1.5 (projector "mlp"/"mlp_norm"): fitted into a square, bicubic, padded (122, 116, 104)
    Idefics3,  // SmolVLM / Idefics3: longest edge to preproc_image_size, split into image_size tiles + a global one
    SmartResize,  // Qwen2-VL / Qwen2.5-VL: dimensions rounded to multiples of patch*merge within min/max pixels
};

std::string_view preprocess_kind_name(PreprocessKind k);  // "square", "pad_square", "idefics3", "smart_resize"

struct PreprocessSpec {
    PreprocessKind kind = PreprocessKind::Square;
    uint32_t image_size = 0, patch_size = 0;
    std::array<float, 3> mean{}, std{};
    // Idefics3 (clip.vision.preproc_image_size): the longest edge the image is scaled to before it is
    // cut into image_size tiles. 0, as mtmd reads a file without the key: no tiles, the global one only.
    uint32_t preproc_image_size = 0;
    uint32_t merge = 0;  // SmartResize: spatial merge size (at least 1)
    uint32_t min_pixels = 0, max_pixels = 0;  // SmartResize: the pixel budget of the resized image
};

// mtmd's Qwen2-VL budget when the user sets none: 8 to 4096 merged tokens, each (patch * merge)^2
// pixels.
inline constexpr uint32_t kSmartResizeMinTokens = 8, kSmartResizeMaxTokens = 4096;

// Spec values beyond these are refused (a hostile file must not make a tile of gigabytes): every
// side at most 4096 (Idefics3 cuts at most 2048, Gemma 3 takes 896), SmartResize's max_pixels and
// the image it resizes to at most 16 Mi pixels (mtmd's Qwen2-VL default budget is 3.2 M).
inline constexpr uint32_t kMaxPreprocessSide = 4096;
inline constexpr uint32_t kMaxSmartResizePixels = 16u << 20;

struct ImageTile {
    uint32_t nx = 0, ny = 0;
    std::vector<float> chw;  // 3 planes (R, G, B) of ny x nx, row-major, normalised
};

struct PreprocessedImage {
    // In the order mtmd encodes them: Idefics3's slices row by row, then the global tile (mtmd keeps
    // the global one apart as the "overview" and places it after the slices); one tile otherwise.
    std::vector<ImageTile> tiles;
    uint32_t grid_cols = 0, grid_rows = 0;  // Idefics3 slices (0: not sliced)
};

// Throws std::invalid_argument naming the field: a zero patch or image size, an image size that is
// not a multiple of the patch, a zero or non-finite std, a non-finite mean, merge 0, min_pixels above
// max_pixels, values above the limits above.
void check_preprocess_spec(const PreprocessSpec& spec);

// Throws std::invalid_argument for a bad spec (above) or an empty image / pixels not matching its size.
PreprocessedImage preprocess_image(const RgbImage& img, const PreprocessSpec& spec);

// The sizes alone, for token counts before any pixel work: every kind yields one tile of
// tile_nx x tile_ny (Idefics3: the global one) after grid_cols x grid_rows slices of
// slice_nx x slice_ny.
struct TileLayout {
    uint32_t tile_nx = 0, tile_ny = 0;
    uint32_t grid_cols = 0, grid_rows = 0;
    uint32_t slice_nx = 0, slice_ny = 0;
    uint32_t n_tiles() const { return grid_cols * grid_rows + 1; }
};
// Same checks and exceptions as preprocess_image.
TileLayout preprocess_layout(uint32_t nx, uint32_t ny, const PreprocessSpec& spec);

}  // namespace vkllm
