// The recorders of a stage's command streams, one per block of a decoder: the embedding and the
// head (record_embed_head.cpp), attention, latent attention and cross-attention
// (record_attention.cpp), the dense FFN and the mixture of experts (record_ffn.cpp). Each follows
// the plan layer_plan.h made for its layer and step shape, top to bottom, and decides nothing
// itself: a new feature's code goes into its block's recorder, its choice into the plan.
#pragma once

#include "model/forward/forward_stage.h"
#include "model/forward/layer_plan.h"
#include "runtime/command_stream.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/linear.h"

namespace vkllm {

class StageRecorder {
public:
    explicit StageRecorder(const ForwardStage& stage);

    // x (n, dim) = the token (and position) embeddings of the ids, scaled and normed as the
    // architecture says; or, where the table is too large to bind, the rows the host wrote; or with
    // b.rows_in the embeddings the host wrote (unscaled).
    void record_embed(CommandStream& s, const StepShape& b) const;
    // A layer: its attention block, then its FFN block.
    void record_layer(CommandStream& s, uint32_t layer, const StepShape& b) const;
    // Only the layer's q, k, v projections (with their norm and clamp) into the activations:
    // StepShape::v_of_layer's last stream.
    void record_projections(CommandStream& s, uint32_t layer, const StepShape& b) const;
    // logits and their argmax: a decode batch's rows, or a chunk's last token (every token's with
    // ModelOptions::all_logits).
    void record_head(CommandStream& s, const StepShape& b) const;
    // An encoder-decoder's cross K and V of every layer for encoder rows [r0, r0 + m) (m at most
    // the scratch's rows), stored as the cache type: W_x · the host-written encoder output.
    void record_cross_kv(CommandStream& s, uint32_t r0, uint32_t m) const;

    // Where a layer's q, k, v, gate and up live for a plan: rows of the scratch buffers, or the fused
    // projections' vectors (qkv, gate_up) of a lone token.
    struct Activations {
        BufferSlice q, k, v, gate, up;
    };
    Activations activations(const LayerPlan& p) const;

private:
    void record_attention(CommandStream& s, uint32_t layer, const AttentionBlockPlan& p, const StepShape& b,
                          const Activations& a) const;
    // q, k, v = W · norm(x) (+ b), clamped where the model clamps: record_attention's first part.
    void record_qkv(CommandStream& s, uint32_t layer, const AttentionBlockPlan& p, uint32_t n,
                    const Activations& a) const;
    void record_mla(CommandStream& s, uint32_t layer, const AttentionBlockPlan& p, const StepShape& b) const;
    void record_cross(CommandStream& s, uint32_t layer, const CrossPlan& p, uint32_t n) const;
    void record_ffn(CommandStream& s, uint32_t layer, const FfnPlan& p, uint32_t n, const Activations& a) const;
    void record_moe(CommandStream& s, uint32_t layer, const FfnPlan& p, uint32_t n, const Activations& a) const;
    // logits [rows][n_vocab] = output · norm(x [rows][dim]) (+ softcap); `normed` holds norm(x) where
    // the norm does not ride in the matvec.
    void record_logits(CommandStream& s, const HeadPlan& h, const BufferSlice& x, const BufferSlice& normed,
                       const BufferSlice& logits) const;

    // Whether xq holds the Q8_1 form of the input a group of projections shares (Q, K and V;
    // gate and up): the first integer-dot projection of the group records the quantization, the
    // others read it. A new group (another input) starts from a fresh one.
    struct SharedQ8 {
        bool ready = false;
    };
    // y (+)= W · input(x) (+ b), as the step's plan says; an integer-dot plan reads x through xq.
    void project(CommandStream& s, const LayerWeights& L, const LinearStep& st, const BufferSlice& x,
                 const BufferSlice& y, const ops::MatvecInput& input = {}, SharedQ8* shared = nullptr) const;
    // input with xq as its Q8_1 scratch where `plan` takes the integer-dot kernel.
    ops::MatvecInput with_q8(const ops::LinearPlan& plan, ops::MatvecInput input, SharedQ8* shared) const;
    ops::MatvecInput rms_input(const DeviceTensor& norm_weight) const;  // RMSNorm fused into a matvec
    // y = norm(x) with the architecture's norm kind (and bias where it has one).
    void norm(CommandStream& s, const BufferSlice& x, const DeviceTensor& w, const DeviceTensor& b,
              const BufferSlice& y, uint32_t rows) const;
    // Entry i of a batch's attention loop: its `rows` rows of `width` floats in b, and its own region of
    // the split-K scratch (the whole scratch when there are no partials).
    static BufferSlice segment_rows(const BufferSlice& b, uint64_t width, size_t i, uint32_t rows);
    BufferSlice attention_scratch_region(size_t i) const;
    // Layer l's pool through table row `row` (with per_token, rows row.. one per token).
    ops::KvPages kv_pages(uint32_t l, uint32_t row, bool per_token) const;

    const ForwardStage& st_;
    Context& ctx_;
    const ModelConfig& cfg_;
    const ModelOptions& opts_;
    const ModelWeights& w_;
    const ForwardBuffers& b_;
};

}  // namespace vkllm
