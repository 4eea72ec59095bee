// Temporary stand-in for model/image/image_preprocess.h (another part of issue 55 writes that folder):
// the same declarations, so model/mmproj and model/vision build before it lands. When it does, the
// includes of this header switch to model/image/image_preprocess.h and this file goes.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace vkllm {

enum class PreprocessKind {
    Square,  // Gemma 3 (SigLIP): resized to image_size x image_size
    PadSquare,  // LLaVA-1.5 (projector "mlp"/"mlp_norm"): padded to a square then resized
    Idefics3,  // SmolVLM / Idefics3: longest edge to preproc_image_size, split into image_size tiles + a global one
    SmartResize,  // Qwen2-VL / Qwen2.5-VL: dimensions rounded to multiples of patch*merge within min/max pixels
};

struct PreprocessSpec {
    PreprocessKind kind;
    uint32_t image_size = 0, patch_size = 0;
    std::array<float, 3> mean{}, std{};
    uint32_t preproc_image_size = 0;  // Idefics3 (clip.vision.preproc_image_size; mtmd's default when absent)
    uint32_t merge = 0;  // SmartResize: spatial merge size
    uint32_t min_pixels = 0, max_pixels = 0;  // SmartResize (mtmd's defaults when the file has none)
};

struct ImageTile {
    uint32_t nx = 0, ny = 0;
    std::vector<float> chw;  // 3 planes of ny x nx, normalized
};

struct PreprocessedImage {
    std::vector<ImageTile> tiles;  // in the order mtmd encodes them
    uint32_t grid_cols = 0, grid_rows = 0;  // Idefics3 slices (0: not sliced)
};

}  // namespace vkllm
