// Writing the current tokens' K or V rows into one layer's KV cache.
#pragma once

#include "runtime/context.h"
#include "runtime/ops/op_types.h"

#include <cstdint>

namespace vkllm::ops {

// cache: one layer's K (or V) cache, [n_ctx][row_elems] of kv_type; src f32 [n_tokens][row_elems];
// row t goes to cache row positions[t] % n_ctx (int32 buffer read on the device), converted to f16
// for KvType::F16 with round-to-nearest-even, quantized to blocks for KvType::Q8_0 (op_types.h).
// The cache is a ring: for positions below n_ctx (an ordinary cache) the row is the position itself; a sliding-window cache of n_ctx rows keeps
// overwriting the oldest rows (ops::attention reads position j from row j % n_ctx). Negative
// positions are skipped. Two tokens of one call whose positions are equal mod n_ctx race, so a call
// stores at most n_ctx consecutive positions. row_elems must be a multiple of kv_row_multiple
// (std::invalid_argument otherwise): 2 for F16, whose cache is written as 32-bit words so that no
// 16-bit storage is needed, 32 for Q8_0.
// pages: a paged cache (op_types.h): cache is the pool (pages.pool_rows rows), n_ctx the rows one
// sequence addresses (its ring), and the row a token's position goes to is found through its table.
void kv_store(Context& ctx, CommandStream& s, const BufferSlice& src, const BufferSlice& cache,
              const BufferSlice& positions, uint32_t n_tokens, uint32_t row_elems, uint32_t n_ctx, KvType kv_type,
              const KvPages& pages = {});

// kv_store of K and of V (same shapes and positions) in one dispatch per cache window: a decode step
// of a small model is bound by dispatch count.
void kv_store_pair(Context& ctx, CommandStream& s, const BufferSlice& k_src, const BufferSlice& k_cache,
                   const BufferSlice& v_src, const BufferSlice& v_cache, const BufferSlice& positions,
                   uint32_t n_tokens, uint32_t row_elems, uint32_t n_ctx, KvType kv_type, const KvPages& pages = {});

}  // namespace vkllm::ops

namespace vkllm::ref {

// cache points at n_ctx rows of kv_row_bytes(t, row_elems) bytes (uint16_t f16 bits, floats, or
// Q8_0 blocks). Any row_elems for F16 and F32, a multiple of 32 for Q8_0. Row positions[t] % n_ctx,
// negative positions skipped, as above. Q8_0 from its definition: d = max|x| / 127,
// q = lround(x * (1 / d)) (ggml's reference quantizer), NaN stored as 0, +-inf as +-FLT_MAX, and a
// block whose d would be below FLT_MIN stored as d = 0, q = 0.
void kv_quantize_q8_0(const float* src, uint32_t* dst_words, uint32_t n);  // n a multiple of 32
void kv_dequantize_q8_0(const uint32_t* words, float* dst, uint32_t n);
void kv_store(const float* src, void* cache, const int32_t* positions, uint32_t n_tokens, uint32_t row_elems,
              uint32_t n_ctx, ops::KvType t);

}  // namespace vkllm::ref
