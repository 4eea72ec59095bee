#include "runtime/ops/kv_store.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/rope.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace vkllm::ops {

namespace {

// kv_store_pair_rope's additions: Q rotated in place and K rotated as it is stored.
struct RopeArgs {
    const BufferSlice& q;
    const RopeParams& rp;  // n_heads: Q's heads
    const BufferSlice* freq_factors;
    uint32_t n_kv_heads;
};

// src2 / cache2: the second pair (V), or null.
void store(Context& ctx, CommandStream& s, const BufferSlice& src, const BufferSlice& cache, const BufferSlice* src2,
           const BufferSlice* cache2, const BufferSlice& positions, uint32_t n_tokens, uint32_t row_elems,
           uint32_t n_ctx, KvType kv_type, const RopeArgs* rope = nullptr) {
    detail::RopeShaderParams rsp{};
    uint64_t q_row = 0;
    if (rope) {
        rsp = detail::rope_shader_params(rope->rp);
        if (rope->n_kv_heads == 0 || row_elems != uint64_t(rope->n_kv_heads) * rope->rp.head_dim)
            throw std::invalid_argument(fmt::format("kv_store_pair_rope: {} K heads of {} do not make rows of {}",
                                                    rope->n_kv_heads, rope->rp.head_dim, row_elems));
        q_row = uint64_t(rope->rp.n_heads) * rope->rp.head_dim;
        detail::require_bytes(rope->q, uint64_t(n_tokens) * q_row * 4, "kv_store_pair_rope", "q");
        if (rope->freq_factors)
            detail::require_bytes(*rope->freq_factors, uint64_t(rsp.rot_half) * 4, "kv_store_pair_rope", "freq_factors");
        // Q is rotated in place while everything else is read or written: Q must share no byte with it.
        const BufferSlice qs{rope->q.buffer, rope->q.offset, uint64_t(n_tokens) * q_row * 4};
        const BufferSlice rows{src.buffer, src.offset, uint64_t(n_tokens) * row_elems * 4};
        if (qs.overlaps(rows) || (src2 && qs.overlaps(*src2)) || qs.overlaps(cache) || (cache2 && qs.overlaps(*cache2)) ||
            qs.overlaps(positions) || (rope->freq_factors && qs.overlaps(*rope->freq_factors)))
            throw std::invalid_argument("kv_store_pair_rope: q overlaps the K or V rows, a cache, the positions or "
                                        "the frequency factors");
        if (n_tokens > 0 && n_ctx == 0) throw std::invalid_argument("kv_store_pair_rope: the cache has no rows");
    }
    if (n_tokens == 0 || n_ctx == 0) return;
    if (row_elems == 0) throw std::invalid_argument("kv_store: row_elems is 0");
    // The f16 cache is written in 32-bit words holding two values; with an odd row length two tokens'
    // rows would share a word and race. A q8_0 row is whole blocks.
    if (row_elems % kv_row_multiple(kv_type) != 0)
        throw std::invalid_argument(fmt::format("kv_store: a {} cache needs a row length that is a multiple of {}, got {}",
                                                kv_type_name(kv_type), kv_row_multiple(kv_type), row_elems));
    const DeviceCaps& caps = ctx.caps();
    const uint32_t row_words = uint32_t(kv_row_bytes(kv_type, row_elems) / 4);
    // One invocation per word, or per q8_0 block.
    const uint32_t row_units = kv_type == KvType::Q8_0 ? row_elems / kKvQ8Block : row_words;
    detail::require_bytes(src, uint64_t(n_tokens) * row_elems * 4, "kv_store", "src");
    detail::require_bytes(cache, uint64_t(n_ctx) * row_words * 4, "kv_store", "cache");
    if (src2) {
        detail::require_bytes(*src2, uint64_t(n_tokens) * row_elems * 4, "kv_store", "V src");
        detail::require_bytes(*cache2, uint64_t(n_ctx) * row_words * 4, "kv_store", "V cache");
    }
    const uint32_t pairs = src2 ? 2 : 1;
    detail::require_bytes(positions, uint64_t(n_tokens) * 4, "kv_store", "positions");
    using detail::SmallOp;
    const SmallOp op = kv_type == KvType::F16   ? (rope ? SmallOp::KvStoreRopeF16 : SmallOp::KvStoreF16)
                       : kv_type == KvType::F32 ? (rope ? SmallOp::KvStoreRopeF32 : SmallOp::KvStoreF32)
                                                : (rope ? SmallOp::KvStoreRopeQ8_0 : SmallOp::KvStoreQ8_0);
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, op));
    const uint32_t wg = p.local_size()[0];
    uint64_t tokens_per = std::min(detail::items_per_window(caps, uint64_t(row_elems) * 4, "kv_store"),
                                   detail::items_per_window(caps, 4, "kv_store"));
    if (rope) tokens_per = std::min(tokens_per, detail::items_per_window(caps, q_row * 4, "kv_store_pair_rope"));
    // Without frequency factors the shader never reads binding 6: positions stands in.
    const detail::Window fw = rope && rope->freq_factors
                                  ? detail::window(caps, *rope->freq_factors, 0, rsp.rot_half, 4)
                                  : detail::window(caps, positions, 0, 1, 4);
    // A cache bigger than one binding is written window by window; every window's dispatch reads all
    // tokens and keeps those whose position falls inside it (positions are only known on the device).
    const uint64_t rows_per = detail::items_per_window(caps, uint64_t(row_words) * 4, "kv_store");
    for (uint64_t t0 = 0; t0 < n_tokens; t0 += tokens_per) {
        const uint32_t nt = uint32_t(std::min<uint64_t>(tokens_per, n_tokens - t0));
        const detail::Window sw = detail::window(caps, src, t0 * row_elems, uint64_t(nt) * row_elems, 4);
        const detail::Window sw2 = src2 ? detail::window(caps, *src2, t0 * row_elems, uint64_t(nt) * row_elems, 4) : sw;
        const detail::Window pw = detail::window(caps, positions, t0, nt, 4);
        const uint64_t kv_units = uint64_t(pairs) * nt * row_units;
        // The tokens' Q rows: rotated by the first cache window's dispatch only.
        const detail::Window qw = rope ? detail::window(caps, rope->q, t0 * q_row, nt * q_row, 4) : sw;
        for (uint64_t c0 = 0; c0 < n_ctx; c0 += rows_per) {
            const uint32_t nc = uint32_t(std::min<uint64_t>(rows_per, n_ctx - c0));
            const detail::Window cw = detail::window(caps, cache, c0 * row_words, uint64_t(nc) * row_words, 4);
            // Without a second pair the shader never touches bindings 3 and 4: the first pair stands in.
            const detail::Window cw2 =
                cache2 ? detail::window(caps, *cache2, c0 * row_words, uint64_t(nc) * row_words, 4) : cw;
            struct {
                uint32_t n_tokens, row_words, src_first, cache_first, pos_first, row_base, row_count, n_ctx;
                uint32_t n_pairs, src2_first, cache2_first;
            } pc{nt, row_words, sw.first, cw.first, pw.first, uint32_t(c0), nc, n_ctx, pairs, sw2.first, cw2.first};
            if (!rope) {
                s.dispatch(p, {sw.slice, cw.slice, pw.slice, sw2.slice, cw2.slice}, pc,
                           detail::grid(caps, (kv_units + wg - 1) / wg, "kv_store"), "kv_store");
                continue;
            }
            const uint32_t q_pairs = c0 == 0 ? uint32_t(uint64_t(nt) * rope->rp.n_heads * rsp.rot_half) : 0u;
            struct {
                decltype(pc) base;
                uint32_t q_pairs, q_first, n_q_heads, head_dim, rot_half, layout_id;
                float log2_step;
                uint32_t ff_first, has_ff;
                float freq_scale, ext_factor, mscale, corr_low, corr_high;
            } rpc{pc, q_pairs, qw.first, rope->rp.n_heads, rope->rp.head_dim, rsp.rot_half, rsp.layout_id,
                  rsp.log2_step, fw.first, rope->freq_factors ? 1u : 0u, rsp.freq_scale, rsp.ext_factor, rsp.mscale,
                  rsp.corr_low, rsp.corr_high};
            s.dispatch(p, {sw.slice, cw.slice, pw.slice, sw2.slice, cw2.slice, qw.slice, fw.slice}, rpc,
                       detail::grid(caps, (q_pairs + kv_units + wg - 1) / wg, "kv_store"), "kv_store");
        }
    }
}

}  // namespace

