// llama.cpp's multimodal projector files ("mmproj", read by its libmtmd): the vision encoder's
// hyperparameters and tensors, as data.
//
// An mmproj file is a GGUF holding a vision transformer (keys clip.vision.*, tensors v.*) and a
// projector (tensors mm.*) that turns the encoder's output into rows of the text model's width. What
// differs between projector types (clip.projector_type) is one row of a table (ProjectorDesc); the
// config reads the file once, checks every key and tensor against that row, and everything else (the
// host reference model/vision/vision_cpu.h, the device encoder, the prompt layout image_prompt.h,
// the random files of model/testgen/random_mmproj.h) reads the resulting VisionConfig.
//
// Supported: "gemma3" (Gemma 3: SigLIP, average pooling, RMS soft-embedding norm, input projection),
// "idefics3" (SmolVLM: SigLIP, pixel shuffle, one linear), "mlp" (LLaVA-1.5: CLIP with a class
// embedding and pre-LN, the features of llama.cpp's feature layer, linear-GELU-linear),
// "qwen2vl_merger" (Qwen2-VL: two patch kernels, 2D rotary positions, any tile of whole 2 x 2 patch
// blocks, the merger's LayerNorm and linear-GELU-linear over each block), "qwen2.5vl_merger"
// (Qwen2.5-VL: the same with RMSNorms, a gated SiLU feed-forward and window attention). Any other type
// llama.cpp knows, and audio-only files, are refused by name.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/image/image_preprocess.h"

namespace vkllm {

// Every error about an mmproj file: "<file>: <key or tensor>: <reason>".
class MmprojError : public GgufError {
public:
    using GgufError::GgufError;
};

enum class ProjectorType : uint8_t {
    Gemma3,  // "gemma3"
    Idefics3,  // "idefics3"
    Mlp,  // "mlp" (LLaVA-1.5)
    Qwen2Vl,  // "qwen2vl_merger" (Qwen2-VL)
    Qwen25Vl,  // "qwen2.5vl_merger" (Qwen2.5-VL)
};

// The ViT's norms (every layer's ln1 / ln2, pre-LN and post-LN), all with the file's eps.
enum class VisionNorm : uint8_t {
    Layer,  // LayerNorm with weight and bias
    Rms,  // RMSNorm, weight only (Qwen2.5-VL)
};

// The activation of the ViT's feed-forward, as llama.cpp chooses it: clip.use_gelu -> tanh GELU,
// clip.use_silu -> SiLU, neither -> quick GELU (x * sigmoid(1.702 x)); both -> an error.
enum class VisionActivation : uint8_t { Gelu, Silu, GeluQuick };

// How the encoder's patch rows become fewer, wider or projected rows before the projector's matrices.
enum class TokenMerge : uint8_t {
    None,  // one output row per patch (LLaVA)
    AvgPool,  // merge x merge average pooling over the patch grid (Gemma 3)
    PixelShuffle,  // merge x merge neighbouring patches concatenated into one row (Idefics3)
    // The encoder's rows are the patches block by block (merge x merge blocks row-major, the patches of
    // a block row-major); each block's rows concatenated into one (Qwen2-VL's merger)
    Blocks,
};

// Where the ViT's position information comes from.
enum class VisionPositions : uint8_t {
    Learned,  // v.position_embd rows added to the patch rows (a fixed tile size)
    // Qwen2-VL's 2D rotary embedding of q and k (ggml's vision M-RoPE, base 10000): in each head of d
    // values, the pair (j, j + d/2) rotated by the patch's row y times base^(-4j/d) for j < d/4, and
    // by its column x times base^(-4(j - d/4)/d) for d/4 <= j < d/2
    Rope2d,
};

// Whether a tensor must be in the file, is used when it is, or is not part of the type.
enum class Presence : uint8_t { Absent, Optional, Required };

// The widths a projector tensor's dims are given in.
enum class ProjDim : uint8_t {
    None,  // (a vector's missing second dim)
    Vision,  // the ViT width (clip.vision.embedding_length)
    Merged,  // the ViT width times merge^2 (a pixel-shuffled row)
    Text,  // the text model's width: the embeddings' row length
};

struct ProjTensorDesc {
    std::string_view name;
    ProjDim ne0, ne1;  // ggml dims: ne0 the row length
    bool matrix;  // a weight matrix (F16 / F32 / quantized); otherwise an f32 vector
    // The matrix is stored as the transpose of the one applied (ne0 the output width): llama.cpp
    // multiplies by its transpose (Gemma 3's input projection).
    bool transposed = false;
};

// One row per projector type: everything that differs between them.
struct ProjectorDesc {
    ProjectorType type;
    std::string_view name;  // clip.projector_type
    PreprocessKind preprocess;
    // What real files of the type declare (clip.use_gelu / use_silu); the loader reads the keys.
    VisionActivation file_activation;
    bool class_embedding;  // v.class_embd is part of the encoder's input (required)
    Presence patch_bias, pre_ln, post_ln;  // v.patch_embd.bias, v.pre_ln.*, v.post_ln.*
    TokenMerge merge;
    std::string_view merge_key;  // the key of the merge factor (clip.vision.projector.scale_factor, ...)
    uint32_t default_merge;  // when merge_key is absent; 0: the key is required
    // The layer count run: true for LLaVA's rule (clip.vision.feature_layer, else all but the last layer).
    bool feature_layer;
    bool fixed_size;  // every tile is image_size x image_size (learned absolute positions, no resizing of them)
    VisionPositions positions;
    // A second patch kernel, v.patch_embd.weight.1 (Qwen2-VL's temporal pair: a still image goes through
    // both and the results are added)
    bool two_patch_kernels;
    VisionNorm norm;
    bool gated_ffn;  // ffn_gate (+ bias): down(act(gate(x)) * up(x)), SiLU for Qwen2.5-VL
    // Qwen2.5-VL: attention within windows of window_px square (in 2 x 2 blocks of the tile, from its
    // top left) except in every wa_pattern-th layer (clip.vision.n_wa_pattern), which sees the tile
    bool window_attention;
    std::span<const ProjTensorDesc> projector;  // mm.* tensors, all required
    // The text model reads an image's rows seeing each other, in one chunk (llama.cpp's
    // mtmd_decode_use_non_causal: Gemma 3).
    bool bidirectional = false;
};

std::span<const ProjectorDesc> projector_table();
const ProjectorDesc& projector_desc(ProjectorType t);
std::string supported_projectors_list();  // "gemma3, idefics3, mlp, qwen2vl_merger, qwen2.5vl_merger"
const ProjectorDesc* find_projector(std::string_view name);  // by clip.projector_type; nullptr if unsupported

// A tensor of the file as the config expects it (names and ggml dims), in file order for writers.
struct VisionTensor {
    std::string name;
    std::vector<uint64_t> ne;
    bool matrix = false;  // F16 / F32 / quantized weights; otherwise f32
    bool required = true;
};

struct VisionConfig {
    std::string file;  // the file's name, for messages
    ProjectorType type = ProjectorType::Gemma3;
    const ProjectorDesc* desc = nullptr;

