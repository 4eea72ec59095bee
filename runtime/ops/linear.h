// The weight-streaming linear layers of the decoder: Y = X · W^T (+ bias) (+ R) with W in any GGUF weight
// type vkllm reads (runtime/tensor_types.h), as matvec (decode, m <= 8: one pass over W
// shared by all rows of X) and as matmul (prefill: shared-memory tiles on GPUs, register tiles fed by
// subgroup broadcasts on CPU drivers).
//
// GPU functions record into a CommandStream and never submit. X, Y, R are f32 row-major, the bias
// f32 [n] (broadcast over the m rows; GPT-2's and Qwen2's biased projections), added in the epilogue.
// W: n rows of k elements of `wtype`, rows contiguous (k a multiple of the type's block: 32, or 256
// for the K-quants and IQ4_XS).
// Alignment: W's slice must start 4-byte aligned for F32 and 2-byte aligned otherwise, X / Y / R
// 4-byte aligned; none needs the storage-buffer offset alignment (each binding is an aligned
// window with the start inside it passed as a push constant); the bias 4-byte aligned. Kernels read whole words of W and
// whole vec4s of X: the buffers must extend to W's slice end rounded up to 4 bytes and X's to 16
// bytes past its 16-byte-aligned start (always true for vkllm Buffers, whose allocations are
// rounded up to 256 bytes).
// Sizes: a W, X or Y larger than caps().max_storage_buffer_range is split over several dispatches
// (row ranges of W; row ranges of X / Y for matmul), so any size that fits in memory works.
#pragma once

#include "runtime/ops/window.h"

#include "runtime/context.h"
#include "runtime/tensor_types.h"

#include <cstdint>
#include <vector>

namespace vkllm::ops {

// An element-wise op that matvec applies to X as it loads it, saving the op's own dispatch (decode
// steps of small models are bound by dispatch count; the op costs the matvec little, as each X
// element is loaded once per workgroup anyway).
struct MatvecInput {
    enum class Kind {
        Plain,    // X as given
        RmsNorm,  // rms_norm(X, norm_weight, eps) (ops::rms_norm's math, row by row)
        SwiGlu,   // X holds the gate rows [m][k]; input = silu(X) * up (ops::swiglu)
        GeGlu,    // as SwiGlu with tanh-GELU (ops::geglu)
    };
    Kind kind = Kind::Plain;
    BufferSlice norm_weight{};  // RmsNorm: f32 [k], 4-byte aligned
    float eps = 0;              // RmsNorm
    BufferSlice up{};           // SwiGlu / GeGlu: f32 [m][k], 4-byte aligned
};

// Y[m, n] = X[m, k] · W[n, k]^T (+ bias[n] broadcast over rows, if bias) (+ R[m, n] if residual).
// residual may be the same slice as y (in-place residual add). m <= 8 uses matvec, else matmul.
void linear(Context& ctx, CommandStream& s, TensorType wtype, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual = nullptr,
            const BufferSlice* bias = nullptr);
void matmul(Context& ctx, CommandStream& s, TensorType wtype, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m, uint32_t n, uint32_t k, const BufferSlice* residual = nullptr,
            const BufferSlice* bias = nullptr);
void matvec(Context& ctx, CommandStream& s, TensorType wtype, const BufferSlice& w, const BufferSlice& x,
            const BufferSlice& y, uint32_t m /* 1..8 */, uint32_t n, uint32_t k, const BufferSlice* residual = nullptr,
            const BufferSlice* bias = nullptr, const MatvecInput& input = {});

// The pipelines linear() would use for this shape on this device (so that start-up can compile
// exactly the pipelines a model needs, in parallel, with ctx.prepare_pipelines()); `input` as
// matvec's (m <= 8 only).
std::vector<PipelineDesc> linear_pipelines(const Context& ctx, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                                           MatvecInput::Kind input = MatvecInput::Kind::Plain);

// Bytes one linear() call must move at least: W once, X once, Y once (and R once if residual).
// For GB/s reports: bytes / time.
uint64_t linear_bytes_read(TensorType wtype, uint32_t m, uint32_t n, uint32_t k);

namespace detail {

// The variant and specialization constants linear() picks; exposed for tests and benchmarks.
// w_offset_aligned: W's slice starts on 4 bytes (as uploaded weights do); with rows and fields of
// the type on 4 bytes too, the variant reads weights without realignment.
PipelineDesc matvec_desc(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                         bool w_offset_aligned = true, MatvecInput::Kind input = MatvecInput::Kind::Plain);
PipelineDesc matmul_desc(const DeviceCaps& caps, TensorType wtype, uint32_t m, uint32_t n, uint32_t k,
                         bool w_offset_aligned = true);

}  // namespace detail

}  // namespace vkllm::ops

namespace vkllm::ref {

// CPU references, same shapes as the GPU ops, W given as raw GGUF bytes (dequantized row by row
// with dequantize_row, so they see exactly the values the GPU decodes), double accumulation.
// bias [n] or nullptr; residual [m][n] or nullptr, may alias y.
void linear(TensorType wtype, const void* w, const float* x, float* y, uint32_t m, uint32_t n, uint32_t k,
            const float* residual = nullptr, const float* bias = nullptr);

}  // namespace vkllm::ref
