// Rotary position embedding (RoPE), applied in place to Q and K.
#pragma once

#include "runtime/context.h"
#include "runtime/ops/op_types.h"

#include <cstdint>

namespace vkllm::ops {

// In place on x: f32 [n_tokens][n_heads][head_dim]. Token t is at position positions[t] (int32
// buffer, read on the device so a recorded command buffer stays valid as positions advance).
// Only the first rot_dim (even, <= head_dim) elements of each head rotate;
// theta_i = pos * base^(-2i/rot_dim), pairs as `layout` says. fp32 on the device: the angle carries
// an error of about pos * 2^-23 radians at the fastest frequencies (see shaders/rope.comp).
void rope(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& positions, uint32_t n_tokens,
          uint32_t n_heads, uint32_t head_dim, uint32_t rot_dim, float base, RopeLayout layout);

}  // namespace vkllm::ops

namespace vkllm::ref {

// The same rotation with the angle, cos and sin in double.
void rope(float* x, const int32_t* positions, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t rot_dim,
          float base, ops::RopeLayout layout);

}  // namespace vkllm::ref
