#include "runtime/ops/moe.h"

#include "runtime/ops/kernel_table.h"
#include "runtime/ops/window.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace vkllm::ops {

namespace {

constexpr uint32_t kRouteMaxExperts = 1024, kRouteMaxK = 64;  // moe_route.comp's MAX_E, MAX_K

// Workgroup of the router and the combine: 64 invocations (a power of two within every device's limit).
uint32_t small_wg(const DeviceCaps& c) {
    uint32_t wg = 64;
    while (wg > 1 && wg > c.max_workgroup_invocations) wg /= 2;
    return wg;
}

struct RoutePush {
    uint32_t E, K, l_base, ids_base, w_base, gating, norm;
    float scale;
    uint32_t has_bias, b_base, n_group, group_used;
};
constexpr uint32_t kRouteMaxGroups = 64;  // moe_route.comp's MAX_GROUPS
struct CombinePush {
    uint32_t dim, K, y_base, w_base, x_base, s_base, g_base, has_shared, has_gate;
};
// matvec.comp's push constants with EXPERT_IDS (runtime/ops/linear.cpp's LinearPush, then the ids).
struct IdPush {
    uint32_t n, k, row_bytes, w_base, x_base, y_base, r_base, y_stride, has_res, x_vec4, b_base, has_bias;
    uint32_t g_base, g_vec4;
    float eps;
    uint32_t ids_base, e_first, e_count, expert_bytes, x_div;
};

// matvec reads X as vec4s: its windows start on 16 bytes as well as the device's alignment.
uint64_t binding_align(const DeviceCaps& c) { return std::max<uint64_t>(c.min_storage_buffer_offset_alignment, 16); }
// Uniform X windows meet both offset alignments, and fit the 64 KiB matvec_input.glsl declares.
uint64_t uniform_align(const DeviceCaps& c) {
    return std::max<uint64_t>(binding_align(c), c.min_uniform_buffer_offset_alignment);
}

void check_fits(const DeviceCaps& c, const char* op, const char* what, uint64_t bytes) {
    if (bytes + binding_align(c) + 16 > c.max_storage_buffer_range)
        throw DeviceLimitError(fmt::format("{}: {} ({} bytes) does not fit one binding ({} bytes)", op, what, bytes,
                                           c.max_storage_buffer_range));
}

// Whole experts of expert_bytes that one W binding holds (at least one, else DeviceLimitError naming
// the expert's shape): moe_matvec and moe_matmul dispatch once per such window.
uint64_t experts_per_window(const DeviceCaps& c, const char* op, uint64_t expert_bytes, uint32_t n, uint32_t k) {
    const uint64_t slack = binding_align(c) + 16;
    const uint64_t per = c.max_storage_buffer_range > slack ? (c.max_storage_buffer_range - slack) / expert_bytes : 0;
    if (per == 0)
        throw DeviceLimitError(
            fmt::format("{}: one expert ({} rows of {} elements, {} bytes) does not fit one "
                        "binding (maxStorageBufferRange {} bytes)",
                        op, n, k, expert_bytes, c.max_storage_buffer_range));
    return per;
}

// The expert biases (f32 [n_expert][n]) where given: long enough, on 4 bytes, one binding.
void check_expert_bias(const DeviceCaps& c, const char* op, const BufferSlice* bias, uint64_t bytes) {
    if (!bias) return;
    detail::require_bytes(*bias, bytes, op, "expert biases");
    if (bias->offset % 4 != 0)
        throw std::invalid_argument(fmt::format("{}: the expert biases must start on 4 bytes", op));
    check_fits(c, op, "expert biases", bytes);
}

}  // namespace

void check_expert_binding(const DeviceCaps& caps, const std::string& what, TensorType wtype, uint32_t n, uint32_t k) {
    (void)experts_per_window(caps, what.c_str(), uint64_t(n) * row_bytes(wtype, k), n, k);
}

