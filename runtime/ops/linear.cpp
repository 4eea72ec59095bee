#include "runtime/ops/linear.h"

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
// into per-lane scalar loads, whatever their width. Measured on lavapipe (2-core EPYC), interleaved
// rounds, decode tokens/s, median: stories15M-shaped Q8_0 84.2 against 60.2 (eight rounds, Mesa
// 22.3) and 74.6 against 61.9 (five, Mesa 25.0); TinyLlama-shaped Q4_0 2.8 against 2.6 (Mesa 25.0).
bool wide_weight_loads(const DeviceCaps& c, TensorType wtype, bool uniform_x) {
    return c.cpu_tuning && c.int64 && uniform_x && (wtype == TensorType::Q8_0 || wtype == TensorType::Q4_0);
}
bool is_wide_variant(const std::string& shader) { return shader.find("_u64_") != std::string::npos; }

void check_slice(const char* op, const char* what, const BufferSlice& s, uint64_t bytes, uint64_t offset_align) {
    if (s.buffer == VK_NULL_HANDLE) throw std::invalid_argument(fmt::format("{}: {} has no buffer", op, what));
    if (s.size < bytes)
        throw std::invalid_argument(fmt::format("{}: {} slice is {} bytes, the shape needs {}", op, what, s.size, bytes));
    if (s.offset % offset_align != 0)
        throw std::invalid_argument(
            fmt::format("{}: {} offset {} is not a multiple of {} bytes", op, what, s.offset, offset_align));
}

void check_args(const char* op, TensorType wtype, const BufferSlice& w, const BufferSlice& x, const BufferSlice& y,
                uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual, const BufferSlice* bias) {
    type_suffix(wtype);  // throws for unsupported types
    if (m == 0 || n == 0 || k == 0) throw std::invalid_argument(fmt::format("{}: empty shape m={} n={} k={}", op, m, n, k));
    const TypeTraits& tt = type_traits(wtype);
    if (k % tt.block_elems != 0)
        throw std::invalid_argument(fmt::format("{}: k={} is not a multiple of the {} block ({})", op, k, tt.name, tt.block_elems));
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

struct LinearPush {
    uint32_t n, k, row_bytes, w_base, x_base, y_base, r_base, y_stride, has_res, x_vec4, b_base, has_bias;
    uint32_t g_base, g_vec4;
    float eps;
};
struct MatmulPush {
    uint32_t m, n, k, row_bytes, w_base, x_base, y_base, r_base, y_stride, has_res, b_base, has_bias, x_vec4;
};

}  // namespace

