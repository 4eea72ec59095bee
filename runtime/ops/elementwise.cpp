#include "runtime/ops/elementwise.h"

#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace vkllm::ops {

namespace detail {

namespace {

// 256 invocations suit both the reductions and the memory-bound element-wise ops on desktop and
// mobile GPUs; maxComputeWorkGroupInvocations is at least 128 everywhere, so fall back to a
// smaller power of two only where the device says so.
uint32_t workgroup_size(const DeviceCaps& caps) {
    uint32_t limit = std::min({256u, caps.max_workgroup_invocations, caps.max_workgroup_size[0]});
    uint32_t wg = 1;
    while (wg * 2 <= limit) wg *= 2;
    return wg;
}

}  // namespace

PipelineDesc small_op_desc(const DeviceCaps& caps, SmallOp op) {
    const uint32_t wg = workgroup_size(caps);
    const bool sg = caps.subgroup_ops();
    switch (op) {
        case SmallOp::RmsNorm: return {sg ? "rms_norm_sg" : "rms_norm", {wg}};
        case SmallOp::Swiglu: return {"swiglu", {wg}};
        case SmallOp::Add: return {"add", {wg}};
        case SmallOp::Rope: return {"rope", {wg}};
        case SmallOp::KvStoreF16: return {"kv_store_f16", {wg}};
        case SmallOp::KvStoreF32: return {"kv_store_f32", {wg}};
        case SmallOp::Argmax: return {sg ? "argmax_sg" : "argmax", {wg}};
        case SmallOp::Softmax: return {sg ? "softmax_sg" : "softmax", {wg}};
        case SmallOp::Topk: return {"topk", {wg}};
    }
    throw std::logic_error("small_op_desc: unknown op");
}


}  // namespace detail

using detail::SmallOp;

std::vector<PipelineDesc> small_op_pipelines(const Context& ctx) {
    std::vector<PipelineDesc> v;
    for (SmallOp op : {SmallOp::RmsNorm, SmallOp::Swiglu, SmallOp::Add, SmallOp::Rope, SmallOp::KvStoreF16,
                       SmallOp::KvStoreF32, SmallOp::Argmax, SmallOp::Softmax, SmallOp::Topk})
        v.push_back(detail::small_op_desc(ctx.caps(), op));
    return v;
}

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
        struct { uint32_t rows, dim, x_first, w_first, y_first; float eps; } pc{nr, dim, xw.first, ww.first, yw.first, eps};
        s.dispatch(p, {xw.slice, ww.slice, yw.slice}, pc, detail::grid(caps, nr, "rms_norm"), "rms_norm");
    }
}

namespace {

// out = f(a, b) element-wise, one invocation per element, split into windows that fit the device.
void binary_elementwise(Context& ctx, CommandStream& s, SmallOp op, const char* name, const BufferSlice& a,
                        const BufferSlice& b, const BufferSlice& out, uint32_t n) {
    if (n == 0) return;
    const DeviceCaps& caps = ctx.caps();
    detail::require_bytes(a, uint64_t(n) * 4, name, "input 0");
    detail::require_bytes(b, uint64_t(n) * 4, name, "input 1");
    detail::require_bytes(out, uint64_t(n) * 4, name, "out");
    const PipelineDesc desc = detail::small_op_desc(caps, op);
    const Pipeline& p = ctx.pipeline(desc);
    const uint32_t wg = p.local_size()[0];
    const uint64_t per = detail::items_per_window(caps, 4, name);
    for (uint64_t e0 = 0; e0 < n; e0 += per) {
        const uint32_t ne = uint32_t(std::min<uint64_t>(per, n - e0));
        const detail::Window aw = detail::window(caps, a, e0, ne, 4);
        const detail::Window bw = detail::window(caps, b, e0, ne, 4);
        const detail::Window ow = detail::window(caps, out, e0, ne, 4);
        struct { uint32_t n, a_first, b_first, o_first; } pc{ne, aw.first, bw.first, ow.first};
        s.dispatch(p, {aw.slice, bw.slice, ow.slice}, pc, detail::grid(caps, (ne + wg - 1) / wg, name), name);
    }
}

}  // namespace

void swiglu(Context& ctx, CommandStream& s, const BufferSlice& gate, const BufferSlice& up, const BufferSlice& out,
            uint32_t n) {
    binary_elementwise(ctx, s, SmallOp::Swiglu, "swiglu", gate, up, out, n);
}

void add(Context& ctx, CommandStream& s, const BufferSlice& a, const BufferSlice& b, const BufferSlice& out, uint32_t n) {
    binary_elementwise(ctx, s, SmallOp::Add, "add", a, b, out, n);
}

}  // namespace vkllm::ops