void check_route(const MoeRouteParams& p) {
    if (p.n_expert == 0 || p.n_expert > kRouteMaxExperts)
        throw std::invalid_argument(fmt::format("moe_route: {} experts (1..{})", p.n_expert, kRouteMaxExperts));
    if (p.k == 0 || p.k > std::min(p.n_expert, kRouteMaxK))
        throw std::invalid_argument(fmt::format("moe_route: {} experts per token of {} (1..{})", p.k, p.n_expert,
                                                std::min(p.n_expert, kRouteMaxK)));
    if (uint32_t(p.gating) > uint32_t(MoeGating::SoftmaxTopK))
        throw std::invalid_argument(fmt::format("moe_route: gating {}", uint32_t(p.gating)));
    if (!std::isfinite(p.scale)) throw std::invalid_argument("moe_route: the weight scale is not finite");
    if (p.n_group == 0 || p.n_group > kRouteMaxGroups || p.n_expert % p.n_group != 0)
        throw std::invalid_argument(
            fmt::format("moe_route: {} expert groups of {} experts (1..{}, dividing the experts)", p.n_group,
                        p.n_expert, kRouteMaxGroups));
    if (p.n_group > 1) {
        const uint32_t per = p.n_expert / p.n_group;
        if (per < 2)
            throw std::invalid_argument(
                fmt::format("moe_route: groups of {} expert: a group scores its two best", per));
        if (p.group_used == 0 || p.group_used > p.n_group || uint64_t(p.group_used) * per < p.k)
            throw std::invalid_argument(
                fmt::format("moe_route: {} of {} groups of {} experts leave fewer than the {} experts per token",
                            p.group_used, p.n_group, per, p.k));
    }
}

void moe_route(Context& ctx, CommandStream& s, const MoeRouteParams& p, const BufferSlice& logits,
               const BufferSlice& ids, const BufferSlice& weights, uint32_t n, const BufferSlice* bias) {
    check_route(p);
    if (p.bias != (bias != nullptr))
        throw std::invalid_argument(p.bias ? "moe_route: the selection bias is missing"
                                           : "moe_route: a bias the parameters do not ask for");
    if (bias) {
        detail::require_bytes(*bias, uint64_t(p.n_expert) * 4, "moe_route", "selection bias");
        if (bias->offset % 4 != 0) throw std::invalid_argument("moe_route: the selection bias must start on 4 bytes");
    }
    if (n == 0) return;
    const DeviceCaps& c = ctx.caps();
    if (n > c.max_workgroup_count[0])
        throw DeviceLimitError(
            fmt::format("moe_route: {} tokens exceed the device's {} workgroups", n, c.max_workgroup_count[0]));
    detail::require_bytes(logits, uint64_t(n) * p.n_expert * 4, "moe_route", "logits");
    detail::require_bytes(ids, uint64_t(n) * p.k * 4, "moe_route", "ids");
    detail::require_bytes(weights, uint64_t(n) * p.k * 4, "moe_route", "weights");
    check_fits(c, "moe_route", "the logits", uint64_t(n) * p.n_expert * 4);
    const detail::Window lw = detail::window(c, logits, 0, uint64_t(n) * p.n_expert, 4);
    const detail::Window iw = detail::window(c, ids, 0, uint64_t(n) * p.k, 4);
    const detail::Window ww = detail::window(c, weights, 0, uint64_t(n) * p.k, 4);
    // Without a bias the kernel never reads binding 3: the logits stand in.
    const detail::Window bw = bias ? detail::window(c, *bias, 0, p.n_expert, 4) : lw;
    const RoutePush pc{
        p.n_expert,       p.k,     lw.first,       iw.first, ww.first,  uint32_t(p.gating),
        p.norm ? 1u : 0u, p.scale, bias ? 1u : 0u, bw.first, p.n_group, p.n_group > 1 ? p.group_used : 1u};
    s.dispatch(ctx.pipeline({ShaderId::moe_route, {small_wg(c)}}), {lw.slice, iw.slice, ww.slice, bw.slice}, pc,
               {n, 1, 1}, "moe_route");
}

