// ModelGpu::export_kv / import_kv: a sequence's K/V rows to the host and into another sequence at
// another position, with K rotated to it (CacheBlend's document store, model_gpu.h). The rows travel
// block by block through the sequences' block tables; a block the rows only partly cover is read
// first so that its other rows stay as they were.
#include "model/forward/model_gpu.h"

#include "runtime/ops/rope.h"
#include "runtime/quant/tensor_types.h"

#include <fmt/format.h>

#include <cstring>

namespace vkllm {

uint64_t KvRows::bytes() const {
    uint64_t b = 0;
    for (const auto& x : k) b += x.size();
    for (const auto& x : v) b += x.size();
    return b;
}

namespace {

// Rows [first, first + n) of one sequence in one layer's pool (whose blocks `blocks` lists), read
// into `rows` (n x row_bytes) or, with `write`, written from it.
void move_rows(Context& ctx, const Buffer& pool, std::span<const uint32_t> blocks, uint32_t first, uint32_t n,
               uint64_t row_bytes, uint8_t* rows, bool write) {
    const uint64_t block_bytes = kKvBlockRows * row_bytes;
    std::vector<uint8_t> block(block_bytes);
    for (uint32_t b = first / kKvBlockRows; b * kKvBlockRows < first + n; ++b) {
        const uint32_t lo = std::max(first, b * kKvBlockRows), hi = std::min(first + n, (b + 1) * kKvBlockRows);
        const uint64_t at = uint64_t(blocks[b]) * block_bytes;
        const bool whole = lo == b * kKvBlockRows && hi == (b + 1) * kKvBlockRows;
        if (!write || !whole) ctx.download(pool, block.data(), block_bytes, at);
        uint8_t* in_block = block.data() + (lo - b * kKvBlockRows) * row_bytes;
        uint8_t* in_rows = rows + uint64_t(lo - first) * row_bytes;
        if (write) {
            std::memcpy(in_block, in_rows, (hi - lo) * row_bytes);
            ctx.upload(pool, block.data(), block_bytes, at);
        } else {
            std::memcpy(in_rows, in_block, (hi - lo) * row_bytes);
        }
    }
}

// n rows of K (n_kv_heads x head_dim each, f32 or f16) rotated by `delta` positions.
void rotate_rows(std::vector<uint8_t>& k, uint32_t n, ops::KvType type, const ops::RopeParams& p, int32_t delta,
                 const float* factors) {
    const size_t per_row = size_t(p.n_heads) * p.head_dim;
    std::vector<float> x(per_row * n);
    if (type == ops::KvType::F32) {
        std::memcpy(x.data(), k.data(), x.size() * 4);
    } else {
        const auto* h = reinterpret_cast<const uint16_t*>(k.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] = f16_to_f32(h[i]);
    }
    const std::vector<int32_t> positions(n, delta);
    ref::rope(x.data(), positions.data(), n, p, factors);
    if (type == ops::KvType::F32) {
        std::memcpy(k.data(), x.data(), x.size() * 4);
    } else {
        auto* h = reinterpret_cast<uint16_t*>(k.data());
        for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_f16(x[i]);
    }
}

}  // namespace

KvRows ModelGpu::export_kv(uint32_t seq, uint32_t first, uint32_t n) const {
    if (seq >= opts_.n_seq) throw std::out_of_range(fmt::format("export_kv: sequence {} does not exist", seq));
    if (n == 0 || uint64_t(first) + n > n_past_[seq])
        throw std::invalid_argument(fmt::format("export_kv: rows {}..{} of sequence {}, which holds {}", first,
                                                uint64_t(first) + n, seq, n_past_[seq]));
    if (stages_.front()->ring_rows() != 0)
        throw std::invalid_argument("export_kv: a model with sliding-window rings keeps no early rows");
    KvRows out;
    out.first = first;
    out.n = n;
    out.type = opts_.kv_type;
    out.row_bytes = kv_row_bytes(cfg_, opts_.kv_type);
    const std::span<const uint32_t> blocks = pool_.blocks(seq);
    for (const auto& st : stages_)
        for (uint32_t l = st->range().first; l < st->range().end(); ++l) {
            const LayerState& L = st->layer(l);
            out.k.emplace_back(n * out.row_bytes);
            move_rows(st->context(), L.k_cache, blocks, first, n, out.row_bytes, out.k.back().data(), false);
            out.v.emplace_back();
            if (L.v_cache.size() == 0) continue;
            out.v.back().resize(n * out.row_bytes);
            move_rows(st->context(), L.v_cache, blocks, first, n, out.row_bytes, out.v.back().data(), false);
        }
    return out;
}

std::string ModelGpu::kv_move_refusal(bool rotate) const {
    const AttentionDesc& A = cfg_.arch->attn;
    if (stages_.front()->ring_rows() != 0) return "sliding-window rings keep fixed rows per sequence";
    if (A.positions == PositionKind::Learned || A.cross_attention)
        return "its K depends on absolute positions or an encoder";
    if (A.mrope || A.mla) return "M-RoPE positions and latent attention are not rotated here";
    if (!rotate || A.positions != PositionKind::Rope) return "";
    if (opts_.kv_type == ops::KvType::Q8_0)
        return "a Q8_0 cache's K cannot be rotated without requantizing (use an f16 or f32 cache)";
    for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
        const ops::RopeParams p = layer_rope_params(cfg_, l, cfg_.n_kv_heads, cfg_.head_dim, cfg_.rope_dim);
        if (p.ext_factor != 0 || p.attn_factor != 1.0f)
            return "YaRN scales the rotated pairs' magnitude, which a second rotation would scale again";
    }
    return "";
}

