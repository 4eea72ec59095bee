#include "runtime/ops/kernel_table.h"

#include "runtime/ops/matmul_coopmat.h"

#include "runtime/kernel_tuning.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <stdexcept>

namespace vkllm::ops {

namespace {

using Kind = MatvecInput::Kind;

// 16: matvec reads X as vec4s, so its window must start on a vec4.
uint64_t binding_align(const DeviceCaps& c) { return std::max<uint64_t>(c.min_storage_buffer_offset_alignment, 16); }
// Uniform X windows meet both offset alignments, and fit the 64 KiB matvec_input.glsl declares.
uint64_t uniform_x_align(const DeviceCaps& c) {
    return std::max<uint64_t>(binding_align(c), c.min_uniform_buffer_offset_alignment);
}
// Whether X (m x k f32) and G fit uniform bindings: the shader declares 64 KiB, the device may allow less.
bool uniform_x_fits(const DeviceCaps& c, uint32_t m, uint32_t k) {
    const uint64_t limit = std::min<uint64_t>(c.max_uniform_buffer_range, 65536);
    return uint64_t(m) * k * 4 + uniform_x_align(c) + 16 <= limit;
}
// The rows of k floats one uniform X binding holds (0: not even one).
uint64_t uniform_x_rows(const DeviceCaps& c, uint32_t k) {
    const uint64_t limit = std::min<uint64_t>(c.max_uniform_buffer_range, 65536), slack = uniform_x_align(c) + 16;
    return limit > slack ? (limit - slack) / (uint64_t(k) * 4) : 0;
}

// The *_u64_* variants (Q8_0 and Q4_0, with uniform X, CPU drivers) read each block as 5 / 3
// 8-byte words instead of 9 / 5 4-byte ones (weights.glsl, W_LOAD64): lavapipe turns every load
// into per-lane scalar loads, whatever their width (docs/kernels.md has the measurements).
bool wide_weight_loads(const DeviceCaps& c, TensorType wtype, bool uniform_x) {
    return c.cpu_tuning && c.int64 && uniform_x && (wtype == TensorType::Q8_0 || wtype == TensorType::Q4_0);
}

// Word-aligned weights (weights.glsl W_ALIGNED: 1) when every row and field starts on 4 bytes.
bool weights_aligned(TensorType wtype, uint32_t k, bool w_offset_aligned) {
    const TypeTraits& tt = type_traits(wtype);
    return w_offset_aligned && k % tt.block_elems == 0 && row_bytes(wtype, k) % 4 == 0 &&
           (tt.block_elems == 1 || tt.block_bytes % 4 == 0);
}

bool always(const DeviceCaps&) { return true; }
bool always_serves(const DeviceCaps&, const LinearShape&) { return true; }
bool always_preferred(const DeviceCaps&, const LinearShape&) { return true; }
bool cpu_tuned(const DeviceCaps& c, const LinearShape&) { return c.cpu_tuning; }
// The integer-dot kernels need the extension; the planner takes them unforced where the packed dot
// is accelerated or `--caps int-dot` says so (DeviceCaps::int_dot_kernels).
bool has_int_dot(const DeviceCaps& c) { return c.int_dot_product; }
bool int_dot_chosen(const DeviceCaps& c, const LinearShape&) { return c.int_dot_kernels; }

// --- dense matvec ------------------------------------------------------------------------------------
// CPU drivers (lavapipe) run a workgroup as SIMD chunks of subgroup_size lanes and every barrier as a
// switch between chunks. The kernel family depends on k and the type only, never on m or n: a row's
// sum is computed the same way in a decode batch as for a lone token (batch invariance).
// Measurements behind each choice: docs/kernels.md.

bool matvec_dot_serves(const DeviceCaps&, const LinearShape& s) {
    return s.allow_dot && has_variant(ShaderFamily::matvec_dot, s.wtype);
}
void matvec_dot(const DeviceCaps& caps, const LinearShape& s, MatvecPlan& p) {
    // X quantized once to 8 bits per element, weights multiplied as the integers they store,
    // four per instruction: the float kernels convert and multiply every weight one by one
    // and read X as 4 bytes per element, which bounds quantized decode on GPUs well below
    // their bandwidth (docs/gpu.md). Workgroups of the float kernel's size on GPUs; on a CPU
    // driver (only ever forced, `--caps int-dot`, for tests) one subgroup-sized workgroup.
    const uint32_t m = s.m, norm = s.input == Kind::RmsNorm;
    p.w_aligned = weights_aligned(s.wtype, s.k, s.w_offset_aligned);
    p.kernel = MatvecPlan::Kernel::Dot;
    p.subgroup = caps.subgroup_ops();
    p.family = p.subgroup ? ShaderFamily::matvec_dot_subgroup : ShaderFamily::matvec_dot;
    p.wg = caps.cpu_tuning ? std::clamp<uint32_t>(caps.subgroup_size, 8, 64)
                           : std::clamp<uint32_t>(caps.subgroup_size, 64, 256);
    // Four rows per workgroup for a lone vector: each X block loaded serves four rows, and
    // there are still >= 256 workgroups for a 1024-row projection (measured on an H200 against
    // 1, 2 and 8 rows and 32 to 256 invocations: docs/gpu.md).
    p.rows = m == 1 ? 4 : m <= 4 ? 2 : 1;
    p.wg = std::min(p.wg, std::max<uint32_t>(caps.max_workgroup_invocations, 1));
    // The reduction keeps (NR + NORM) * NB * WG floats in shared memory.
    while (p.rows > 1 && uint64_t(p.rows + norm) * m * p.wg * 4 > caps.max_shared_memory) p.rows /= 2;
}

bool matvec_rows_preferred(const DeviceCaps& c, const LinearShape& s) {
    return c.cpu_tuning && row_bytes(s.wtype, s.k) <= 1024;
}
void matvec_rows(const DeviceCaps& caps, const LinearShape& s, MatvecPlan& p) {
    // Rows of at most 1 KiB: matvec_rows, one SIMD chunk per workgroup, each lane owning R whole
    // rows, so that nothing is reduced across lanes (no shared memory, no barrier). Longer rows
    // stream better with a row's bytes spread over the lanes (the CPU's prefetch).
    p.w_aligned = weights_aligned(s.wtype, s.k, s.w_offset_aligned);
    p.kernel = MatvecPlan::Kernel::Rows;
    p.wg = std::clamp<uint32_t>(caps.subgroup_size, 4, std::max<uint32_t>(caps.max_workgroup_invocations, 4));
    // Every X load serves the R rows of a lane, so tall matrices (the output head) take more rows
    // per lane while they still make >= 32 workgroups; short ones keep 4, so that every core gets
    // work. A row's sum is the same whatever R (batch invariance).
    p.rows = 4;
    while (p.rows < 16 && s.n / (uint64_t(p.rows) * 2 * p.wg) >= 32) p.rows *= 2;
    // X (and G) through uniform buffers where they fit: Mesa 22.3's lavapipe loads a uniform
    // buffer at one address once instead of lane by lane. Only the load instructions differ,
    // so this choice may depend on m (test_matvec_fused checks the bits agree).
    p.uniform_x = uniform_x_fits(caps, s.m, s.k);
    p.wide_loads = wide_weight_loads(caps, s.wtype, p.uniform_x);
    p.family = p.wide_loads  ? ShaderFamily::matvec_rows_u64
               : p.uniform_x ? ShaderFamily::matvec_rows_u
                             : ShaderFamily::matvec_rows;
}

void matvec_strided(const DeviceCaps& caps, const LinearShape& s, MatvecPlan& p) {
    const uint32_t m = s.m, norm = s.input == Kind::RmsNorm;
    p.w_aligned = weights_aligned(s.wtype, s.k, s.w_offset_aligned);
    p.kernel = MatvecPlan::Kernel::Strided;
    if (caps.cpu_tuning) {
        // CPU drivers, long rows: one small workgroup (about one SIMD chunk) per NR rows, so that
        // each X load serves NR rows and few barriers switch chunks; tall matrices (output head,
        // FFN) take NR = 32 and still make >= 64 workgroups, short ones NR = 8, so that every core
        // gets work. NR does not depend on the batch (a row's sum is the same whatever NR).
        p.wg = std::clamp<uint32_t>(caps.subgroup_size, 8, 64);
        p.rows = s.n >= 2048 ? 32 : 8;
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
    p.uniform_x = caps.cpu_tuning && uniform_x_fits(caps, m, s.k);
    p.wide_loads = p.subgroup && wide_weight_loads(caps, s.wtype, p.uniform_x);
    p.family = p.wide_loads                ? ShaderFamily::matvec_u64_subgroup
               : p.uniform_x && p.subgroup ? ShaderFamily::matvec_u_subgroup
               : p.uniform_x               ? ShaderFamily::matvec_u
               : p.subgroup                ? ShaderFamily::matvec_subgroup
                                           : ShaderFamily::matvec;
}

// --- dense matmul ------------------------------------------------------------------------------------

void matmul_dot(const DeviceCaps& caps, const LinearShape& s, MatmulPlan& p) {
    // As the integer-dot matvec: X quantized once to 8 bits, weights as the integers they
    // store, four multiply-adds per instruction; both tiles in shared memory are 8-bit, so a
    // slice of 128 columns costs what 32 float columns do. The float kernel's tile shapes (64 x
    // 64, 4 x 4 per invocation; 32 rows for short prompts; 32 x 32 where fewer than 256
    // invocations are allowed), 4 blocks per k slice: a multiple of every type's unit.
    p.kernel = MatmulPlan::Kernel::Dot;
    p.family = ShaderFamily::matmul_dot;
    p.w_aligned = weights_aligned(s.wtype, s.k, s.w_offset_aligned);
    p.bm = p.bn = 64, p.tm = p.tn = 4, p.bk = 128;
    if (caps.max_workgroup_invocations < 256)
        p.bm = p.bn = 32;
    else if (s.m <= 32)
        p.bm = 32, p.tm = 2;
    while (matmul_dot_shared_bytes(p.bm, p.bn, p.bk) > caps.max_shared_memory && p.bk > 32) p.bk /= 2;
}
// A slice holds whole units of weights_dot.glsl: Q4_K / Q5_K's span 2 blocks (a 64-column chunk),
// Q6_K's 4 (two groups of a 128-column half).
uint32_t dot_span(TensorType wtype) {
    return wtype == TensorType::Q6_K ? 4 : (wtype == TensorType::Q4_K || wtype == TensorType::Q5_K) ? 2 : 1;
}
bool matmul_dot_serves(const DeviceCaps& caps, const LinearShape& s) {
    if (!s.allow_dot || !has_variant(ShaderFamily::matmul_dot, s.wtype)) return false;
    MatmulPlan p;
    matmul_dot(caps, s, p);
    // Too little shared memory for whole units: a float kernel.
    return p.bk / 32 >= dot_span(s.wtype) && matmul_dot_shared_bytes(p.bm, p.bn, p.bk) <= caps.max_shared_memory;
}

// The kernel broadcasts from lanes 0 .. S-1 of one full subgroup of 4, 8 or 16 lanes.
bool broadcast_runs_on(const DeviceCaps& caps) {
    const uint32_t sg = caps.subgroup_size;
    return caps.subgroup_basic && caps.subgroup_ballot && (sg == 4 || sg == 8 || sg == 16) &&
           sg <= caps.max_workgroup_invocations;
}
bool broadcast_serves(const DeviceCaps& caps, const LinearShape&) { return broadcast_runs_on(caps); }
void matmul_broadcast(const DeviceCaps& caps, const LinearShape& s, MatmulPlan& p) {
    // CPU drivers: one subgroup per workgroup, no shared memory or barrier; each lane keeps R
    // weight rows in registers and X reaches all lanes by broadcasts. Larger register tiles
    // spill or stop NIR from unrolling the loops (per-lane memory); 16 lanes take 2 rows: the
    // same 32 accumulators per lane.
    const uint32_t sg = caps.subgroup_size;
    p.kernel = MatmulPlan::Kernel::Broadcast;
    p.family = ShaderFamily::matmul_broadcast;
    p.lanes = sg;
    p.rows_per_lane = sg >= 16 ? 2 : 4;
    p.tokens_per_lane = 1;
    p.w_aligned = weights_aligned(s.wtype, s.k, s.w_offset_aligned);
    // The kernel broadcasts from lanes 0 .. S-1 of one full subgroup: required where the device
    // can require it (SPIR-V 1.3 shaders already see the reported size; this also rules out a
    // split or partly populated subgroup).
    if (caps.subgroup_size_control && caps.min_subgroup_size <= sg && sg <= caps.max_subgroup_size)
        p.required_subgroup_size = sg;
}

void matmul_tiled(const DeviceCaps& caps, const LinearShape& s, MatmulPlan& p) {
    p.kernel = MatmulPlan::Kernel::Tiled;
    p.family = ShaderFamily::matmul;
    p.bm = p.bn = 64, p.tm = p.tn = 4;
    if (caps.max_workgroup_invocations < 256) {
        p.bm = p.bn = 32;  // 64 invocations: every Vulkan device allows 128
    } else if (s.m <= 32) {
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
}

// --- cooperative-matrix matmul (tensor cores), dense and experts -----------------------------------
// f16 products on the device's matrix units at many times the rate of any other kernel here: first
// wherever the device has them (caps.coopmat_kernels: GPUs reporting a f16 shape; CPU drivers only
// when forced, as they emulate the units). Tiles: plan_matmul_coopmat (matmul_coopmat.cpp).

bool coopmat_chosen(const DeviceCaps& c, const LinearShape&) { return c.coopmat_kernels; }
std::optional<MatmulPlan> coopmat_plan(const DeviceCaps& caps, const LinearShape& s, bool experts) {
    if (!has_variant(experts ? ShaderFamily::matmul_coopmat_id : ShaderFamily::matmul_coopmat, s.wtype))
        return std::nullopt;
    std::optional<MatmulPlan> p =
        plan_matmul_coopmat(caps, s.wtype, s.m, weights_aligned(s.wtype, s.k, s.w_offset_aligned), experts);
    if (p) p->family = experts ? ShaderFamily::matmul_coopmat_id : ShaderFamily::matmul_coopmat;
    return p;
}
bool matmul_coopmat_serves(const DeviceCaps& caps, const LinearShape& s) {
    return coopmat_plan(caps, s, false).has_value();
}
void matmul_coopmat(const DeviceCaps& caps, const LinearShape& s, MatmulPlan& p) { p = *coopmat_plan(caps, s, false); }
bool moe_matmul_coopmat_serves(const DeviceCaps& caps, const LinearShape& s) {
    return coopmat_plan(caps, s, true).has_value();
}
void moe_matmul_coopmat(const DeviceCaps& caps, const LinearShape& s, MatmulPlan& p) {
    p = *coopmat_plan(caps, s, true);
}

// --- expert matvec (moe_matvec) ----------------------------------------------------------------------

bool moe_matvec_dot_serves(const DeviceCaps&, const LinearShape& s) {
    return s.allow_dot && has_variant(ShaderFamily::matvec_dot_id, s.wtype);
}
void moe_matvec_dot(const DeviceCaps& caps, const LinearShape&, MoeMatvecPlan& p) {
    // As plan_matvec's integer-dot kernel: X quantized once per row (the GLU applied first), the
    // weights multiplied as the integers they store; two rows per workgroup as the float form.
    p.dot = true;
    p.family = p.subgroup ? ShaderFamily::matvec_dot_id_subgroup : ShaderFamily::matvec_dot_id;
    p.wg = caps.cpu_tuning ? std::clamp<uint32_t>(caps.subgroup_size, 8, 64)
                           : std::clamp<uint32_t>(caps.subgroup_size, 64, 256);
    p.wg = std::min(p.wg, std::max<uint32_t>(caps.max_workgroup_invocations, 1));
    p.rows = 2;
    while (p.rows > 1 && uint64_t(p.rows) * p.wg * 4 > caps.max_shared_memory) p.rows /= 2;
}

void moe_matvec_strided(const DeviceCaps& caps, const LinearShape& s, MoeMatvecPlan& p) {
    // matvec's strided kernel as plan_matvec shapes it for one vector: a small workgroup (about one
    // SIMD chunk) owning many rows on CPU drivers, 64+ invocations and two rows on GPUs. An expert's
    // rows are few (768 in Qwen3-30B-A3B), so GPUs keep two rows per workgroup.
    if (caps.cpu_tuning) {
        p.wg = std::clamp<uint32_t>(caps.subgroup_size, 8, 64);
        p.rows = s.n >= 2048 ? 32 : 8;
    } else {
        p.wg = std::clamp<uint32_t>(caps.subgroup_size, 64, 256);
        p.rows = 2;
    }
    p.wg = std::min(p.wg, std::max<uint32_t>(caps.max_workgroup_invocations, 1));
    while (p.rows > 1 && uint64_t(p.rows) * p.wg * 4 > caps.max_shared_memory) p.rows /= 2;
    // CPU drivers: X through uniform buffers, and Q8_0 / Q4_0 weights as 8-byte words, as plan_matvec
    // (lavapipe loads a uniform buffer at one address once, a storage buffer lane by lane: about 3x
    // the decode speed of a Mixtral-shaped expert matvec, docs/performance.md). Where all the rows do
    // not fit one binding (Mixtral's down projection: 2 slots x 14336 floats), a dispatch takes as
    // many as fit rather than every row falling back to storage loads.
    if (const uint64_t fit = uniform_x_rows(caps, s.k); caps.cpu_tuning && fit > 0) {
        p.uniform_x = true;
        p.x_rows_per_dispatch = uint32_t(std::min<uint64_t>(p.x_rows, fit));
    }
    p.wide_loads = p.subgroup && caps.cpu_tuning && caps.int64 && p.uniform_x &&
                   (s.wtype == TensorType::Q8_0 || s.wtype == TensorType::Q4_0);
    p.family = p.wide_loads                ? ShaderFamily::matvec_id_u64_subgroup
               : p.uniform_x && p.subgroup ? ShaderFamily::matvec_id_u_subgroup
               : p.uniform_x               ? ShaderFamily::matvec_id_u
               : p.subgroup                ? ShaderFamily::matvec_id_subgroup
                                           : ShaderFamily::matvec_id;
}

// --- expert matmul (moe_matmul): the dense kernels in their EXPERT_GROUPS form ------------------------

void moe_matmul_dot(const DeviceCaps& caps, const LinearShape& s, MatmulPlan& p) {
    matmul_dot(caps, s, p);
    p.family = ShaderFamily::matmul_dot_id;
}
bool moe_matmul_dot_serves(const DeviceCaps& caps, const LinearShape& s) {
    if (!matmul_dot_serves(caps, s) || !has_variant(ShaderFamily::matmul_dot_id, s.wtype)) return false;
    // matmul_dot.comp's EXPERT_GROUPS form keeps the tile's slots in shared memory beside its tiles,
    // which the dense configuration sized to fit alone: the float kernels where those words do not fit too.
    MatmulPlan d;
    matmul_dot(caps, s, d);
    return matmul_dot_shared_bytes(d.bm, d.bn, d.bk) + 4ull * d.bm <= caps.max_shared_memory;
}
void moe_matmul_broadcast(const DeviceCaps& caps, const LinearShape& s, MatmulPlan& p) {
    matmul_broadcast(caps, s, p);
    p.family = ShaderFamily::matmul_broadcast_id;
}
void moe_matmul_tiled(const DeviceCaps& caps, const LinearShape& s, MatmulPlan& m) {
    matmul_tiled(caps, s, m);
    m.family = ShaderFamily::matmul_id;
    // matmul.comp's EXPERT_GROUPS form also keeps the tile's slots in shared memory.
    auto shared = [&] { return (uint64_t(m.bk) * (m.bm + 1 + m.bn + 1) + m.bm) * 4; };
    while (m.bk > 8 && shared() > caps.max_shared_memory) m.bk /= 2;
    if (shared() > caps.max_shared_memory)
        throw DeviceLimitError(fmt::format("moe_matmul: needs {} bytes of shared memory, device has {}", shared(),
                                           caps.max_shared_memory));
}

using P = LinearProblem;
// Priority order within each problem; the last row of each always serves and is preferred.
constexpr KernelRow kRows[] = {
    {"matvec-dot", P::DenseMatvec, has_int_dot, matvec_dot_serves, int_dot_chosen, matvec_dot},
    {"matvec-rows", P::DenseMatvec, always, always_serves, matvec_rows_preferred, matvec_rows},
    {"matvec-strided", P::DenseMatvec, always, always_serves, always_preferred, matvec_strided},
    {"matmul-coopmat", P::DenseMatmul, coopmat_usable, matmul_coopmat_serves, coopmat_chosen, nullptr, matmul_coopmat},
    {"matmul-dot", P::DenseMatmul, has_int_dot, matmul_dot_serves, int_dot_chosen, nullptr, matmul_dot},
    {"matmul-broadcast", P::DenseMatmul, broadcast_runs_on, broadcast_serves, cpu_tuned, nullptr, matmul_broadcast},
    {"matmul-tiled", P::DenseMatmul, always, always_serves, always_preferred, nullptr, matmul_tiled},
    {"moe-matvec-dot", P::ExpertMatvec, has_int_dot, moe_matvec_dot_serves, int_dot_chosen, nullptr, nullptr,
     moe_matvec_dot},
    {"moe-matvec-strided", P::ExpertMatvec, always, always_serves, always_preferred, nullptr, nullptr,
     moe_matvec_strided},
    {"moe-matmul-coopmat", P::ExpertMatmul, coopmat_usable, moe_matmul_coopmat_serves, coopmat_chosen, nullptr,
     moe_matmul_coopmat},
    {"moe-matmul-dot", P::ExpertMatmul, has_int_dot, moe_matmul_dot_serves, int_dot_chosen, nullptr, moe_matmul_dot},
    {"moe-matmul-broadcast", P::ExpertMatmul, broadcast_runs_on, broadcast_serves, cpu_tuned, nullptr,
     moe_matmul_broadcast},
    {"moe-matmul-tiled", P::ExpertMatmul, always, always_serves, always_preferred, nullptr, moe_matmul_tiled},
};

// --- tuned configurations (runtime/kernel_tuning.h, measured by `vkllm tune`) ------------------------

bool pow2(uint32_t v) { return v && (v & (v - 1)) == 0; }
uint32_t wg_limit(const DeviceCaps& c) { return std::min(c.max_workgroup_invocations, c.max_workgroup_size[0]); }

// Matvec rows (dense and experts): wg from the decode entry (m = 1) whatever m, so that every row of a
// decode batch sums as a lone token's does (the strided kernels' reduction order follows wg, and
// decode batches must stay batch invariant); rows, which never change a row's sum, from the call's
// own bucket, halved while the reduction (`shared_per_row` bytes per row) does not fit, as the rows'
// own configure does. matvec-rows keeps its workgroup of one SIMD chunk: only rows per lane tune.
void tune_matvec(const DeviceCaps& caps, const KernelRow& row, const LinearShape& s, bool tunes_wg, uint32_t& wg,
                 uint32_t& rows, const std::function<uint64_t(uint32_t wg)>& shared_per_row) {
    const KernelTuning& t = *caps.tuning;
    const uint32_t type = uint32_t(s.wtype);
    if (const TunedConfig* d = t.find(row.name, type, s.n, s.k, 1); tunes_wg && d && d->wg)
        if (pow2(d->wg) && d->wg >= caps.subgroup_size && d->wg <= wg_limit(caps) &&
            shared_per_row(d->wg) <= caps.max_shared_memory)
            wg = d->wg;
    if (const TunedConfig* e = t.find(row.name, type, s.n, s.k, s.m); e && e->rows && pow2(e->rows) && e->rows <= 32) {
        uint32_t r = e->rows;
        while (r > 1 && r * shared_per_row(wg) > caps.max_shared_memory) r /= 2;
        rows = r;
    }
}

// Whether a tiled, integer-dot or cooperative-matrix matmul plan with tuned tiles is one its kernel
// runs on this device (its tile rules, invocations and shared memory).
bool matmul_fits(const DeviceCaps& caps, const LinearShape& s, const MatmulPlan& p, bool experts) {
    using K = MatmulPlan::Kernel;
    if (!pow2(p.bm) || !pow2(p.bn) || p.bk == 0) return false;
    if (p.kernel == K::Coopmat) {
        if (!p.sgm || !p.sgn || (p.bm / p.sgm) % p.cm || (p.bn / p.sgn) % p.cn || p.bk % 8 || p.bk % p.ck) return false;
        const uint64_t wg = uint64_t(p.sgm) * p.sgn * p.sg;
        return wg <= wg_limit(caps) && matmul_coopmat_shared_bytes(p.bm, p.bn, p.bk, p.sgm * p.sgn, p.cm, p.cn,
                                                                   experts) <= caps.max_shared_memory;
    }
    if (!p.tm || !p.tn || p.bm % p.tm || p.bn % p.tn || uint64_t(p.bm / p.tm) * (p.bn / p.tn) > wg_limit(caps))
        return false;
    const uint64_t slots = experts ? 4ull * p.bm : 0;
    if (p.kernel == K::Dot)
        return p.bk % 32 == 0 && p.bk / 32 >= dot_span(s.wtype) &&
               matmul_dot_shared_bytes(p.bm, p.bn, p.bk) + slots <= caps.max_shared_memory;
    return p.bk % 8 == 0 && uint64_t(p.bk) * (p.bm + 1 + p.bn + 1) * 4 + slots <= caps.max_shared_memory;
}

// The forced row of this problem, or null (throws as pick_kernel says).
const KernelRow* forced_row(const DeviceCaps& caps, LinearProblem problem) {
    const KernelRow* found = nullptr;
    for (const std::string& name : caps.forced_kernels) {
        const KernelRow* row = find_kernel_row(name);
        if (!row) {
            std::string names;
            for (const KernelRow& r : kRows) names += fmt::format("{}{}", names.empty() ? "" : ", ", r.name);
            throw std::invalid_argument(fmt::format("--caps kernel={}: no such kernel (the rows: {})", name, names));
        }
        if (row->problem != problem) continue;
        if (found && found != row)
            throw std::invalid_argument(fmt::format("--caps kernel={} and kernel={}: one row per problem ({})",
                                                    found->name, row->name, problem_name(problem)));
        if (!row->runs_on(caps))
            throw DeviceLimitError(fmt::format("--caps kernel={}: {} lacks what the kernel needs", name, caps.name));
        found = row;
    }
    return found;
}

}  // namespace

std::string_view problem_name(LinearProblem p) {
    switch (p) {
        case P::DenseMatvec: return "dense matvec";
        case P::DenseMatmul: return "dense matmul";
        case P::ExpertMatvec: return "expert matvec";
        case P::ExpertMatmul: return "expert matmul";
    }
    return "?";
}

std::span<const KernelRow> kernel_table() { return kRows; }

const KernelRow* find_kernel_row(std::string_view name) {
    for (const KernelRow& r : kRows)
        if (r.name == name) return &r;
    return nullptr;
}

const KernelRow& pick_kernel(const DeviceCaps& caps, LinearProblem problem, const LinearShape& shape) {
    if (const KernelRow* forced = caps.forced_kernels.empty() ? nullptr : forced_row(caps, problem);
        forced && forced->serves(caps, shape))
        return *forced;
    for (const KernelRow& r : kRows)
        if (r.problem == problem && r.serves(caps, shape) && r.preferred(caps, shape)) return r;
    throw std::logic_error(fmt::format("kernel table: no row serves the {} problem", problem_name(problem)));
}

void configure(const DeviceCaps& caps, const KernelRow& row, const LinearShape& shape, MatvecPlan& plan) {
    row.matvec(caps, shape, plan);
    if (!caps.tuning) return;
    const uint32_t norm = shape.input == Kind::RmsNorm;
    const bool rows_kernel = plan.kernel == MatvecPlan::Kernel::Rows;
    tune_matvec(caps, row, shape, !rows_kernel, plan.wg, plan.rows, [&](uint32_t wg) -> uint64_t {
        // The reduction keeps (NR + NORM) * NB * WG floats in shared memory (matvec_rows none).
        return rows_kernel ? 0 : uint64_t(1 + norm) * shape.m * wg * 4;
    });
}

void configure(const DeviceCaps& caps, const KernelRow& row, const LinearShape& shape, MatmulPlan& plan) {
    row.matmul(caps, shape, plan);
    if (!caps.tuning || plan.kernel == MatmulPlan::Kernel::Broadcast) return;
    const TunedConfig* t = caps.tuning->find(row.name, uint32_t(shape.wtype), shape.n, shape.k, shape.m);
    if (!t) return;
    MatmulPlan tuned = plan;
    for (auto [from, to] : {std::pair{t->bm, &tuned.bm}, {t->bn, &tuned.bn}, {t->bk, &tuned.bk}})
        if (from) *to = from;
    if (plan.kernel == MatmulPlan::Kernel::Coopmat) {
        if (t->sgm) tuned.sgm = t->sgm;
        if (t->sgn) tuned.sgn = t->sgn;
    } else {
        if (t->tm) tuned.tm = t->tm;
        if (t->tn) tuned.tn = t->tn;
    }
    if (matmul_fits(caps, shape, tuned, row.problem == P::ExpertMatmul)) plan = tuned;
}

void configure(const DeviceCaps& caps, const KernelRow& row, const LinearShape& shape, MoeMatvecPlan& plan) {
    row.moe_matvec(caps, shape, plan);
    if (!caps.tuning) return;
    // One slot per workgroup row: RR * WG floats of reduction.
    tune_matvec(caps, row, shape, true, plan.wg, plan.rows, [](uint32_t wg) -> uint64_t { return uint64_t(wg) * 4; });
}

void check_forced_kernels(const DeviceCaps& caps) {
    for (LinearProblem p : {P::DenseMatvec, P::DenseMatmul, P::ExpertMatvec, P::ExpertMatmul})
        (void)forced_row(caps, p);
}

}  // namespace vkllm::ops
