// Element-wise and per-row ops of the LLaMA decoder: RMSNorm, SwiGLU, residual add; and the
// pieces every small op shares (its pipeline table, binding windows for devices with a small
// maxStorageBufferRange, 2-D grids for more than 65535 workgroups).
//
// GPU functions record into a CommandStream and never submit. Shapes are in elements, buffers are
// f32 unless noted; an output may alias an input where the comment says so (same slice).
// Every function splits its work over several dispatches when a binding would exceed
// caps().max_storage_buffer_range, so any size that fits in memory works, and binds aligned windows
// itself, so slices need only element-aligned (4-byte) offsets, not minStorageBufferOffsetAlignment.
#pragma once

#include "runtime/ops/window.h"

#include "runtime/context.h"

#include <array>
#include <cstdint>
#include <vector>

namespace vkllm::ops {

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w[:]; x, y [rows][dim]; w [dim]; y may alias x. Any dim.
void rms_norm(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& w, const BufferSlice& y,
              uint32_t rows, uint32_t dim, float eps);
// out[i] = silu(gate[i]) * up[i] (silu(g) = g / (1 + exp(-g))); out may alias gate. n elements.
void swiglu(Context& ctx, CommandStream& s, const BufferSlice& gate, const BufferSlice& up, const BufferSlice& out,
            uint32_t n);
// out[i] = a[i] + b[i]; out may alias a (or b).
void add(Context& ctx, CommandStream& s, const BufferSlice& a, const BufferSlice& b, const BufferSlice& out, uint32_t n);

// Pipelines the small ops (this header, rope.h, kv_store.h, sampling_ops.h) use on this device:
// start-up compiles exactly these, in parallel, with ctx.prepare_pipelines().
std::vector<PipelineDesc> small_op_pipelines(const Context& ctx);

namespace detail {

enum class SmallOp { RmsNorm, Swiglu, Add, Rope, KvStoreF16, KvStoreF32, Argmax, Softmax, Topk };
// The one place that picks a small op's variant and workgroup size from the caps.
PipelineDesc small_op_desc(const DeviceCaps& caps, SmallOp op);


}  // namespace detail
}  // namespace vkllm::ops

namespace vkllm::ref {

// Plain C++ references (double accumulation); the same contracts as the GPU functions above.
void rms_norm(const float* x, const float* w, float* y, uint32_t rows, uint32_t dim, float eps);
void swiglu(const float* gate, const float* up, float* out, uint32_t n);
void add(const float* a, const float* b, float* out, uint32_t n);

}  // namespace vkllm::ref
