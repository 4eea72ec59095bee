#include "runtime/ops/sampling_ops.h"

#include "runtime/ops/elementwise.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace vkllm::ops {

using detail::SmallOp;

void argmax(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& out, uint32_t rows, uint32_t n) {
    if (rows == 0) return;
    if (n == 0) throw std::invalid_argument("argmax: n is 0");
    const DeviceCaps& caps = ctx.caps();
    const uint64_t row_bytes = uint64_t(n) * 4;
    detail::require_bytes(x, rows * row_bytes, "argmax", "x");
    detail::require_bytes(out, uint64_t(rows) * 4, "argmax", "out");
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, SmallOp::Argmax));
    const uint64_t per =
        std::min(detail::items_per_window(caps, row_bytes, "argmax"), detail::items_per_window(caps, 4, "argmax"));
    for (uint64_t r0 = 0; r0 < rows; r0 += per) {
        const uint32_t nr = uint32_t(std::min<uint64_t>(per, rows - r0));
        const detail::Window xw = detail::window(caps, x, r0 * n, uint64_t(nr) * n, 4);
        const detail::Window ow = detail::window(caps, out, r0, nr, 4);
        struct {
            uint32_t rows, n, x_first, out_first;
        } pc{nr, n, xw.first, ow.first};
        s.dispatch(p, {xw.slice, ow.slice}, pc, detail::grid(caps, nr, "argmax"), "argmax");
    }
}

void softmax(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& y, uint32_t rows, uint32_t n,
             float temperature) {
    if (rows == 0) return;
    if (n == 0) throw std::invalid_argument("softmax: n is 0");
    if (!(temperature > 0.0f) || !std::isfinite(temperature))
        throw std::invalid_argument(fmt::format("softmax: temperature {} must be positive and finite", temperature));
    const DeviceCaps& caps = ctx.caps();
    const uint64_t row_bytes = uint64_t(n) * 4;
    detail::require_bytes(x, rows * row_bytes, "softmax", "x");
    detail::require_bytes(y, rows * row_bytes, "softmax", "y");
    const Pipeline& p = ctx.pipeline(
        detail::small_op_desc(caps, n <= detail::kSoftmaxShortRow ? SmallOp::SoftmaxShort : SmallOp::Softmax));
    const uint64_t per = detail::items_per_window(caps, row_bytes, "softmax");
    const float inv_temp = float(1.0 / double(temperature));
    for (uint64_t r0 = 0; r0 < rows; r0 += per) {
        const uint32_t nr = uint32_t(std::min<uint64_t>(per, rows - r0));
        const detail::Window xw = detail::window(caps, x, r0 * n, uint64_t(nr) * n, 4);
        const detail::Window yw = detail::window(caps, y, r0 * n, uint64_t(nr) * n, 4);
        struct {
            uint32_t rows, n, x_first, y_first;
            float inv_temp;
        } pc{nr, n, xw.first, yw.first, inv_temp};
        s.dispatch(p, {xw.slice, yw.slice}, pc, detail::grid(caps, nr, "softmax"), "softmax");
    }
}

void topk(Context& ctx, CommandStream& s, const BufferSlice& x, uint32_t n, uint32_t k, const BufferSlice& ids,
          const BufferSlice& vals) {
    if (k == 0 || k > 256 || k > n)
        throw std::invalid_argument(fmt::format("topk: k = {} must be in 1..min(256, n = {})", k, n));
    const DeviceCaps& caps = ctx.caps();
    detail::require_bytes(x, uint64_t(n) * 4, "topk", "x");
    detail::require_bytes(ids, uint64_t(k) * 4, "topk", "ids");
    detail::require_bytes(vals, uint64_t(k) * 4, "topk", "vals");
    detail::items_per_window(caps, uint64_t(n) * 4, "topk");  // one row must fit one binding
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, SmallOp::Topk));
    const detail::Window xw = detail::window(caps, x, 0, n, 4);
    const detail::Window iw = detail::window(caps, ids, 0, k, 4);
    const detail::Window vw = detail::window(caps, vals, 0, k, 4);
    struct {
        uint32_t n, k, x_first, ids_first, vals_first;
    } pc{n, k, xw.first, iw.first, vw.first};
    s.dispatch(p, {xw.slice, iw.slice, vw.slice}, pc, {1, 1, 1}, "topk");
}

}  // namespace vkllm::ops