PipelineDesc MoeMatvecPlan::pipeline() const {
    const uint32_t act = MatvecInput::act_id(input);
    if (dot) return {variant(family, wtype), {wg, rows, 1, uint32_t(w_aligned), 0}};
    return {variant(family, wtype), {wg, rows, 1, uint32_t(w_aligned), 0, act}};
}

std::vector<PipelineDesc> MoeMatvecPlan::pipelines() const {
    if (!dot) return {pipeline()};
    return {quantize_q8_1_pipeline(input), pipeline()};
}

MoeMatvecPlan plan_moe_matvec(const DeviceCaps& caps, TensorType wtype, uint32_t n, uint32_t k, uint32_t x_rows,
                              MatvecInput::Kind input, bool allow_dot) {
    if (!is_supported_type(uint32_t(wtype)))
        throw std::invalid_argument(fmt::format("moe_matvec: unsupported weight type {}", uint32_t(wtype)));
    if (input == MatvecInput::Kind::RmsNorm)
        throw std::invalid_argument("moe_matvec: the RMSNorm input is not fused (the router needs the normed x too)");
    if (x_rows == 0) throw std::invalid_argument("moe_matvec: no rows of X");
    MoeMatvecPlan p;
    p.wtype = wtype;
    p.input = input;
    const TypeTraits& tt = type_traits(wtype);
    p.w_aligned =
        k % tt.block_elems == 0 && row_bytes(wtype, k) % 4 == 0 && (tt.block_elems == 1 || tt.block_bytes % 4 == 0);
    p.subgroup = caps.subgroup_ops();
    p.x_rows = x_rows;
    p.x_rows_per_dispatch = x_rows;
    const LinearShape shape{wtype, x_rows, n, k, true, input, allow_dot};
    configure(caps, pick_kernel(caps, LinearProblem::ExpertMatvec, shape), shape, p);
    return p;
}

