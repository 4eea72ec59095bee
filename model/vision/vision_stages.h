// The host-side stages of a vision encoder, around the transformer the device runs: a tile's pixels
// unfolded into patch rows (the patch embedding is then one matmul), and the encoder's rows merged
// into the projector's input rows as the projector type says (model/mmproj's TokenMerge). Plain data
// movement, written from llama.cpp's definitions (clip.cpp's build_inp and the projectors'
// graphs): the host reference and the device encoder both use them.
#pragma once

#include "model/mmproj/mmproj_config.h"

#include <cstdint>
#include <span>
#include <vector>

namespace vkllm {

// (n_patches, 3 * patch^2) rows of tile `t` (3 planes of ny x nx): patch (px, py) is row
// py * (nx / patch) + px, its values in (channel, y, x) order, x fastest: the layout of the patch
// kernel's rows (ggml dims kx, ky, channel, output). With round_f16, every value is rounded to half,
// as ggml's convolution copies its input into the kernel's type (F16 kernels) before multiplying.
std::vector<float> unfold_patches(const ImageTile& t, uint32_t patch, bool round_f16);

// The projector's input rows of one tile from the encoder's output `rows` (n_positions, n_embd) for
// a grid of px x py patches:
//   TokenMerge::None          rows 1..n_patches (LLaVA: llama.cpp's class row is the last, so this
//                             is its selection, the first patch dropped and the class row kept)
//   TokenMerge::AvgPool       merge x merge averages over the grid, row-major (Gemma 3)
//   TokenMerge::PixelShuffle  merge x merge neighbours concatenated, (dy, dx) row-major inside a row,
//                             rows row-major over the merged grid (Idefics3)
// Returns (n_rows, merged_width(cfg)).
std::vector<float> merge_tokens(const VisionConfig& cfg, std::span<const float> rows, uint32_t px, uint32_t py);
uint32_t merged_width(const VisionConfig& cfg);

}  // namespace vkllm
