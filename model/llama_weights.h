// A LLaMA model's weights resident on the device: one device buffer per tensor, uploaded once
// from the memory-mapped GGUF file.
#pragma once

#include "model/gguf.h"
#include "model/llama_config.h"
#include "runtime/context.h"

#include <functional>
#include <vector>

namespace vkllm {

// A tensor on the device: a view into a buffer owned by LlamaWeights (several tensors can share
// one buffer, see LayerWeights::wqkv).
struct DeviceTensor {
    TensorType type = TensorType::F32;
    uint32_t row_elems = 0;  // ne[0]
    uint32_t rows = 0;       // product of the other dims
    BufferSlice view;
    BufferSlice slice() const { return view; }
};

struct LayerWeights {
    DeviceTensor attn_norm;  // (dim)            f32
    DeviceTensor wq;         // (dim, dim)       rows = output features
    DeviceTensor wk;         // (kv_dim, dim)
    DeviceTensor wv;         // (kv_dim, dim)
    DeviceTensor wo;         // (dim, dim)
    DeviceTensor ffn_norm;   // (dim)
    DeviceTensor w_gate;     // (ffn, dim)
    DeviceTensor w_up;       // (ffn, dim)
    DeviceTensor w_down;     // (dim, ffn)
    // When Q, K and V (and gate and up) share a type they are uploaded back to back, so that these
    // views cover all of them: decoding then projects all three with one matvec dispatch.
    DeviceTensor wqkv;       // (dim + 2 * kv_dim, dim), rows of wq then wk then wv; rows == 0 if not fused
    DeviceTensor w_gate_up;  // (2 * ffn, dim), rows of w_gate then w_up; rows == 0 if not fused
};

// (bytes uploaded so far, total bytes)
using UploadProgress = std::function<void(uint64_t, uint64_t)>;

struct LlamaWeights {
    DeviceTensor token_embd;     // (n_vocab, dim): rows are tokens
    DeviceTensor output_norm;    // (dim)
    DeviceTensor output;         // (n_vocab, dim); the same tensor as token_embd when tied
    bool tied = false;
    std::vector<LayerWeights> layers;
    uint64_t bytes = 0;          // device bytes of all weights
    std::vector<Buffer> buffers; // owns the memory every view above points into

    static LlamaWeights upload(Context& ctx, const GgufFile& file, const LlamaConfig& cfg,
                               const UploadProgress& progress = {});
    // Bytes the weights will take on the device (sum of tensor sizes), for the fit check.
    static uint64_t device_bytes(const GgufFile& file, const LlamaConfig& cfg);
    const DeviceTensor& output_tensor() const { return tied ? token_embd : output; }
};

}  // namespace vkllm
