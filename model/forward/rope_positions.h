// Where M-RoPE (Qwen2-VL's text model, ModelConfig::rope_sections) puts each KV row of a sequence.
// Each token carries four position components (t, h, w, e): text at (p, p, p, 0), row k of an image of
// nx x ny merged patches (raster order: y = k / nx, x = k % nx) starting at position p at
// (p, p + y, p + x, 0), and the text after the image from p + max(nx, ny), as llama.cpp's mtmd counts
// an image's positions, though it takes nx * ny rows. A sequence's position and its KV row thus part
// after an image; RopePositions keeps, per sequence, the images among its rows, from which every row's
// position follows. Models without M-RoPE never add an image: their rows' positions are the rows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vkllm {

// An image's grid of merged patches, nx columns by ny rows, its rows in raster order; {0, 0}: none
// (the rows take sequential positions, as text).
struct ImageGrid {
    uint32_t nx = 0, ny = 0;
    bool empty() const { return nx == 0 && ny == 0; }
    auto operator<=>(const ImageGrid&) const = default;
};

// Throws std::invalid_argument unless `grid` is empty or holds exactly `rows` rows (both sides > 0).
void check_image_grid(ImageGrid grid, uint64_t rows);

class RopePositions {
public:
    // (t, h, w, e) of row `row`.
    std::array<int32_t, 4> at(uint32_t row) const;
    // Rows [first, first + nx * ny) are an image's (a non-empty grid). `first` is at or after the end of
    // every image held (std::logic_error otherwise).
    void add_image(uint32_t first, ImageGrid grid);
    // Keeps rows [0, n): the images from n on are forgotten; an image that n cuts keeps its first rows'
    // positions, and the text from n on continues from the offset before that image.
    void truncate(uint32_t n);
    void clear() { images_.clear(); }
    size_t images() const { return images_.size(); }

private:
    struct Image {
        uint32_t first = 0, rows = 0;  // rows: those kept, at most nx * ny
        ImageGrid grid;
        int32_t pos = 0;  // its t
        // position - row of the text after it: the image's span of positions, or for a cut image the
        // offset before it
        int64_t offset_after() const;
    };
    std::vector<Image> images_;  // in row order
};

// Token i's position in a buffer of `width` components per token (1: t alone; 4: all of them).
inline void put_position(int32_t* out, uint32_t width, uint32_t i, const std::array<int32_t, 4>& p) {
    for (uint32_t c = 0; c < width; ++c) out[size_t(width) * i + c] = p[c];
}

}  // namespace vkllm
