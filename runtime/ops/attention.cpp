#include "runtime/ops/attention.h"

#include "runtime/ops/rope.h"
#include "runtime/ops/window.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>

namespace vkllm::ops {

namespace {

// Must match the shaders' limits.
constexpr uint32_t kDecodeWg = 64;  // attention_decode.comp: WG >= v_dim / 4 (wider for V past 256)
constexpr uint32_t kDecodeMaxHeads = 8;  // attention_decode.comp: GW_MAX
constexpr uint32_t kPrefillWg = 128;  // attention_prefill.comp: WG >= v_dim / 4 (wider for V past 512)
constexpr uint32_t kPrefillMaxRows = 8;  // attention_prefill.comp: MAX_ROWS (rows per invocation)
constexpr uint32_t kMergeWg = 64;
constexpr uint32_t kMaxSplits = 128;  // attention_merge.comp holds up to 256
constexpr uint32_t kMaxHeadDim = 576;  // DeepSeek's MLA: K heads of 64 RoPE + 512 latent dims
constexpr uint32_t kStoreMaxHeadDim = 256;  // attention_store: the fused path as written and tested
constexpr uint32_t kMaxPosBiasRange = 1u << 20;  // a table of n_heads x 2M+1 floats is already absurd

// The KV element type's member of an attention family (shaders.cmake declares each for every KvType).
ShaderId kv_variant(ShaderFamily f, KvType t) {
    return variant(f, t == KvType::F16 ? TensorType::F16 : t == KvType::F32 ? TensorType::F32 : TensorType::Q8_0);
}

// ALiBi's slopes as alibi_slope() in shaders/include/kv_read.glsl takes them.
struct AlibiPush {
    float step = 0;  // max_bias / n_log2
    uint32_t n_log2 = 0;  // the largest power of two <= n_heads; 0: no ALiBi
};

AlibiPush alibi_push(const AttentionParams& p) {
    if (p.max_alibi_bias == 0.0f) return {};
    const uint32_t n_log2 = std::bit_floor(p.n_heads);
    return {p.max_alibi_bias / float(n_log2), n_log2};
}

struct DecodePush {
    uint32_t n_heads, n_kv_heads, n_ctx, n_splits, min_chunk;
    float scale;
    uint32_t window;
    float softcap;
    uint32_t q_first, pos_first, dst_first;
    AlibiPush alibi;
    uint32_t has_sinks, sink_first;
    // V's layout in its binding, in 4-element groups: row r, kv head g starts at r * v_row4 + g * v_head4
    // + v_off4 (a V cache: n_kv_heads * v_dim / 4, v_dim / 4, 0; V in K: K's strides, (head_dim - v_dim) / 4).
    uint32_t v_row4, v_head4, v_off4;
    uint32_t table_first, block_shift;  // paged: the first table row's offset; log2 of the block rows (0: not paged)
};
struct MergePush {
    uint32_t n_heads, v_dim, n_splits, out_first;
};
struct PrefillPush {
    uint32_t n_tokens, n_heads, n_kv_heads, n_ctx, group;
    float scale;
    uint32_t window;
    float softcap;
    uint32_t q_first, pos_first, out_first;
    uint32_t causal;
    AlibiPush alibi;
    uint32_t bias_range;
    uint32_t seg_first, segmented;
    uint32_t has_sinks, sink_first;
    uint32_t v_row4, v_head4, v_off4;  // as DecodePush's
    uint32_t v_in_k;  // 1: V is the tail of the K rows, so the K tile in shared memory already holds it
    uint32_t table_first, block_shift;  // as DecodePush's
};

struct VLayout {
    uint32_t row4, head4, off4;
};
VLayout v_layout(const AttentionParams& p) {
    const uint32_t dv4 = p.v_dim() / 4;
    if (p.v_in_k) return {p.n_kv_heads * (p.head_dim / 4), p.head_dim / 4, (p.head_dim - p.v_dim()) / 4};
    return {p.n_kv_heads * dv4, dv4, 0};
}

uint32_t ceil_div(uint64_t a, uint64_t b) { return uint32_t((a + b - 1) / b); }

uint32_t largest_divisor_at_most(uint32_t n, uint32_t cap) {
    for (uint32_t d = std::min(n, cap); d > 1; --d)
        if (n % d == 0) return d;
    return 1;
}

void check_params(const AttentionParams& p) {
    auto bad = [&](const std::string& why) {
        throw std::invalid_argument(fmt::format(
            "attention: {} (n_tokens {}, n_heads {}, n_kv_heads {}, head_dim {}, n_ctx {}, window {}, softcap {}, "
            "max_alibi_bias {})",
            why, p.n_tokens, p.n_heads, p.n_kv_heads, p.head_dim, p.n_ctx, p.window, p.softcap, p.max_alibi_bias));
    };
    if (p.n_tokens == 0 || p.n_heads == 0 || p.n_kv_heads == 0 || p.n_ctx == 0) bad("zero-sized shape");
    if (p.n_heads % p.n_kv_heads != 0) bad("n_heads must be a multiple of n_kv_heads");
    if (p.head_dim == 0 || p.head_dim % 4 != 0 || p.head_dim > kMaxHeadDim)
        bad(fmt::format("head_dim must be a multiple of 4 in 4..{}", kMaxHeadDim));
    if (p.v_head_dim % 4 != 0 || p.v_head_dim > p.head_dim)
        bad(fmt::format("v_head_dim {} must be a multiple of 4 and at most head_dim (0: head_dim)", p.v_head_dim));
    if ((uint64_t(p.n_kv_heads) * p.head_dim) % kv_row_multiple(p.kv_type) != 0)
        bad(fmt::format("a {} cache needs n_kv_heads * head_dim to be a multiple of {}", kv_type_name(p.kv_type),
                        kv_row_multiple(p.kv_type)));
    if (!p.v_in_k && (uint64_t(p.n_kv_heads) * p.v_dim()) % kv_row_multiple(p.kv_type) != 0)
        bad(fmt::format("a {} V cache needs n_kv_heads * v_head_dim ({}) to be a multiple of {}",
                        kv_type_name(p.kv_type), p.v_dim(), kv_row_multiple(p.kv_type)));
    if (p.v_in_k && p.kv_type == KvType::Q8_0 && (p.head_dim - p.v_dim()) % kKvQ8Block != 0)
        bad(fmt::format(
            "V inside a q8_0 K row must start on a block: head_dim - v_head_dim = {} is not a multiple of {}",
            p.head_dim - p.v_dim(), kKvQ8Block));
    // All of a chunk's rows are stored before attention runs: the ring must still hold the window of
    // the chunk's first query after the last one's row went in.
    if (p.window > 0 && uint64_t(p.n_ctx) < uint64_t(p.window) + p.seq_tokens() - 1)
        bad(fmt::format("a sliding-window cache needs n_ctx >= window + n_tokens - 1 = {}",
                        uint64_t(p.window) + p.seq_tokens() - 1));
    if (!(p.softcap >= 0.0f) || !std::isfinite(p.softcap)) bad("softcap must be finite and >= 0");
    if (!(p.max_alibi_bias >= 0.0f) || !std::isfinite(p.max_alibi_bias)) bad("max_alibi_bias must be finite and >= 0");
    if (p.pos_bias_range > kMaxPosBiasRange) bad(fmt::format("pos_bias_range must be at most {}", kMaxPosBiasRange));
    if (p.segmented && (p.causal || p.window > 0)) bad("packed segments need bidirectional attention without a window");
    if (p.batch && (p.pos_bias_range > 0 || p.segmented || !p.causal))
        bad("a batch of sequences is causal decode: no position-bias table or segments");
}

// A paged cache's table and pool, checked against the call; the table's window (the positions' when
// not paged: never read then) and the block shift.
struct PagesBinding {
    detail::Window table;
    uint32_t shift = 0;
};
PagesBinding bind_pages(const DeviceCaps& caps, const KvPages& pg, uint32_t n_ctx, uint32_t table_rows,
                        const detail::Window& stand_in, const char* op) {
    detail::check_pages(pg, n_ctx, table_rows, op);
    if (!pg.paged()) return {stand_in, 0};
    return {detail::window(caps, pg.table, 0, uint64_t(table_rows) * pg.table_stride(n_ctx), 4), pg.block_shift()};
}

// Split-K partials of a decode plan: o[n_splits][n_heads][v_dim], then (m, l) per split and head;
// a batch's queries one such region each, back to back.
uint64_t partials_bytes(const AttentionParams& p, uint32_t n_splits) {
    return uint64_t(p.batch ? p.n_tokens : 1) * n_splits * p.n_heads * (p.v_dim() + 2) * sizeof(float);
}

// The most keys one query can see: a window bounds the KV length.
uint32_t max_kv_len(const AttentionParams& p) { return p.window > 0 ? std::min(p.window, p.n_ctx) : p.n_ctx; }

// attention_decode.comp's shared memory: q_sh (GW queries of K's width dk), p_sh, alpha_sh and ml_sh,
// red_sh (WG vec4). store: the STORE variants also hold the new K and V rows twice (raw_sh, new_sh).
size_t decode_shared_bytes(uint32_t wg, uint32_t dk, uint32_t gw, bool store) {
    return size_t(gw) * (dk / 4) * 16 + size_t(gw) * wg * 4 + size_t(gw) * 12 + size_t(wg) * 16 +
           (store ? 16 * size_t(dk) : 0);
}

// attention_prefill.comp's shared memory: q_sh (M queries of K's width dk), the K/V tile (BK rows of
// the wider of K and V plus one vec4 of padding: the V tile reuses the K tile's space), p_sh, and
// eight words of per-row state.
size_t prefill_shared_bytes(uint32_t dk, uint32_t dv, uint32_t m, uint32_t bk) {
    const size_t dk4 = dk / 4, tile4 = std::max(dk, dv) / 4 + 1;
    return (m * dk4 + bk * tile4) * 16 + size_t(m) * bk * 4 + size_t(m) * 32;
}

// Decode workgroup: its value phase gives each of V's 4-column groups an invocation, so WG >= v_dim / 4:
// 64 up to v_dim 256, else the next power of two (MLA's 512: 128). A CPU driver runs a workgroup as
// chunks of SIMD width switched at every barrier, so there the smallest that holds V (at least 16):
// a short decode pays those switches, not arithmetic (docs/kernels.md).
uint32_t decode_wg(const DeviceCaps& caps, const AttentionParams& p) {
    return std::max(caps.cpu_tuning ? 16u : kDecodeWg, std::bit_ceil(p.v_dim() / 4));
}
// Prefill workgroup: WG >= v_dim / 4 likewise (128 up to v_dim 512).
uint32_t prefill_wg(const AttentionParams& p) { return std::max(kPrefillWg, std::bit_ceil(p.v_dim() / 4)); }

// attention_prefill_coopmat.comp's shared memory: Q, the K/V tile and the weights as f16 rows padded
// by 8 halves, the output accumulator as f32 rows padded by 4, and the scalar kernel's p_sh and row state.
size_t prefill_coopmat_shared_bytes(uint32_t dk, uint32_t dv, uint32_t m, uint32_t bk) {
    return 2 * (size_t(m) * (dk + 8) + size_t(bk) * (std::max(dk, dv) + 8) + size_t(m) * (bk + 8)) +
           4 * size_t(m) * (dv + 4) + size_t(m) * bk * 4 + size_t(m) * 32;
}

// The cooperative-matrix prefill plan, where the device takes the matrix units and the head sizes
// split into its shape: the most query rows per workgroup (a multiple of the shape's rows; rows past
// the call's tokens are masked), then the longest KV tile, within shared memory.
bool plan_prefill_coopmat(const DeviceCaps& caps, const AttentionParams& p, detail::AttentionPlan& plan) {
    const CoopMatShape* shape = coopmat_f16_shape(caps);
    if (!caps.coopmat_kernels || !shape) return false;
    const uint32_t cm = shape->m, cn = shape->n, ck = shape->k, sg = caps.subgroup_size;
    if (p.head_dim % ck != 0 || p.head_dim % 8 != 0 || p.v_dim() % cn != 0 || p.v_dim() % 8 != 0) return false;
    const uint32_t wg = prefill_wg(p);
    if (wg % sg != 0 || sg < caps.min_subgroup_size || sg > caps.max_subgroup_size) return false;
    const uint32_t group = p.n_heads / p.n_kv_heads;
    for (uint32_t rows : {64u, 32u, 16u, 8u}) {
        // Tokens per workgroup: as many as fit the rows, in steps that keep M a multiple of cm
        // (3 heads per group with cm 8 take 8 tokens: 24 rows).
        const uint32_t gw = largest_divisor_at_most(group, rows), step = cm / std::gcd(gw, cm);
        const uint32_t bt = std::max(rows / gw / step, 1u) * step, m = gw * bt;
        if (m > std::max(rows, cm * gw)) continue;
        for (uint32_t bk : {64u, 32u, 16u, 8u}) {
            if (bk % cn != 0 || bk % ck != 0 || bk % 8 != 0) continue;
            const size_t bytes = prefill_coopmat_shared_bytes(p.head_dim, p.v_dim(), m, bk);
            if (bytes > caps.max_shared_memory) continue;
            plan.wg = wg;
            plan.heads_per_wg = gw;
            plan.tokens_per_wg = bt;
            plan.kv_tile = bk;
            plan.shared_bytes = bytes;
            plan.coopmat = true;
            plan.cm = cm, plan.cn = cn, plan.ck = ck, plan.sg = sg;
            return true;
        }
    }
    return false;
}

// Workgroups that keep the device busy during decode. The caps do not say how many compute units
// there are, so this goes by device class: enough for a large discrete GPU, few on a CPU where
// each workgroup is a thread's job and more splits only add merge work.
uint32_t decode_target_workgroups(const DeviceCaps& caps) {
    switch (caps.type) {
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return 16;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 64;
        default: return 256;
    }
}

// cache_rows: the rows of a cache binding (n_ctx, or a paged pool's), for the message.
BufferSlice bound(const BufferSlice& s, uint64_t bytes, const DeviceCaps& caps, const char* tensor,
                  const AttentionParams& p, uint64_t cache_rows = 0) {
    if (s.buffer == VK_NULL_HANDLE || s.size < bytes)
        throw std::invalid_argument(fmt::format("attention: {} holds {} bytes, needs {}", tensor, s.size, bytes));
    if (bytes > caps.max_storage_buffer_range) {
        const bool cache = std::string_view(tensor).find("cache") != std::string_view::npos;
        const uint64_t rows = cache_rows ? cache_rows : p.n_ctx;
        const uint64_t row = bytes / rows;
        throw DeviceLimitError(fmt::format(
            "attention: {} needs a {}-byte binding, more than this device's maxStorageBufferRange ({} bytes){}", tensor,
            bytes, caps.max_storage_buffer_range,
            cache ? fmt::format("; one layer's cache ({} rows of {} bytes) must fit in one binding, so at most "
                                "{} rows work on this device",
                                rows, row, caps.max_storage_buffer_range / row)
                  : std::string("; use fewer tokens per call")));
    }
    return {s.buffer, s.offset, bytes};
}

}  // namespace

namespace detail {

AttentionPlan attention_plan(const DeviceCaps& caps, const AttentionParams& p, bool store) {
    check_params(p);
    const uint32_t group = p.n_heads / p.n_kv_heads;
    AttentionPlan plan;
    if (p.seq_tokens() == 1 && p.pos_bias_range == 0 && !p.segmented) {
        // A batch takes the plan of one of its queries, so that a sequence's reduction order (its
        // splits) does not depend on the batch beside it.
        plan.decode = true;
        plan.wg = decode_wg(caps, p);
        plan.kv_tile = plan.wg;
        // A split costs a merge dispatch, and on a CPU driver a dispatch has a fixed cost of tens of
        // microseconds (lavapipe: 50-90 us for attention_merge on a 2-core EPYC) while a 64-row split
        // of a small model is ~nothing: there a split holds at least 16384 values of each head's K
        // (256 rows at head_dim 64; 2048 rows at stories260K's 8: its decode loses 5 merges of 43
        // dispatches), so short contexts take one split and long ones still spread over the cores.
        // (A wider workgroup, for V past 256, keeps the same 256-row floor: its rows are longer.)
        plan.min_chunk = caps.cpu_tuning ? std::max(4 * kDecodeWg, 16384 / p.head_dim) : plan.wg;
        uint32_t gw = largest_divisor_at_most(group, kDecodeMaxHeads);
        while (gw > 1 && decode_shared_bytes(plan.wg, p.head_dim, gw, store) > caps.max_shared_memory)
            gw = largest_divisor_at_most(group, gw - 1);
        plan.heads_per_wg = gw;
        plan.shared_bytes = decode_shared_bytes(plan.wg, p.head_dim, gw, store);
        const uint32_t wgs_per_split = p.n_kv_heads * (group / gw);
        const uint32_t max_splits = std::min(kMaxSplits, ceil_div(max_kv_len(p), plan.min_chunk));
        plan.n_splits = std::clamp(ceil_div(decode_target_workgroups(caps), wgs_per_split), 1u, max_splits);
    } else if (!plan_prefill_coopmat(caps, p, plan)) {
        plan.wg = prefill_wg(p);
        // The value phase spreads (row, 4 columns of V) over the workgroup: rows per invocation from V's width.
        const uint32_t dv4 = p.v_dim() / 4;
        // Most query rows per workgroup first (each K/V tile is reused by all of them), then the
        // longest KV tile, within shared memory and the accumulator registers.
        for (uint32_t rows : {32u, 16u, 8u, 4u, 2u, 1u}) {
            const uint32_t gw = largest_divisor_at_most(group, rows);
            const uint32_t bt = std::min(rows / gw, p.n_tokens);
            const uint32_t m = gw * bt;
            if (ceil_div(m, plan.wg / dv4) > kPrefillMaxRows) continue;
            for (uint32_t bk : {32u, 16u, 8u, 4u}) {
                if (ceil_div(m, plan.wg / bk) > kPrefillMaxRows) continue;
                const size_t bytes = prefill_shared_bytes(p.head_dim, p.v_dim(), m, bk);
                if (bytes > caps.max_shared_memory) continue;
                plan.heads_per_wg = gw;
                plan.tokens_per_wg = bt;
                plan.kv_tile = bk;
                plan.shared_bytes = bytes;
                break;
            }
            if (plan.kv_tile) break;
        }
    }
    if (caps.max_workgroup_invocations != 0 &&
        plan.wg > std::min(caps.max_workgroup_invocations, caps.max_workgroup_size[0]))
        throw DeviceLimitError(
            fmt::format("attention: v_dim {} needs workgroups of {} invocations, more than this device's {}", p.v_dim(),
                        plan.wg, std::min(caps.max_workgroup_invocations, caps.max_workgroup_size[0])));
    if (plan.heads_per_wg == 0 || plan.shared_bytes > caps.max_shared_memory)
        throw DeviceLimitError(
            fmt::format("attention: head_dim {} needs more than this device's {} bytes of shared memory", p.head_dim,
                        caps.max_shared_memory));
    return plan;
}

}  // namespace detail

size_t attention_scratch_bytes(const Context& ctx, const AttentionParams& p) {
    return attention_scratch_bytes(ctx.caps(), p);
}

size_t attention_scratch_bytes(const DeviceCaps& caps, const AttentionParams& p) {
    const detail::AttentionPlan plan = detail::attention_plan(caps, p);
    if (!plan.decode || plan.n_splits == 1) return 0;
    return size_t(partials_bytes(p, plan.n_splits));
}

std::vector<PipelineDesc> attention_pipelines(const Context& ctx, const AttentionParams& p) {
    const detail::AttentionPlan plan = detail::attention_plan(ctx.caps(), p);
    std::vector<PipelineDesc> descs;
    if (plan.decode) {
        descs.push_back(
            {kv_variant(ShaderFamily::attention_decode, p.kv_type), {plan.wg, p.head_dim, plan.heads_per_wg}});
        if (plan.n_splits > 1) descs.push_back({ShaderId::attention_merge, {kMergeWg}});
    } else {
        descs.push_back(
            {kv_variant(plan.coopmat ? ShaderFamily::attention_prefill_coopmat : ShaderFamily::attention_prefill,
                        p.kv_type),
             {plan.wg, p.head_dim, plan.heads_per_wg, plan.tokens_per_wg, plan.kv_tile}});
        if (plan.coopmat) {
            // DV always (constant 5, 0 = D), then the shape and the subgroup size it requires.
            descs[0].spec.insert(descs[0].spec.end(),
                                 {p.v_dim() != p.head_dim ? p.v_dim() : 0u, plan.cm, plan.cn, plan.ck, plan.sg});
            descs[0].subgroup_size = plan.sg;
            return descs;
        }
    }
    // DV (constant 3 of the decode kernel, 5 of prefill; 0 = D) only where V is narrower, so that the
    // pipelines of every V-as-wide-as-K call stay exactly the ones they were.
    if (p.v_dim() != p.head_dim) descs[0].spec.push_back(p.v_dim());
    return descs;
}

namespace {

// The bindings every attention call shares, checked and windowed.
struct Bindings {
    BufferSlice k, v;
    detail::ByteWindow q, out;
    detail::Window pos;
    detail::Window sinks;  // the sinks' window; the positions' when there are none (never read then)
    detail::Window table;  // a paged cache's block table; the positions' when not paged
    uint32_t block_shift = 0;
    uint64_t q_bytes = 0;  // n_tokens rows of n_heads * head_dim f32
    uint64_t out_bytes = 0;  // n_tokens rows of n_heads * v_dim f32
};

Bindings bind(const DeviceCaps& caps, const AttentionParams& p, const BufferSlice& q, const BufferSlice& k,
              const BufferSlice& v, const BufferSlice& positions, const BufferSlice& out, const BufferSlice& sinks,
              const KvPages& pages) {
    Bindings b;
    if (p.batch && !pages.paged()) throw std::invalid_argument("attention: a batch of sequences needs a paged cache");
    b.q_bytes = uint64_t(p.n_tokens) * p.n_heads * p.head_dim * sizeof(float);
    b.out_bytes = uint64_t(p.n_tokens) * p.n_heads * p.v_dim() * sizeof(float);
    const uint64_t rows = pages.paged() ? pages.pool_rows : p.n_ctx;
    const uint64_t k_bytes = rows * kv_row_bytes(p.kv_type, uint64_t(p.n_kv_heads) * p.head_dim);
    b.k = bound(k, k_bytes, caps, "the K cache", p, rows);
    // V inside K: the K cache is bound to the V binding too (both read-only) and the push constants
    // address V's columns inside its rows; the v slice is not looked at.
    b.v = p.v_in_k ? b.k
                   : bound(v, rows * kv_row_bytes(p.kv_type, uint64_t(p.n_kv_heads) * p.v_dim()), caps, "the V cache",
                           p, rows);
    // q, out and positions may start at any element (one sequence's rows inside a batch): they are
    // bound through aligned windows and the kernels index from the offsets in the push constants.
    // q and out are read and written as vec4s, so their windows keep 16-byte granularity.
    const uint64_t vec_align = std::max<uint64_t>(caps.min_storage_buffer_offset_alignment, 16);
    auto act = [&](const BufferSlice& s, uint64_t act_bytes, const char* tensor) {
        bound(s, act_bytes, caps, tensor, p);
        if (s.offset % 16 != 0)
            throw std::invalid_argument(
                fmt::format("attention: {} must start on 16 bytes, starts at {}", tensor, s.offset));
        detail::ByteWindow w = detail::byte_window(s, 0, act_bytes, vec_align, 16);
        bound(w.slice, w.slice.size, caps, tensor, p);
        return w;
    };
    b.q = act(q, b.q_bytes, "q");
    b.out = act(out, b.out_bytes, "out");
    bound(positions, uint64_t(p.n_tokens) * sizeof(int32_t), caps, "positions", p);
    b.pos = detail::window(caps, positions, 0, p.n_tokens, 4);
    b.sinks = b.pos;
    if (p.sinks) {
        bound(sinks, uint64_t(p.n_heads) * sizeof(float), caps, "sinks", p);
        if (sinks.offset % 4 != 0)
            throw std::invalid_argument(
                fmt::format("attention: sinks must start on 4 bytes, start at {}", sinks.offset));
        b.sinks = detail::window(caps, sinks, 0, p.n_heads, 4);
    }
    const PagesBinding pg = bind_pages(caps, pages, p.n_ctx, p.batch ? p.n_tokens : 1, b.pos, "attention");
    b.table = pg.table;
    b.block_shift = pg.shift;
    return b;
}

// attention_decode.comp's STORE push constants after DecodePush.
struct StorePush {
    uint32_t k_first, v_first, rot_half, layout_id;
    float log2_step;
    uint32_t ff_first, has_ff;
    float freq_scale, ext_factor, mscale, corr_low, corr_high;
};
// Vulkan guarantees 128 bytes of push constants: the fused decode's block must stay within them.
static_assert(sizeof(DecodePush) + sizeof(StorePush) <= 128,
              "attention_decode_store's push constants exceed 128 bytes");

// The decode kernel (with STORE: its new-row bindings and push constants) and, for split KV, the merge.
void decode(Context& ctx, CommandStream& s, const AttentionParams& p, const detail::AttentionPlan& plan,
            const std::vector<PipelineDesc>& descs, const Bindings& b, const BufferSlice& scratch,
            const StorePush* store, std::initializer_list<BufferSlice> store_bindings) {
    const detail::Window sk = b.sinks;
    const DeviceCaps& caps = ctx.caps();
    const uint32_t group = p.n_heads / p.n_kv_heads;
    const uint32_t queries = p.batch ? p.n_tokens : 1;
    const std::array<uint32_t, 3> grid{p.n_kv_heads, plan.n_splits, group / plan.heads_per_wg * queries};
    const bool direct = plan.n_splits == 1;
    // The partials of this plan's splits; attention_store's plan never has more splits than
    // attention()'s (its workgroups hold at most as many heads), so attention_scratch_bytes suffices.
    const BufferSlice dst = direct ? b.out.slice : bound(scratch, partials_bytes(p, plan.n_splits), caps, "scratch", p);
    const VLayout vl = v_layout(p);
    const DecodePush push{p.n_heads,
                          p.n_kv_heads,
                          p.n_ctx,
                          plan.n_splits,
                          plan.min_chunk,
                          p.scale,
                          p.window,
                          p.softcap,
                          uint32_t(b.q.inner / 16),
                          b.pos.first,
                          direct ? uint32_t(b.out.inner / 4) : 0u,
                          alibi_push(p),
                          p.sinks ? 1u : 0u,
                          sk.first,
                          vl.row4,
                          vl.head4,
                          vl.off4,
                          b.table.first,
                          b.block_shift};
    std::vector<BufferSlice> bindings{b.q.slice, b.k, b.v, b.pos.slice, dst};
    bindings.insert(bindings.end(), store_bindings.begin(), store_bindings.end());
    bindings.push_back(sk.slice);
    bindings.push_back(b.table.slice);
    if (store) {
        struct {
            DecodePush base;
            StorePush store;
        } spush{push, *store};
        s.dispatch(ctx.pipeline(descs[0]), bindings, &spush, sizeof(spush), grid, "attention_store");
    } else {
        s.dispatch(ctx.pipeline(descs[0]), bindings, &push, sizeof(push), grid, "attention");
    }
    if (direct) return;
    const MergePush mpush{p.n_heads, p.v_dim(), plan.n_splits, uint32_t(b.out.inner / 4)};
    s.dispatch(ctx.pipeline(descs[1]), {dst, b.out.slice}, mpush, {p.n_heads, queries, 1}, "attention_merge");
}

}  // namespace

void attention(Context& ctx, CommandStream& s, const AttentionParams& p, const BufferSlice& q, const BufferSlice& k,
               const BufferSlice& v, const BufferSlice& positions, const BufferSlice& out, const BufferSlice& scratch,
               const AttentionExtras& extras) {
    const DeviceCaps& caps = ctx.caps();
    const detail::AttentionPlan plan = detail::attention_plan(caps, p);
    const std::vector<PipelineDesc> descs = attention_pipelines(ctx, p);
    const Bindings b = bind(caps, p, q, k, v, positions, out, extras.sinks, extras.pages);
    if (plan.decode) {
        decode(ctx, s, p, plan, descs, b, scratch, nullptr, {});
        return;
    }
    const uint32_t group = p.n_heads / p.n_kv_heads;
    // Without a table or segments the kernel never reads bindings 5 and 6; the positions stand in.
    const BufferSlice bias =
        p.pos_bias_range > 0
            ? bound(extras.pos_bias, uint64_t(p.n_heads) * (2ull * p.pos_bias_range + 1) * 4, caps, "pos_bias", p)
            : b.pos.slice;
    detail::Window segs{b.pos.slice, 0};
    if (p.segmented) {
        bound(extras.segments, uint64_t(p.n_tokens) * 8, caps, "segments", p);
        segs = detail::window(caps, extras.segments, 0, 2ull * p.n_tokens, 4);
    }
    const VLayout vl = v_layout(p);
    const PrefillPush push{p.n_tokens,
                           p.n_heads,
                           p.n_kv_heads,
                           p.n_ctx,
                           group,
                           p.scale,
                           p.window,
                           p.softcap,
                           uint32_t(b.q.inner / 16),
                           b.pos.first,
                           uint32_t(b.out.inner / 16),
                           p.causal ? 1u : 0u,
                           alibi_push(p),
                           p.pos_bias_range,
                           segs.first,
                           p.segmented ? 1u : 0u,
                           p.sinks ? 1u : 0u,
                           b.sinks.first,
                           vl.row4,
                           vl.head4,
                           vl.off4,
                           p.v_in_k ? 1u : 0u,
                           b.table.first,
                           b.block_shift};
    s.dispatch(ctx.pipeline(descs[0]),
               {b.q.slice, b.k, b.v, b.pos.slice, b.out.slice, bias, segs.slice, b.sinks.slice, b.table.slice}, push,
               {ceil_div(p.n_tokens, plan.tokens_per_wg), p.n_kv_heads, group / plan.heads_per_wg}, "attention");
}

bool attention_store_supported(const AttentionParams& p) {
    return p.seq_tokens() == 1 && p.pos_bias_range == 0 && !p.segmented && p.v_dim() == p.head_dim && !p.v_in_k &&
           p.head_dim <= kStoreMaxHeadDim && (p.kv_type != KvType::Q8_0 || p.head_dim % kKvQ8Block == 0);
}

std::vector<PipelineDesc> attention_store_pipelines(const Context& ctx, const AttentionParams& p) {
    if (!attention_store_supported(p))
        throw std::invalid_argument(fmt::format(
            "attention_store: needs one token (got {}), no position-bias table or segments, a V cache as wide as K "
            "(v_head_dim {}, v_in_k {}), head_dim at most {} and, for a q8_0 cache, a multiple of {} (got {})",
            p.n_tokens, p.v_head_dim, p.v_in_k, kStoreMaxHeadDim, kKvQ8Block, p.head_dim));
    const detail::AttentionPlan plan = detail::attention_plan(ctx.caps(), p, true);
    std::vector<PipelineDesc> descs{
        {kv_variant(ShaderFamily::attention_decode_store, p.kv_type), {plan.wg, p.head_dim, plan.heads_per_wg}}};
    if (plan.n_splits > 1) descs.push_back({ShaderId::attention_merge, {kMergeWg}});
    return descs;
}

void attention_store(Context& ctx, CommandStream& s, const AttentionParams& p, const BufferSlice& q, const NewKv& kv,
                     const BufferSlice& k_cache, const BufferSlice& v_cache, const BufferSlice& positions,
                     const BufferSlice& out, const BufferSlice& scratch, const AttentionExtras& extras) {
    const DeviceCaps& caps = ctx.caps();
    const std::vector<PipelineDesc> descs = attention_store_pipelines(ctx, p);
    const detail::AttentionPlan plan = detail::attention_plan(caps, p, true);
    if (extras.pos_bias.buffer != VK_NULL_HANDLE || extras.segments.buffer != VK_NULL_HANDLE)
        throw std::invalid_argument("attention_store: no position-bias table or segments");
    const BufferSlice& sinks = extras.sinks;
    const Bindings b = bind(caps, p, q, k_cache, v_cache, positions, out, sinks, extras.pages);
    const uint32_t row = p.n_kv_heads * p.head_dim;
    const uint64_t new_rows = uint64_t(row) * p.n_tokens;  // elements of the new K (and V) rows: one row per query
    detail::require_bytes(kv.k, new_rows * 4, "attention_store", "k");
    detail::require_bytes(kv.v, new_rows * 4, "attention_store", "v");
    StorePush sp{};
    if (kv.rope) {
        if (kv.rope->n_heads != p.n_heads || kv.rope->head_dim != p.head_dim)
            throw std::invalid_argument(
                fmt::format("attention_store: RoPE of {} heads of {} for attention over {} heads of {}",
                            kv.rope->n_heads, kv.rope->head_dim, p.n_heads, p.head_dim));
        const detail::RopeShaderParams r = detail::rope_shader_params(*kv.rope);
        sp.rot_half = r.rot_half, sp.layout_id = r.layout_id, sp.log2_step = r.log2_step, sp.freq_scale = r.freq_scale;
        sp.ext_factor = r.ext_factor, sp.mscale = r.mscale, sp.corr_low = r.corr_low, sp.corr_high = r.corr_high;
        if (kv.freq_factors)
            detail::require_bytes(*kv.freq_factors, uint64_t(r.rot_half) * 4, "attention_store", "freq_factors");
    } else if (kv.freq_factors) {
        throw std::invalid_argument("attention_store: frequency factors without RoPE");
    }
    // One dispatch writes the caches and the output (or the split partials) while its other
    // workgroups read the rest: no written range may share a byte with another range.
    const uint64_t act_bytes = b.q_bytes;  // also out's: V is as wide as K here
    const bool split = plan.n_splits > 1;
    const KvPages& pg = extras.pages;
    const uint64_t table_bytes = uint64_t(p.batch ? p.n_tokens : 1) * pg.table_stride(p.n_ctx) * 4;
    struct Range {
        BufferSlice slice;
        const char* name;
        bool written;
    };
    const Range ranges[] = {
        {b.k, "the K cache", true},
        {b.v, "the V cache", true},
        {split ? BufferSlice{scratch.buffer, scratch.offset, partials_bytes(p, plan.n_splits)}
               : BufferSlice{out.buffer, out.offset, act_bytes},
         split ? "scratch" : "out", true},
        {BufferSlice{q.buffer, q.offset, act_bytes}, "q", false},
        {BufferSlice{kv.k.buffer, kv.k.offset, new_rows * 4}, "the new K row", false},
        {BufferSlice{kv.v.buffer, kv.v.offset, new_rows * 4}, "the new V row", false},
        {BufferSlice{positions.buffer, positions.offset, 4ull * p.n_tokens}, "positions", false},
        {pg.paged() ? BufferSlice{pg.table.buffer, pg.table.offset, table_bytes} : BufferSlice{}, "the block table",
         false},
        {kv.freq_factors ? *kv.freq_factors : BufferSlice{}, "the frequency factors", false},
        {p.sinks ? BufferSlice{sinks.buffer, sinks.offset, p.n_heads * 4ull} : BufferSlice{}, "the sinks", false},
    };
    for (const Range& w : ranges)
        for (const Range& o : ranges)
            if (w.written && &o != &w && o.slice.buffer != VK_NULL_HANDLE && w.slice.overlaps(o.slice))
                throw std::invalid_argument(fmt::format("attention_store: {} overlaps {}", w.name, o.name));
    const detail::Window kw = detail::window(caps, kv.k, 0, new_rows, 4),
                         vw = detail::window(caps, kv.v, 0, new_rows, 4);
    // Without frequency factors the shader never reads binding 7: positions stands in.
    const detail::Window fw = kv.freq_factors ? detail::window(caps, *kv.freq_factors, 0, sp.rot_half, 4) : b.pos;
    sp.k_first = kw.first, sp.v_first = vw.first, sp.ff_first = fw.first, sp.has_ff = kv.freq_factors ? 1u : 0u;
    decode(ctx, s, p, plan, descs, b, scratch, &sp, {kw.slice, vw.slice, fw.slice});
}

}  // namespace vkllm::ops
