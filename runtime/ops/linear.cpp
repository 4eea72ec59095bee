#include "runtime/ops/linear.h"

#include "runtime/ops/kernel_table.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace vkllm::ops {

namespace {

// Throws for a weight type vkllm does not read.
void check_type(TensorType t) {
    if (!is_supported_type(uint32_t(t)))
        throw std::invalid_argument(fmt::format("linear: unsupported weight type {}", uint32_t(t)));
}

// 16: matvec reads X as vec4s, so its window must start on a vec4.
uint64_t binding_align(const DeviceCaps& c) { return std::max<uint64_t>(c.min_storage_buffer_offset_alignment, 16); }

// Bytes a window may need beyond its payload: the aligned-down start and the round-up of the end.
uint64_t window_slack(const DeviceCaps& c) { return binding_align(c) + 16; }

// matvec_u_*, matvec_rows_u_* and their 8-byte-load forms *_u64_* bind X and G as uniform buffers
// (their windows need both offset alignments).
uint64_t uniform_x_align(const DeviceCaps& c) {
    return std::max<uint64_t>(binding_align(c), c.min_uniform_buffer_offset_alignment);
}

void check_slice(const char* op, const char* what, const BufferSlice& s, uint64_t bytes, uint64_t offset_align) {
    if (s.buffer == VK_NULL_HANDLE) throw std::invalid_argument(fmt::format("{}: {} has no buffer", op, what));
    if (s.size < bytes)
        throw std::invalid_argument(
            fmt::format("{}: {} slice is {} bytes, the shape needs {}", op, what, s.size, bytes));
    if (s.offset % offset_align != 0)
        throw std::invalid_argument(
            fmt::format("{}: {} offset {} is not a multiple of {} bytes", op, what, s.offset, offset_align));
}

void check_args(const char* op, TensorType wtype, const BufferSlice& w, const BufferSlice& x, const BufferSlice& y,
                uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual, const BufferSlice* bias) {
    check_type(wtype);  // throws for unsupported types
    if (m == 0 || n == 0 || k == 0)
        throw std::invalid_argument(fmt::format("{}: empty shape m={} n={} k={}", op, m, n, k));
    const TypeTraits& tt = type_traits(wtype);
    if (k % tt.block_elems != 0)
        throw std::invalid_argument(
            fmt::format("{}: k={} is not a multiple of the {} block ({})", op, k, tt.name, tt.block_elems));
    check_slice(op, "W", w, uint64_t(n) * row_bytes(wtype, k), wtype == TensorType::F32 ? 4 : 2);
    check_slice(op, "X", x, uint64_t(m) * k * 4, 4);
    check_slice(op, "Y", y, uint64_t(m) * n * 4, 4);
    if (residual) check_slice(op, "residual", *residual, uint64_t(m) * n * 4, 4);
    if (bias) check_slice(op, "bias", *bias, uint64_t(n) * 4, 4);
}

// Largest count of rows (each `row` bytes, `extra` fixed bytes more) that one binding can hold.
uint64_t rows_that_fit(const DeviceCaps& c, uint64_t row, uint64_t extra) {
    uint64_t limit = c.max_storage_buffer_range, need = window_slack(c) + extra;
    return limit > need ? (limit - need) / row : 0;
}

// Chunk length for `total` rows, at most `cap`, a multiple of `quantum` unless it is all of them.
uint32_t chunk_rows(uint64_t total, uint64_t cap, uint32_t quantum) {
    if (cap >= total) return uint32_t(total);
    return uint32_t(cap >= quantum ? cap / quantum * quantum : cap);
}

// The dispatches of a matvec over W's rows: each takes rows [n0, n0 + step) (the last fewer), W's
// window holding those rows and Y's spanning Y[0][n0] .. Y[m-1][n0 + rows), i.e. (m - 1) * n + rows
// floats. The step fits every binding and the workgroup count (nr rows per workgroup).
uint32_t matvec_row_step(const DeviceCaps& c, uint64_t rb, uint32_t m, uint32_t n, uint32_t nr) {
    const uint64_t cap = std::min({rows_that_fit(c, rb, 0), rows_that_fit(c, 4, uint64_t(m - 1) * n * 4),
                                   uint64_t(c.max_workgroup_count[0]) * nr});
    const uint32_t step = chunk_rows(n, cap, 64);
    if (step == 0)
        throw DeviceLimitError(
            fmt::format("matvec: a row of W ({} bytes) or Y ({} x {} f32) does not fit one binding "
                        "({} bytes)",
                        rb, m, n, c.max_storage_buffer_range));
    return step;
}

// The W, Y, residual and bias windows of the dispatch over rows [n0, n0 + rows); an absent residual
// or bias is never read by the shader, and Y's window stands in. W's window ends on w_round bytes.
struct RowChunk {
    detail::ByteWindow w, y, r, b;
};
RowChunk row_chunk(const BufferSlice& w, const BufferSlice& y, const BufferSlice* residual, const BufferSlice* bias,
                   uint32_t n0, uint32_t rows, uint64_t rb, uint32_t m, uint32_t n, uint64_t align, uint64_t w_round) {
    RowChunk ch;
    ch.w = detail::byte_window(w, n0 * rb, (n0 + rows) * rb, align, w_round);
    const uint64_t yb = uint64_t(n0) * 4, ye = (uint64_t(m - 1) * n + n0 + rows) * 4;
    ch.y = detail::byte_window(y, yb, ye, align);
    ch.r = residual ? detail::byte_window(*residual, yb, ye, align) : ch.y;
    ch.b = bias ? detail::byte_window(*bias, uint64_t(n0) * 4, uint64_t(n0 + rows) * 4, align) : ch.y;
    return ch;
}

// quantize_q8_1.comp's workgroup: an invocation per block of 32, workgroups over the blocks of a row.
constexpr uint32_t kQuantizeWg = 64;

struct LinearPush {
    uint32_t n, k, row_bytes, w_base, x_base, y_base, r_base, y_stride, has_res, x_vec4, b_base, has_bias;
    uint32_t g_base, g_vec4;
    float eps;
};
struct MatmulPush {
    uint32_t m, n, k, row_bytes, w_base, x_base, y_base, r_base, y_stride, has_res, b_base, has_bias, x_vec4;
};

}  // namespace

