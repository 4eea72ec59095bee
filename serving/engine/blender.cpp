#include "serving/engine/blender.h"

#include <fmt/format.h>

namespace vkllm::engine {

std::string blend_refusal(const ModelGpu& model) {
    const ModelConfig& cfg = model.config();
    const AttentionDesc& a = cfg.arch->attn;
    if (!cfg.causal || !cfg.arch->stack.lm_head) return "it is not a causal language model";
    if (a.cross_attention) return "its decoder attends to an encoder";
    if (a.positions == PositionKind::Learned) return "its K depends on absolute (learned) positions";
    if (a.mrope) return "M-RoPE positions are not one per token";
    // Re-rotating the rope part of MLA's latent row would be possible; the latent itself is not per-head
    // K/V, and the selection reads a V the latent does not have.
    if (a.mla) return "latent attention (MLA) caches no per-token V to select by";
    if (model.stages().front().layers.end() < std::min(2u, cfg.n_layers))
        return "the selection's layer is not on the split's first device";
    for (uint32_t l = 0; l < cfg.n_layers; ++l)
        if (kv_cache_rows(cfg, l, model.n_ctx(), model.ubatch()) < model.n_ctx())
            return "its sliding-window layers keep rings, not every row";
    if (model.options().kv_type == ops::KvType::Q8_0 && a.positions == PositionKind::Rope)
        return "a Q8_0 cache's K cannot be rotated without requantizing (use --kv-type f16)";
    for (uint32_t l = 0; l < cfg.n_layers; ++l) {
        const ops::RopeParams p = layer_rope_params(cfg, l, cfg.n_kv_heads, cfg.head_dim, cfg.rope_dim);
        if (a.positions == PositionKind::Rope && (p.ext_factor != 0 || p.attn_factor != 1.0f))
            return "YaRN scales the rotated pairs' magnitude, which a second rotation would scale again";
    }
    return "";
}

Blender::Blender(ModelGpu& model, uint32_t scratch, BlendOptions opts)
    : model_(model),
      scratch_(scratch),
      ratio_(opts.ratio),
      store_(model_fingerprint(model.file(), model.options().kv_type), std::move(opts.store)) {
    if (const std::string why = blend_refusal(model); !why.empty())
        throw std::invalid_argument(
            fmt::format("CacheBlend cannot serve this {} model: {}", model.config().arch->name, why));
    if (scratch >= model.n_seq())
        throw std::invalid_argument(fmt::format("blend: sequence {} of a model of {}", scratch, model.n_seq()));
    if (!(ratio_ >= 0 && ratio_ <= 1))
        throw std::invalid_argument(fmt::format("--blend-ratio {} must be within 0..1", ratio_));
}

BlendOutcome Blender::blend(uint32_t seq, std::span<const std::span<const int32_t>> docs,
                            std::span<const int32_t> then) {
    if (then.empty()) throw std::invalid_argument("blend: no tokens after the documents");
    std::vector<std::shared_ptr<const KvRows>> rows;
    BlendOutcome out;
    const uint64_t row_bytes = kv_row_bytes(model_.config(), model_.options().kv_type);
    for (const auto& d : docs) {
        std::shared_ptr<const KvRows> r = store_.find(d);
        // Rows of another shape (a damaged file under this model's name) would be refused by
        // import_kv on every use: they go, and the document is evaluated again.
        if (r && (r->type != model_.options().kv_type || r->row_bytes != row_bytes ||
                  r->k.size() != model_.config().n_layers || r->v.size() != model_.config().n_layers)) {
            store_.erase(d);
            r.reset();
        }
        if (r) {
            ++out.from_store;
        } else {
            model_.reset(scratch_);
            try {
                model_.eval(scratch_, d);
                r = std::make_shared<const KvRows>(model_.export_kv(scratch_, 0, uint32_t(d.size())));
            } catch (...) {
                model_.reset(scratch_);
                throw;
            }
            model_.reset(scratch_);
            store_.put(d, r);
        }
        rows.push_back(std::move(r));
    }
    std::vector<BlendDoc> bd;
    for (size_t i = 0; i < docs.size(); ++i) bd.push_back({docs[i], rows[i].get()});
    const BlendResult res = blend_documents(model_, seq, bd, ratio_, then);
    out.documents = uint32_t(docs.size());
    out.tokens = res.tokens;
    out.recomputed = uint32_t(res.recomputed.size());
    std::lock_guard lock(m_);
    stats_.documents += out.documents;
    stats_.from_store += out.from_store;
    stats_.document_tokens += out.tokens;
    stats_.recomputed_tokens += out.recomputed;
    return out;
}

void Blender::count_fallback() {
    std::lock_guard lock(m_);
    ++stats_.fallbacks;
}

BlendStats Blender::stats() const {
    std::lock_guard lock(m_);
    BlendStats s = stats_;
    s.store = store_.stats();
    return s;
}

}  // namespace vkllm::engine
