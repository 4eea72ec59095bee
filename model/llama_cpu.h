// The LLaMA forward pass on the host, written to be read: the reference that the device forward
// pass is tested against, and the other half of `vkllm run --check`. It uses the same plain C++
// op references as the kernel tests (runtime/ops/*_ref.cpp) and keeps its KV cache in the same
// element type as the device, so the two differ only by floating-point summation order.
#pragma once

#include "model/gguf.h"
#include "model/llama_config.h"
#include "model/llama_gpu.h"

#include <span>
#include <vector>

namespace vkllm {

class LlamaCpu {
public:
    LlamaCpu(const GgufFile& file, const LlamaConfig& cfg, uint32_t n_ctx, ops::KvType kv_type = ops::KvType::F16);

    // Evaluates tokens at positions n_past().. and returns the logits of the last one. The probe
    // sees the same named tensors as LlamaGpu's.
    std::vector<float> eval(std::span<const int32_t> tokens, const LayerProbe& probe = {});
    uint32_t n_past() const { return n_past_; }
    void reset() { n_past_ = 0; }

private:
    const GgufFile& file_;
    LlamaConfig cfg_;
    uint32_t n_ctx_;
    ops::KvType kv_type_;
    size_t kv_elem_bytes_;
    std::vector<uint8_t> k_cache_, v_cache_;  // (n_layers, n_ctx, kv_dim) of kv_type
    uint32_t n_past_ = 0;
};

}  // namespace vkllm
