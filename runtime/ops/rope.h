// Rotary position embedding (RoPE), applied in place to Q and K, with the frequency factors and
// context-extension scalings (linear, YaRN) of Llama 3.x, Phi-3, Gemma and Qwen.
#pragma once

#include "runtime/context.h"
#include "runtime/ops/op_types.h"

#include <array>
#include <cstdint>

namespace vkllm::ops {

// The rotation of one call. The defaults are plain RoPE (no scaling).
//
// Pair i of a head (0 <= i < rot_dim / 2), token at position pos, ff = freq_factors (or 1):
//   theta_extrap = pos * base^(-2i / rot_dim) / ff[i],  theta_interp = freq_scale * theta_extrap
//   ext_factor == 0: theta = theta_interp,                                   mscale = attn_factor
//   ext_factor != 0 (YaRN): mix = ramp(i) * ext_factor,
//                           theta = theta_interp * (1 - mix) + theta_extrap * mix,
//                           mscale = attn_factor * (1 + 0.1 ln(1 / freq_scale))
//   ramp(i) = 1 - clamp((i - low) / max(0.001, high - low), 0, 1), with
//   corr_dim(n) = rot_dim * ln(n_ctx_orig / (2 pi n)) / (2 ln base),
//   low = max(0, floor(corr_dim(beta_fast))), high = min(rot_dim - 1, ceil(corr_dim(beta_slow))).
//   (x0, x1) <- ((x0 cos theta - x1 sin theta) * mscale, (x0 sin theta + x1 cos theta) * mscale)
// These are GGML's definitions, so a GGUF's rope.scaling.* keys map onto the fields one to one.
//
// Multi-axis positions (RopeSections, GGML's M-RoPE and vision modes): a token carries 4 position
// components and pair i takes component c by its sector j = i % (n[0] + n[1] + n[2] + n[3]):
// c = 0 for j < n[0], 1 below n[0] + n[1], 2 below n[0] + n[1] + n[2], 3 above.
//   M-RoPE (Qwen2-VL's text model):  the rate stays base^(-2i / rot_dim): only the position differs.
//   vision (a ViT's 2D positions):   the rate restarts at each section: base^(-4 (j - start_c) / rot_dim),
//                                    start_c the section's first sector (GGML with n_dims = rot_dim / 2).
struct RopeSections {
    std::array<uint32_t, 4> n{};  // pairs per component; all zero: one position per token
    bool vision = false;
    bool multi() const { return n[0] + n[1] + n[2] + n[3] != 0; }
    auto operator<=>(const RopeSections&) const = default;
};

struct RopeParams {
    uint32_t n_heads, head_dim, rot_dim;  // rot_dim even, 0 < rot_dim <= head_dim
    float base;  // > 0
    RopeLayout layout;
    float freq_scale = 1.0f;  // > 0: 1 / (linear or YaRN scaling factor)
    float ext_factor = 0.0f;  // YaRN extrapolation mix; 0 = off
    float attn_factor = 1.0f;  // magnitude scale of the rotated pair
    float beta_fast = 32.0f, beta_slow = 1.0f;  // YaRN correction range, in rotations
    uint32_t n_ctx_orig = 0;  // training context the YaRN ramp is computed for; > 0 when ext_factor != 0
    // Multi-axis positions; the vision mode takes no frequency factors and no YaRN.
    RopeSections sections{};
};

// YaRN's ramp bounds (low, high) above, in pair indices; computed on the host in double.
struct RopeCorrDims {
    float low = 0, high = 0;
};
RopeCorrDims rope_corr_dims(const RopeParams& p);

// In place on x: f32 [n_tokens][n_heads][head_dim]. Token t is at position positions[t] (int32
// buffer, read on the device so a recorded command buffer stays valid as positions advance), or
// with sections, at positions[4 t + c] for component c.
// Only the first rot_dim elements of each head rotate, pairs as `layout` says. freq_factors: null,
// or f32 [rot_dim / 2] (all > 0; read on the device). Throws std::invalid_argument for bad
// parameters or short buffers. fp32 on the device: the angle carries an error of about
// pos * |d theta / d pos| * 2^-23 radians at the fastest frequencies (see shaders/rope.comp).
void rope(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& positions, uint32_t n_tokens,
          const RopeParams& p, const BufferSlice* freq_factors = nullptr);

// Plain RoPE (freq_scale 1, no factors, no YaRN): the signature the LLaMA forward pass uses.
void rope(Context& ctx, CommandStream& s, const BufferSlice& x, const BufferSlice& positions, uint32_t n_tokens,
          uint32_t n_heads, uint32_t head_dim, uint32_t rot_dim, float base, RopeLayout layout);

namespace detail {
// A checked rotation as the shaders take it (rope.comp, attention_decode.comp's STORE variants; the fields of
// include/rope_angle.glsl). Throws std::invalid_argument for bad parameters.
struct RopeShaderParams {
    uint32_t rot_half, layout_id;
    float log2_step, freq_scale, ext_factor, mscale, corr_low, corr_high;
};
// Only the single-position form: the fused kernels rotate with one position per token, so
// std::invalid_argument for parameters with sections.
RopeShaderParams rope_shader_params(const RopeParams& p);
}  // namespace detail

}  // namespace vkllm::ops

namespace vkllm::ref {

// The same rotation with the angle, the ramp, cos and sin in double.
void rope(float* x, const int32_t* positions, uint32_t n_tokens, const ops::RopeParams& p,
          const float* freq_factors = nullptr);
void rope(float* x, const int32_t* positions, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t rot_dim,
          float base, ops::RopeLayout layout);

}  // namespace vkllm::ref