namespace detail {

namespace {
// Word-aligned weights (weights.glsl W_ALIGNED: 1) when every row and field starts on 4 bytes.
uint32_t weights_aligned(TensorType wtype, uint32_t k, bool w_offset_aligned) {
    const TypeTraits& tt = type_traits(wtype);
    return w_offset_aligned && k % tt.block_elems == 0 && row_bytes(wtype, k) % 4 == 0 &&
           (tt.block_elems == 1 || tt.block_bytes % 4 == 0);
}
}  // namespace

PipelineDesc matvec_desc(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                         bool w_offset_aligned, MatvecInput::Kind input) {
    if (m < 1 || m > 8) throw std::invalid_argument(fmt::format("matvec: m={} (1..8)", m));
    using K = MatvecInput::Kind;
    const uint32_t norm = input == K::RmsNorm, act = input == K::SwiGlu ? 1 : input == K::GeGlu ? 2 : 0;
    const uint32_t aligned = weights_aligned(wtype, k, w_offset_aligned);
    // Rows of at most 1 KiB (stories-sized models): matvec_rows on CPU drivers.
    if (caps.cpu_tuning && row_bytes(wtype, k) <= 1024) {
        // CPU drivers (lavapipe) run a workgroup as SIMD chunks of subgroup_size lanes and every
        // barrier as a switch between chunks: matvec_rows, one chunk per workgroup, each lane
        // owning R whole rows, so that nothing is reduced across lanes (no shared memory, no
        // barrier) and all lanes read X at one address (Mesa 22.3 loads a storage buffer lane by
        // lane even then, hence the uniform-buffer variants below).
        // Measured on lavapipe (2-core EPYC, S = 8), stories-shaped Q8_0 / Q4_K, best of 30, µs:
        // 256 x 256: 64-66 / 60-68 against 74-80 / 72-76 with matvec.comp (8 rows per workgroup
        // of 8); 768 x 256: 122-125 / 115-131 against 160-246 / 145-236; 4096 x 256 (32 rows):
        // 499-510 / 489-839 against 496-508 / 415-681, the same within the machine's noise.
        // stories15M-shaped Q8_0 decode 34.9 against 29.4 tokens/s. Long rows stream worse: the
        // 32 rows a workgroup walks at once defeat the CPU's prefetch, where matvec.comp's lanes
        // walk one row's contiguous bytes (TinyLlama-shaped Q4_0 decode, rows of 1152-3168 bytes:
        // 1.0 against 1.2 tokens/s), hence the 1 KiB bound. Broadcasting X from one load per lane
        // instead (as matmul_broadcast) measured 1.3-3x slower than loading it in every lane.
        // The kernel family depends on k and the type only, never on m or n: a row's sum is
        // computed the same way in a decode batch as for a lone token (batch invariance).
        const uint32_t wg =
            std::clamp<uint32_t>(caps.subgroup_size, 4, std::max<uint32_t>(caps.max_workgroup_invocations, 4));
        const uint32_t r = 4;
        // X (and G) through uniform buffers where they fit: Mesa 22.3's lavapipe loads a uniform
        // buffer at one address once (or gathers it) instead of lane by lane. Only the load
        // instructions differ between the two variants, so this choice may depend on m (a batch
        // past 64 KiB of X reads it as a storage buffer; test_matvec_fused checks the bits agree).
        // Measured on lavapipe (Mesa 22.3.6, 2-core EPYC), best of 40, µs, uniform / storage:
        // stories-shaped Q8_0 256 x 256 70-78 / 118-128, 768 x 256 165-180 / 235-242, 4096 x 256
        // 427-683 / 845-948; stories15M-shaped Q8_0 decode 43.4 / 32.9 tokens/s, TinyLlama-shaped
        // Q4_0 1.5 / 1.3. Mesa 25.0's lavapipe loads both kinds alike: no difference there.
        const bool uniform = uniform_x_fits(caps, m, k);
        const char* prefix = wide_weight_loads(caps, wtype, uniform) ? "matvec_rows_u64_"
                             : uniform                                ? "matvec_rows_u_"
                                                                      : "matvec_rows_";
        return {std::string(prefix) + type_suffix(wtype),
                {wg, r, m, aligned, norm, act}};
    }
    uint32_t wg, nr;
    if (caps.cpu_tuning) {
        // CPU drivers, long rows: one small workgroup (about one SIMD chunk) per NR rows, so that
        // each X load serves NR rows and few barriers switch chunks; tall matrices (output head,
        // FFN) take NR = 32 and still make >= 64 workgroups, short ones NR = 8, so that every core
        // gets work. NR does not depend on the batch (a row's sum is the same whatever NR).
        // Measured on lavapipe, stories15M-shaped Q8_0 decode, matvec time per step: 10.4 ms with
        // NR = 8 everywhere, 7.1-7.8 ms with NR = 32 for n >= 2048.
        wg = std::clamp<uint32_t>(caps.subgroup_size, 8, 64);
        nr = n >= 2048 ? 32 : 8;
    } else {
        // 64 invocations stream a row in 64 unit-sized steps (16 bytes, a Q8_0 / Q4_0 block); a wider
        // subgroup gets one full subgroup.
        wg = std::clamp<uint32_t>(caps.subgroup_size, 64, 256);
        // Two rows per workgroup halve the reduction overhead; with many vectors, registers matter more.
        nr = m <= 4 ? 2 : 1;
    }
    wg = std::min(wg, std::max<uint32_t>(caps.max_workgroup_invocations, 1));
    // The reduction keeps (NR + NORM) * NB * WG floats in shared memory.
    while (nr > 1 && uint64_t(nr + norm) * m * wg * 4 > caps.max_shared_memory) nr /= 2;
    // CPU drivers read X (and G) through uniform buffers where they fit, as matvec_rows above.
    const bool uniform = caps.cpu_tuning && uniform_x_fits(caps, m, k);
    if (wide_weight_loads(caps, wtype, uniform) && caps.subgroup_ops())
        return {"matvec_u64_" + type_suffix(wtype) + "_subgroup", {wg, nr, m, aligned, norm, act}};
    std::string name = std::string(uniform ? "matvec_u_" : "matvec_") + type_suffix(wtype) +
                       (caps.subgroup_ops() ? "_subgroup" : "");
    return {name, {wg, nr, m, aligned, norm, act}};
}

PipelineDesc matmul_desc(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t /*n*/, uint32_t k,
                         bool w_offset_aligned) {
    const uint32_t sg = caps.subgroup_size;
    if (caps.cpu_tuning && caps.subgroup_basic && caps.subgroup_ballot && (sg == 4 || sg == 8 || sg == 16) &&
        sg <= caps.max_workgroup_invocations) {
        // Measured on lavapipe (AVX2, S = 8), stories-shaped FFN matmuls, GFLOP/s for Q8_0 / F32
        // (Q8_0 then in half-block units; prefill measured the same after the whole-block change):
        // R 4, TT 1: 18-20 / 15-16; R 2, TT 1: 12-14 / 11; R 4, TT 2: 8 / 11; R 8, TT 1: 5-11 / 15;
        // tiled matmul.comp: 4.4 / 4.3. Larger tiles spill or stop NIR from unrolling the loops,
        // which turns the register arrays into per-lane memory.
        // 16 lanes (AVX-512-wide llvmpipe) take 2 rows: the same 32 accumulators per lane.
        const uint32_t r = sg >= 16 ? 2 : 4, tt = 1;
        PipelineDesc d{"matmul_broadcast_" + type_suffix(wtype), {sg, r, tt, weights_aligned(wtype, k, w_offset_aligned)}};
        // The kernel broadcasts from lanes 0 .. S-1 of one full subgroup: required where the device
        // can require it (SPIR-V 1.3 shaders already see the reported size; this also rules out a
        // split or partly populated subgroup).
        if (caps.subgroup_size_control && caps.min_subgroup_size <= sg && sg <= caps.max_subgroup_size)
            d.subgroup_size = sg;
        return d;
    }
    uint32_t bm = 64, bn = 64, tm = 4, tn = 4;
    if (caps.max_workgroup_invocations < 256) {
        bm = bn = 32;  // 64 invocations: every Vulkan device allows 128
    } else if (m <= 32) {
        bm = 32, tm = 2;  // short prompts: less of the tile wasted on rows that do not exist
    }
    uint32_t wg = (bm / tm) * (bn / tn);
    // The deepest k slice whose two shared tiles fit: deeper slices mean fewer barriers.
    uint32_t bk = 8;
    for (uint32_t cand : {32u, 16u})
        if (uint64_t(cand) * (bm + 1 + bn + 1) * 4 <= caps.max_shared_memory) { bk = cand; break; }
    if (uint64_t(bk) * (bm + 1 + bn + 1) * 4 > caps.max_shared_memory)
        throw DeviceLimitError(fmt::format("matmul: needs {} bytes of shared memory, device has {}",
                                           bk * (bm + 1 + bn + 1) * 4, caps.max_shared_memory));
    return {"matmul_" + type_suffix(wtype), {wg, bm, bn, bk, tm, tn}};
}

}  // namespace detail

