#include "runtime/ops/elementwise.h"

#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
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

// Norms and short softmax rows reduce one row per workgroup. A CPU driver runs a workgroup as SIMD chunks of
// subgroup_size lanes and switches between all of them at each barrier: one chunk per row does
// the same work without the switches (measured on lavapipe, stories260K prefill of 64 tokens:
// 11 rms_norm dispatches 5.9 ms with 256 invocations).
uint32_t row_reduce_size(const DeviceCaps& caps, uint32_t wg) {
    if (!caps.cpu_tuning) return wg;
    uint32_t r = 4;
    while (r < caps.subgroup_size && r < wg) r *= 2;
    return std::min(r, wg);
}

}  // namespace

PipelineDesc small_op_desc(const DeviceCaps& caps, SmallOp op) {
    const uint32_t wg = workgroup_size(caps);
    const bool sg = caps.subgroup_ops();
    switch (op) {
        case SmallOp::RmsNorm: return {sg ? ShaderId::rms_norm_sg : ShaderId::rms_norm, {row_reduce_size(caps, wg)}};
        case SmallOp::Swiglu: return {ShaderId::swiglu, {wg}};
        case SmallOp::Add: return {ShaderId::add, {wg}};
        case SmallOp::Rope: return {ShaderId::rope, {wg}};
        case SmallOp::KvStoreF16: return {ShaderId::kv_store_f16, {wg}};
        case SmallOp::KvStoreF32: return {ShaderId::kv_store_f32, {wg}};
        case SmallOp::KvStoreQ8_0: return {ShaderId::kv_store_q8_0, {wg}};
        case SmallOp::Argmax: return {sg ? ShaderId::argmax_sg : ShaderId::argmax, {wg}};
        case SmallOp::Softmax: return {sg ? ShaderId::softmax_sg : ShaderId::softmax, {wg}};
        case SmallOp::SoftmaxShort: return {sg ? ShaderId::softmax_sg : ShaderId::softmax, {row_reduce_size(caps, wg)}};
        case SmallOp::Topk: return {ShaderId::topk, {wg}};
        case SmallOp::LayerNorm:
            return {sg ? ShaderId::layer_norm_sg : ShaderId::layer_norm, {row_reduce_size(caps, wg)}};
        case SmallOp::Geglu: return {ShaderId::geglu, {wg}};
        case SmallOp::Gelu: return {ShaderId::gelu, {wg}};
        case SmallOp::Scale: return {ShaderId::scale, {wg}};
        case SmallOp::Softcap: return {ShaderId::softcap, {wg}};
        case SmallOp::AddRows: return {ShaderId::add_rows, {wg}};
        case SmallOp::Clamp: return {ShaderId::clamp, {wg}};
        case SmallOp::Relu: return {ShaderId::relu, {wg}};
        case SmallOp::SwigluOai: return {ShaderId::swiglu_oai, {wg}};
        case SmallOp::CopyCols: return {ShaderId::copy_cols, {wg}};
        case SmallOp::GeluQuick: return {ShaderId::gelu_quick, {wg}};
    }
    throw std::logic_error("small_op_desc: unknown op");
}

}  // namespace detail

using detail::SmallOp;

std::vector<PipelineDesc> small_op_pipelines(const Context& ctx) {
    std::vector<PipelineDesc> v;
    for (SmallOp op : detail::kAllSmallOps) v.push_back(detail::small_op_desc(ctx.caps(), op));
    return v;
}

std::vector<PipelineDesc> small_op_pipelines(const Context& ctx, KvType kv_type) {
    auto kv_type_of = [](SmallOp op) -> std::optional<KvType> {
        switch (op) {
            case SmallOp::KvStoreF16: return KvType::F16;
            case SmallOp::KvStoreF32: return KvType::F32;
            case SmallOp::KvStoreQ8_0: return KvType::Q8_0;
            default: return std::nullopt;
        }
    };
    std::vector<PipelineDesc> v;
    for (SmallOp op : detail::kAllSmallOps)
        if (kv_type_of(op).value_or(kv_type) == kv_type) v.push_back(detail::small_op_desc(ctx.caps(), op));
    return v;
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
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, op));
    const uint32_t wg = p.local_size()[0];
    const uint64_t per = detail::items_per_window(caps, 4, name);
    for (uint64_t e0 = 0; e0 < n; e0 += per) {
        const uint32_t ne = uint32_t(std::min<uint64_t>(per, n - e0));
        const detail::Window aw = detail::window(caps, a, e0, ne, 4);
        const detail::Window bw = detail::window(caps, b, e0, ne, 4);
        const detail::Window ow = detail::window(caps, out, e0, ne, 4);
        struct {
            uint32_t n, a_first, b_first, o_first;
        } pc{ne, aw.first, bw.first, ow.first};
        s.dispatch(p, {aw.slice, bw.slice, ow.slice}, pc, detail::grid(caps, (ne + wg - 1) / wg, name), name);
    }
}

