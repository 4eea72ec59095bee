// Tensor element types vkllm understands, with the exact GGUF/ggml block layouts, and the CPU
// conversions every layer shares: f16 <-> f32, and Q8_0 / Q4_0 quantize / dequantize.
//
//   F32   4 bytes per element.
//   F16   IEEE half, 2 bytes per element.
//   Q8_0  blocks of 32: f16 scale d, then 32 int8 q;            value = q * d            (34 bytes)
//   Q4_0  blocks of 32: f16 scale d, then 16 bytes; byte j holds element j in its low nibble and
//         element j + 16 in its high nibble;                     value = (nibble - 8) * d (18 bytes)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace vkllm {

// Values are the GGML type ids used in GGUF files.
enum class TensorType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8 };

inline constexpr size_t kQuantBlock = 32;  // elements per Q8_0 / Q4_0 block

struct TypeTraits {
    std::string_view name;
    size_t block_elems;  // elements per block (1 for F32/F16)
    size_t block_bytes;  // bytes per block
};

// Throws std::invalid_argument for ids vkllm does not support (the message names the id).
const TypeTraits& type_traits(TensorType t);
bool is_supported_type(uint32_t ggml_type_id);
std::string_view ggml_type_name(uint32_t ggml_type_id);  // names unsupported ids too ("Q4_K", ...)

// Bytes of a row of n elements; throws if n is not a multiple of the block size.
size_t row_bytes(TensorType t, size_t n);

uint16_t f32_to_f16(float f);  // round to nearest even, overflow to inf, NaN kept
float f16_to_f32(uint16_t h);

// Quantize / dequantize n elements (n a multiple of 32 for block types). `dst` must hold
// row_bytes(t, n) bytes for quantize, n floats for dequantize.
void quantize_row(TensorType t, const float* src, void* dst, size_t n);
void dequantize_row(TensorType t, const void* src, float* dst, size_t n);

// Round-trip: what the device will see after the data is stored as `t`. References use this so
// that they compare against exactly the values the GPU reads.
void round_trip(TensorType t, std::span<float> values);

}  // namespace vkllm
