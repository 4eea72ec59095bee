// Ops on logits: greedy argmax, temperature softmax, top-k.
#pragma once

#include "runtime/context.h"

#include <cstdint>

namespace vkllm::ops {

// out[r] = index of the max of x[r, :] (uint32; lowest index on ties; NaN never wins, an all-NaN row
// gives 0); x f32 [rows][n].
void argmax(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& out, uint32_t rows, uint32_t n);
// y[r, :] = softmax(x[r, :] / temperature), numerically stable (max subtracted); y may alias x.
// temperature > 0 (std::invalid_argument otherwise: greedy decoding is argmax).
void softmax(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& y, uint32_t rows, uint32_t n,
             float temperature);
// Top-k (1 <= k <= min(256, n)) of one row x f32 [n]: ids uint32 [k] and vals f32 [k], sorted by
// value descending, ties by lower index first; NaN ranks below every number. One workgroup does the
// whole row (a radix select, then a sort of the k): for sampling from one row of logits, which must fit
// one binding (DeviceLimitError otherwise).
void topk(Context& ctx, CommandStream& s, const BufferSlice& x, uint32_t n, uint32_t k, const BufferSlice& ids,
          const BufferSlice& vals);

}  // namespace vkllm::ops

namespace vkllm::ref {

void argmax(const float* x, uint32_t* out, uint32_t rows, uint32_t n);
void softmax(const float* x, float* y, uint32_t rows, uint32_t n, float temperature);
void topk(const float* x, uint32_t n, uint32_t k, uint32_t* ids, float* vals);

}  // namespace vkllm::ref
