// Random but valid rows of any tensor type, straight in the GGUF byte layout: every quant and
// scale bit is random, and only the f16 block scales are drawn from a range that keeps the decoded
// values finite and of order 1. Kernel tests and benchmarks use these instead of quantizing random
// floats: it is fast at real model sizes (hundreds of millions of elements), independent of the
// quantizer, and reaches bit patterns a quantizer rarely emits (every 6-bit scale and min, every
// nibble, every Q3_K / Q5 high bit).
#pragma once

#include "runtime/quant/tensor_types.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vkllm::quant {

// Fills `dst` (row_bytes(t, n) bytes) with n elements of type t. Float types get uniform values in
// [-1, 1) (rounded to the type). Deterministic for a given seed.
void random_blocks(TensorType t, uint64_t seed, uint8_t* dst, size_t n);

// `rows` rows of k elements each (row j seeded from seed and j).
std::vector<uint8_t> random_rows(TensorType t, uint64_t seed, size_t rows, size_t k);

}  // namespace vkllm::quant
