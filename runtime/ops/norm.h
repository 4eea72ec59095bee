// Per-row normalisations: RMSNorm (LLaMA, Gemma, Qwen2) and LayerNorm (GPT-2).
//
// GPU functions record into a CommandStream and never submit. x, y are f32 [rows][dim] row-major,
// the weight and bias f32 [dim]; y may alias x (same slice). Rows are split over several
// dispatches when a binding would exceed caps().max_storage_buffer_range (one row must fit one
// binding), and slices need only 4-byte aligned offsets (each binding is an aligned window).
// Included by elementwise.h, so code that includes elementwise.h sees these too.
#pragma once

#include "runtime/ops/window.h"

#include "runtime/context.h"

#include <cstdint>

namespace vkllm::ops {

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w[:]; x, y [rows][dim]; w [dim]; y may alias x. Any dim.
// rows = 0 records nothing (kept for existing callers); dim = 0 throws std::invalid_argument.
void rms_norm(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& w, const BufferSlice& y,
              uint32_t rows, uint32_t dim, float eps);

// y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * w[:] + b[:], mean and var (biased, population: / dim)
// over the row; b == nullptr: no bias. x, y [rows][dim]; w, b [dim]; y may alias x. Any dim.
// The variance is computed from centred values (no E[x^2] - E[x]^2 cancellation), so rows with a
// large common offset (|mean| >> stddev) normalise correctly in f32.
// Throws std::invalid_argument for rows = 0, dim = 0 or a slice smaller than the shape.
void layer_norm(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& w, const BufferSlice* b,
                const BufferSlice& y, uint32_t rows, uint32_t dim, float eps);

}  // namespace vkllm::ops

namespace vkllm::ref {

// Plain C++ references (double accumulation); the same contracts as the GPU functions above.
void rms_norm(const float* x, const float* w, float* y, uint32_t rows, uint32_t dim, float eps);
// b may be nullptr (no bias); y may alias x.
void layer_norm(const float* x, const float* w, const float* b, float* y, uint32_t rows, uint32_t dim, float eps);

}  // namespace vkllm::ref
