// The host reference of the vision encoders of model/mmproj (gemma3, idefics3, mlp, qwen2vl_merger,
// qwen2.5vl_merger): one
// preprocessed tile in, the rows the text model takes in its place out. Written from the models'
// definitions in plain C++ (double accumulation, the references of runtime/ops), to check the device
// encoder and, through tests/fixtures/vision, llama.cpp's.
//
// The stages:
//   patch embedding  the tile cut into patch x patch squares, row-major over the patch grid (qwen2vl:
//                    2 x 2 blocks row-major, the block's patches row-major); each
//                    unfolded channel-major (c, then y, then x inside the patch: the order of the
//                    kernel's ggml dims [kx, ky, c, out]) and multiplied by v.patch_embd.weight as a
//                    (3 p^2 -> width) matrix, plus v.patch_embd.bias when the file has it (qwen2vl:
//                    plus the same through v.patch_embd.weight.1)
//   class embedding  (mlp) one more row, v.class_embd (see class_row below for where it goes)
//   positions        v.position_embd.weight row i added to row i; qwen2vl: q and k of each layer turned
//                    by the patch's row and column (VisionPositions::Rope2d)
//   pre-LN, layers   LayerNorm (v.pre_ln) when present, then n_layer_used pre-norm transformer layers:
//                    x += out(attn(ln1(x))), x += down(act(up(ln2(x)))), attention bidirectional over
//                    every row, q.k / sqrt(head_dim), biases on q, k, v, out, up, down (qwen2.5vl:
//                    RMSNorms, down(silu(gate(x)) * up(x)), and in the layers VisionConfig::windowed
//                    names attention within 112-pixel windows of whole 2 x 2 blocks)
//   post-LN          v.post_ln when present
//   projector        gemma3: merge x merge average pooling over the patch grid, RMSNorm (the ViT's
//                    eps) times mm.soft_emb_norm, times mm.input_projection (stored transposed);
//                    idefics3: pixel shuffle (the merge x merge block of rows at (Y, X) concatenated
//                    dy-major, then dx, then width) and mm.model.fc; mlp: the patch rows, mm.0 + bias,
//                    tanh GELU, mm.2 + bias; qwen2vl: each block's 4 rows as one, mm.0 + bias, tanh
//                    GELU, mm.2 + bias
#pragma once

#include <cstdint>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/mmproj/mmproj_config.h"

namespace vkllm {

// The row of the class embedding among the ViT's rows (mlp). CLIP's definition puts it first (position
// embedding row 0) and LLaVA projects the patch rows after it. llama.cpp build 9749 appends it after
// the patches instead (position embedding row n_patches) and still projects rows 1..n_patches: the
// first patch is dropped and the class row is projected in its place (checked against libmtmd:
// tests/fixtures/vision). Last reproduces that, so that a file gives llama.cpp's embeddings; First
// is the definition.
enum class ClassRow : uint8_t { Last, First };

// The ViT's rows after the transformer (and post-LN), [rows][n_embd]: the tile's patches (in the
// encoder's order) plus the class row (mlp). std::invalid_argument for a tile the encoder does not
// take (tile_tokens) or one whose chw is not 3 planes of it.
std::vector<float> encode_vit_cpu(const VisionConfig& cfg, const GgufFile& file, const ImageTile& tile,
                                  ClassRow class_row = ClassRow::Last);

// The projector over encode_vit_cpu's rows: [tile_tokens][text_dim] (mlp: of rows 1..n_patches).
std::vector<float> project_cpu(const VisionConfig& cfg, const GgufFile& file, const std::vector<float>& vit);

// Both: one tile's embeddings, [tile_tokens(cfg, nx, ny)][text_dim] row-major.
std::vector<float> encode_tile_cpu(const VisionConfig& cfg, const GgufFile& file, const ImageTile& tile);

}  // namespace vkllm