std::vector<PipelineDesc> linear_pipelines(const Context& ctx, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                                           MatvecInput::Kind input) {
    if (m <= 8) return {detail::matvec_desc(ctx.caps(), wtype, m, n, k, true, input)};
    if (input != MatvecInput::Kind::Plain) throw std::invalid_argument("linear_pipelines: a fused input needs m <= 8");
    return {detail::matmul_desc(ctx.caps(), wtype, m, n, k)};
}

uint64_t linear_bytes_read(TensorType wtype, uint32_t m, uint32_t n, uint32_t k) {
    return uint64_t(n) * row_bytes(wtype, k) + uint64_t(m) * k * 4 + uint64_t(m) * n * 4;
}

void matvec(Context& ctx, CommandStream& s, TensorType wtype, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual,
            const BufferSlice* bias, const MatvecInput& input) {
    using K = MatvecInput::Kind;
    const bool glu = input.kind == K::SwiGlu || input.kind == K::GeGlu, norm = input.kind == K::RmsNorm;
    check_args("matvec", wtype, w, x, y, m, n, k, residual, bias);
    if (glu) check_slice("matvec", "GLU up rows", input.up, uint64_t(m) * k * 4, 4);
    if (norm) {
        check_slice("matvec", "norm weight", input.norm_weight, uint64_t(k) * 4, 4);
        if (!(input.eps >= 0)) throw std::invalid_argument(fmt::format("matvec: norm eps {} is not >= 0", input.eps));
    }
    const DeviceCaps& c = ctx.caps();
    const PipelineDesc desc = detail::matvec_desc(c, wtype, m, n, k, w.offset % 4 == 0, input.kind);
    // Rows per workgroup: matvec.comp's NR, matvec_rows.comp's R per lane times WG lanes.
    const uint32_t nr = desc.shader.starts_with("matvec_rows_") ? desc.spec[1] * desc.spec[0] : desc.spec[1];
    const Pipeline& p = ctx.pipeline(desc);
    const uint64_t rb = row_bytes(wtype, k), align = binding_align(c);

    const uint64_t x_floats = uint64_t(m) * k;
    if (rows_that_fit(c, x_floats * 4, 0) < 1)
        throw DeviceLimitError(fmt::format("matvec: X ({} x {} f32) does not fit one binding ({} bytes)", m, k,
                                           c.max_storage_buffer_range));
    // Each dispatch takes the W rows [n0, n1): W's window holds those rows, Y's window spans
    // Y[0][n0] .. Y[m-1][n1), i.e. (m - 1) * n + rows floats.
    uint64_t cap = std::min({rows_that_fit(c, rb, 0), rows_that_fit(c, 4, uint64_t(m - 1) * n * 4),
                             uint64_t(c.max_workgroup_count[0]) * nr});
    const uint32_t step = chunk_rows(n, cap, 64);
    if (step == 0)
        throw DeviceLimitError(fmt::format("matvec: a row of W ({} bytes) or Y ({} x {} f32) does not fit one binding "
                                           "({} bytes)", rb, m, n, c.max_storage_buffer_range));

    const bool uniform_x = desc.shader.starts_with("matvec_rows_u") || desc.shader.starts_with("matvec_u");
    const uint64_t x_align = uniform_x ? uniform_x_align(c) : align;
    const detail::ByteWindow xw = detail::byte_window(x, 0, x_floats * 4, x_align, 16);
    const uint32_t x_vec4 = xw.inner % 16 == 0 && k % 4 == 0;
    // G: the norm weight or the GLU's up rows; otherwise never read, and X's window stands in.
    const detail::ByteWindow gw = norm  ? detail::byte_window(input.norm_weight, 0, uint64_t(k) * 4, x_align, 16)
                                  : glu ? detail::byte_window(input.up, 0, x_floats * 4, x_align, 16)
                                        : xw;
    const uint32_t g_vec4 = gw.inner % 16 == 0 && k % 4 == 0;
    // The 8-byte loads of the *_u64_* variants need W's window to end on an 8-byte word.
    const uint64_t w_round = is_wide_variant(desc.shader) ? 8 : 4;
    for (uint32_t n0 = 0; n0 < n; n0 += step) {
        const uint32_t rows = std::min(step, n - n0);
        const detail::ByteWindow ww = detail::byte_window(w, n0 * rb, (n0 + rows) * rb, align, w_round);
        const uint64_t yb = uint64_t(n0) * 4, ye = (uint64_t(m - 1) * n + n0 + rows) * 4;
        const detail::ByteWindow yw = detail::byte_window(y, yb, ye, align);
        const detail::ByteWindow rw = residual ? detail::byte_window(*residual, yb, ye, align) : yw;
        // Absent bias or residual: the shader never reads the binding, Y's window stands in.
        const detail::ByteWindow bw = bias ? detail::byte_window(*bias, uint64_t(n0) * 4, uint64_t(n0 + rows) * 4, align) : yw;
        LinearPush pc{rows,     k,      uint32_t(rb),          uint32_t(ww.inner), uint32_t(xw.inner / 4),
                      uint32_t(yw.inner / 4), uint32_t(rw.inner / 4), n, residual ? 1u : 0u, x_vec4,
                      uint32_t(bw.inner / 4), bias ? 1u : 0u, uint32_t(gw.inner / 4), g_vec4, input.eps};
        s.dispatch(p, {ww.slice, xw.slice, rw.slice, yw.slice, bw.slice, gw.slice}, pc, {(rows + nr - 1) / nr, 1, 1},
                   "matvec");
    }
}