void moe_matvec(Context& ctx, CommandStream& s, const MoeMatvecPlan& plan, const BufferSlice& w, uint32_t n_expert,
                const BufferSlice& x, uint32_t x_div, const BufferSlice& ids, const BufferSlice& y, uint32_t slots,
                uint32_t n, uint32_t k, const MatvecInput& input, const BufferSlice* bias) {
    const TypeTraits& tt = type_traits(plan.wtype);
    if (n == 0 || k == 0 || n_expert == 0 || x_div == 0)
        throw std::invalid_argument(
            fmt::format("moe_matvec: empty shape n={} k={} experts={} x_div={}", n, k, n_expert, x_div));
    if (k % tt.block_elems != 0)
        throw std::invalid_argument(
            fmt::format("moe_matvec: k={} is not a multiple of the {} block ({})", k, tt.name, tt.block_elems));
    if (slots == 0) return;
    if (slots % x_div != 0)
        throw std::invalid_argument(fmt::format("moe_matvec: {} slots are not rows of {}", slots, x_div));
    if (input.kind != plan.input) throw std::invalid_argument("moe_matvec: the input kind differs from the plan's");
    if (slots / x_div != plan.x_rows)
        throw std::invalid_argument(
            fmt::format("moe_matvec: {} rows of X, the plan's are {}", slots / x_div, plan.x_rows));
    const DeviceCaps& c = ctx.caps();
    const uint64_t rb = row_bytes(plan.wtype, k), expert_bytes = uint64_t(n) * rb;
    const uint64_t x_bytes = uint64_t(slots / x_div) * k * 4, y_bytes = uint64_t(slots) * n * 4;
    detail::require_bytes(w, uint64_t(n_expert) * expert_bytes, "moe_matvec", "W");
    detail::require_bytes(x, x_bytes, "moe_matvec", "X");
    detail::require_bytes(y, y_bytes, "moe_matvec", "Y");
    detail::require_bytes(ids, uint64_t(slots) * 4, "moe_matvec", "ids");
    const bool glu = MatvecInput::glu(input.kind);
    if (glu) detail::require_bytes(input.up, x_bytes, "moe_matvec", "GLU up rows");
    const uint64_t b_bytes = uint64_t(n_expert) * n * 4;
    check_expert_bias(c, "moe_matvec", bias, b_bytes);
    if (plan.w_aligned && w.offset % 4 != 0)
        throw std::invalid_argument(
            "moe_matvec: the plan reads W as aligned words but W's slice is not 4-byte aligned");
    check_fits(c, "moe_matvec", "X", x_bytes);
    check_fits(c, "moe_matvec", "Y", y_bytes);
    if (slots > c.max_workgroup_count[0] || (n + plan.rows - 1) / plan.rows > c.max_workgroup_count[1])
        throw DeviceLimitError(
            fmt::format("moe_matvec: {} slots of {} rows exceed the device's workgroup grid", slots, n));
    const uint64_t per_window = experts_per_window(c, "moe_matvec", expert_bytes, n, k);
    if (plan.dot) {
        // X's rows (the GLU applied) as Q8_1 blocks, then matvec_dot_id over every slot at once.
        const uint64_t align = binding_align(c), q_bytes = uint64_t(plan.x_rows) * q8_1_row_bytes(k);
        detail::require_bytes(input.q8, q_bytes, "moe_matvec", "Q8_1 scratch (MatvecInput::q8)");
        check_fits(c, "moe_matvec", "X as Q8_1", q_bytes);
        if (!input.q8_ready) quantize_q8_1(ctx, s, x, input.q8, plan.x_rows, k, input);
        const detail::ByteWindow qw = detail::byte_window(input.q8, 0, q_bytes, align);
        const detail::ByteWindow yw = detail::byte_window(y, 0, y_bytes, align);
        const detail::ByteWindow iw = detail::byte_window(ids, 0, uint64_t(slots) * 4, align);
        const detail::ByteWindow bw = bias ? detail::byte_window(*bias, 0, b_bytes, align) : yw;
        const Pipeline& p = ctx.pipeline(plan.pipeline());
        struct {
            uint32_t n, k, row_bytes, w_base, x_base, xq_row_words, y_base, r_base, y_stride, has_res, b_base, has_bias;
            float eps;
            uint32_t ids_base, e_first, e_count, expert_bytes, x_div;
        } pc{n,
             k,
             uint32_t(rb),
             0,
             uint32_t(qw.inner / 4),
             uint32_t(q8_1_row_bytes(k) / 4),
             uint32_t(yw.inner / 4),
             uint32_t(yw.inner / 4),
             n,
             0,
             uint32_t(bw.inner / 4),
             bias ? 1u : 0u,
             0.0f,
             uint32_t(iw.inner / 4),
             0,
             0,
             uint32_t(expert_bytes),
             x_div};
        for (uint64_t e0 = 0; e0 < n_expert; e0 += per_window) {
            const uint64_t count = std::min<uint64_t>(per_window, n_expert - e0);
            const detail::ByteWindow ww =
                detail::byte_window(w, e0 * expert_bytes, (e0 + count) * expert_bytes, align, 4);
            pc.w_base = uint32_t(ww.inner);
            pc.e_first = uint32_t(e0);
            pc.e_count = uint32_t(count);
            const BufferSlice bindings[] = {ww.slice, qw.slice, yw.slice, yw.slice, bw.slice, iw.slice};
            s.dispatch(p, bindings, &pc, sizeof(pc), {slots, (n + plan.rows - 1) / plan.rows, 1}, "matvec_id");
        }
        return;
    }

    const uint64_t align = binding_align(c), x_align = plan.uniform_x ? uniform_align(c) : align;
    const detail::ByteWindow bias_w = bias ? detail::byte_window(*bias, 0, b_bytes, align) : detail::ByteWindow{};
    const Pipeline& p = ctx.pipeline(plan.pipeline());
    const uint64_t x_row_bytes = uint64_t(k) * 4;
    // Each group of X rows (with its slots, ids and Y rows) is a dispatch per window of experts.
    for (uint32_t r0 = 0; r0 < plan.x_rows; r0 += plan.x_rows_per_dispatch) {
        const uint32_t rows = std::min(plan.x_rows_per_dispatch, plan.x_rows - r0);
        const uint64_t s0 = uint64_t(r0) * x_div, ns = uint64_t(rows) * x_div;
        const detail::ByteWindow xw = detail::byte_window(x, r0 * x_row_bytes, (r0 + rows) * x_row_bytes, x_align, 16);
        const detail::ByteWindow gw =
            glu ? detail::byte_window(input.up, r0 * x_row_bytes, (r0 + rows) * x_row_bytes, x_align, 16) : xw;
        const detail::ByteWindow yw = detail::byte_window(y, s0 * n * 4, (s0 + ns) * n * 4, align);
        const detail::ByteWindow iw = detail::byte_window(ids, s0 * 4, (s0 + ns) * 4, align);
        const detail::ByteWindow bw = bias ? bias_w : yw;  // unread without biases
        const uint32_t x_vec4 = xw.inner % 16 == 0 && k % 4 == 0, g_vec4 = gw.inner % 16 == 0 && k % 4 == 0;
        for (uint64_t e0 = 0; e0 < n_expert; e0 += per_window) {
            const uint64_t count = std::min<uint64_t>(per_window, n_expert - e0);
            // The 8-byte loads of the *_u64_* variants need W's window to end on an 8-byte word.
            const detail::ByteWindow ww =
                detail::byte_window(w, e0 * expert_bytes, (e0 + count) * expert_bytes, align, plan.wide_loads ? 8 : 4);
            const IdPush pc{n,
                            k,
                            uint32_t(rb),
                            uint32_t(ww.inner),
                            uint32_t(xw.inner / 4),
                            uint32_t(yw.inner / 4),
                            uint32_t(yw.inner / 4),
                            n,
                            0,
                            x_vec4,
                            uint32_t(bw.inner / 4),
                            bias ? 1u : 0u,
                            uint32_t(gw.inner / 4),
                            g_vec4,
                            0.0f,
                            uint32_t(iw.inner / 4),
                            uint32_t(e0),
                            uint32_t(count),
                            uint32_t(expert_bytes),
                            x_div};
            s.dispatch(p, {ww.slice, xw.slice, yw.slice, yw.slice, bw.slice, gw.slice, iw.slice}, pc,
                       {uint32_t(ns), (n + plan.rows - 1) / plan.rows, 1}, "matvec_id");
        }
    }
}

