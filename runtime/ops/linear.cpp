#include "runtime/ops/linear.h"

#include "runtime/ops/matmul_coopmat.h"

#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace vkllm::ops {

namespace {

// Pipelines are named "<op>_<type>" (shaders/shaders.cmake declares one per type).
std::string type_suffix(TensorType t) {
    if (!is_supported_type(uint32_t(t)))
        throw std::invalid_argument(fmt::format("linear: unsupported weight type {}", uint32_t(t)));
    return std::string(type_traits(t).lower);
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
// Whether X (m x k f32) and G fit uniform bindings: the shader declares 64 KiB, the device may allow less.
bool uniform_x_fits(const DeviceCaps& c, uint32_t m, uint32_t k) {
    const uint64_t limit = std::min<uint64_t>(c.max_uniform_buffer_range, 65536);
    return uint64_t(m) * k * 4 + uniform_x_align(c) + 16 <= limit;
}

// The *_u64_* variants (Q8_0 and Q4_0, with uniform X, CPU drivers) read each block as 5 / 3
// 8-byte words instead of 9 / 5 4-byte ones (weights.glsl, W_LOAD64): lavapipe turns every load
// into per-lane scalar loads, whatever their width (docs/kernels.md has the measurements).
bool wide_weight_loads(const DeviceCaps& c, TensorType wtype, bool uniform_x) {
    return c.cpu_tuning && c.int64 && uniform_x && (wtype == TensorType::Q8_0 || wtype == TensorType::Q4_0);
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
    type_suffix(wtype);  // throws for unsupported types
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

bool weights_aligned(TensorType wtype, uint32_t k, bool w_offset_aligned) {
    const TypeTraits& tt = type_traits(wtype);
    return w_offset_aligned && k % tt.block_elems == 0 && row_bytes(wtype, k) % 4 == 0 &&
           (tt.block_elems == 1 || tt.block_bytes % 4 == 0);
}

uint32_t MatvecPlan::rows_per_workgroup() const { return kernel == Kernel::Rows ? rows * wg : rows; }

namespace {
// Specialization constants 4 NORM and 5 ACT of matvec.comp and quantize_q8_1.comp.
uint32_t norm_constant(MatvecInput::Kind k) { return k == MatvecInput::Kind::RmsNorm; }
uint32_t act_constant(MatvecInput::Kind k) { return MatvecInput::act_id(k); }
PipelineDesc quantize_desc(MatvecInput::Kind input) {
    return {"quantize_q8_1", {kQuantizeWg, 0, 0, 0, norm_constant(input), act_constant(input)}};
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

bool int_dot_type(TensorType t) {
    switch (t) {
        case TensorType::Q8_0:
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::IQ4_NL:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
        case TensorType::IQ4_XS:
        case TensorType::MXFP4: return true;
        default: return false;
    }
}

PipelineDesc MatvecPlan::quantize_pipeline() const { return quantize_desc(input); }
PipelineDesc quantize_q8_1_pipeline(MatvecInput::Kind input) { return quantize_desc(input); }

std::vector<PipelineDesc> MatvecPlan::pipelines() const {
    if (kernel == Kernel::Dot) return {quantize_pipeline(), pipeline()};
    return {pipeline()};
}

PipelineDesc MatvecPlan::pipeline() const {
    const uint32_t norm = norm_constant(input), act = act_constant(input);
    const std::string type = type_suffix(wtype);
    if (kernel == Kernel::Dot)
        return {"matvec_dot_" + type + (subgroup ? "_subgroup" : ""), {wg, rows, batch, uint32_t(w_aligned), norm}};
    std::string name;
    if (kernel == Kernel::Rows)
        name = (wide_loads ? "matvec_rows_u64_" : uniform_x ? "matvec_rows_u_" : "matvec_rows_") + type;
    else if (wide_loads)
        name = "matvec_u64_" + type + "_subgroup";
    else
        name = (uniform_x ? "matvec_u_" : "matvec_") + type + (subgroup ? "_subgroup" : "");
    return {name, {wg, rows, batch, uint32_t(w_aligned), norm, act}};
}

MatvecPlan plan_matvec(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                       bool w_offset_aligned, MatvecInput::Kind input, bool allow_dot) {
    if (m < 1 || m > 8) throw std::invalid_argument(fmt::format("matvec: m={} (1..8)", m));
    type_suffix(wtype);  // throws for unsupported types
    MatvecPlan p;
    p.wtype = wtype;
    p.batch = m;
    p.input = input;
    p.w_aligned = weights_aligned(wtype, k, w_offset_aligned);
    const uint32_t norm = input == MatvecInput::Kind::RmsNorm;
    // CPU drivers (lavapipe) run a workgroup as SIMD chunks of subgroup_size lanes and every
    // barrier as a switch between chunks. The kernel family depends on k and the type only, never
    // on m or n: a row's sum is computed the same way in a decode batch as for a lone token (batch
    // invariance). Measurements behind each choice: docs/kernels.md.
    if (allow_dot && caps.int_dot_kernels && int_dot_type(wtype)) {
        // X quantized once to 8 bits per element, weights multiplied as the integers they store,
        // four per instruction: the float kernels convert and multiply every weight one by one
        // and read X as 4 bytes per element, which bounds quantized decode on GPUs well below
        // their bandwidth (docs/gpu.md). Workgroups of the float kernel's size on GPUs; on a CPU
        // driver (only ever forced, `--caps int-dot`, for tests) one subgroup-sized workgroup.
        p.kernel = MatvecPlan::Kernel::Dot;
        p.subgroup = caps.subgroup_ops();
        p.wg = caps.cpu_tuning ? std::clamp<uint32_t>(caps.subgroup_size, 8, 64)
                               : std::clamp<uint32_t>(caps.subgroup_size, 64, 256);
        // Four rows per workgroup for a lone vector: each X block loaded serves four rows, and
        // there are still >= 256 workgroups for a 1024-row projection (measured on an H200 against
        // 1, 2 and 8 rows and 32 to 256 invocations: docs/gpu.md).
        p.rows = m == 1 ? 4 : m <= 4 ? 2 : 1;
        p.wg = std::min(p.wg, std::max<uint32_t>(caps.max_workgroup_invocations, 1));
        // The reduction keeps (NR + NORM) * NB * WG floats in shared memory.
        while (p.rows > 1 && uint64_t(p.rows + norm) * m * p.wg * 4 > caps.max_shared_memory) p.rows /= 2;
        return p;
    }
    if (caps.cpu_tuning && row_bytes(wtype, k) <= 1024) {
        // Rows of at most 1 KiB: matvec_rows, one SIMD chunk per workgroup, each lane owning R whole
        // rows, so that nothing is reduced across lanes (no shared memory, no barrier). Longer rows
        // stream better with a row's bytes spread over the lanes (the CPU's prefetch).
        p.kernel = MatvecPlan::Kernel::Rows;
        p.wg = std::clamp<uint32_t>(caps.subgroup_size, 4, std::max<uint32_t>(caps.max_workgroup_invocations, 4));
        // Every X load serves the R rows of a lane, so tall matrices (the output head) take more rows
        // per lane while they still make >= 32 workgroups; short ones keep 4, so that every core gets
        // work. A row's sum is the same whatever R (batch invariance).
        p.rows = 4;
        while (p.rows < 16 && n / (uint64_t(p.rows) * 2 * p.wg) >= 32) p.rows *= 2;
        // X (and G) through uniform buffers where they fit: Mesa 22.3's lavapipe loads a uniform
        // buffer at one address once instead of lane by lane. Only the load instructions differ,
        // so this choice may depend on m (test_matvec_fused checks the bits agree).
        p.uniform_x = uniform_x_fits(caps, m, k);
        p.wide_loads = wide_weight_loads(caps, wtype, p.uniform_x);
        return p;
    }
    p.kernel = MatvecPlan::Kernel::Strided;
    if (caps.cpu_tuning) {
        // CPU drivers, long rows: one small workgroup (about one SIMD chunk) per NR rows, so that
        // each X load serves NR rows and few barriers switch chunks; tall matrices (output head,
        // FFN) take NR = 32 and still make >= 64 workgroups, short ones NR = 8, so that every core
        // gets work. NR does not depend on the batch (a row's sum is the same whatever NR).
        p.wg = std::clamp<uint32_t>(caps.subgroup_size, 8, 64);
        p.rows = n >= 2048 ? 32 : 8;
    } else {
        // 64 invocations stream a row in 64 unit-sized steps (16 bytes, a Q8_0 / Q4_0 block); a wider
        // subgroup gets one full subgroup. Two rows per workgroup halve the reduction overhead; more
        // starve small matrices of workgroups (measured on an H100: docs/gpu.md); with many vectors,
        // registers matter more.
        p.wg = std::clamp<uint32_t>(caps.subgroup_size, 64, 256);
        p.rows = m <= 4 ? 2 : 1;
    }
    p.wg = std::min(p.wg, std::max<uint32_t>(caps.max_workgroup_invocations, 1));
    // The reduction keeps (NR + NORM) * NB * WG floats in shared memory.
    while (p.rows > 1 && uint64_t(p.rows + norm) * m * p.wg * 4 > caps.max_shared_memory) p.rows /= 2;
    p.subgroup = caps.subgroup_ops();
    p.uniform_x = caps.cpu_tuning && uniform_x_fits(caps, m, k);
    p.wide_loads = p.subgroup && wide_weight_loads(caps, wtype, p.uniform_x);
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
    if (kernel == Kernel::Broadcast) {
        PipelineDesc d{"matmul_broadcast_" + type_suffix(wtype),
                       {lanes, rows_per_lane, tokens_per_lane, uint32_t(w_aligned)}};
        d.subgroup_size = required_subgroup_size;
        return d;
    }
    if (kernel == Kernel::Coopmat)
        return {"matmul_coopmat_" + type_suffix(wtype),
                {sgm * sgn * sg, bm, bn, bk, sgm, sgn, cm, cn, ck, sg, uint32_t(w_aligned)},
                sg};
    if (kernel == Kernel::Dot)
        return {"matmul_dot_" + type_suffix(wtype),
                {(bm / tm) * (bn / tn), bm, bn, bk / 32, tm, tn, uint32_t(w_aligned)}};
    return {"matmul_" + type_suffix(wtype), {(bm / tm) * (bn / tn), bm, bn, bk, tm, tn}};
}

MatmulPlan plan_matmul(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t /*n*/, uint32_t k,
                       bool w_offset_aligned, bool allow_dot) {
    type_suffix(wtype);  // throws for unsupported types
    // The matrix units first: f16 products at many times the rate of any other kernel here.
    if (auto coop = plan_matmul_coopmat(caps, wtype, m, weights_aligned(wtype, k, w_offset_aligned), false))
        return *coop;
    MatmulPlan p;
    p.wtype = wtype;
    const uint32_t sg = caps.subgroup_size;
    if (allow_dot && caps.int_dot_kernels && int_dot_type(wtype)) {
        // As the integer-dot matvec: X quantized once to 8 bits, weights as the integers they
        // store, four multiply-adds per instruction; both tiles in shared memory are 8-bit, so a
        // slice of 128 columns costs what 32 float columns do. The float kernel's tile shapes (64 x
        // 64, 4 x 4 per invocation; 32 rows for short prompts; 32 x 32 where fewer than 256
        // invocations are allowed), 4 blocks per k slice: a multiple of every type's unit.
        p.kernel = MatmulPlan::Kernel::Dot;
        p.w_aligned = weights_aligned(wtype, k, w_offset_aligned);
        p.bm = p.bn = 64, p.tm = p.tn = 4, p.bk = 128;
        if (caps.max_workgroup_invocations < 256)
            p.bm = p.bn = 32;
        else if (m <= 32)
            p.bm = 32, p.tm = 2;
        auto shared_bytes = [&] { return matmul_dot_shared_bytes(p.bm, p.bn, p.bk); };
        while (shared_bytes() > caps.max_shared_memory && p.bk > 32) p.bk /= 2;
        // A slice holds whole units of weights_dot.glsl: Q4_K / Q5_K's span 2 blocks (a 64-column
        // chunk), Q6_K's 4 (two groups of a 128-column half).
        const uint32_t span = wtype == TensorType::Q6_K                                  ? 4
                              : (wtype == TensorType::Q4_K || wtype == TensorType::Q5_K) ? 2
                                                                                         : 1;
        if (p.bk / 32 >= span && shared_bytes() <= caps.max_shared_memory) return p;
        p = MatmulPlan{};  // too little shared memory: the float kernel below
        p.wtype = wtype;
    }
    if (caps.cpu_tuning && caps.subgroup_basic && caps.subgroup_ballot && (sg == 4 || sg == 8 || sg == 16) &&
        sg <= caps.max_workgroup_invocations) {
        // CPU drivers: one subgroup per workgroup, no shared memory or barrier; each lane keeps R
        // weight rows in registers and X reaches all lanes by broadcasts. Larger register tiles
        // spill or stop NIR from unrolling the loops (per-lane memory); 16 lanes take 2 rows: the
        // same 32 accumulators per lane.
        p.kernel = MatmulPlan::Kernel::Broadcast;
        p.lanes = sg;
        p.rows_per_lane = sg >= 16 ? 2 : 4;
        p.tokens_per_lane = 1;
        p.w_aligned = weights_aligned(wtype, k, w_offset_aligned);
        // The kernel broadcasts from lanes 0 .. S-1 of one full subgroup: required where the device
        // can require it (SPIR-V 1.3 shaders already see the reported size; this also rules out a
        // split or partly populated subgroup).
        if (caps.subgroup_size_control && caps.min_subgroup_size <= sg && sg <= caps.max_subgroup_size)
            p.required_subgroup_size = sg;
        return p;
    }
    p.kernel = MatmulPlan::Kernel::Tiled;
    p.bm = p.bn = 64, p.tm = p.tn = 4;
    if (caps.max_workgroup_invocations < 256) {
        p.bm = p.bn = 32;  // 64 invocations: every Vulkan device allows 128
    } else if (m <= 32) {
        p.bm = 32, p.tm = 2;  // short prompts: less of the tile wasted on rows that do not exist
    }
    // The deepest k slice whose two shared tiles fit: deeper slices mean fewer barriers.
    p.bk = 8;
    for (uint32_t cand : {32u, 16u})
        if (uint64_t(cand) * (p.bm + 1 + p.bn + 1) * 4 <= caps.max_shared_memory) {
            p.bk = cand;
            break;
        }
    if (uint64_t(p.bk) * (p.bm + 1 + p.bn + 1) * 4 > caps.max_shared_memory)
        throw DeviceLimitError(fmt::format("matmul: needs {} bytes of shared memory, device has {}",
                                           p.bk * (p.bm + 1 + p.bn + 1) * 4, caps.max_shared_memory));
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
