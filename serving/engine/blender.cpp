#include "serving/engine/blender.h"

#include <fmt/format.h>

namespace vkllm::engine {

std::string blend_refusal(const ModelGpu& model) {
    const ModelConfig& cfg = model.config();
    if (!cfg.causal || !cfg.arch->stack.lm_head) return "it is not a causal language model";
    if (model.stages().front().layers.end() < std::min(2u, cfg.n_layers))
        return "the selection's layer is not on the split's first device";
    // Documents land at other positions than they were computed at: their K moves by rotation.
    // Latent attention (MLA) is refused there: re-rotating the rope part of its latent row would be
    // possible, but the latent has no per-token V for the selection to compare.
    return model.kv_move_refusal(true);
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
    for (const auto& d : docs) {
        std::shared_ptr<const KvRows> r = store_.find(d);
        // Rows of another shape (a damaged file under this model's name) would be refused by
        // import_kv on every use: they go, and the document is evaluated again.
        if (r && !model_.kv_rows_mismatch(*r).empty()) {
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
