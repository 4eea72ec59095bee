// The vision encoder of an mmproj file on a device: its weights uploaded once, the transformer and
// the projector's matrices run with the runtime's kernels (matmuls, LayerNorm / RMSNorm, 2D RoPE,
// bidirectional attention, GELU / SwiGLU), the pixel unfolding and the token merges of the fixed-size
// types on the host (vision_stages.h).
//
// A batch of tiles (an image's slices) runs as one pass: their rows packed back to back, every
// linear layer one matmul over all of them, attention through per-row key ranges (segments), so
// that each tile sees only itself (or, in Qwen2.5-VL's windowed layers, its row's window). The plan
// (VisionGpu::plan) fixes the kernels, the row layout (vision_layout.h) and the tables of a batch
// shape once; recording and the warm-up read it.
//
//   x (T*n, e)   = unfold(tile) · patch_w^T + patch_b, then the class row, + position_embd (per tile)
//                  (Qwen: both patch kernels summed once, rows in the layout's order, no table)
//   x            = pre_ln(x)                                     (CLIP)
//   per layer:   x += attn_out(attention(q, k, v of ln1(x)))     (q, k, v, out with biases; Qwen:
//                                                                 q, k turned by each row's (y, x))
//                x += ffn_down(act(ffn_up(ln2(x))))              (Qwen2.5: act(gate) * up)
//   x            = post_ln(x)                                    (SigLIP, Qwen)
//   rows         = merge_tokens(x) per tile                      (host; Qwen: each block's 4 rows
//                                                                 read as one, on the device)
//   out (T*r, t) = the projector's matrices over rows            (device; Qwen: blocks put back in
//                                                                 the reference's order on the host)
#pragma once

#include "model/gguf/gguf.h"
#include "model/mmproj/mmproj_config.h"
#include "model/vision/vision_attention.h"
#include "model/vision/vision_layout.h"
#include "runtime/command_stream.h"
#include "runtime/context.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/linear.h"

#include <map>
#include <memory>
#include <span>
#include <vector>

namespace vkllm {

// One weight on the device: a matrix in its file type (rows of k), or an f32 vector.
struct VisionDeviceTensor {
    TensorType type = TensorType::F32;
    uint32_t rows = 0, k = 0;
    Buffer buf;
    BufferSlice slice() const { return buf.slice(); }
    bool present() const { return rows != 0; }
};

// The kernels and tables of one batch shape: `tiles` tiles of n_pos positions each, r projector rows each.
struct VisionPlan {
    uint32_t tiles = 0, n_pos = 0, n_patches = 0, out_rows = 0;
    VitRowLayout layout;
    // merge_tokens on the host between the transformer and the projector (every merge but Blocks).
    bool host_merge = true;
    // Per packed row: its tile's key range, its window's (empty without windows), and its 2D rotary
    // position (empty without VisionPositions::Rope2d).
    std::vector<int32_t> segments, window_segments, rope_positions;
    ops::LinearPlan patch;
    struct Layer {
        ops::LinearPlan q, k, v, o, gate, up, down;  // gate: ProjectorDesc::gated_ffn only
        bool gated = false, windowed = false;
        bool attn_matmuls = false;  // attention as matrix products (vision_attention.h), else the flash kernel
    };
    std::vector<Layer> layers;
    ops::AttentionParams attn{};
    VitAttentionMatmuls attn_mm;
    std::vector<ops::LinearPlan> projector;  // in the projector's order (vision_gpu.cpp)
    std::vector<PipelineDesc> pipelines(const Context& ctx) const;
};

class VisionGpu {
public:
    VisionGpu(Context& ctx, const GgufFile& file, const VisionConfig& cfg);
    ~VisionGpu();
    VisionGpu(const VisionGpu&) = delete;
    VisionGpu& operator=(const VisionGpu&) = delete;

    const VisionConfig& config() const { return cfg_; }
    // The embeddings of each tile, (tile_tokens(cfg, nx, ny), text_dim) row-major, in order. Tiles of one
    // size run in batches (as many as the device's buffers hold); std::invalid_argument for a tile the
    // encoder does not take.
    std::vector<std::vector<float>> encode(std::span<const ImageTile> tiles);
    // The plan of a batch of `tiles` tiles of nx x ny pixels on this device.
    VisionPlan plan(uint32_t tiles, uint32_t nx, uint32_t ny) const;
    // Tiles of nx x ny that one batch holds on this device (every buffer within one binding).
    uint32_t batch_tiles(uint32_t nx, uint32_t ny) const;
    // With profiling on, the batches are recorded with timestamps (recorded again when it changes)
    // and last_timings() holds the dispatches of the last encode(): `vkllm bench --profile`.
    void set_profiling(bool on);
    const std::vector<DispatchTiming>& last_timings() const { return timings_; }

private:
    struct Weights;
    struct Batch;  // buffers and recorded streams of one batch shape
    Batch& batch(uint32_t tiles, uint32_t nx, uint32_t ny);
    void run_batch(Batch& b, std::span<const ImageTile> tiles, std::vector<std::vector<float>>& out);

    Context& ctx_;
    VisionConfig cfg_;
    std::unique_ptr<Weights> w_;
    // Recorded batch shapes (tiles, nx, ny), the least recently used dropped beyond kKeptBatches.
    static constexpr size_t kKeptBatches = 4;
    std::map<std::array<uint32_t, 3>, std::unique_ptr<Batch>> batches_;
    uint64_t clock_ = 0;
    bool profiling_ = false;
    std::vector<DispatchTiming> timings_;
};

}  // namespace vkllm
