// Where the device encoder (vision_gpu.h) puts a tile's patches among its rows, and the tables a
// batch of tiles reads on the device: each row's rotary position, the key range its attention
// sees. Pure functions of the config and the tile's size, decided once per batch shape.
//
// Rows run in the reference's order (patch_order in vision_stages.h) except with window attention
// (Qwen2.5-VL): there a window must be a contiguous run of rows for the segmented attention, so the
// rows are kept in window order for the whole encoder: windows row-major over the tile, in each
// window its merge x merge blocks row-major, each block's patches row-major. Every op but attention
// is per row and a full-attention layer sees the whole tile in any order, so only the windowed
// layers' key ranges and the merger's output order (whole blocks, out_block) see the difference.
#pragma once

#include "model/mmproj/mmproj_config.h"
#include "model/vision/vision_stages.h"

#include <array>
#include <cstdint>
#include <vector>

namespace vkllm {

struct VitRowLayout {
    uint32_t gx = 0, gy = 0;  // the tile's grid of patches
    std::vector<PatchPos> rows;  // the patch of each encoder row (patch rows only, no class row)
    // Window attention in at least one layer run: each row's window as rows [first, end) of the tile.
    // Empty: no windows.
    std::vector<std::array<uint32_t, 2>> windows;
    // TokenMerge::Blocks: the projector's row j (the encoder's rows merge^2 j ..) is the tile's
    // embedding row out_block[j] (the reference's block order). Empty for other merges.
    std::vector<uint32_t> out_block;
};

// The layout of an nx x ny tile; std::invalid_argument for a tile the encoder does not take.
VitRowLayout vit_row_layout(const VisionConfig& cfg, uint32_t nx, uint32_t ny);

// Whether any layer run attends within windows (ProjectorDesc::window_attention, VisionConfig::windowed).
bool uses_windows(const VisionConfig& cfg);

// The key range [first, end) of each of `tiles` x n_pos packed rows as attention's segments take
// them (int32 pairs): the row's tile, or with `windows` the row's window inside its tile.
std::vector<int32_t> batch_segments(const VitRowLayout& layout, uint32_t tiles, uint32_t n_pos, bool windows);

// ops::rope's positions for VisionPositions::Rope2d in the vision mode: (y, x, 0, 0) per row.
std::vector<int32_t> batch_rope_positions(const VitRowLayout& layout, uint32_t tiles);

}  // namespace vkllm
