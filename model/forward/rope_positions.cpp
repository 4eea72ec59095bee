#include "model/forward/rope_positions.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace vkllm {

void check_image_grid(ImageGrid grid, uint64_t rows) {
    if (grid.empty()) return;
    if (grid.nx == 0 || grid.ny == 0 || uint64_t(grid.nx) * grid.ny != rows)
        throw std::invalid_argument(
            fmt::format("an image grid of {} x {} does not hold its {} rows", grid.nx, grid.ny, rows));
}

int64_t RopePositions::Image::offset_after() const {
    const uint64_t full = uint64_t(grid.nx) * grid.ny;
    if (rows < full) return int64_t(pos) - first;
    return int64_t(pos) + std::max(grid.nx, grid.ny) - (int64_t(first) + int64_t(full));
}

std::array<int32_t, 4> RopePositions::at(uint32_t row) const {
    // The last image starting at or before the row: the row is in it, or text after it.
    auto it =
        std::upper_bound(images_.begin(), images_.end(), row, [](uint32_t r, const Image& im) { return r < im.first; });
    if (it == images_.begin()) return {int32_t(row), int32_t(row), int32_t(row), 0};
    const Image& im = *(it - 1);
    if (row - im.first < im.rows) {
        const uint32_t k = row - im.first;
        return {im.pos, im.pos + int32_t(k / im.grid.nx), im.pos + int32_t(k % im.grid.nx), 0};
    }
    const int32_t p = int32_t(int64_t(row) + im.offset_after());
    return {p, p, p, 0};
}

void RopePositions::add_image(uint32_t first, ImageGrid grid) {
    if (grid.nx == 0 || grid.ny == 0) throw std::logic_error("RopePositions::add_image: an empty grid");
    if (!images_.empty() && first < images_.back().first + images_.back().rows)
        throw std::logic_error(fmt::format("RopePositions::add_image: row {} is inside the image before it", first));
    const uint64_t rows = uint64_t(grid.nx) * grid.ny;
    if (rows > UINT32_MAX - uint64_t(first))
        throw std::invalid_argument(fmt::format("an image of {} x {} rows at row {}", grid.nx, grid.ny, first));
    images_.push_back({first, uint32_t(rows), grid, at(first)[0]});
}

void RopePositions::truncate(uint32_t n) {
    while (!images_.empty() && images_.back().first >= n) images_.pop_back();
    if (!images_.empty()) images_.back().rows = std::min(images_.back().rows, n - images_.back().first);
}

}  // namespace vkllm