uint32_t MatvecPlan::rows_per_workgroup() const { return kernel == Kernel::Rows ? rows * wg : rows; }

namespace {
// Specialization constants 4 NORM and 5 ACT of matvec.comp and quantize_q8_1.comp.
uint32_t norm_constant(MatvecInput::Kind k) { return k == MatvecInput::Kind::RmsNorm; }
uint32_t act_constant(MatvecInput::Kind k) { return MatvecInput::act_id(k); }
PipelineDesc quantize_desc(MatvecInput::Kind input) {
    return {ShaderId::quantize_q8_1, {kQuantizeWg, 0, 0, 0, norm_constant(input), act_constant(input)}};
}

struct QuantizePush {
    uint32_t k, x_base, x_vec4, g_base, g_vec4, out_base, xq_row_words;
};
struct DotPush {
    uint32_t n, k, row_bytes, w_base, x_base, xq_row_words, y_base, r_base, y_stride, has_res, b_base, has_bias;
    float eps;
};

void check_input(const char* op, const MatvecInput& input, uint32_t m, uint32_t k) {
    using K = MatvecInput::Kind;
    if (MatvecInput::glu(input.kind)) check_slice(op, "GLU up rows", input.up, uint64_t(m) * k * 4, 4);
    if (input.kind == K::RmsNorm) {
        check_slice(op, "norm weight", input.norm_weight, uint64_t(k) * 4, 4);
        if (!(input.eps >= 0)) throw std::invalid_argument(fmt::format("{}: norm eps {} is not >= 0", op, input.eps));
    }
}

// xq = Q8_1 of input(x): an invocation per block, workgroups over each row's blocks (shapes checked
// by the callers).
void record_quantize(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& xq, uint32_t m,
                     uint32_t k, const MatvecInput& input) {
    using K = MatvecInput::Kind;
    const DeviceCaps& c = ctx.caps();
    const uint64_t align = binding_align(c), x_bytes = uint64_t(m) * k * 4, q_bytes = uint64_t(m) * q8_1_row_bytes(k);
    if (x_bytes + window_slack(c) > c.max_storage_buffer_range ||
        q_bytes + window_slack(c) > c.max_storage_buffer_range)
        throw DeviceLimitError(fmt::format("quantize_q8_1: X ({} x {} f32) does not fit one binding ({} bytes)", m, k,
                                           c.max_storage_buffer_range));
    const detail::ByteWindow xw = detail::byte_window(x, 0, x_bytes, align, 16);
    const detail::ByteWindow gw = input.kind == K::RmsNorm
                                      ? detail::byte_window(input.norm_weight, 0, uint64_t(k) * 4, align, 16)
                                  : input.kind == K::Plain ? xw
                                                           : detail::byte_window(input.up, 0, x_bytes, align, 16);
    const detail::ByteWindow qw = detail::byte_window(xq, 0, q_bytes, align);
    const QuantizePush pc{k,
                          uint32_t(xw.inner / 4),
                          xw.inner % 16 == 0 && k % 4 == 0,
                          uint32_t(gw.inner / 4),
                          gw.inner % 16 == 0 && k % 4 == 0,
                          uint32_t(qw.inner / 4),
                          uint32_t(q8_1_row_bytes(k) / 4)};
    const uint32_t blocks = k / 32;
    if (m > c.max_workgroup_count[1])
        throw DeviceLimitError(fmt::format("quantize_q8_1: {} rows of X exceed the device's {} workgroups in y", m,
                                           c.max_workgroup_count[1]));
    s.dispatch(ctx.pipeline(quantize_desc(input.kind)), {xw.slice, gw.slice, qw.slice}, pc,
               {(blocks + kQuantizeWg - 1) / kQuantizeWg, m, 1}, "quantize");
}

void matvec_dot(Context& ctx, CommandStream& s, const MatvecPlan& plan, const BufferSlice& w, const BufferSlice& x,
                const BufferSlice& y, uint32_t n, uint32_t k, const BufferSlice* residual, const BufferSlice* bias,
                const MatvecInput& input) {
    const DeviceCaps& c = ctx.caps();
    const uint32_t m = plan.batch, nr = plan.rows;
    const uint64_t rb = row_bytes(plan.wtype, k), align = binding_align(c), q_bytes = uint64_t(m) * q8_1_row_bytes(k);
    check_slice("matvec", "Q8_1 scratch (MatvecInput::q8)", input.q8, q_bytes, 4);
    if (!input.q8_ready) record_quantize(ctx, s, x, input.q8, m, k, input);
    const Pipeline& p = ctx.pipeline(plan.pipeline());
    const uint32_t step = matvec_row_step(c, rb, m, n, nr);
    const detail::ByteWindow qw = detail::byte_window(input.q8, 0, q_bytes, align);
    for (uint32_t n0 = 0; n0 < n; n0 += step) {
        const uint32_t rows = std::min(step, n - n0);
        const RowChunk ch = row_chunk(w, y, residual, bias, n0, rows, rb, m, n, align, 4);
        const DotPush pc{rows,
                         k,
                         uint32_t(rb),
                         uint32_t(ch.w.inner),
                         uint32_t(qw.inner / 4),
                         uint32_t(q8_1_row_bytes(k) / 4),
                         uint32_t(ch.y.inner / 4),
                         uint32_t(ch.r.inner / 4),
                         n,
                         residual ? 1u : 0u,
                         uint32_t(ch.b.inner / 4),
                         bias ? 1u : 0u,
                         input.eps};
        s.dispatch(p, {ch.w.slice, qw.slice, ch.r.slice, ch.y.slice, ch.b.slice}, pc, {(rows + nr - 1) / nr, 1, 1},
                   "matvec");
    }
}
struct MatmulDotPush {
    uint32_t m, n, k, row_bytes, w_base, x_base, xq_row_words, y_base, r_base, y_stride, has_res, b_base, has_bias;
};

// Tiles (X rows [m0, m1)) x (W rows [n0, n1)) as matmul's float path; X's window holds the Q8_1 rows
// [m0, m1), quantized beforehand in as many dispatches as the bindings need.
void matmul_dot(Context& ctx, CommandStream& s, const MatmulPlan& plan, const BufferSlice& w, const BufferSlice& x,
                const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual,
                const BufferSlice* bias, const MatvecInput& input) {
    const DeviceCaps& c = ctx.caps();
    const uint64_t qrb = q8_1_row_bytes(k), rb = row_bytes(plan.wtype, k), align = binding_align(c);
    check_slice("matmul", "Q8_1 scratch (MatvecInput::q8)", input.q8, uint64_t(m) * qrb, 4);
    const uint32_t bm = plan.bm, bn = plan.bn;
    const uint32_t n_step =
        chunk_rows(n, std::min(rows_that_fit(c, rb, 0), uint64_t(c.max_workgroup_count[0]) * bn), bn);
    const uint32_t m_step =
        chunk_rows(m,
                   std::min({rows_that_fit(c, uint64_t(k) * 4, 0), rows_that_fit(c, qrb, 0),
                             rows_that_fit(c, uint64_t(n) * 4, 0), uint64_t(c.max_workgroup_count[1]) * bm}),
                   bm);
    if (n_step == 0 || m_step == 0)
        throw DeviceLimitError(
            fmt::format("matmul: a row of W ({} bytes), X ({} f32) or Y ({} f32) does not fit one "
                        "binding ({} bytes)",
                        rb, k, n, c.max_storage_buffer_range));
    const Pipeline& p = ctx.pipeline(plan.pipeline());
    for (uint32_t m0 = 0; m0 < m; m0 += m_step) {
        const uint32_t mr = std::min(m_step, m - m0);
        const BufferSlice q8{input.q8.buffer, input.q8.offset + m0 * qrb, mr * qrb};
        if (!input.q8_ready)
            record_quantize(ctx, s, BufferSlice{x.buffer, x.offset + uint64_t(m0) * k * 4, uint64_t(mr) * k * 4}, q8,
                            mr, k, input);
        const detail::ByteWindow qw = detail::byte_window(q8, 0, q8.size, align);
        for (uint32_t n0 = 0; n0 < n; n0 += n_step) {
            const uint32_t nr = std::min(n_step, n - n0);
            const detail::ByteWindow ww = detail::byte_window(w, n0 * rb, (n0 + nr) * rb, align, 4);
            const uint64_t yb = (uint64_t(m0) * n + n0) * 4, ye = (uint64_t(m0 + mr - 1) * n + n0 + nr) * 4;
            const detail::ByteWindow yw = detail::byte_window(y, yb, ye, align);
            const detail::ByteWindow rw = residual ? detail::byte_window(*residual, yb, ye, align) : yw;
            const detail::ByteWindow bw =
                bias ? detail::byte_window(*bias, uint64_t(n0) * 4, uint64_t(n0 + nr) * 4, align) : yw;
            const MatmulDotPush pc{mr,
                                   nr,
                                   k,
                                   uint32_t(rb),
                                   uint32_t(ww.inner),
                                   uint32_t(qw.inner / 4),
                                   uint32_t(qrb / 4),
                                   uint32_t(yw.inner / 4),
                                   uint32_t(rw.inner / 4),
                                   n,
                                   residual ? 1u : 0u,
                                   uint32_t(bw.inner / 4),
                                   bias ? 1u : 0u};
            s.dispatch(p, {ww.slice, qw.slice, rw.slice, yw.slice, bw.slice}, pc,
                       {(nr + bn - 1) / bn, (mr + bm - 1) / bm, 1}, "matmul");
        }
    }
}
}  // namespace