void moe_combine(Context& ctx, CommandStream& s, const BufferSlice& y, const BufferSlice& weights, const BufferSlice& x,
                 uint32_t n, uint32_t k, uint32_t dim, const BufferSlice* shared, const BufferSlice* shared_gate) {
    if (n == 0) return;
    if (k == 0 || dim == 0) throw std::invalid_argument(fmt::format("moe_combine: k={} dim={}", k, dim));
    if (shared_gate && !shared) throw std::invalid_argument("moe_combine: a shared-expert gate without its output");
    const DeviceCaps& c = ctx.caps();
    const uint64_t y_elems = uint64_t(n) * k * dim, x_elems = uint64_t(n) * dim;
    detail::require_bytes(y, y_elems * 4, "moe_combine", "Y");
    detail::require_bytes(weights, uint64_t(n) * k * 4, "moe_combine", "weights");
    detail::require_bytes(x, x_elems * 4, "moe_combine", "X");
    if (shared) detail::require_bytes(*shared, x_elems * 4, "moe_combine", "shared expert output");
    if (shared_gate) detail::require_bytes(*shared_gate, uint64_t(n) * 4, "moe_combine", "shared expert gate");
    check_fits(c, "moe_combine", "Y", y_elems * 4);
    const uint32_t wg = small_wg(c);
    if (n > c.max_workgroup_count[1])
        throw DeviceLimitError(
            fmt::format("moe_combine: {} tokens exceed the device's {} workgroups in y", n, c.max_workgroup_count[1]));
    const detail::Window yw = detail::window(c, y, 0, y_elems, 4);
    const detail::Window ww = detail::window(c, weights, 0, uint64_t(n) * k, 4);
    const detail::Window xw = detail::window(c, x, 0, x_elems, 4);
    const detail::Window sw = shared ? detail::window(c, *shared, 0, x_elems, 4) : xw;
    const detail::Window gw = shared_gate ? detail::window(c, *shared_gate, 0, n, 4) : xw;
    const CombinePush pc{
        dim, k, yw.first, ww.first, xw.first, sw.first, gw.first, shared ? 1u : 0u, shared_gate ? 1u : 0u};
    s.dispatch(ctx.pipeline({ShaderId::moe_combine, {wg}}), {yw.slice, ww.slice, xw.slice, sw.slice, gw.slice}, pc,
               {(dim + wg - 1) / wg, n, 1}, "moe_combine");
}

