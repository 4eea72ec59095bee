// Element-wise ops of the decoders: activations (SwiGLU, GeGLU, GELU), residual add, bias rows,
// scaling and logit soft-capping; and the pieces every small op shares (its pipeline table, binding
// windows for devices with a small maxStorageBufferRange, 2-D grids for more than 65535 workgroups).
// The per-row norms (rms_norm, layer_norm) are in norm.h, included here for existing callers.
//
// GPU functions record into a CommandStream and never submit. Shapes are in elements, buffers are
// f32 unless noted; an output may alias an input where the comment says so (same slice).
// Every function splits its work over several dispatches when a binding would exceed
// caps().max_storage_buffer_range, so any size that fits in memory works, and binds aligned windows
// itself, so slices need only element-aligned (4-byte) offsets, not minStorageBufferOffsetAlignment.
// n = 0 records nothing; a slice smaller than the shape throws std::invalid_argument.
#pragma once

#include "runtime/ops/norm.h"
#include "runtime/ops/op_types.h"
#include "runtime/ops/window.h"

#include "runtime/context.h"

#include <array>
#include <cstdint>
#include <vector>

namespace vkllm::ops {

// out[i] = silu(gate[i]) * up[i] (silu(g) = g / (1 + exp(-g))); out may alias gate. n elements.
void swiglu(Context& ctx, CommandStream& s, const BufferSlice& gate, const BufferSlice& up, const BufferSlice& out,
            uint32_t n);
// out[i] = gelu(gate[i]) * up[i] with gelu as in gelu() below; out may alias gate. n elements.
void geglu(Context& ctx, CommandStream& s, const BufferSlice& gate, const BufferSlice& up, const BufferSlice& out,
           uint32_t n);
// gpt-oss's clamped SwiGLU, ref::swiglu_oai below; out may alias gate. n elements.
void swiglu_oai(Context& ctx, CommandStream& s, const BufferSlice& gate, const BufferSlice& up, const BufferSlice& out,
                uint32_t n);
// out[i] = a[i] + b[i]; out may alias a (or b).
void add(Context& ctx, CommandStream& s, const BufferSlice& a, const BufferSlice& b, const BufferSlice& out,
         uint32_t n);

// y[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = x[i] (GELU, tanh approximation);
// y may alias x. Finite and correct for every finite x (no tanh/exp overflow).
void gelu(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& y, uint32_t n);
// y[i] = max(x[i], 0); y may alias x.
void relu(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& y, uint32_t n);
// y[i] = x * sigmoid(1.702 x), x = x[i] (CLIP's quick GELU, the ViT of LLaVA's mmproj files); y may
// alias x. Finite and correct for every finite x.
void gelu_quick(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& y, uint32_t n);
// In place: x[i] *= factor.
void scale(Context& ctx, CommandStream& s, const BufferSlice& x, uint32_t n, float factor);
// In place: x[i] = cap * tanh(x[i] / cap) (logit soft-capping); finite for every finite x.
// Throws std::invalid_argument unless cap is finite and > 0.
void softcap(Context& ctx, CommandStream& s, const BufferSlice& x, uint32_t n, float cap);
// In place: x[i] = clamp(x[i], -limit, limit) (MPT's clamp_kqv). Throws std::invalid_argument unless
// limit is finite and > 0.
void clamp(Context& ctx, CommandStream& s, const BufferSlice& x, uint32_t n, float limit);
// In place: x[r, c] += b[c] for r < rows, c < dim (a bias broadcast over rows). Any dim (b must fit
// one binding). Throws std::invalid_argument for rows = 0 or dim = 0.
void add_rows(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& b, uint32_t rows, uint32_t dim);
// A block of `width` columns of each of `rows` rows: dst[r * dst_stride + dst_col + c] = src[r * src_stride +
// src_col + c] (strides and columns in floats; latent attention's row concatenations). src and dst must not
// overlap, each block must fit its stride, and each slice's span must fit one binding (DeviceLimitError);
// std::invalid_argument otherwise.
struct ColBlock {
    BufferSlice buf;
    uint32_t stride = 0, col = 0;
};
void copy_cols(Context& ctx, CommandStream& s, const ColBlock& src, const ColBlock& dst, uint32_t rows, uint32_t width);

// Pipelines the small ops (this header, norm.h, rope.h, kv_store.h, sampling_ops.h) use on this
// device: start-up compiles exactly these, in parallel, with ctx.prepare_pipelines().
std::vector<PipelineDesc> small_op_pipelines(const Context& ctx);
// The same, with the K/V store variant of one KV cache type only: what a model
// whose cache has that type can record.
std::vector<PipelineDesc> small_op_pipelines(const Context& ctx, KvType kv_type);

namespace detail {

enum class SmallOp {
    RmsNorm,
    Swiglu,
    Add,
    Rope,
    KvStoreF16,
    KvStoreF32,
    KvStoreQ8_0,
    Argmax,
    Softmax,
    Topk,
    LayerNorm,
    Geglu,
    Gelu,
    Scale,
    Softcap,
    AddRows,
    Clamp,
    Relu,
    SwigluOai,
    CopyCols,
    GeluQuick,
    SoftmaxShort,  // softmax of rows of at most kSoftmaxShortRow (attention scores), its own workgroup size
};
// Every SmallOp, for small_op_pipelines and tests.
inline constexpr std::array<SmallOp, 22> kAllSmallOps = {
    SmallOp::RmsNorm,    SmallOp::Swiglu,      SmallOp::Add,    SmallOp::Rope,      SmallOp::KvStoreF16,
    SmallOp::KvStoreF32, SmallOp::KvStoreQ8_0, SmallOp::Argmax, SmallOp::Softmax,   SmallOp::Topk,
    SmallOp::LayerNorm,  SmallOp::Geglu,       SmallOp::Gelu,   SmallOp::Scale,     SmallOp::Softcap,
    SmallOp::AddRows,    SmallOp::Clamp,       SmallOp::Relu,   SmallOp::SwigluOai, SmallOp::CopyCols,
    SmallOp::GeluQuick,  SmallOp::SoftmaxShort};
// Rows of at most this many values take SmallOp::SoftmaxShort: on a CPU driver a workgroup of one
// subgroup per row (as the norms), where 256 invocations switching at every barrier cost 12x the
// work (measured on lavapipe: 12 x 3072 rows of 256 scores, 588 ms against 47 ms); longer rows
// (vocabularies) keep the wide workgroup, whose fp32 partial sums stay short.
inline constexpr uint32_t kSoftmaxShortRow = 4096;
// The one place that picks a small op's variant and workgroup size from the caps.
PipelineDesc small_op_desc(const DeviceCaps& caps, SmallOp op);

}  // namespace detail
}  // namespace vkllm::ops

namespace vkllm::ref {

// Plain C++ references (double arithmetic); the same contracts as the GPU functions above.
void swiglu(const float* gate, const float* up, float* out, uint32_t n);
void geglu(const float* gate, const float* up, float* out, uint32_t n);
// gpt-oss's clamped SwiGLU (alpha 1.702, limit 7): min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1).
void swiglu_oai(const float* gate, const float* up, float* out, uint32_t n);
void add(const float* a, const float* b, float* out, uint32_t n);
void gelu(const float* x, float* y, uint32_t n);
void relu(const float* x, float* y, uint32_t n);
void gelu_quick(const float* x, float* y, uint32_t n);
void scale(float* x, uint32_t n, float factor);
void softcap(float* x, uint32_t n, float cap);
void clamp(float* x, uint32_t n, float limit);
void add_rows(float* x, const float* b, uint32_t rows, uint32_t dim);
void copy_cols(const float* src, uint32_t src_stride, uint32_t src_col, float* dst, uint32_t dst_stride,
               uint32_t dst_col, uint32_t rows, uint32_t width);

}  // namespace vkllm::ref