    uint32_t image_size = 0, patch_size = 0;
    uint32_t n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, head_dim = 0;
    float eps = 1e-6f;  // every LayerNorm of the ViT, and Gemma 3's soft-embedding RMSNorm
    uint32_t projection_dim = 0;  // clip.vision.projection_dim (informative)
    std::array<float, 3> image_mean{}, image_std{};
    VisionActivation activation = VisionActivation::GeluQuick;
    uint32_t n_layer_used = 0;  // layers run (LLaVA: the feature layer); the others are in the file, unused
    uint32_t merge = 1;  // TokenMerge factor per side (1 for None)
    uint32_t preproc_image_size = 0;  // clip.vision.preproc_image_size (Idefics3), 0 when absent
    uint32_t text_dim = 0;  // the projector's output width (checked against the text model: check_text_dim)
    float rope_base = 0;  // VisionPositions::Rope2d's base (llama.cpp's 10000); 0 otherwise
    // ProjectorDesc::window_attention: layer l attends within windows unless (l + 1) % wa_pattern == 0
    // (wa_pattern 0: no windows); windows of window_px pixels (llama.cpp's 112), whole merged blocks.
    uint32_t wa_pattern = 0, window_px = 0;
    bool windowed(uint32_t layer) const { return wa_pattern > 0 && (layer + 1) % wa_pattern != 0; }
    bool has_patch_bias = false, has_pre_ln = false, has_post_ln = false, has_class_embedding = false;

    uint32_t patches_per_side() const { return image_size / patch_size; }
    uint32_t n_patches() const { return patches_per_side() * patches_per_side(); }
    // Rows of the transformer for an image_size tile (patches, plus the class embedding's row); the
    // rows of v.position_embd.weight.
    uint32_t n_positions() const { return n_patches() + (has_class_embedding ? 1 : 0); }

    // Reads and validates an mmproj file; MmprojError naming the file and key or tensor otherwise.
    static VisionConfig from_gguf(const GgufFile& file);
};

// The tensors the encoder reads (the ones present among the optional ones, or all of them with
// include_optional), with their expected dims. The loader checks the file against this list; the
// random writer writes it.
std::vector<VisionTensor> vision_tensors(const VisionConfig& cfg, bool include_optional = false);

// The ViT's per-layer tensor name: "v.blk.<layer>.<suffix>" (suffix e.g. "attn_q.weight").
std::string vit_tensor_name(uint32_t layer, std::string_view suffix);

// MmprojError unless the projector's rows are n_embd wide (the text model's embedding_length).
void check_text_dim(const VisionConfig& cfg, uint32_t n_embd);

// How model/image must prepare an image for this encoder.
PreprocessSpec preprocess_spec(const VisionConfig& cfg);

// The embedding rows of one tile of nx x ny pixels as the grid they come in (row-major, cols per
// row): an M-RoPE text model (Qwen2-VL) places them by it. std::invalid_argument for a tile the
// encoder does not take (a fixed-size type's tile not image_size square, sides not multiples of the
// patch, or for TokenMerge::Blocks of patch x merge).
struct TileGrid {
    uint32_t cols = 0, rows = 0;
    uint32_t tokens() const { return cols * rows; }
};
TileGrid tile_grid(const VisionConfig& cfg, uint32_t nx, uint32_t ny);
// tile_grid(...).tokens(): the rows the tile yields.
uint32_t tile_tokens(const VisionConfig& cfg, uint32_t nx, uint32_t ny);

}  // namespace vkllm