bool int_dot_type(TensorType t) { return has_variant(ShaderFamily::matvec_dot, t); }

PipelineDesc MatvecPlan::quantize_pipeline() const { return quantize_desc(input); }
PipelineDesc quantize_q8_1_pipeline(MatvecInput::Kind input) { return quantize_desc(input); }

std::vector<PipelineDesc> MatvecPlan::pipelines() const {
    if (kernel == Kernel::Dot) return {quantize_pipeline(), pipeline()};
    return {pipeline()};
}

PipelineDesc MatvecPlan::pipeline() const {
    const uint32_t norm = norm_constant(input), act = act_constant(input);
    if (kernel == Kernel::Dot) return {variant(family, wtype), {wg, rows, batch, uint32_t(w_aligned), norm}};
    return {variant(family, wtype), {wg, rows, batch, uint32_t(w_aligned), norm, act}};
}

MatvecPlan plan_matvec(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                       bool w_offset_aligned, MatvecInput::Kind input, bool allow_dot) {
    if (m < 1 || m > 8) throw std::invalid_argument(fmt::format("matvec: m={} (1..8)", m));
    check_type(wtype);  // throws for unsupported types
    MatvecPlan p;
    p.wtype = wtype;
    p.batch = m;
    p.input = input;
    const LinearShape shape{wtype, m, n, k, w_offset_aligned, input, allow_dot};
    configure(caps, pick_kernel(caps, LinearProblem::DenseMatvec, shape), shape, p);
    return p;
}

