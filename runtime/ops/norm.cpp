#include "runtime/ops/norm.h"

#include "runtime/ops/elementwise.h"  // detail::small_op_desc

#include <algorithm>
#include <stdexcept>

namespace vkllm::ops {

using detail::SmallOp;

void rms_norm(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& w, const BufferSlice& y,
              uint32_t rows, uint32_t dim, float eps) {
    if (rows == 0) return;
    if (dim == 0) throw std::invalid_argument("rms_norm: dim is 0");
    const DeviceCaps& caps = ctx.caps();
    const uint64_t row_bytes = uint64_t(dim) * 4;
    detail::require_bytes(x, rows * row_bytes, "rms_norm", "x");
    detail::require_bytes(w, row_bytes, "rms_norm", "w");
    detail::require_bytes(y, rows * row_bytes, "rms_norm", "y");
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, SmallOp::RmsNorm));
    const uint64_t per = detail::items_per_window(caps, row_bytes, "rms_norm");
    const detail::Window ww = detail::window(caps, w, 0, dim, 4);
    for (uint64_t r0 = 0; r0 < rows; r0 += per) {
        const uint32_t nr = uint32_t(std::min<uint64_t>(per, rows - r0));
        const detail::Window xw = detail::window(caps, x, r0 * dim, uint64_t(nr) * dim, 4);
        const detail::Window yw = detail::window(caps, y, r0 * dim, uint64_t(nr) * dim, 4);
        struct {
            uint32_t rows, dim, x_first, w_first, y_first;
            float eps;
        } pc{nr, dim, xw.first, ww.first, yw.first, eps};
        s.dispatch(p, {xw.slice, ww.slice, yw.slice}, pc, detail::grid(caps, nr, "rms_norm"), "rms_norm");
    }
}

void layer_norm(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& w, const BufferSlice* b,
                const BufferSlice& y, uint32_t rows, uint32_t dim, float eps) {
    if (rows == 0) throw std::invalid_argument("layer_norm: rows is 0");
    if (dim == 0) throw std::invalid_argument("layer_norm: dim is 0");
    const DeviceCaps& caps = ctx.caps();
    const uint64_t row_bytes = uint64_t(dim) * 4;
    detail::require_bytes(x, rows * row_bytes, "layer_norm", "x");
    detail::require_bytes(w, row_bytes, "layer_norm", "w");
    if (b) detail::require_bytes(*b, row_bytes, "layer_norm", "b");
    detail::require_bytes(y, rows * row_bytes, "layer_norm", "y");
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, SmallOp::LayerNorm));
    const uint64_t per = detail::items_per_window(caps, row_bytes, "layer_norm");
    const detail::Window ww = detail::window(caps, w, 0, dim, 4);
    // Without a bias the shader never reads binding 2, but a binding must exist: w stands in.
    const detail::Window bw = b ? detail::window(caps, *b, 0, dim, 4) : ww;
    for (uint64_t r0 = 0; r0 < rows; r0 += per) {
        const uint32_t nr = uint32_t(std::min<uint64_t>(per, rows - r0));
        const detail::Window xw = detail::window(caps, x, r0 * dim, uint64_t(nr) * dim, 4);
        const detail::Window yw = detail::window(caps, y, r0 * dim, uint64_t(nr) * dim, 4);
        struct {
            uint32_t rows, dim, x_first, w_first, b_first, y_first, has_bias;
            float eps;
        } pc{nr, dim, xw.first, ww.first, bw.first, yw.first, b ? 1u : 0u, eps};
        s.dispatch(p, {xw.slice, ww.slice, bw.slice, yw.slice}, pc, detail::grid(caps, nr, "layer_norm"), "layer_norm");
    }
}

}  // namespace vkllm::ops