uint64_t moe_group_words(uint32_t slots, uint32_t n_expert) { return uint64_t(n_expert) + 1 + slots; }

void moe_group(Context& ctx, CommandStream& s, const BufferSlice& ids, const BufferSlice& groups, uint32_t slots,
               uint32_t n_expert) {
    if (n_expert == 0 || n_expert > kRouteMaxExperts)
        throw std::invalid_argument(fmt::format("moe_group: {} experts (1..{})", n_expert, kRouteMaxExperts));
    if (slots == 0) return;
    const DeviceCaps& c = ctx.caps();
    detail::require_bytes(ids, uint64_t(slots) * 4, "moe_group", "ids");
    detail::require_bytes(groups, moe_group_words(slots, n_expert) * 4, "moe_group", "groups");
    check_fits(c, "moe_group", "the groups", moe_group_words(slots, n_expert) * 4);
    const detail::Window iw = detail::window(c, ids, 0, slots, 4);
    const detail::Window gw = detail::window(c, groups, 0, moe_group_words(slots, n_expert), 4);
    const struct { uint32_t slots, n_expert, ids_base, g_base; } pc{slots, n_expert, iw.first, gw.first};
    s.dispatch(ctx.pipeline({ShaderId::moe_group, {small_wg(c)}}), {iw.slice, gw.slice}, pc, {1, 1, 1}, "moe_group");
}

PipelineDesc MoeMatmulPlan::pipeline() const { return mm.pipeline(); }

std::vector<PipelineDesc> MoeMatmulPlan::pipelines() const { return mm.pipelines(); }

MoeMatmulPlan plan_moe_matmul(const DeviceCaps& caps, TensorType wtype, uint32_t n, uint32_t k, uint32_t rows,
                              bool allow_dot) {
    if (!is_supported_type(uint32_t(wtype)))
        throw std::invalid_argument(fmt::format("linear: unsupported weight type {}", uint32_t(wtype)));
    MoeMatmulPlan p;
    p.mm.wtype = wtype;
    // Experts start at multiples of their byte size: aligned words only where an expert is whole words.
    const bool aligned = (uint64_t(n) * row_bytes(wtype, k)) % 4 == 0;
    const LinearShape shape{wtype, rows, n, k, aligned, MatvecInput::Kind::Plain, allow_dot};
    configure(caps, pick_kernel(caps, LinearProblem::ExpertMatmul, shape), shape, p.mm);
    return p;
}