uint64_t matmul_dot_shared_bytes(uint32_t bm, uint32_t bn, uint32_t bk) {
    // wq_ and xq_: 2 uvec4s per block and one of padding per row; wf_: a vec4 per block and one of
    // padding; xd_: a vec2 per block.
    const uint64_t sb = bk / 32;
    return (32 * sb + 16) * (uint64_t(bn) + bm) + 16 * (sb + 1) * bn + 8 * sb * bm;
}

std::vector<PipelineDesc> MatmulPlan::pipelines() const {
    if (kernel == Kernel::Dot) return {quantize_desc(MatvecInput::Kind::Plain), pipeline()};
    return {pipeline()};
}

uint32_t MatmulPlan::tile_m() const { return kernel == Kernel::Broadcast ? tokens_per_lane * lanes : bm; }
uint32_t MatmulPlan::tile_n() const { return kernel == Kernel::Broadcast ? rows_per_lane * lanes : bn; }

PipelineDesc MatmulPlan::pipeline() const {
    const ShaderId shader = variant(family, wtype);
    switch (kernel) {
        case Kernel::Broadcast:
            return {shader, {lanes, rows_per_lane, tokens_per_lane, uint32_t(w_aligned)}, required_subgroup_size};
        case Kernel::Dot: return {shader, {(bm / tm) * (bn / tn), bm, bn, bk / 32, tm, tn, uint32_t(w_aligned)}};
        case Kernel::Coopmat:
            return {shader, {sgm * sgn * sg, bm, bn, bk, sgm, sgn, cm, cn, ck, sg, uint32_t(w_aligned)}, sg};
        case Kernel::Tiled: break;
    }
    return {shader, {(bm / tm) * (bn / tn), bm, bn, bk, tm, tn}};
}

