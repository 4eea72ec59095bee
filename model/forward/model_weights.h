// A model's weights on the device. plan_weights() decides, from the file's metadata alone, where
// every tensor of the schema (model/arch/tensor_schema.h) goes: which buffer, at which offset, and
// which parts of a fused group (q|k|v, gate|up) sit back to back so that one matvec reads them all.
// The uploader follows that layout; the forward pass's planner (layer_plan.h), the host reference
// and the warm-up read the same layout, so none of them decides fusion again.
#pragma once

#include "model/arch/model_config.h"
#include "model/arch/tensor_schema.h"
#include "model/gguf/gguf.h"
#include "runtime/context.h"

#include <array>
#include <functional>
#include <vector>

namespace vkllm {

// Where one role's tensor lives: its source in the file and its place on the device. rows == 0:
// the model has no such tensor. A part of a fused group is a row range of the group's tensor.
struct TensorPlace {
    const GgufTensorInfo* source = nullptr;  // the file's tensor holding it (a whole attn_qkv for Wq)
    uint64_t first = 0;  // first element of it in `source`
    TensorType type = TensorType::F32;  // on the device (f32 for norms and biases)
    uint32_t row_elems = 0;  // ne[0]
    uint32_t rows = 0;  // product of the other dims
    uint32_t buffer = 0;  // index into WeightLayout::buffers; kHostOnly: not uploaded
    uint64_t offset = 0;  // bytes into that buffer
    bool present() const { return rows != 0; }
    uint64_t bytes() const { return uint64_t(rows) * row_bytes(type, row_elems); }
    // A tensor the host reference reads but no kernel does (an older DeepSeek file's attn_kv_b, from
    // which the uploader derives what the device reads).
    static constexpr uint32_t kHostOnly = 0xffffffffu;
};

// The places of one layer's tensors, by role.
struct LayerPlaces {
    std::array<TensorPlace, kLayerRoles> t{};
    const TensorPlace& operator[](Role r) const { return t[size_t(r)]; }
    TensorPlace& operator[](Role r) { return t[size_t(r)]; }
};

// Layers [first, first + count) of a model: what one device holds when a model is split over
// several (count 0: all of them). The embedding goes with the range that starts at layer 0, the
// output head with the one that ends at the last layer.
struct LayerRange {
    uint32_t first = 0, count = 0;
    LayerRange resolved(const ModelConfig& cfg) const;  // count 0 -> the layers from `first` on; checked
    uint32_t end() const { return first + count; }
};

struct WeightLayout {
    // One device buffer per group of tensors uploaded back to back.
    struct Buffer {
        std::string label;
        std::vector<const GgufTensorInfo*> tensors;  // uploaded in this order
        bool as_f32 = false;  // converted on the host (norms, biases)
        uint64_t bytes = 0;
        // Set: the buffer's bytes are computed on the host from `tensors` (a rearranged or transposed
        // form of them) instead of copied.
        std::function<void(const GgufFile&, std::span<uint8_t>)> derive;
    };
    std::vector<Buffer> buffers;
    LayerRange range;  // the layers placed (resolved)
    std::vector<LayerPlaces> layers;  // indexed by layer; those outside `range` are empty
    TensorPlace token_embd, position_embd, output_norm, output_norm_b, output, rope_factors;
    TensorPlace token_types, embd_norm, embd_norm_b;  // encoders (f32)
    uint64_t bytes = 0;  // device bytes of all weights
    bool tied = false;
    const TensorPlace& output_tensor() const { return tied ? token_embd : output; }
};

// A placed vector (norm weight, bias) read from the file as f32, whatever type stores it; empty
// when the model has no such tensor.
std::vector<float> read_place_f32(const GgufFile& file, const TensorPlace& p);

// Expert e's rows (rows / n_expert of them) of the expert stack `stack` as the file holds them:
// stacked in one tensor, or expert e's own tensor (TensorSpec::per_expert_name).
const uint8_t* expert_rows(const GgufFile& file, const WeightLayout& layout, const TensorPlace& stack,
                           uint32_t n_expert, uint32_t e);

// Pure: reads tensor metadata only. n_ctx picks Phi-3's long or short rope factors.
// shared_token_embd: the token embedding is read from another model's upload on the same device
// (T5's encoder from its decoder, ModelOptions::shared_token_embd): placed host-only (its source
// kept, for row lookups on the host where it is too big to bind), not uploaded, not counted.
WeightLayout plan_weights(const GgufFile& file, const ModelConfig& cfg, uint32_t n_ctx, LayerRange layers = {},
                          bool shared_token_embd = false);

// A tensor on the device: a view into a buffer owned by ModelWeights.
struct DeviceTensor {
    TensorType type = TensorType::F32;
    uint32_t row_elems = 0;  // ne[0]
    uint32_t rows = 0;  // product of the other dims
    BufferSlice view;
    BufferSlice slice() const { return view; }
    bool present() const { return rows != 0; }
};

struct LayerWeights {
    std::array<DeviceTensor, kLayerRoles> t{};
    const DeviceTensor& operator[](Role r) const { return t[size_t(r)]; }
};

// (bytes uploaded so far, total bytes)
using UploadProgress = std::function<void(uint64_t, uint64_t)>;

struct ModelWeights {
    DeviceTensor token_embd;  // (n_vocab, dim): rows are tokens
    DeviceTensor position_embd;  // (n_ctx_train, dim) learned positions (GPT-2)
    DeviceTensor output_norm, output_norm_b;  // (dim)
    DeviceTensor output;  // (n_vocab, dim); the same tensor as token_embd when tied
    DeviceTensor rope_factors;  // (rope_dim / 2) f32: the frequency factors this context uses
    DeviceTensor token_types;  // (n_token_types, dim) f32 (encoders; row 0 is added to every token)
    DeviceTensor embd_norm, embd_norm_b;  // (dim) LayerNorm of the embeddings (encoders)
    bool tied = false;
    std::vector<LayerWeights> layers;
    uint64_t bytes = 0;  // device bytes of all weights
    std::vector<Buffer> buffers;  // owns the memory every view above points into

    static ModelWeights upload(Context& ctx, const GgufFile& file, const WeightLayout& layout,
                               const UploadProgress& progress = {});
    const DeviceTensor& output_tensor() const { return tied ? token_embd : output; }
};

}  // namespace vkllm
