// `vkllm bench --mmproj P --image F`: the vision encoder's speed on each image, beside the text
// model's figures. Per image: decoding and preprocessing time, the device encode time (the first run a
// warm-up, then the median of the repetitions), tiles, image tokens, the encoder's tokens/s and GFLOP/s,
// and with --profile the GPU time per kernel. The encoder is timed directly (VisionGpu), not through
// VisionModel, whose cache would answer every repetition after the first.
#pragma once

#include "apps/vision_options.h"
#include "runtime/context.h"

#include <nlohmann/json.hpp>

namespace vkllm::apps {

// The "vision" object of one model's results: the mmproj, its encoder's shape and one entry per
// --image. The mmproj must match the text model's width (text_dim).
nlohmann::json bench_vision(Context& ctx, uint32_t text_dim, const VisionOptions& o, int reps, bool profile);

// The Markdown table of every result's "vision" object (nothing where none has one).
void print_vision_markdown(const nlohmann::json& results);

}  // namespace vkllm::apps
