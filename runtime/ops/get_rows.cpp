#include "runtime/ops/get_rows.h"

#include "runtime/ops/linear.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace vkllm::ops {

namespace {

// One variant per weight type (shaders/shaders.cmake); type_traits throws for unknown types.
PipelineDesc get_rows_desc(TensorType type) { return {variant(ShaderFamily::get_rows, type), {64}}; }

struct GetRowsPush {
    uint32_t n_rows, dim, row_bytes, w_base, ids_base, out_base;
};

}  // namespace

std::vector<PipelineDesc> get_rows_pipelines(const Context&, TensorType type) { return {get_rows_desc(type)}; }

void get_rows(Context& ctx, CommandStream& s, TensorType type, const BufferSlice& table, uint32_t n_rows, uint32_t dim,
              const BufferSlice& ids, uint32_t n_ids, const BufferSlice& out) {
    const PipelineDesc desc = get_rows_desc(type);
    const TypeTraits& tt = type_traits(type);
    if (dim == 0 || dim % tt.block_elems != 0)
        throw std::invalid_argument(fmt::format("get_rows: dim={} is not a positive multiple of the {} block ({})", dim,
                                                tt.name, tt.block_elems));
    const uint64_t rb = row_bytes(type, dim), table_bytes = uint64_t(n_rows) * rb;
    if (n_rows == 0) throw std::invalid_argument("get_rows: empty table");
    if (table.size < table_bytes || ids.size < uint64_t(n_ids) * 4 || out.size < uint64_t(n_ids) * dim * 4)
        throw std::invalid_argument(
            fmt::format("get_rows: slices too small (table {} of {}, ids {} of {}, out {} of {})", table.size,
                        table_bytes, ids.size, uint64_t(n_ids) * 4, out.size, uint64_t(n_ids) * dim * 4));
    if (table.offset % (type == TensorType::F32 ? 4 : 2) != 0 || ids.offset % 4 != 0 || out.offset % 4 != 0)
        throw std::invalid_argument("get_rows: misaligned table, ids or out offset");
    if (n_ids == 0) return;

    const DeviceCaps& c = ctx.caps();
    const uint64_t align = std::max<uint64_t>(c.min_storage_buffer_offset_alignment, 4);
    const uint64_t limit = c.max_storage_buffer_range, slack = align + 4;
    const detail::ByteWindow tw = detail::byte_window(table, 0, table_bytes, align);
    if (tw.slice.size > limit)
        throw DeviceLimitError(
            fmt::format("get_rows: the {} table ({} rows x {}, {} bytes) exceeds this device's "
                        "maxStorageBufferRange ({} bytes); look the rows up on the host",
                        tt.name, n_rows, dim, table_bytes, limit));
    if (limit <= slack + uint64_t(dim) * 4)
        throw DeviceLimitError(fmt::format("get_rows: one output row ({} f32) does not fit one binding", dim));
    // One workgroup per id; the out window of a dispatch must fit a binding too.
    const uint32_t step =
        uint32_t(std::min<uint64_t>({(limit - slack) / (uint64_t(dim) * 4), c.max_workgroup_count[0], n_ids}));
    const Pipeline& p = ctx.pipeline(desc);
    for (uint32_t i0 = 0; i0 < n_ids; i0 += step) {
        const uint32_t cnt = std::min(step, n_ids - i0);
        const detail::ByteWindow iw = detail::byte_window(ids, uint64_t(i0) * 4, uint64_t(i0 + cnt) * 4, align);
        const detail::ByteWindow ow =
            detail::byte_window(out, uint64_t(i0) * dim * 4, uint64_t(i0 + cnt) * dim * 4, align);
        GetRowsPush pc{n_rows, dim, uint32_t(rb), uint32_t(tw.inner), uint32_t(iw.inner / 4), uint32_t(ow.inner / 4)};
        s.dispatch(p, {tw.slice, iw.slice, ow.slice}, pc, {cnt, 1, 1}, "get_rows");
    }
}

}  // namespace vkllm::ops
