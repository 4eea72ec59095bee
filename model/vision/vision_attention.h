// The ViT's attention as matrix products, where that is faster than the flash-attention kernel: on
// devices whose matmul is the broadcast kernel (CPU drivers such as lavapipe), the flash kernel's
// shared-memory tiles run at about a quarter of the matmul's rate, and a tile's attention over its
// few hundred rows fits in memory whole. Per tile and head h (d = head_dim, n = the tile's rows):
//
//   V^T (e, n)      = Wv · xn^T                     one matmul per tile, Wv in f32 as its X
//   Q_h, K_h (n, d) = the head's columns of q, k     (copy_cols)
//   S_h (n, n)      = Q_h · K_h^T                    K_h as the matmul's weight rows
//   P_h             = softmax(S_h / sqrt(d))         all heads' rows in one call
//   O_h (n, d)      = P_h · (V^T rows h d ..)^T      V^T's rows as the weight rows
//   att[:, h d ..]  = O_h                            (copy_cols)
//
// V's bias is not in V^T: the softmax's rows sum to 1, so P (V + 1 bv^T) = P V + 1 bv^T, and it is
// folded into the out projection's bias instead (bo + Wo bv, made when the weights are uploaded).
// A layer with window attention (Qwen2.5-VL) keeps the flash kernel and its segments.
#pragma once

#include "model/mmproj/mmproj_config.h"
#include "runtime/context.h"
#include "runtime/ops/linear.h"

#include <cstdint>
#include <vector>

namespace vkllm {

// The matmuls of one batch shape; `on` false: the flash kernel runs every layer.
struct VitAttentionMatmuls {
    bool on = false;
    ops::LinearPlan vt, scores, values;  // V^T of a tile, S_h, O_h
    std::vector<PipelineDesc> pipelines() const;
};

// Whether this device takes the matmul form at all (its dense matmul is the broadcast kernel): the
// weights it needs (Wv in f32, the folded bias) are uploaded only then.
bool vit_attention_by_matmuls(const DeviceCaps& caps);

// The plan for tiles of n_pos rows: off unless vit_attention_by_matmuls and every head's scores of a
// tile fit one binding (and 64 MiB).
VitAttentionMatmuls plan_vit_attention(const DeviceCaps& caps, const VisionConfig& cfg, uint32_t n_pos);

// Scratch of the matmul form for tiles of n_pos rows (bytes): per-head Q and K, V^T, the scores, O.
struct VitAttentionScratch {
    Buffer qh, kh, vt, scores, oh;
};
VitAttentionScratch make_vit_attention_scratch(Context& ctx, const VisionConfig& cfg, uint32_t n_pos);

// Records the attention of `tiles` tiles of n_pos rows: q, k (after RoPE) and xn (the layer's normed
// input) (tiles * n_pos, e), wv_f32 (e, e); writes att (tiles * n_pos, e) without V's bias.
void record_vit_attention(Context& ctx, CommandStream& s, const VitAttentionMatmuls& p, const VisionConfig& cfg,
                          uint32_t tiles, uint32_t n_pos, const BufferSlice& q, const BufferSlice& k,
                          const BufferSlice& xn, const BufferSlice& wv_f32, const BufferSlice& att,
                          const VitAttentionScratch& scratch);

}  // namespace vkllm