MatmulPlan plan_matmul(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                       bool w_offset_aligned, bool allow_dot) {
    check_type(wtype);  // throws for unsupported types
    MatmulPlan p;
    p.wtype = wtype;
    const LinearShape shape{wtype, m, n, k, w_offset_aligned, MatvecInput::Kind::Plain, allow_dot};
    configure(caps, pick_kernel(caps, LinearProblem::DenseMatmul, shape), shape, p);
    return p;
}

std::vector<PipelineDesc> linear_pipelines(const Context& ctx, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                                           MatvecInput::Kind input) {
    return plan_linear(ctx.caps(), wtype, m, n, k, true, input, false, false).pipelines();
}

uint64_t linear_bytes_read(TensorType wtype, uint32_t m, uint32_t n, uint32_t k) {
    return uint64_t(n) * row_bytes(wtype, k) + uint64_t(m) * k * 4 + uint64_t(m) * n * 4;
}

void matvec(Context& ctx, CommandStream& s, TensorType wtype, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual,
            const BufferSlice* bias, const MatvecInput& input) {
    check_args("matvec", wtype, w, x, y, m, n, k, residual, bias);
    matvec(ctx, s, plan_matvec(ctx.caps(), wtype, m, n, k, w.offset % 4 == 0, input.kind, false), w, x, y, n, k,
           residual, bias, input);
}

