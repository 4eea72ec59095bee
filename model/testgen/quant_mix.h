// llama.cpp's quantization mixes for random models: the type each tensor of a generated model
// gets, and the file type its metadata states.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "runtime/quant/tensor_types.h"

namespace vkllm {

struct ModelShape;

// The file types of llama.cpp's quantizer (`llama-quantize in.gguf out.gguf Q4_K_M`) that
// gen-model writes: each gives every tensor a type by llama.cpp's rules (mix_tensor_type).
enum class QuantMix : uint8_t { Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS };

inline constexpr QuantMix kAllQuantMixes[] = {
    QuantMix::Q2_K,   QuantMix::Q3_K_S, QuantMix::Q3_K_M, QuantMix::Q3_K_L, QuantMix::Q4_K_S, QuantMix::Q4_K_M,
    QuantMix::Q5_K_S, QuantMix::Q5_K_M, QuantMix::Q6_K,   QuantMix::IQ4_NL, QuantMix::IQ4_XS,
};

struct QuantMixInfo {
    std::string_view name;  // as gen-model's --type spells it: "q4_k_m"
    uint32_t file_type;  // llama.cpp's LLAMA_FTYPE_MOSTLY_* value, written as general.file_type
    TensorType base;  // the type of the matrices no rule changes
};
const QuantMixInfo& quant_mix_info(QuantMix m);
// "q4_k_m" or "Q4_K_M" -> QuantMix::Q4_K_M; nullopt for any other name.
std::optional<QuantMix> parse_quant_mix(std::string_view name);

// The type llama.cpp's quantizer gives the LLaMA tensor `name` (as make_random_model names it, with
// rows of `row_len` elements) in a model of `shape` for the file type `mix`. Mirrors
// llama_tensor_get_type() in llama.cpp's src/llama-quant.cpp for the llama architecture without
// experts or importance matrix, including its fallback for rows that are not whole 256-element
// blocks. 1D tensors (norms) are not quantized: F32.
TensorType mix_tensor_type(QuantMix mix, const ModelShape& shape, std::string_view name, uint64_t row_len);

// ggml "general.file_type" for a model whose matrices are of type t (for a single 256-element
// type, the file type llama.cpp's loader infers from it: Q4_K -> MOSTLY_Q4_K_M).
uint32_t llama_file_type(TensorType t);
// The type of every tensor of the model `shape` describes (its weight_type, or its mix's choice).
TensorType llama_tensor_type(const ModelShape& shape, std::string_view name, uint64_t row_len);

}  // namespace vkllm
