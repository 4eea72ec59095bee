// A LLaMA model's weights resident on the device: one device buffer per tensor, uploaded once
// from the memory-mapped GGUF file.
#pragma once

#include "model/gguf.h"
#include "model/llama_config.h"
#include "runtime/context.h"

#include <functional>
#include <vector>

namespace vkllm {

struct DeviceTensor {
    TensorType type = TensorType::F32;
    uint32_t row_elems = 0;  // ne[0]
    uint32_t rows = 0;       // product of the other dims
    Buffer buffer;
    BufferSlice slice() const { return buffer.slice(); }
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

    static LlamaWeights upload(Context& ctx, const GgufFile& file, const LlamaConfig& cfg,
                               const UploadProgress& progress = {});
    // Bytes the weights will take on the device (sum of tensor sizes), for the fit check.
    static uint64_t device_bytes(const GgufFile& file, const LlamaConfig& cfg);
    const DeviceTensor& output_tensor() const { return tied ? token_embd : output; }
};

}  // namespace vkllm
