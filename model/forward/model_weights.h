// A model's weights resident on the device: tensors uploaded once from the memory-mapped GGUF
// file, grouped into a few buffers, with views for each role the forward pass needs.
#pragma once

#include "model/arch/model_config.h"
#include "model/gguf.h"
#include "runtime/context.h"

#include <functional>
#include <vector>

namespace vkllm {

// A tensor on the device: a view into a buffer owned by ModelWeights (several tensors can share
// one buffer, see LayerWeights::wqkv). rows == 0: the model has no such tensor.
struct DeviceTensor {
    TensorType type = TensorType::F32;
    uint32_t row_elems = 0;  // ne[0]
    uint32_t rows = 0;       // product of the other dims
    BufferSlice view;
    BufferSlice slice() const { return view; }
    bool present() const { return rows != 0; }
    // Rows [first, first + n) of a matrix: a view into the same buffer.
    DeviceTensor row_range(uint32_t first, uint32_t n) const;
};

// Shapes as the forward pass uses them: (out, in) for matrices; q = n_heads * head_dim,
// kv = n_kv_heads * head_dim. Norm weights and biases are f32 (converted at upload).
struct LayerWeights {
    DeviceTensor attn_norm, attn_norm_b;  // (dim), bias only with LayerNorm
    DeviceTensor wq, wk, wv;              // (q, dim), (kv, dim), (kv, dim)
    DeviceTensor bq, bk, bv;              // (q), (kv), (kv) when the model has them
    DeviceTensor q_norm, k_norm;          // (head_dim) per-head RMSNorm weights (Qwen3, Gemma 3)
    DeviceTensor wo, bo;                  // (dim, q), (dim)
    DeviceTensor post_attn_norm;          // (dim) Gemma 2/3
    DeviceTensor ffn_norm, ffn_norm_b;    // (dim)
    DeviceTensor w_gate, w_up, w_down;    // (ffn, dim), (ffn, dim), (dim, ffn); no gate for GPT-2
    DeviceTensor b_up, b_down;            // (ffn), (dim) GPT-2
    DeviceTensor post_ffn_norm;           // (dim) Gemma 2/3
    // Q, K and V (and gate and up) are stored back to back when they share a type (or the file
    // fused them), so these views cover all of them: decoding then projects all three with one
    // matvec dispatch. rows == 0 when not fused. bqkv likewise covers bq|bk|bv.
    DeviceTensor wqkv;       // (q + 2 kv, dim)
    DeviceTensor bqkv;       // (q + 2 kv)
    DeviceTensor w_gate_up;  // (2 ffn, dim)
};

// (bytes uploaded so far, total bytes)
using UploadProgress = std::function<void(uint64_t, uint64_t)>;

struct ModelWeights {
    DeviceTensor token_embd;     // (n_vocab, dim): rows are tokens
    DeviceTensor position_embd;  // (n_ctx_train, dim) learned positions (GPT-2)
    DeviceTensor output_norm, output_norm_b;  // (dim)
    DeviceTensor output;         // (n_vocab, dim); the same tensor as token_embd when tied
    DeviceTensor rope_factors;   // (rope_dim / 2) f32: the frequency factors this context uses
    bool tied = false;
    std::vector<LayerWeights> layers;
    uint64_t bytes = 0;          // device bytes of all weights
    std::vector<Buffer> buffers; // owns the memory every view above points into

    // n_ctx picks Phi-3's long or short rope factors.
    static ModelWeights upload(Context& ctx, const GgufFile& file, const ModelConfig& cfg, uint32_t n_ctx,
                               const UploadProgress& progress = {});
    // Bytes the weights will take on the device, for the fit check.
    static uint64_t device_bytes(const GgufFile& file, const ModelConfig& cfg);
    const DeviceTensor& output_tensor() const { return tied ? token_embd : output; }
};

// The GGUF names of the tensors the model reads, present ones only (norms, biases, matrices),
// without the rope factors. The forward passes and the upload share this list.
std::vector<std::string> model_tensor_names(const GgufFile& file, const ModelConfig& cfg);

}  // namespace vkllm