void matvec(Context& ctx, CommandStream& s, const MatvecPlan& plan, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t n, uint32_t k, const BufferSlice* residual, const BufferSlice* bias,
            const MatvecInput& input) {
    using K = MatvecInput::Kind;
    const TensorType wtype = plan.wtype;
    const uint32_t m = plan.batch;
    const bool glu = MatvecInput::glu(input.kind), norm = input.kind == K::RmsNorm;
    check_args("matvec", wtype, w, x, y, m, n, k, residual, bias);
    if (input.kind != plan.input) throw std::invalid_argument("matvec: the input kind differs from the plan's");
    if (plan.w_aligned && w.offset % 4 != 0)
        throw std::invalid_argument("matvec: the plan reads W as aligned words but W's slice is not 4-byte aligned");
    check_input("matvec", input, m, k);
    const DeviceCaps& c = ctx.caps();
    if (plan.kernel == MatvecPlan::Kernel::Dot) {
        matvec_dot(ctx, s, plan, w, x, y, n, k, residual, bias, input);
        return;
    }
    const uint32_t nr = plan.rows_per_workgroup();
    const Pipeline& p = ctx.pipeline(plan.pipeline());
    const uint64_t rb = row_bytes(wtype, k), align = binding_align(c);

    const uint64_t x_floats = uint64_t(m) * k;
    if (rows_that_fit(c, x_floats * 4, 0) < 1)
        throw DeviceLimitError(fmt::format("matvec: X ({} x {} f32) does not fit one binding ({} bytes)", m, k,
                                           c.max_storage_buffer_range));
    const uint32_t step = matvec_row_step(c, rb, m, n, nr);

    const uint64_t x_align = plan.uniform_x ? uniform_x_align(c) : align;
    const detail::ByteWindow xw = detail::byte_window(x, 0, x_floats * 4, x_align, 16);
    const uint32_t x_vec4 = xw.inner % 16 == 0 && k % 4 == 0;
    // G: the norm weight or the GLU's up rows; otherwise never read, and X's window stands in.
    const detail::ByteWindow gw = norm  ? detail::byte_window(input.norm_weight, 0, uint64_t(k) * 4, x_align, 16)
                                  : glu ? detail::byte_window(input.up, 0, x_floats * 4, x_align, 16)
                                        : xw;
    const uint32_t g_vec4 = gw.inner % 16 == 0 && k % 4 == 0;
    // The 8-byte loads of the *_u64_* variants need W's window to end on an 8-byte word.
    const uint64_t w_round = plan.wide_loads ? 8 : 4;
    for (uint32_t n0 = 0; n0 < n; n0 += step) {
        const uint32_t rows = std::min(step, n - n0);
        const RowChunk ch = row_chunk(w, y, residual, bias, n0, rows, rb, m, n, align, w_round);
        LinearPush pc{rows,
                      k,
                      uint32_t(rb),
                      uint32_t(ch.w.inner),
                      uint32_t(xw.inner / 4),
                      uint32_t(ch.y.inner / 4),
                      uint32_t(ch.r.inner / 4),
                      n,
                      residual ? 1u : 0u,
                      x_vec4,
                      uint32_t(ch.b.inner / 4),
                      bias ? 1u : 0u,
                      uint32_t(gw.inner / 4),
                      g_vec4,
                      input.eps};
        s.dispatch(p, {ch.w.slice, xw.slice, ch.r.slice, ch.y.slice, ch.b.slice, gw.slice}, pc,
                   {(rows + nr - 1) / nr, 1, 1}, "matvec");
    }
}

void quantize_q8_1(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& xq, uint32_t m, uint32_t k,
                   const MatvecInput& input) {
    if (m == 0 || k == 0 || k % 32 != 0)
        throw std::invalid_argument(fmt::format("quantize_q8_1: m={} k={} (k a positive multiple of 32)", m, k));
    check_slice("quantize_q8_1", "X", x, uint64_t(m) * k * 4, 4);
    check_slice("quantize_q8_1", "XQ", xq, uint64_t(m) * q8_1_row_bytes(k), 4);
    check_input("quantize_q8_1", input, m, k);
    record_quantize(ctx, s, x, xq, m, k, input);
}

