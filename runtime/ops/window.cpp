#include "runtime/ops/window.h"

#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace vkllm::ops::detail {

ByteWindow byte_window(const BufferSlice& s, uint64_t begin, uint64_t end, uint64_t align, uint64_t round) {
    uint64_t first = s.offset + begin;
    uint64_t start = first / align * align;
    uint64_t stop = start + (s.offset + end - start + round - 1) / round * round;
    return {{s.buffer, start, stop - start}, first - start};
}

Window window(const DeviceCaps& caps, const BufferSlice& s, uint64_t first, uint64_t count, uint32_t elem_bytes) {
    const uint64_t align = std::max<uint64_t>(caps.min_storage_buffer_offset_alignment, 1);
    if ((first + count) * elem_bytes > s.size)
        throw std::logic_error(
            fmt::format("window [{}, +{}) x {} B past a binding of {} B", first, count, elem_bytes, s.size));
    // Aligning down keeps the window inside the VkBuffer (it only grows towards offset 0), so a slice
    // at any element-aligned offset can be bound; the extra leading bytes are never written.
    const uint64_t start = s.offset + first * elem_bytes;
    const uint64_t lead = start % align;
    if (start % elem_bytes != 0)
        throw std::invalid_argument(
            fmt::format("binding offset {} is not a multiple of the {}-byte element size", start, elem_bytes));
    return {BufferSlice{s.buffer, start - lead, lead + count * elem_bytes}, uint32_t(lead / elem_bytes)};
}

uint64_t items_per_window(const DeviceCaps& caps, uint64_t item_bytes, const char* op) {
    const uint64_t align = std::max<uint64_t>(caps.min_storage_buffer_offset_alignment, 1);
    const uint64_t range = caps.max_storage_buffer_range;
    const uint64_t n = range > align ? (range - align) / item_bytes : 0;
    if (n == 0)
        throw DeviceLimitError(
            fmt::format("{}: one row of {} bytes does not fit the device's maxStorageBufferRange ({} bytes)", op,
                        item_bytes, range));
    return n;
}

std::array<uint32_t, 3> grid(const DeviceCaps& caps, uint64_t groups, const char* op) {
    const uint64_t gx = std::min<uint64_t>(groups, caps.max_workgroup_count[0]);
    const uint64_t gy = (groups + gx - 1) / gx;
    if (gy > caps.max_workgroup_count[1])
        throw DeviceLimitError(fmt::format("{}: {} workgroups exceed the device's grid ({} x {})", op, groups,
                                           caps.max_workgroup_count[0], caps.max_workgroup_count[1]));
    return {uint32_t(gx), uint32_t(gy), 1};
}

void require_bytes(const BufferSlice& s, uint64_t bytes, const char* op, const char* tensor) {
    if (s.size < bytes)
        throw std::invalid_argument(fmt::format("{}: {} is {} bytes, the shape needs {}", op, tensor, s.size, bytes));
}

void check_pages(const KvPages& pg, uint32_t n_ctx, uint64_t table_rows, const char* op) {
    if (!pg.paged()) return;
    if (pg.block_rows < 2 || !std::has_single_bit(pg.block_rows))
        throw std::invalid_argument(
            fmt::format("{}: block_rows must be a power of two >= 2, got {}", op, pg.block_rows));
    if (pg.pool_rows == 0 || pg.pool_rows % pg.block_rows != 0)
        throw std::invalid_argument(
            fmt::format("{}: the pool's {} rows are not whole blocks of {}", op, pg.pool_rows, pg.block_rows));
    if (pg.table.offset % 4 != 0)
        throw std::invalid_argument(
            fmt::format("{}: the block table must start on 4 bytes, starts at {}", op, pg.table.offset));
    require_bytes(pg.table, table_rows * pg.table_stride(n_ctx) * 4, op, "the block table");
}

}  // namespace vkllm::ops::detail
