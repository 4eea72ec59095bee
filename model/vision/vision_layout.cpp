#include "model/vision/vision_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace vkllm {

bool uses_windows(const VisionConfig& cfg) {
    if (!cfg.desc->window_attention) return false;
    for (uint32_t l = 0; l < cfg.n_layer_used; ++l)
        if (cfg.windowed(l)) return true;
    return false;
}

VitRowLayout vit_row_layout(const VisionConfig& cfg, uint32_t nx, uint32_t ny) {
    tile_tokens(cfg, nx, ny);  // throws for a size the encoder does not take
    VitRowLayout t;
    t.gx = nx / cfg.patch_size;
    t.gy = ny / cfg.patch_size;
    const uint32_t m = cfg.merge;
    if (!uses_windows(cfg)) {
        t.rows = patch_order(cfg, t.gx, t.gy);
    } else {
        // Windows of `side` blocks a side from the top left; the last row and column of windows may
        // be partial. The config checked that a window holds at least one block.
        const uint32_t side = cfg.window_px / (cfg.patch_size * m), bw = t.gx / m, bh = t.gy / m;
        t.rows.reserve(size_t(t.gx) * t.gy);
        t.windows.reserve(size_t(t.gx) * t.gy);
        for (uint32_t wy = 0; wy < bh; wy += side)
            for (uint32_t wx = 0; wx < bw; wx += side) {
                const uint32_t first = uint32_t(t.rows.size());
                for (uint32_t by = wy; by < std::min(wy + side, bh); ++by)
                    for (uint32_t bx = wx; bx < std::min(wx + side, bw); ++bx)
                        for (uint32_t dy = 0; dy < m; ++dy)
                            for (uint32_t dx = 0; dx < m; ++dx) t.rows.push_back({by * m + dy, bx * m + dx});
                const uint32_t end = uint32_t(t.rows.size());
                t.windows.insert(t.windows.end(), end - first, {first, end});
            }
    }
    if (cfg.desc->merge == TokenMerge::Blocks) {
        const uint32_t per_block = m * m;
        for (size_t j = 0; j < t.rows.size(); j += per_block)
            t.out_block.push_back(t.rows[j].y / m * (t.gx / m) + t.rows[j].x / m);
    }
    return t;
}

std::vector<int32_t> batch_segments(const VitRowLayout& layout, uint32_t tiles, uint32_t n_pos, bool windows) {
    if (windows && layout.windows.size() != n_pos)
        throw std::logic_error(
            fmt::format("batch_segments: {} windowed rows for tiles of {} rows", layout.windows.size(), n_pos));
    std::vector<int32_t> out;
    out.reserve(size_t(tiles) * n_pos * 2);
    for (uint32_t i = 0; i < tiles; ++i) {
        const uint32_t base = i * n_pos;
        for (uint32_t r = 0; r < n_pos; ++r) {
            const std::array<uint32_t, 2> range = windows ? layout.windows[r] : std::array<uint32_t, 2>{0, n_pos};
            out.push_back(int32_t(base + range[0]));
            out.push_back(int32_t(base + range[1]));
        }
    }
    return out;
}

std::vector<int32_t> batch_rope_positions(const VitRowLayout& layout, uint32_t tiles) {
    const std::vector<int32_t> tile = vit_rope_positions(layout.rows);
    std::vector<int32_t> out;
    out.reserve(size_t(tiles) * tile.size());
    for (uint32_t i = 0; i < tiles; ++i) out.insert(out.end(), tile.begin(), tile.end());
    return out;
}

}  // namespace vkllm
