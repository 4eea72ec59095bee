// llama.cpp mmproj files (model/mmproj/) with random weights, for `vkllm gen-model --mmproj`, the
// vision tests and the comparison with llama.cpp's libmtmd: a valid file of each supported projector
// type, F16 matrices as real files have them and f32 norms, biases and embeddings, sized to a text
// model's width.
#pragma once

#include <cstdint>
#include <string>

#include "model/gguf/gguf_writer.h"
#include "model/mmproj/mmproj_config.h"

namespace vkllm {

struct MmprojShape {
    ProjectorType type = ProjectorType::Gemma3;
    uint32_t text_dim = 64;  // the text model's embedding length
    uint32_t dim = 64, layers = 2, heads = 4, ffn = 128;  // the ViT
    uint32_t image_size = 0, patch_size = 0;  // 0: the type's small default (mmproj_default_sizes)
    // Idefics3's pixel shuffle / Gemma 3's pooling per side; 0: the type's default (Gemma 3's files have
    // no key and mean 4; Idefics3 is written with 2).
    uint32_t merge = 0;
    int32_t feature_layer = -1;  // mlp: clip.vision.feature_layer when >= 0 (else llama.cpp's default rule)
    // qwen2.5vl_merger: clip.vision.n_wa_pattern (every window_pattern-th layer attends to the whole tile)
    uint32_t window_pattern = 2;
    TensorType weight_type = TensorType::F16;
    uint64_t seed = 1;
};

// Fills the zero sizes with the type's defaults: gemma3 64 px / 8 (4 tokens), idefics3 32 px / 8
// (4 tokens), mlp 56 px / 14 (16 tokens), qwen2vl_merger and qwen2.5vl_merger 64 px / 8 (their
// tiles: any multiple of 16 px). std::invalid_argument for an impossible shape.
MmprojShape resolve_mmproj_shape(MmprojShape s);

GgufWriter make_random_mmproj(const MmprojShape& shape);
void write_random_mmproj(const std::string& path, const MmprojShape& shape);

}  // namespace vkllm
