// Embedding lookup: rows of a weight table (F32, F16, Q8_0, Q4_0 in the GGUF layouts) gathered by
// token id and dequantized to f32. Shares the weight decoding of the linear layers
// (shaders/include/weights.glsl).
#pragma once

#include "runtime/context.h"
#include "runtime/quant/tensor_types.h"

#include <cstdint>
#include <vector>

namespace vkllm::ops {

// out[i, :] = dequant(table[ids[i], :]); ids: int32 [n_ids]; table: n_rows rows of `dim` elements
// of `type` (dim a multiple of 32 for block types); out: f32 [n_ids][dim]. Ids outside
// [0, n_rows) produce rows of zeros (never an out-of-bounds read). The table must fit one binding
// (caps().max_storage_buffer_range): otherwise DeviceLimitError, and the caller does the lookup on
// the host. Alignment as for linear(): the table starts 4-byte aligned for F32, 2-byte otherwise,
// and its buffer extends to the slice end rounded up to 4 bytes; ids / out 4-byte aligned.
// n_ids == 0 records nothing.
void get_rows(Context& ctx, CommandStream& s, TensorType type, const BufferSlice& table, uint32_t n_rows, uint32_t dim,
              const BufferSlice& ids, uint32_t n_ids, const BufferSlice& out);

// The pipelines get_rows() uses for this type on this device (for ctx.prepare_pipelines()).
std::vector<PipelineDesc> get_rows_pipelines(const Context& ctx, TensorType type);

}  // namespace vkllm::ops

namespace vkllm::ref {

// CPU reference: the same lookup on raw GGUF bytes (zeros for out-of-range ids).
void get_rows(TensorType type, const void* table, uint32_t n_rows, uint32_t dim, const int32_t* ids, uint32_t n_ids,
              float* out);

}  // namespace vkllm::ref
