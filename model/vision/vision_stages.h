// The host-side stages of a vision encoder, around the transformer the device runs: a tile's pixels
// unfolded into patch rows (the patch embedding is then one matmul), and the encoder's rows merged
// into the projector's input rows as the projector type says (model/mmproj's TokenMerge). Plain data
// movement, written from llama.cpp's definitions (clip.cpp's build_inp and the projectors'
// graphs): the host reference and the device encoder both use them, and both read the file's
// vectors and matrices as f32 through tensor_f32.
#pragma once

#include "model/gguf/gguf.h"
#include "model/mmproj/mmproj_config.h"
#include "runtime/ops/rope.h"

#include <cstdint>
#include <span>
#include <vector>

namespace vkllm {

// A tensor's values as f32, decoded row by row (rows of ne0: a block type's blocks never straddle rows).
std::vector<float> tensor_f32(const GgufFile& f, const GgufTensorInfo& t);

// A patch's place in its tile's grid of patches.
struct PatchPos {
    uint32_t y, x;
};

// The encoder's rows of a gx x gy grid (the host reference's order, and the order of the
// embeddings): row-major over the grid, or for TokenMerge::Blocks merge x merge blocks row-major,
// each block's patches row-major (Qwen2-VL's).
std::vector<PatchPos> patch_order(const VisionConfig& cfg, uint32_t gx, uint32_t gy);

// VisionPositions::Rope2d as ops::rope (and ref::rope) take it: the vision mode, in each head of d
// values d/4 pairs turned by a patch's row and d/4 by its column, from positions (y, x, 0, 0) per
// row (vit_rope_positions, rows in the encoder's order).
ops::RopeParams vit_rope_params(const VisionConfig& cfg);
std::vector<int32_t> vit_rope_positions(std::span<const PatchPos> rows);

// (n_patches, 3 * patch^2) rows of tile `t` (3 planes of ny x nx): row i is patch order[i], or with
// no order patch (px, py) is row py * (nx / patch) + px; its values in (channel, y, x) order, x
// fastest: the layout of the patch kernel's rows (ggml dims kx, ky, channel, output). With round_f16,
// every value is rounded to half, as ggml's convolution copies its input into the kernel's type (F16
// kernels) before multiplying. std::invalid_argument for a tile that is not whole patches or an
// order that is not one patch of it per row.
std::vector<float> unfold_patches(const ImageTile& t, uint32_t patch, bool round_f16,
                                  std::span<const PatchPos> order = {});

// The projector's input rows of one tile from the encoder's output `rows` (n_positions, n_embd) for
// a grid of px x py patches:
//   TokenMerge::None          rows 1..n_patches (LLaVA: llama.cpp's class row is the last, so this
//                             is its selection, the first patch dropped and the class row kept)
//   TokenMerge::AvgPool       merge x merge averages over the grid, row-major (Gemma 3)
//   TokenMerge::PixelShuffle  merge x merge neighbours concatenated, (dy, dx) row-major inside a row,
//                             rows row-major over the merged grid (Idefics3)
//   TokenMerge::Blocks        refused: the encoder's rows are already block by block, a block's
//                             merge^2 rows one projector row as they lie (Qwen2-VL)
// Returns (n_rows, merged_width(cfg)); merged_width is n_embd * merge^2 for PixelShuffle and Blocks.
std::vector<float> merge_tokens(const VisionConfig& cfg, std::span<const float> rows, uint32_t px, uint32_t py);
uint32_t merged_width(const VisionConfig& cfg);

}  // namespace vkllm
