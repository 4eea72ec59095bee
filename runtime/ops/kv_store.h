// Writing the current tokens' K or V rows into one layer's KV cache.
#pragma once

#include "runtime/context.h"
#include "runtime/ops/op_types.h"

#include <cstdint>

namespace vkllm::ops {

// cache: one layer's K (or V) cache, [n_ctx][row_elems] of kv_type; src f32 [n_tokens][row_elems];
// row t goes to cache row positions[t] % n_ctx (int32 buffer read on the device), converted to f16
// for KvType::F16 with round-to-nearest-even. The cache is a ring: for positions below n_ctx (an
// ordinary cache) the row is the position itself; a sliding-window cache of n_ctx rows keeps
// overwriting the oldest rows (ops::attention reads position j from row j % n_ctx). Negative
// positions are skipped. Two tokens of one call whose positions are equal mod n_ctx race, so a call
// stores at most n_ctx consecutive positions. KvType::F16 needs an even row_elems
// (std::invalid_argument otherwise; every real model has one): the f16 cache is written as 32-bit
// words so that no 16-bit storage is needed.
void kv_store(Context& ctx, CommandStream& s, const BufferSlice& src, const BufferSlice& cache,
              const BufferSlice& positions, uint32_t n_tokens, uint32_t row_elems, uint32_t n_ctx, KvType kv_type);

}  // namespace vkllm::ops

namespace vkllm::ref {

// cache points at n_ctx * row_elems elements of type t (uint16_t f16 bits or float). Any row_elems.
// Row positions[t] % n_ctx, negative positions skipped, as above.
void kv_store(const float* src, void* cache, const int32_t* positions, uint32_t n_tokens, uint32_t row_elems,
              uint32_t n_ctx, ops::KvType t);

}  // namespace vkllm::ref
