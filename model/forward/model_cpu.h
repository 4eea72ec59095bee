// The decoder forward pass on the host, written to be read: the reference that the device forward
// pass is tested against, and the other half of `vkllm run --check`. It follows the same
// architecture description (model/arch) with the plain C++ op references of the kernel tests
// (runtime/ops/*_ref.cpp), keeps its KV cache in the same element type as the device and in the
// same ring layout for sliding-window layers, so the two differ only by floating-point summation
// order.
#pragma once

#include "model/arch/model_config.h"
#include "model/forward/model_gpu.h"
#include "model/forward/model_weights.h"
#include "model/forward/rope_positions.h"
#include "model/gguf/gguf.h"

#include <span>
#include <vector>

namespace vkllm {

class ModelCpu {
public:
    // ubatch: the largest chunk eval() will be given, which sizes the sliding-window rings
    // exactly as on the device (kv_cache_rows).
    ModelCpu(const GgufFile& file, const ModelConfig& cfg, uint32_t n_ctx, ops::KvType kv_type = ops::KvType::F16,
             uint32_t ubatch = 64);

    // Evaluates tokens at positions n_past().., in chunks of at most ubatch as the device does, and
    // returns the logits of the last one, or for a model without an LM head (an encoder) the last
    // layer's output of every token of the last chunk (n, dim). The probe sees the same named
    // tensors as ModelGpu's, per chunk.
    std::vector<float> eval(std::span<const int32_t> tokens, const LayerProbe& probe = {});
    // As ModelGpu::eval_embeddings: rows (n, dim) in place of tokens' embeddings, at `grid`'s positions
    // for an M-RoPE model; returns as eval().
    std::vector<float> eval_embeddings(std::span<const float> rows, bool bidirectional, ImageGrid grid = {},
                                       const LayerProbe& probe = {});
    // As ModelGpu::eval_packed: several inputs of a bidirectional model in one pass; returns their
    // last-layer rows in order (n_total, dim).
    std::vector<float> eval_packed(std::span<const std::span<const int32_t>> inputs, const LayerProbe& probe = {});
    uint32_t n_past() const { return n_past_; }
    void reset() {
        n_past_ = 0;
        rope_pos_.clear();
    }
    // Keeps the first n tokens (n <= n_past()), as ModelGpu::truncate; std::logic_error for a model with
    // sliding-window layers (their rings may have lost what the next token needs).
    void truncate(uint32_t n);
    // Encoder-decoder models: the encoder's output (n_rows, dim), projected into every layer's
    // cross-attention K and V (of the cache's type); forgets the decoder's tokens. As ModelGpu::set_encoder_output.
    void set_encoder_output(std::span<const float> states, uint32_t n_rows);

private:
    // `lengths`: the packed inputs' token counts (bidirectional models), empty for one chunk of one sequence.
    // `rows`: embeddings in place of the tokens' (eval_embeddings), their tokens seeing each other
    // with `bidirectional`.
    std::vector<float> eval_chunk(std::span<const int32_t> tokens, const LayerProbe& probe,
                                  std::span<const uint32_t> lengths = {}, std::span<const float> rows = {},
                                  bool bidirectional = false);
    // A mixture-of-experts FFN block of n tokens (ArchDesc::moe()): x (n, dim) in place, xn (n, dim)
    // receives norm(x); logits_out, when given, the router's logits (n, n_expert).
    void moe_ffn(const LayerPlaces& L, float* x, float* xn, uint32_t n, std::vector<float>* logits_out);
    // Latent attention (AttentionDesc::mla) of n tokens at cache rows pos from xn = norm(x) (n, dim): x += wo · heads;
    // probe, when given, receives its named intermediates.
    void mla_attention(const LayerPlaces& L, uint32_t layer, const float* xn, float* x, uint32_t n, const int32_t* pos,
                       LayerTensors* probe);

    const GgufFile& file_;
    ModelConfig cfg_;
    uint32_t n_ctx_, ubatch_;
    ops::KvType kv_type_;
    size_t kv_row_bytes_;
    std::vector<uint32_t> kv_rows_;  // per layer, as kv_cache_rows()
    std::vector<std::vector<uint8_t>> k_cache_, v_cache_;  // per layer (rows, kv_dim) of kv_type
    WeightLayout layout_;  // where each role's tensor is in the file (the device's layout, read on the host)
    uint32_t n_past_ = 0;
    RopePositions rope_pos_;  // each row's RoPE position (M-RoPE's images)
    std::vector<std::vector<uint8_t>> cross_k_, cross_v_;  // per layer (n_enc, kv_dim) of kv_type
    std::vector<std::vector<float>> mla_cache_;  // latent attention: per layer (n_ctx, kv_dim) as the cache holds them
    uint32_t n_enc_ = 0;
};

}  // namespace vkllm
