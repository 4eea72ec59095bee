// T5's relative attention bias (PositionKind::RelativeBias) as the attention kernels take it: a table
// of one bias per head and relative distance, looked up once per layer on the host.
#pragma once

#include <cstdint>
#include <vector>

#include "model/arch/model_config.h"
#include "model/gguf/gguf.h"

namespace vkllm {

// T5's max distance (relative_attention_max_distance in Hugging Face's config, fixed to 128 by
// llama.cpp, which reads no key for it): every distance from it on falls in the last bucket of its
// direction, so a table over [-128, 128] covers all distances (attention clamps to it).
inline constexpr uint32_t kT5MaxDistance = 128;

// The bucket of a key at relative position d = key position - query position, as the T5 paper's
// code defines it: bidirectional, half the buckets for keys after the query; then the first half
// of a direction's buckets are exact distances 0, 1, ..., the rest logarithmically wider up to
// kT5MaxDistance. Causal (a decoder), keys after the query all land in bucket 0. Computed in
// llama.cpp's float arithmetic so that distances on a bucket boundary land where llama.cpp puts them.
uint32_t t5_relative_bucket(int32_t d, uint32_t n_buckets, bool bidirectional);

// Layer `layer`'s table for ops::attention (AttentionParams::pos_bias_range = kT5MaxDistance):
// f32 [n_heads][2 * kT5MaxDistance + 1], entry (h, d + kT5MaxDistance) = attn_rel_b[bucket(d)][h],
// from the layer's own attn_rel_b or, when it has none, layer 0's (as llama.cpp). Attention is
// bidirectional unless cfg.causal.
std::vector<float> t5_position_bias(const GgufFile& file, const ModelConfig& cfg, uint32_t layer);
// Whether `layer` has an attn_rel_b of its own (else it shares layer 0's table).
bool has_own_position_bias(const GgufFile& file, const ModelConfig& cfg, uint32_t layer);

}  // namespace vkllm