void matmul(Context& ctx, CommandStream& s, TensorType wtype, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual,
            const BufferSlice* bias) {
    check_args("matmul", wtype, w, x, y, m, n, k, residual, bias);
    matmul(ctx, s, plan_matmul(ctx.caps(), wtype, m, n, k, w.offset % 4 == 0), w, x, y, m, n, k, residual, bias);
}

void matmul(Context& ctx, CommandStream& s, const MatmulPlan& plan, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual,
            const BufferSlice* bias, const MatvecInput& input) {
    const TensorType wtype = plan.wtype;
    check_args("matmul", wtype, w, x, y, m, n, k, residual, bias);
    if (plan.w_aligned && w.offset % 4 != 0)
        throw std::invalid_argument("matmul: the plan reads W as aligned words but W's slice is not 4-byte aligned");
    if (input.kind != MatvecInput::Kind::Plain)
        throw std::invalid_argument("matmul: a fused input op needs matvec rows");
    const DeviceCaps& c = ctx.caps();
    if (plan.kernel == MatmulPlan::Kernel::Dot) {
        matmul_dot(ctx, s, plan, w, x, y, m, n, k, residual, bias, input);
        return;
    }
    const bool broadcast = plan.kernel == MatmulPlan::Kernel::Broadcast;
    const bool vec4_x = broadcast || plan.kernel == MatmulPlan::Kernel::Coopmat;
    const uint32_t bm = plan.tile_m(), bn = plan.tile_n();
    const Pipeline& p = ctx.pipeline(plan.pipeline());
    const uint64_t rb = row_bytes(wtype, k), align = binding_align(c);

    // Dispatches tile (X rows [m0, m1)) x (W rows [n0, n1)); Y's window spans Y[m0][n0] .. Y[m1-1][n1).
    const uint32_t n_step =
        chunk_rows(n, std::min(rows_that_fit(c, rb, 0), uint64_t(c.max_workgroup_count[0]) * bn), bn);
    const uint32_t m_step =
        chunk_rows(m,
                   std::min({rows_that_fit(c, uint64_t(k) * 4, 0), rows_that_fit(c, uint64_t(n) * 4, 0),
                             uint64_t(c.max_workgroup_count[1]) * bm}),
                   bm);
    if (n_step == 0 || m_step == 0)
        throw DeviceLimitError(
            fmt::format("matmul: a row of W ({} bytes), X ({} f32) or Y ({} f32) does not fit one "
                        "binding ({} bytes)",
                        rb, k, n, c.max_storage_buffer_range));

    for (uint32_t m0 = 0; m0 < m; m0 += m_step) {
        const uint32_t mr = std::min(m_step, m - m0);
        const detail::ByteWindow xw =
            detail::byte_window(x, uint64_t(m0) * k * 4, uint64_t(m0 + mr) * k * 4, align, vec4_x ? 16 : 4);
        const uint32_t x_vec4 = xw.inner % 16 == 0 && k % 4 == 0;
        for (uint32_t n0 = 0; n0 < n; n0 += n_step) {
            const uint32_t nr = std::min(n_step, n - n0);
            const detail::ByteWindow ww = detail::byte_window(w, n0 * rb, (n0 + nr) * rb, align);
            const uint64_t yb = (uint64_t(m0) * n + n0) * 4, ye = (uint64_t(m0 + mr - 1) * n + n0 + nr) * 4;
            const detail::ByteWindow yw = detail::byte_window(y, yb, ye, align);
            const detail::ByteWindow rw = residual ? detail::byte_window(*residual, yb, ye, align) : yw;
            const detail::ByteWindow bw =
                bias ? detail::byte_window(*bias, uint64_t(n0) * 4, uint64_t(n0 + nr) * 4, align) : yw;
            MatmulPush pc{mr,
                          nr,
                          k,
                          uint32_t(rb),
                          uint32_t(ww.inner),
                          uint32_t(xw.inner / 4),
                          uint32_t(yw.inner / 4),
                          uint32_t(rw.inner / 4),
                          n,
                          residual ? 1u : 0u,
                          uint32_t(bw.inner / 4),
                          bias ? 1u : 0u,
                          x_vec4};
            s.dispatch(p, {ww.slice, xw.slice, rw.slice, yw.slice, bw.slice}, pc,
                       {(nr + bn - 1) / bn, (mr + bm - 1) / bm, 1}, "matmul");
        }
    }
}

