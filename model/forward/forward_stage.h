// One device's part of the forward pass: the weights and KV pools of its layers, the buffers of a
// step (forward_buffers.h), and the command streams recorded for each step shape. A model on one
// device is one stage; a model split over devices (device_split.h) is several, owned and run in
// turn by ModelGpu, which also owns what is the model's rather than a device's: the sequences, the
// KV block pool (kv_block_pool.h) and the hand-off of the residual stream between stages.
//
// Each decoder layer is one CommandStream recorded once per step shape and re-submitted for every
// step: token positions and ids live in small host-visible buffers that the kernels read, so a
// step costs a few tiny host writes, one vkQueueSubmit of (layers + 2) command buffers per stage, a
// fence wait and a 4-byte read of the argmax. The recorders (stage_recorder.h) follow the plans of
// layer_plan.h; the start-up warm-up (pipelines()) lists the pipelines of the same plans.
#pragma once

#include "model/arch/model_config.h"
#include "model/forward/forward_buffers.h"
#include "model/forward/layer_plan.h"
#include "model/forward/memory_plan.h"
#include "model/forward/model_weights.h"
#include "model/gguf/gguf.h"
#include "runtime/command_stream.h"
#include "runtime/context.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace vkllm {

struct ForwardStats {
    uint64_t recordings = 0;  // command streams recorded (per chunk size, not per token)
    uint64_t submits = 0;  // vkQueueSubmit calls
    uint64_t tokens = 0;  // tokens evaluated
};

// Intermediate tensors of one layer, for --check and the tests: name -> values (n_tokens rows).
using LayerTensors = std::map<std::string, std::vector<float>>;
using LayerProbe = std::function<void(uint32_t layer, const LayerTensors&)>;

// Everything a layer reads besides the activations.
struct LayerState {
    LayerWeights w;  // views into the stage's weight buffers, by role
    uint32_t kv_rows = 0;  // kv_cache_rows(): rows a sequence addresses, n_ctx or a sliding window's ring
    // The pools every sequence's rows live in, (pool rows, n_kv_heads * head_dim) of the KV type,
    // for K and for V (none with MLA); a sequence's rows found through its block table.
    Buffer k_cache, v_cache;
    uint32_t pool_rows = 0;
    bool ring = false;  // kv_rows differs from n_ctx: fixed blocks per sequence, never shared
    int32_t pos_bias = -1;  // T5: the layer's position-bias table in ForwardStage::pos_bias
};

// The streams of one step shape: the embedding (or a split's hand-off in), every layer of the
// stage, the head (or the hand-off out).
struct Recording {
    std::vector<std::unique_ptr<CommandStream>> streams;
    uint64_t last_used = 0;
};

// Where a stage sits in its model: its upload progress reports from the bytes of the stages before
// it, over the total of all (0: one device, progress reported as is).
struct StagePlace {
    uint64_t before = 0, total = 0;
    bool alone = true;  // the model's only stage
};

class ForwardStage {
public:
    // Plans the stage's memory (plan_memory) and weights, uploads them while its pipelines compile,
    // and allocates its KV pools and buffers. opts.n_ctx is the context every stage of a split shares.
    ForwardStage(Context& ctx, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts, LayerRange range,
                 StagePlace where, const UploadProgress& progress);
    ForwardStage(const ForwardStage&) = delete;
    ForwardStage& operator=(const ForwardStage&) = delete;

    bool first() const { return range_.first == 0; }
    bool last() const { return range_.end() == cfg_.n_layers; }
    // Holds the model's LM head (the last stage of a model that has one).
    bool head() const { return last() && cfg_.arch->stack.lm_head; }
    KvGeometry kv_geometry() const { return {plan_.n_ctx, opts_.ubatch, opts_.kv_type}; }
    // The pipelines this stage's plans record; compiled in parallel at construction.
    std::vector<PipelineDesc> pipelines() const;
    // Whether a layer projection of this stage takes an integer-dot kernel at `shape` (the plans'
    // own choice: plan_layer's steps and expert plans).
    bool int_dot_layers(const StepShape& shape) const;

    // The streams of step shape `b`, recorded on first use; the least recently used are dropped.
    Recording& recording(const StepShape& b);
    // Submits the recording of step shape b (ids already in buffers().ids, or with b.rows_in the rows in
    // buffers().embed_in). With a probe, every layer is submitted on its own and its intermediate
    // tensors are downloaded.
    void submit(Recording& rec, const LayerProbe& probe, const StepShape& b);
    // After a StepShape::v_of_layer chunk of n rows: that layer's V projection, (n, kv_dim).
    std::vector<float> read_v(uint32_t layer, uint32_t n) const;
    // Copies KV block `from` into block `to` in every full-context layer's pools.
    void copy_block(uint32_t from, uint32_t to);
    void set_profiling(bool on);
    std::vector<DispatchTiming> last_timings() const;

    Context& context() const { return ctx_; }
    const GgufFile& file() const { return file_; }
    const ModelConfig& config() const { return cfg_; }
    const ModelOptions& options() const { return opts_; }
    LayerRange range() const { return range_; }
    const MemoryPlan& memory_plan() const { return plan_; }
    const WeightLayout& weight_layout() const { return layout_; }
    const ModelWeights& weights() const { return w_; }
    bool gpu_embed() const { return gpu_embed_; }
    const LayerState& layer(uint32_t l) const { return layers_[l]; }
    const Buffer& position_bias(size_t i) const { return pos_bias_[i]; }
    const ForwardBuffers& buffers() const { return buf_; }
    uint32_t ring_rows() const { return ring_rows_; }
    // One KV block over this stage's full-context layers, K and V.
    uint64_t kv_block_bytes() const { return kv_block_bytes_; }
    const ForwardStats& stats() const { return stats_; }

private:
    LayerTensors read_layer_tensors(uint32_t layer, uint32_t n) const;

    Context& ctx_;
    const GgufFile& file_;
    const ModelConfig& cfg_;
    ModelOptions opts_;
    LayerRange range_;
    MemoryPlan plan_;
    WeightLayout layout_;  // where every weight goes (plan_weights), read by the plans
    ModelWeights w_;
    bool gpu_embed_ = true;  // token_embd fits one binding: look rows up with get_rows on the device
    std::vector<LayerState> layers_;  // indexed by layer; only this stage's are filled
    std::vector<Buffer> pos_bias_;  // T5: layer 0's table (shared by layers without attn_rel_b), then any others
    uint32_t ring_rows_ = 0;  // kv_rows of the sliding-window layers where they differ from n_ctx (0: none)
    uint64_t kv_block_bytes_ = 0;
    ForwardBuffers buf_;

    std::map<StepShape, std::unique_ptr<Recording>> recordings_;
    uint64_t recording_clock_ = 0;  // for dropping the least recently used recording
    Recording* last_recording_ = nullptr;
    bool profiling_ = false;
    ForwardStats stats_;
};

}  // namespace vkllm