std::string ModelGpu::kv_rows_mismatch(const KvRows& rows) const {
    if (rows.n == 0 || rows.k.size() != cfg_.n_layers || rows.v.size() != cfg_.n_layers)
        return fmt::format("{} rows of {} layers for a model of {} layers", rows.n, rows.k.size(), cfg_.n_layers);
    if (rows.type != opts_.kv_type || rows.row_bytes != kv_row_bytes(cfg_, opts_.kv_type))
        return "the rows are of another KV type or shape than this model's cache";
    for (size_t l = 0; l < cfg_.n_layers; ++l)
        if (rows.k[l].size() != rows.n * rows.row_bytes ||
            rows.v[l].size() != (cfg_.v_in_k() ? 0 : rows.n * rows.row_bytes))
            return "a layer's rows are cut short";
    return "";
}

void ModelGpu::import_kv(uint32_t seq, const KvRows& rows) {
    if (seq >= opts_.n_seq) throw std::out_of_range(fmt::format("import_kv: sequence {} does not exist", seq));
    const uint32_t at = n_past_[seq];
    const int32_t delta = int32_t(int64_t(at) - rows.first);
    const bool rotate = cfg_.arch->attn.positions == PositionKind::Rope && delta != 0;
    // Everything checked before a row is written: a refusal leaves the sequence as it was.
    for (const std::string& why : {kv_rows_mismatch(rows), kv_move_refusal(rotate)})
        if (!why.empty()) throw std::invalid_argument(fmt::format("import_kv: {} ({} model)", why, cfg_.arch->name));
    if (uint64_t(at) + rows.n > n_ctx())
        throw ContextFullError(fmt::format("import_kv: {} rows do not fit sequence {}: it holds {} of {} tokens",
                                           rows.n, seq, at, n_ctx()));
    std::vector<float> factors;
    if (rotate && stages_.front()->weights().rope_factors.present()) {
        const BufferSlice f = stages_.front()->weights().rope_factors.slice();
        factors.resize(f.size / 4);
        stages_.front()->context().download(f, factors.data(), f.size);
    }
    hold_rows(seq, at + rows.n, at);
    const std::span<const uint32_t> blocks = pool_.blocks(seq);
    size_t layer = 0;
    for (const auto& st : stages_)
        for (uint32_t l = st->range().first; l < st->range().end(); ++l, ++layer) {
            const LayerState& L = st->layer(l);
            std::vector<uint8_t> k = rows.k[layer];
            if (rotate)
                rotate_rows(k, rows.n, opts_.kv_type,
                            layer_rope_params(cfg_, l, cfg_.n_kv_heads, cfg_.head_dim, cfg_.rope_dim), delta,
                            factors.empty() ? nullptr : factors.data());
            move_rows(st->context(), L.k_cache, blocks, at, rows.n, rows.row_bytes, k.data(), true);
            if (L.v_cache.size() == 0) continue;
            std::vector<uint8_t> v = rows.v[layer];
            move_rows(st->context(), L.v_cache, blocks, at, rows.n, rows.row_bytes, v.data(), true);
        }
    n_past_[seq] = at + rows.n;
}

}  // namespace vkllm