void linear(Context& ctx, CommandStream& s, TensorType wtype, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual,
            const BufferSlice* bias) {
    if (m <= 8)
        matvec(ctx, s, wtype, w, x, y, m, n, k, residual, bias);
    else
        matmul(ctx, s, wtype, w, x, y, m, n, k, residual, bias);
}

LinearPlan plan_linear(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                       bool w_offset_aligned, MatvecInput::Kind input, bool batch_invariant, bool allow_dot) {
    if (m == 0) throw std::invalid_argument("plan_linear: m = 0");
    LinearPlan p;
    p.m = m, p.n = n, p.k = k;
    if (m > 8 && !batch_invariant) {
        // matmul's tiles sum in another order than matvec: only where no row must match a lone token's.
        if (input != MatvecInput::Kind::Plain)
            throw std::invalid_argument("plan_linear: a fused input needs matvec rows (m <= 8 or batch invariant)");
        p.kernel = LinearPlan::Kernel::Matmul;
        p.matmul = plan_matmul(caps, wtype, m, n, k, w_offset_aligned, allow_dot);
        return p;
    }
    p.kernel = LinearPlan::Kernel::Matvec;
    p.group = std::min(m, 8u);
    p.matvec = plan_matvec(caps, wtype, p.group, n, k, w_offset_aligned, input, allow_dot);
    p.tail = m % p.group ? plan_matvec(caps, wtype, m % p.group, n, k, w_offset_aligned, input, allow_dot) : p.matvec;
    return p;
}

std::vector<PipelineDesc> LinearPlan::pipelines() const {
    if (kernel == Kernel::Matmul) return matmul.pipelines();
    std::vector<PipelineDesc> out = matvec.pipelines();
    if (m % group)
        for (PipelineDesc& d : tail.pipelines()) out.push_back(std::move(d));
    return out;
}

void linear(Context& ctx, CommandStream& s, const LinearPlan& plan, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, const BufferSlice* residual, const BufferSlice* bias, const MatvecInput& input) {
    const uint32_t m = plan.m, n = plan.n, k = plan.k;
    if (plan.kernel == LinearPlan::Kernel::Matmul) {
        matmul(ctx, s, plan.matmul, w, x, y, m, n, k, residual, bias, input);
        return;
    }
    // Groups of rows, each one matvec pass over W: X, Y (and R, up) windows of the group's rows.
    auto rows = [](const BufferSlice& b, uint64_t width, uint32_t r0, uint32_t count) {
        return BufferSlice{b.buffer, b.offset + 4ull * width * r0, 4ull * width * count};
    };
    for (uint32_t r0 = 0; r0 < m; r0 += plan.group) {
        const uint32_t g = std::min(plan.group, m - r0);
        const BufferSlice ys = rows(y, n, r0, g);
        BufferSlice rs;
        if (residual) rs = rows(*residual, n, r0, g);
        MatvecInput in = input;
        if (in.up.buffer != VK_NULL_HANDLE) in.up = rows(in.up, k, r0, g);
        if (in.q8.buffer != VK_NULL_HANDLE)
            in.q8 = BufferSlice{in.q8.buffer, in.q8.offset + q8_1_row_bytes(k) * r0, q8_1_row_bytes(k) * g};
        matvec(ctx, s, g == plan.group ? plan.matvec : plan.tail, w, rows(x, k, r0, g), ys, n, k,
               residual ? &rs : nullptr, bias, in);
    }
}

}  // namespace vkllm::ops