// y = f(x; param) element-wise (shaders/unary.comp), split into windows like binary_elementwise.
void unary_elementwise(Context& ctx, CommandStream& s, SmallOp op, const char* name, const BufferSlice& x,
                       const BufferSlice& y, uint32_t n, float param) {
    if (n == 0) return;
    const DeviceCaps& caps = ctx.caps();
    detail::require_bytes(x, uint64_t(n) * 4, name, "x");
    detail::require_bytes(y, uint64_t(n) * 4, name, "y");
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, op));
    const uint32_t wg = p.local_size()[0];
    const uint64_t per = detail::items_per_window(caps, 4, name);
    for (uint64_t e0 = 0; e0 < n; e0 += per) {
        const uint32_t ne = uint32_t(std::min<uint64_t>(per, n - e0));
        const detail::Window xw = detail::window(caps, x, e0, ne, 4);
        const detail::Window yw = detail::window(caps, y, e0, ne, 4);
        struct {
            uint32_t n, x_first, y_first;
            float param;
        } pc{ne, xw.first, yw.first, param};
        s.dispatch(p, {xw.slice, yw.slice}, pc, detail::grid(caps, (ne + wg - 1) / wg, name), name);
    }
}

}  // namespace

void swiglu(Context& ctx, CommandStream& s, const BufferSlice& gate, const BufferSlice& up, const BufferSlice& out,
            uint32_t n) {
    binary_elementwise(ctx, s, SmallOp::Swiglu, "swiglu", gate, up, out, n);
}

void geglu(Context& ctx, CommandStream& s, const BufferSlice& gate, const BufferSlice& up, const BufferSlice& out,
           uint32_t n) {
    binary_elementwise(ctx, s, SmallOp::Geglu, "geglu", gate, up, out, n);
}

void swiglu_oai(Context& ctx, CommandStream& s, const BufferSlice& gate, const BufferSlice& up, const BufferSlice& out,
                uint32_t n) {
    binary_elementwise(ctx, s, SmallOp::SwigluOai, "swiglu_oai", gate, up, out, n);
}

void add(Context& ctx, CommandStream& s, const BufferSlice& a, const BufferSlice& b, const BufferSlice& out,
         uint32_t n) {
    binary_elementwise(ctx, s, SmallOp::Add, "add", a, b, out, n);
}

void gelu(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& y, uint32_t n) {
    unary_elementwise(ctx, s, SmallOp::Gelu, "gelu", x, y, n, 0.0f);
}

void relu(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& y, uint32_t n) {
    unary_elementwise(ctx, s, SmallOp::Relu, "relu", x, y, n, 0.0f);
}

void gelu_quick(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& y, uint32_t n) {
    unary_elementwise(ctx, s, SmallOp::GeluQuick, "gelu_quick", x, y, n, 0.0f);
}

void scale(Context& ctx, CommandStream& s, const BufferSlice& x, uint32_t n, float factor) {
    unary_elementwise(ctx, s, SmallOp::Scale, "scale", x, x, n, factor);
}

void softcap(Context& ctx, CommandStream& s, const BufferSlice& x, uint32_t n, float cap) {
    // cap <= 0 or NaN would turn every element into NaN or flip its sign: a caller's bug.
    if (!(cap > 0.0f) || !std::isfinite(cap))
        throw std::invalid_argument(fmt::format("softcap: cap must be finite and positive, got {}", cap));
    unary_elementwise(ctx, s, SmallOp::Softcap, "softcap", x, x, n, cap);
}

