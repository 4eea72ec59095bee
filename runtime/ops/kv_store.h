// Writing the current tokens' K or V rows into one layer's KV cache.
#pragma once

#include "runtime/context.h"
#include "runtime/ops/op_types.h"

#include <cstdint>

namespace vkllm::ops {

// cache: one layer's K (or V) cache, [n_ctx][row_elems] of kv_type; src f32 [n_tokens][row_elems];
// row t goes to cache row positions[t] (int32 buffer read on the device), converted to f16 for
// KvType::F16 with round-to-nearest-even. Positions >= n_ctx (and negative ones) are skipped, never
// written out of bounds. KvType::F16 needs an even row_elems (std::invalid_argument otherwise; every
// real model has one): the f16 cache is written as 32-bit words so that no 16-bit storage is needed.
void kv_store(Context& ctx, CommandStream& s, const BufferSlice& src, const BufferSlice& cache,
              const BufferSlice& positions, uint32_t n_tokens, uint32_t row_elems, uint32_t n_ctx, KvType kv_type);

}  // namespace vkllm::ops

namespace vkllm::ref {

// cache points at n_ctx * row_elems elements of type t (uint16_t f16 bits or float). Any row_elems.
void kv_store(const float* src, void* cache, const int32_t* positions, uint32_t n_tokens, uint32_t row_elems,
              uint32_t n_ctx, ops::KvType t);

}  // namespace vkllm::ref
