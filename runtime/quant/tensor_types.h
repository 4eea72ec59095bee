// Tensor element types vkllm understands, with the exact GGUF/ggml block layouts, and the CPU
// conversions every layer shares: f16 / bf16 <-> f32, quantize and dequantize of every type.
// The byte layout of each block type is documented in runtime/quant/block_formats.h; the
// reference dequantizers (runtime/quant/dequantize.cpp) are written from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace vkllm {

// Values are the GGML type ids used in GGUF files.
enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    IQ4_NL = 20,
    IQ4_XS = 23,
    BF16 = 30,
    MXFP4 = 39,
};

// Every type vkllm reads, in a stable order (tests and benchmarks iterate over it).
inline constexpr TensorType kAllTensorTypes[] = {
    TensorType::F32,  TensorType::F16,  TensorType::BF16,   TensorType::Q8_0,  TensorType::Q4_0, TensorType::Q4_1,
    TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL, TensorType::Q2_K,  TensorType::Q3_K, TensorType::Q4_K,
    TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_XS, TensorType::MXFP4,
};

inline constexpr size_t kQuantBlock = 32;  // elements per Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL/MXFP4 block
inline constexpr size_t kSuperBlock = 256;  // elements per K-quant / IQ4_XS super-block

struct TypeTraits {
    std::string_view name;  // as ggml spells it: "Q4_K"
    std::string_view lower;  // as vkllm options and shader names spell it: "q4_k"
    size_t block_elems;  // elements per block (1 for F32/F16/BF16)
    size_t block_bytes;  // bytes per block
    // Largest RMS error of the type's quantizer on Gaussian data, relative to the data's RMS
    // (the documented bound quantizer tests check; 0 for exact types).
    double rel_rms_bound;
};

// Throws std::invalid_argument for ids vkllm does not support (the message names the id).
const TypeTraits& type_traits(TensorType t);
bool is_supported_type(uint32_t ggml_type_id);
std::string_view ggml_type_name(uint32_t ggml_type_id);  // names unsupported ids too ("IQ2_XS", ...)
std::string supported_types_list();  // "F32, F16, BF16, Q8_0, ..."
// Parses a lower- or upper-case type name ("q4_k", "Q4_K"); throws std::invalid_argument listing
// the supported names otherwise.
TensorType parse_tensor_type(std::string_view name);
// Bits per weight including scales: 4.5 for Q4_K.
inline double bits_per_weight(TensorType t) {
    const TypeTraits& tt = type_traits(t);
    return 8.0 * double(tt.block_bytes) / double(tt.block_elems);
}

// Bytes of a row of n elements; throws if n is not a multiple of the block size.
size_t row_bytes(TensorType t, size_t n);

uint16_t f32_to_f16(float f);  // round to nearest even, overflow to inf, NaN kept
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  // round to nearest even, NaN kept (quiet)
float bf16_to_f32(uint16_t h);

// Quantize / dequantize n elements (n a multiple of the type's block). `dst` must hold
// row_bytes(t, n) bytes for quantize, n floats for dequantize. Quantization is deterministic.
void quantize_row(TensorType t, const float* src, void* dst, size_t n);
void dequantize_row(TensorType t, const void* src, float* dst, size_t n);

// Round-trip: what the device will see after the data is stored as `t`. References use this so
// that they compare against exactly the values the GPU reads.
void round_trip(TensorType t, std::span<float> values);

}  // namespace vkllm