void clamp(Context& ctx, CommandStream& s, const BufferSlice& x, uint32_t n, float limit) {
    if (!(limit > 0.0f) || !std::isfinite(limit))
        throw std::invalid_argument(fmt::format("clamp: limit must be finite and positive, got {}", limit));
    unary_elementwise(ctx, s, SmallOp::Clamp, "clamp", x, x, n, limit);
}

void copy_cols(Context& ctx, CommandStream& s, const ColBlock& src, const ColBlock& dst, uint32_t rows,
               uint32_t width) {
    if (rows == 0 || width == 0) return;
    auto check = [&](const ColBlock& b, const char* what) {
        if (b.col + uint64_t(width) > b.stride)
            throw std::invalid_argument(
                fmt::format("copy_cols: {} columns {}..{} exceed its row of {}", what, b.col, b.col + width, b.stride));
        if (b.buf.offset % 4 != 0)
            throw std::invalid_argument(fmt::format("copy_cols: {} must start on 4 bytes", what));
        const uint64_t elems = uint64_t(rows - 1) * b.stride + b.col + width;
        detail::require_bytes(b.buf, elems * 4, "copy_cols", what);
        return elems;
    };
    const uint64_t src_elems = check(src, "src"), dst_elems = check(dst, "dst");
    if (BufferSlice{src.buf.buffer, src.buf.offset, src_elems * 4}.overlaps(
            {dst.buf.buffer, dst.buf.offset, dst_elems * 4}))
        throw std::invalid_argument("copy_cols: src and dst overlap");
    const DeviceCaps& caps = ctx.caps();
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, SmallOp::CopyCols));
    const uint32_t wg = p.local_size()[0];
    // One window each: the blocks of latent attention are scratch-sized.
    for (uint64_t elems : {src_elems, dst_elems})
        if (elems * 4 + caps.min_storage_buffer_offset_alignment > caps.max_storage_buffer_range)
            throw DeviceLimitError(
                fmt::format("copy_cols: a block spanning {} bytes does not fit one binding ({} bytes)", elems * 4,
                            caps.max_storage_buffer_range));
    const detail::Window sw = detail::window(caps, src.buf, 0, src_elems, 4);
    const detail::Window dw = detail::window(caps, dst.buf, 0, dst_elems, 4);
    struct {
        uint32_t rows, width, src_first, src_stride, dst_first, dst_stride;
    } pc{rows, width, sw.first + src.col, src.stride, dw.first + dst.col, dst.stride};
    const uint64_t n = uint64_t(rows) * width;
    s.dispatch(p, {sw.slice, dw.slice}, pc, detail::grid(caps, (n + wg - 1) / wg, "copy_cols"), "copy_cols");
}

void add_rows(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& b, uint32_t rows, uint32_t dim) {
    if (rows == 0) throw std::invalid_argument("add_rows: rows is 0");
    if (dim == 0) throw std::invalid_argument("add_rows: dim is 0");
    const DeviceCaps& caps = ctx.caps();
    const uint64_t n = uint64_t(rows) * dim;
    detail::require_bytes(x, n * 4, "add_rows", "x");
    detail::require_bytes(b, uint64_t(dim) * 4, "add_rows", "b");
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, SmallOp::AddRows));
    const uint32_t wg = p.local_size()[0];
    detail::items_per_window(caps, uint64_t(dim) * 4, "add_rows");  // b is bound whole: throws if it cannot be
    const detail::Window bw = detail::window(caps, b, 0, dim, 4);
    // x is split by elements, not rows, so that a row longer than a binding still works; each
    // dispatch is told the column its first element falls in.
    const uint64_t per = detail::items_per_window(caps, 4, "add_rows");
    for (uint64_t e0 = 0; e0 < n; e0 += per) {
        const uint32_t ne = uint32_t(std::min<uint64_t>(per, n - e0));
        const detail::Window xw = detail::window(caps, x, e0, ne, 4);
        struct {
            uint32_t n, dim, col0, x_first, b_first;
        } pc{ne, dim, uint32_t(e0 % dim), xw.first, bw.first};
        s.dispatch(p, {xw.slice, bw.slice}, pc, detail::grid(caps, (ne + wg - 1) / wg, "add_rows"), "add_rows");
    }
}

}  // namespace vkllm::ops