void matmul(Context& ctx, CommandStream& s, TensorType wtype, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual,
            const BufferSlice* bias) {
    check_args("matmul", wtype, w, x, y, m, n, k, residual, bias);
    const DeviceCaps& c = ctx.caps();
    const PipelineDesc desc = detail::matmul_desc(c, wtype, m, n, k, w.offset % 4 == 0);
    // Tile of one workgroup: matmul.comp's BM x BN, or matmul_broadcast.comp's TT * S x R * S.
    const bool broadcast = desc.shader.starts_with("matmul_broadcast_");
    const uint32_t bm = broadcast ? desc.spec[2] * desc.spec[0] : desc.spec[1];
    const uint32_t bn = broadcast ? desc.spec[1] * desc.spec[0] : desc.spec[2];
    const Pipeline& p = ctx.pipeline(desc);
    const uint64_t rb = row_bytes(wtype, k), align = binding_align(c);

    // Dispatches tile (X rows [m0, m1)) x (W rows [n0, n1)); Y's window spans Y[m0][n0] .. Y[m1-1][n1).
    const uint32_t n_step = chunk_rows(n, std::min(rows_that_fit(c, rb, 0), uint64_t(c.max_workgroup_count[0]) * bn), bn);
    const uint32_t m_step = chunk_rows(
        m, std::min({rows_that_fit(c, uint64_t(k) * 4, 0), rows_that_fit(c, uint64_t(n) * 4, 0),
                     uint64_t(c.max_workgroup_count[1]) * bm}), bm);
    if (n_step == 0 || m_step == 0)
        throw DeviceLimitError(fmt::format("matmul: a row of W ({} bytes), X ({} f32) or Y ({} f32) does not fit one "
                                           "binding ({} bytes)", rb, k, n, c.max_storage_buffer_range));

    for (uint32_t m0 = 0; m0 < m; m0 += m_step) {
        const uint32_t mr = std::min(m_step, m - m0);
        const detail::ByteWindow xw =
            detail::byte_window(x, uint64_t(m0) * k * 4, uint64_t(m0 + mr) * k * 4, align, broadcast ? 16 : 4);
        const uint32_t x_vec4 = xw.inner % 16 == 0 && k % 4 == 0;
        for (uint32_t n0 = 0; n0 < n; n0 += n_step) {
            const uint32_t nr = std::min(n_step, n - n0);
            const detail::ByteWindow ww = detail::byte_window(w, n0 * rb, (n0 + nr) * rb, align);
            const uint64_t yb = (uint64_t(m0) * n + n0) * 4, ye = (uint64_t(m0 + mr - 1) * n + n0 + nr) * 4;
            const detail::ByteWindow yw = detail::byte_window(y, yb, ye, align);
            const detail::ByteWindow rw = residual ? detail::byte_window(*residual, yb, ye, align) : yw;
            const detail::ByteWindow bw =
                bias ? detail::byte_window(*bias, uint64_t(n0) * 4, uint64_t(n0 + nr) * 4, align) : yw;
            MatmulPush pc{mr, nr, k, uint32_t(rb), uint32_t(ww.inner), uint32_t(xw.inner / 4),
                          uint32_t(yw.inner / 4), uint32_t(rw.inner / 4), n, residual ? 1u : 0u,
                          uint32_t(bw.inner / 4), bias ? 1u : 0u, x_vec4};
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

}  // namespace vkllm::ops