void moe_matmul(Context& ctx, CommandStream& s, const MoeMatmulPlan& plan, const BufferSlice& w, uint32_t n_expert,
                const BufferSlice& x, uint32_t x_div, const BufferSlice& groups, const BufferSlice& y, uint32_t tokens,
                uint32_t slots, uint32_t n, uint32_t k, const BufferSlice* bias, const MatvecInput& q8) {
    const MatmulPlan& mm = plan.mm;
    const TypeTraits& tt = type_traits(mm.wtype);
    if (n == 0 || k == 0 || n_expert == 0 || x_div == 0 || tokens == 0)
        throw std::invalid_argument(fmt::format("moe_matmul: empty shape n={} k={} experts={} x_div={} tokens={}", n, k,
                                                n_expert, x_div, tokens));
    if (k % tt.block_elems != 0)
        throw std::invalid_argument(
            fmt::format("moe_matmul: k={} is not a multiple of the {} block ({})", k, tt.name, tt.block_elems));
    if (slots == 0) return;
    if (slots % x_div != 0)
        throw std::invalid_argument(fmt::format("moe_matmul: {} slots are not rows of {}", slots, x_div));
    const DeviceCaps& c = ctx.caps();
    const uint64_t rb = row_bytes(mm.wtype, k), expert_bytes = uint64_t(n) * rb;
    const uint64_t x_bytes = uint64_t(slots / x_div) * k * 4, y_bytes = uint64_t(slots) * n * 4;
    const uint64_t g_words = moe_group_words(slots, n_expert), b_bytes = uint64_t(n_expert) * n * 4;
    detail::require_bytes(w, uint64_t(n_expert) * expert_bytes, "moe_matmul", "W");
    detail::require_bytes(x, x_bytes, "moe_matmul", "X");
    detail::require_bytes(y, y_bytes, "moe_matmul", "Y");
    detail::require_bytes(groups, g_words * 4, "moe_matmul", "groups");
    check_expert_bias(c, "moe_matmul", bias, b_bytes);
    for (const auto& [slice, what] : {std::pair{&x, "X"}, std::pair{&y, "Y"}, std::pair{&groups, "the groups"}})
        if (slice->offset % 4 != 0)
            throw std::invalid_argument(
                fmt::format("moe_matmul: {} must start on 4 bytes, starts at {}", what, slice->offset));
    if (mm.w_aligned && w.offset % 4 != 0)
        throw std::invalid_argument(
            "moe_matmul: the plan reads W as aligned words but W's slice is not 4-byte aligned");
    check_fits(c, "moe_matmul", "X", x_bytes);
    check_fits(c, "moe_matmul", "Y", y_bytes);
    check_fits(c, "moe_matmul", "the groups", g_words * 4);
    const uint32_t bm = mm.tile_m(), bn = mm.tile_n();
    const uint64_t gx = (n + bn - 1) / bn, gy = (tokens + bm - 1) / bm;
    if (gx > c.max_workgroup_count[2] || gy > c.max_workgroup_count[1])
        throw DeviceLimitError(
            fmt::format("moe_matmul: {} rows x {} tokens exceed the device's workgroup grid", n, tokens));
    // Workgroups (expert of the window, token tile, row tile): the row tiles outermost (matmul.comp).
    const uint64_t per_window =
        std::min<uint64_t>(experts_per_window(c, "moe_matmul", expert_bytes, n, k), c.max_workgroup_count[0]);
    const uint64_t align = binding_align(c);
    const detail::ByteWindow xw = detail::byte_window(x, 0, x_bytes, align, 16);
    const detail::ByteWindow yw = detail::byte_window(y, 0, y_bytes, align);
    const detail::ByteWindow gw = detail::byte_window(groups, 0, g_words * 4, align);
    const detail::ByteWindow bw = bias ? detail::byte_window(*bias, 0, b_bytes, align) : yw;
    const uint32_t x_vec4 = xw.inner % 16 == 0 && k % 4 == 0;
    const Pipeline& p = ctx.pipeline(plan.pipeline());
    if (plan.int_dot()) {
        // X's rows as Q8_1 blocks (quantize_q8_1), then matmul_dot_id over them.
        if (q8.kind != MatvecInput::Kind::Plain)
            throw std::invalid_argument("moe_matmul: the integer-dot form takes X as it is (no fused input op)");
        const uint32_t rows = slots / x_div;
        const uint64_t q_bytes = uint64_t(rows) * q8_1_row_bytes(k);
        detail::require_bytes(q8.q8, q_bytes, "moe_matmul", "Q8_1 scratch (q8)");
        check_fits(c, "moe_matmul", "X as Q8_1", q_bytes);
        if (!q8.q8_ready) quantize_q8_1(ctx, s, x, q8.q8, rows, k);
        const detail::ByteWindow qw = detail::byte_window(q8.q8, 0, q_bytes, align);
        struct {
            uint32_t m, n, k, row_bytes, w_base, x_base, xq_row_words, y_base, r_base, y_stride, has_res, b_base,
                has_bias;
            uint32_t g_base, n_expert, e_first, expert_bytes, x_div;
        } dc{tokens,
             n,
             k,
             uint32_t(rb),
             0,
             uint32_t(qw.inner / 4),
             uint32_t(q8_1_row_bytes(k) / 4),
             uint32_t(yw.inner / 4),
             uint32_t(yw.inner / 4),
             n,
             0,
             uint32_t(bw.inner / 4),
             bias ? 1u : 0u,
             uint32_t(gw.inner / 4),
             n_expert,
             0,
             uint32_t(expert_bytes),
             x_div};
        for (uint64_t e0 = 0; e0 < n_expert; e0 += per_window) {
            const uint64_t count = std::min<uint64_t>(per_window, n_expert - e0);
            const detail::ByteWindow ww =
                detail::byte_window(w, e0 * expert_bytes, (e0 + count) * expert_bytes, align, 4);
            dc.w_base = uint32_t(ww.inner);
            dc.e_first = uint32_t(e0);
            const BufferSlice bindings[] = {ww.slice, qw.slice, yw.slice, yw.slice, bw.slice, gw.slice};
            s.dispatch(p, bindings, &dc, sizeof(dc), {uint32_t(count), uint32_t(gy), uint32_t(gx)}, "matmul_id");
        }
        return;
    }
    struct {
        uint32_t m, n, k, row_bytes, w_base, x_base, y_base, r_base, y_stride, has_res, b_base, has_bias, x_vec4;
        uint32_t g_base, n_expert, e_first, expert_bytes, x_div;
    } pc{tokens,
         n,
         k,
         uint32_t(rb),
         0,
         uint32_t(xw.inner / 4),
         uint32_t(yw.inner / 4),
         uint32_t(yw.inner / 4),
         n,
         0,
         uint32_t(bw.inner / 4),
         bias ? 1u : 0u,
         x_vec4,
         uint32_t(gw.inner / 4),
         n_expert,
         0,
         uint32_t(expert_bytes),
         x_div};
    for (uint64_t e0 = 0; e0 < n_expert; e0 += per_window) {
        const uint64_t count = std::min<uint64_t>(per_window, n_expert - e0);
        const detail::ByteWindow ww = detail::byte_window(w, e0 * expert_bytes, (e0 + count) * expert_bytes, align);
        pc.w_base = uint32_t(ww.inner);
        pc.e_first = uint32_t(e0);
        const BufferSlice bindings[] = {ww.slice, xw.slice, yw.slice, yw.slice, bw.slice, gw.slice};
        s.dispatch(p, bindings, &pc, sizeof(pc), {uint32_t(count), uint32_t(gy), uint32_t(gx)}, "matmul_id");
    }
}

std::vector<PipelineDesc> moe_small_pipelines(const DeviceCaps& caps) {
    return {{ShaderId::moe_route, {small_wg(caps)}},
            {ShaderId::moe_group, {small_wg(caps)}},
            {ShaderId::moe_combine, {small_wg(caps)}}};
}

}  // namespace vkllm::ops