void kv_store(Context& ctx, CommandStream& s, const BufferSlice& src, const BufferSlice& cache,
              const BufferSlice& positions, uint32_t n_tokens, uint32_t row_elems, uint32_t n_ctx, KvType kv_type) {
    store(ctx, s, src, cache, nullptr, nullptr, positions, n_tokens, row_elems, n_ctx, kv_type);
}

void kv_store_pair(Context& ctx, CommandStream& s, const BufferSlice& k_src, const BufferSlice& k_cache,
                   const BufferSlice& v_src, const BufferSlice& v_cache, const BufferSlice& positions,
                   uint32_t n_tokens, uint32_t row_elems, uint32_t n_ctx, KvType kv_type) {
    store(ctx, s, k_src, k_cache, &v_src, &v_cache, positions, n_tokens, row_elems, n_ctx, kv_type);
}

void kv_store_pair_rope(Context& ctx, CommandStream& s, const BufferSlice& q, const BufferSlice& k_src,
                        const BufferSlice& k_cache, const BufferSlice& v_src, const BufferSlice& v_cache,
                        const BufferSlice& positions, uint32_t n_tokens, uint32_t n_kv_heads, uint32_t n_ctx,
                        KvType kv_type, const RopeParams& rp, const BufferSlice* freq_factors) {
    const RopeArgs rope{q, rp, freq_factors, n_kv_heads};
    store(ctx, s, k_src, k_cache, &v_src, &v_cache, positions, n_tokens, n_kv_heads * rp.head_dim, n_ctx, kv_type,
          &rope);
}

}  // namespace vkllm::ops
