// ModelGpu::eval_at and eval_v: tokens evaluated again at positions inside a sequence (and, for
// eval_at, after it), CacheBlend's selective recompute and its selection (model/forward/blend.h).
#include "model/forward/model_gpu.h"

#include <fmt/format.h>

namespace vkllm {

void ModelGpu::check_eval_at(uint32_t seq, size_t n_tokens, std::span<const uint32_t> positions, bool grows) const {
    if (positions.size() != n_tokens)
        throw std::invalid_argument(fmt::format("eval_at: {} tokens at {} positions", n_tokens, positions.size()));
    for (size_t i = 0; i < positions.size(); ++i) {
        // Past the end, the positions follow on from it: no hole in the sequence.
        const uint32_t next = i > 0 && positions[i - 1] >= n_past_[seq] ? positions[i - 1] + 1 : n_past_[seq];
        if (positions[i] >= n_past_[seq] && (!grows || positions[i] != next))
            throw std::invalid_argument(
                grows ? fmt::format("eval_at: position {} is neither inside sequence {}'s {} tokens nor the next",
                                    positions[i], seq, n_past_[seq])
                      : fmt::format("eval_at: position {} is not inside sequence {}'s {} tokens", positions[i], seq,
                                    n_past_[seq]));
        if (i > 0 && positions[i] <= positions[i - 1])
            throw std::invalid_argument(
                fmt::format("eval_at: positions must ascend ({} after {})", positions[i], positions[i - 1]));
    }
    if (cfg_.arch->attn.mrope || stages_.front()->ring_rows() != 0 || !cfg_.causal || cfg_.arch->attn.cross_attention)
        throw std::invalid_argument(fmt::format(
            "eval_at: a {} model cannot evaluate tokens again inside its cache (M-RoPE positions, sliding-window "
            "rings, or attention that is not causal self-attention)",
            cfg_.arch->name));
}

void ModelGpu::eval_at(uint32_t seq, std::span<const int32_t> tokens, std::span<const uint32_t> positions) {
    check_seq(seq, opts_.n_seq);
    if (tokens.empty()) throw std::invalid_argument("eval_at: no tokens");
    check_eval_at(seq, tokens.size(), positions, true);  // before eval_impl: an empty list would mean eval()
    if (positions.back() >= n_ctx())
        throw ContextFullError(fmt::format("eval_at: position {} is past sequence {}'s context of {} tokens",
                                           positions.back(), seq, n_ctx()));
    eval_impl(seq, {.tokens = tokens, .at = positions}, {}, {});
}

std::vector<float> ModelGpu::eval_v(uint32_t seq, std::span<const int32_t> tokens, std::span<const uint32_t> positions,
                                    uint32_t layer) {
    check_seq(seq, opts_.n_seq);
    if (tokens.empty()) throw std::invalid_argument("eval_v: no tokens");
    check_eval_at(seq, tokens.size(), positions, false);
    if (layer >= cfg_.n_layers)
        throw std::invalid_argument(fmt::format("eval_v: layer {} of a model of {} layers", layer, cfg_.n_layers));
    if (cfg_.arch->attn.mla) throw std::invalid_argument("eval_v: latent attention keeps no per-token V");
    if (layer >= stages_.front()->range().end())
        throw std::invalid_argument(fmt::format("eval_v: layer {} is not on the split's first device", layer));
    std::vector<float> v;
    v.reserve(tokens.size() * cfg_.kv_dim());
    eval_impl(seq, {.tokens = tokens, .at = positions, .v_of_layer = layer, .v_out = &v}, {}, {});
    return v;
}

}  // namespace vkllm
