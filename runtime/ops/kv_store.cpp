#include "runtime/ops/kv_store.h"

#include "runtime/ops/elementwise.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace vkllm::ops {

namespace {

// src2 / cache2: the second pair (V), or null.
void store(Context& ctx, CommandStream& s, const BufferSlice& src, const BufferSlice& cache, const BufferSlice* src2,
           const BufferSlice* cache2, const BufferSlice& positions, uint32_t n_tokens, uint32_t row_elems,
           uint32_t n_ctx, KvType kv_type, const KvPages& pages) {
    if (n_tokens == 0 || n_ctx == 0) return;
    if (row_elems == 0) throw std::invalid_argument("kv_store: row_elems is 0");
    // The f16 cache is written in 32-bit words holding two values; with an odd row length two tokens'
    // rows would share a word and race. A q8_0 row is whole blocks.
    if (row_elems % kv_row_multiple(kv_type) != 0)
        throw std::invalid_argument(
            fmt::format("kv_store: a {} cache needs a row length that is a multiple of {}, got {}",
                        kv_type_name(kv_type), kv_row_multiple(kv_type), row_elems));
    const DeviceCaps& caps = ctx.caps();
    const uint32_t row_words = uint32_t(kv_row_bytes(kv_type, row_elems) / 4);
    // One invocation per word, or per q8_0 block.
    const uint32_t row_units = kv_type == KvType::Q8_0 ? row_elems / kKvQ8Block : row_words;
    // A paged cache's bindings are the pool; its table rows ceil(n_ctx / block_rows) entries each.
    const uint64_t cache_rows = pages.paged() ? pages.pool_rows : n_ctx;
    const uint64_t stride = pages.table_stride(n_ctx);
    detail::check_pages(pages, n_ctx, pages.per_token ? n_tokens : 1, "kv_store");
    detail::require_bytes(src, uint64_t(n_tokens) * row_elems * 4, "kv_store", "src");
    detail::require_bytes(cache, cache_rows * row_words * 4, "kv_store", "cache");
    if (src2) {
        detail::require_bytes(*src2, uint64_t(n_tokens) * row_elems * 4, "kv_store", "V src");
        detail::require_bytes(*cache2, cache_rows * row_words * 4, "kv_store", "V cache");
    }
    const uint32_t pairs = src2 ? 2 : 1;
    detail::require_bytes(positions, uint64_t(n_tokens) * 4, "kv_store", "positions");
    using detail::SmallOp;
    const SmallOp op = kv_type == KvType::F16   ? SmallOp::KvStoreF16
                       : kv_type == KvType::F32 ? SmallOp::KvStoreF32
                                                : SmallOp::KvStoreQ8_0;
    const Pipeline& p = ctx.pipeline(detail::small_op_desc(caps, op));
    const uint32_t wg = p.local_size()[0];
    const uint64_t tokens_per = std::min(detail::items_per_window(caps, uint64_t(row_elems) * 4, "kv_store"),
                                         detail::items_per_window(caps, 4, "kv_store"));
    // A cache bigger than one binding is written window by window; every window's dispatch reads all
    // tokens and keeps those whose position falls inside it (positions are only known on the device).
    const uint64_t rows_per = detail::items_per_window(caps, uint64_t(row_words) * 4, "kv_store");
    for (uint64_t t0 = 0; t0 < n_tokens; t0 += tokens_per) {
        const uint32_t nt = uint32_t(std::min<uint64_t>(tokens_per, n_tokens - t0));
        const detail::Window sw = detail::window(caps, src, t0 * row_elems, uint64_t(nt) * row_elems, 4);
        const detail::Window sw2 = src2 ? detail::window(caps, *src2, t0 * row_elems, uint64_t(nt) * row_elems, 4) : sw;
        const detail::Window pw = detail::window(caps, positions, t0, nt, 4);
        const uint64_t kv_units = uint64_t(pairs) * nt * row_units;
        // Without a table the shader never reads binding 5: the positions stand in.
        const detail::Window tw = !pages.paged()    ? pw
                                  : pages.per_token ? detail::window(caps, pages.table, t0 * stride, nt * stride, 4)
                                                    : detail::window(caps, pages.table, 0, stride, 4);
        for (uint64_t c0 = 0; c0 < cache_rows; c0 += rows_per) {
            const uint32_t nc = uint32_t(std::min<uint64_t>(rows_per, cache_rows - c0));
            const detail::Window cw = detail::window(caps, cache, c0 * row_words, uint64_t(nc) * row_words, 4);
            // Without a second pair the shader never touches bindings 3 and 4: the first pair stands in.
            const detail::Window cw2 =
                cache2 ? detail::window(caps, *cache2, c0 * row_words, uint64_t(nc) * row_words, 4) : cw;
            struct {
                uint32_t n_tokens, row_words, src_first, cache_first, pos_first, row_base, row_count, n_ctx;
                uint32_t n_pairs, src2_first, cache2_first, table_first, block_shift, per_token;
            } pc{nt,    row_words, sw.first,  cw.first,  pw.first, uint32_t(c0),        nc,
                 n_ctx, pairs,     sw2.first, cw2.first, tw.first, pages.block_shift(), pages.per_token ? 1u : 0u};
            s.dispatch(p, {sw.slice, cw.slice, pw.slice, sw2.slice, cw2.slice, tw.slice}, pc,
                       detail::grid(caps, (kv_units + wg - 1) / wg, "kv_store"), "kv_store");
        }
    }
}

}  // namespace

void kv_store(Context& ctx, CommandStream& s, const BufferSlice& src, const BufferSlice& cache,
              const BufferSlice& positions, uint32_t n_tokens, uint32_t row_elems, uint32_t n_ctx, KvType kv_type,
              const KvPages& pages) {
    store(ctx, s, src, cache, nullptr, nullptr, positions, n_tokens, row_elems, n_ctx, kv_type, pages);
}

void kv_store_pair(Context& ctx, CommandStream& s, const BufferSlice& k_src, const BufferSlice& k_cache,
                   const BufferSlice& v_src, const BufferSlice& v_cache, const BufferSlice& positions,
                   uint32_t n_tokens, uint32_t row_elems, uint32_t n_ctx, KvType kv_type, const KvPages& pages) {
    store(ctx, s, k_src, k_cache, &v_src, &v_cache, positions, n_tokens, row_elems, n_ctx, kv_type, pages);
}

}  // namespace vkllm::ops
