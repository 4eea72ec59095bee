// The decoder forward pass on the device, for every architecture model/arch describes. Three
// layers of decision, each made once: the tensor schema (model/arch/tensor_schema.h) says which
// tensors a model reads, the weight layout (model_weights.h) where they live and which fuse, and the
// layer plans (layer_plan.h) which kernels and folds each recording uses. The pieces:
//   memory_plan.h     what a model needs on a device, and the context that fits
//   forward_stage.h   one device's layers, KV pools, buffers and recorded streams
//   stage_recorder.h  the recorders of each block (embedding, attention, FFN, head)
//   kv_block_pool.h   which KV blocks each sequence holds (no device)
// ModelGpu owns the stages (one per device; a split model has several, run in turn with the
// residual stream handed from one device to the next through the host), the sequences and their
// KV blocks, and evaluation: it writes a step's ids, positions and block tables, submits, and
// reads the logits back. Generating a token costs two tiny host writes, one vkQueueSubmit per
// stage, a fence wait and a 4-byte read of the argmax (see stats()).
#pragma once

#include "model/gguf/gguf.h"
#include "model/arch/model_config.h"
#include "model/forward/forward_stage.h"
#include "model/forward/kv_block_pool.h"
#include "model/forward/layer_plan.h"
#include "model/forward/memory_plan.h"
#include "model/forward/model_weights.h"
#include "model/forward/sequence_model.h"
#include "runtime/context.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace vkllm {

// A bidirectional model (ModelConfig::causal false) attends over one whole input: it must start at
// position 0 (std::logic_error) and fit one ubatch (ContextFullError, naming both sizes). Nothing
// for causal models.
void check_bidirectional(const ModelConfig& cfg, uint32_t n_past, size_t n_tokens, uint32_t ubatch);

// One device's part of a model split over several (model/forward/device_split.h plans them).
struct ModelStage {
    Context* ctx = nullptr;
    LayerRange layers;  // contiguous; the first stage's starts at 0, the last's ends at the last layer
};

// A model split over devices is refused unless it is decoder-only with an LM head: ModelConfigError
// naming the architecture. Nothing for one device.
void check_splittable(const ModelConfig& cfg, size_t n_devices);

// A sequence's K/V rows as the cache holds them, in every layer: what CacheBlend's document store
// keeps of a document, to put it into another sequence at another position (ModelGpu::import_kv).
struct KvRows {
    uint32_t first = 0, n = 0;  // the positions the rows were computed at
    ops::KvType type = ops::KvType::F16;
    uint64_t row_bytes = 0;  // one row of one layer's K (and of its V)
    // Per layer, every stage's in layer order: n rows of K, and of V (empty where V lives in K).
    std::vector<std::vector<uint8_t>> k, v;
    uint64_t bytes() const;
};

class ModelGpu final : public SequenceModel {
public:
    const GgufFile& file() const { return file_; }
    // Every layer on one device.
    ModelGpu(Context& ctx, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts,
             const UploadProgress& progress = {});
    // A model split over devices: each stage holds its layers' weights and KV cache on its device,
    // the first the embedding, the last the output head. A step runs the stages in turn, and
    // between two of them the residual stream's rows of the step (n x dim floats) go from one
    // device to the next through the host. Every stage gets the same context: opts.n_ctx, or the
    // largest that every stage can hold. The interface below is the same as on one device.
    ModelGpu(std::span<const ModelStage> stages, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts,
             const UploadProgress& progress = {});
    ~ModelGpu() override;
    ModelGpu(const ModelGpu&) = delete;
    ModelGpu& operator=(const ModelGpu&) = delete;

    const ModelConfig& config() const override { return cfg_; }
    // The token embedding on the device (absent where this stage does not hold it): what
    // ModelOptions::shared_token_embd lets another model of the same file read.
    const DeviceTensor& token_embedding() const { return stages_.front()->weights().token_embd; }
    // The first stage's (all of the model's on one device); stages() has every stage's.
    const MemoryPlan& memory_plan() const { return stages_.front()->memory_plan(); }
    const WeightLayout& weight_layout() const { return stages_.front()->weight_layout(); }
    struct StageInfo {
        const DeviceCaps* caps = nullptr;
        LayerRange layers;
        const MemoryPlan* memory = nullptr;
        const WeightLayout* weights = nullptr;  // its layers' places (the others empty)
    };
    std::vector<StageInfo> stages() const;  // one entry on one device
    uint32_t n_ctx() const override { return memory_plan().n_ctx; }  // per sequence
    uint32_t n_seq() const override { return opts_.n_seq; }
    uint32_t ubatch() const override { return opts_.ubatch; }
    uint32_t draft_rows() const override { return opts_.draft_rows; }
    const ModelOptions& options() const { return opts_; }  // as loaded (n_ctx: as asked, 0 for the default)
    // The single-sequence interface (vkllm run, perplexity, bench) works on sequence 0.
    uint32_t n_past() const { return n_past_[0]; }
    void reset() { reset(0); }  // forget the conversation: its blocks go back to the pool

    // --- several sequences (ModelOptions::n_seq). The KV cache is paged: per layer one pool of blocks
    // of kKvBlockRows rows, a sequence holding blocks as it grows (up to n_ctx rows) and letting them go
    // when truncated or reset; sequences that share a prefix share its blocks (share_prefix).
    uint32_t n_past(uint32_t seq) const override;
    void reset(uint32_t seq) override;
    // Keeps the first n tokens of sequence `seq` (n <= n_past(seq)) so that a prompt sharing them
    // evaluates only the rest. False, changing nothing, when a sliding-window layer's ring has already
    // overwritten keys that a token after n would need: the caller starts over with reset().
    bool truncate(uint32_t seq, uint32_t n) override;
    // Sequence `dst` starts from the first n tokens of sequence `src` (n <= n_past(src); a system
    // prompt every slot shares) without evaluating them: it forgets what it held and shares src's KV
    // blocks holding them, n_past(dst) = n. Either sequence copies a shared block before it writes
    // into it (copy on write), so both continue as if each had evaluated the tokens itself. False,
    // changing nothing, for a model with sliding-window layers (their rings are per sequence).
    bool share_prefix(uint32_t dst, uint32_t src, uint32_t n) override;
    // The paged KV cache's use, over every stage.
    KvUsage kv_usage() const override;
    // Free blocks sequence `seq` takes to add n tokens: new blocks, and copies of shared ones it would
    // write into. A caller that makes this many free first never sees the pool run out.
    uint32_t kv_blocks_needed(uint32_t seq, uint32_t n) const override;
    // eval() for sequence `seq`: its tokens at positions n_past(seq).., in chunks of ubatch; the last
    // token's logits are row 0 afterwards.
    void eval(uint32_t seq, std::span<const int32_t> tokens) override;
    // Embedding rows (n, dim) of sequence `seq` at positions n_past(seq)..: what eval() would do with n
    // tokens whose looked-up (and scaled) embeddings were these rows (SequenceModel's), at the positions
    // of `grid` for an M-RoPE model.
    void eval_embeddings(uint32_t seq, std::span<const float> rows, bool bidirectional, ImageGrid grid) override;
    // Tokens at given, strictly ascending positions, in chunks of ubatch: those inside what sequence
    // `seq` holds (< n_past(seq)) replace their positions' K/V in every layer; those after it follow
    // on from n_past(seq) (n, n + 1, ...) and the sequence grows by them. Each attends to the keys at
    // or before its own position as the cache holds them then; the last token's logits are row 0.
    // CacheBlend's selective recompute, fused with the rest of the prompt: a document's cached K/V
    // reused where it now stands, a few of its tokens evaluated again there, then the question.
    // Refused (std::invalid_argument) for models whose positions are not one per token (M-RoPE), that
    // keep sliding-window rings (a ring no longer holds early positions) or that are not causal;
    // ContextFullError past the context.
    void eval_at(uint32_t seq, std::span<const int32_t> tokens, std::span<const uint32_t> positions);
    // CacheBlend's selection: tokens at positions inside sequence `seq` (as eval_at) through layers
    // 0..layer-1, whose K/V they replace, and layer `layer`'s V projection, returned (n, kv_dim); the
    // layers from `layer` on and the last logits are left as they were (hidden_states() is not
    // valid after it). One submission per ubatch.
    // Also refused for latent attention, a bad layer, or one not on a split's first device.
    std::vector<float> eval_v(uint32_t seq, std::span<const int32_t> tokens, std::span<const uint32_t> positions,
                              uint32_t layer);
    // Rows [first, first + n) of sequence `seq`'s K/V in every layer, read back to the host.
    // std::invalid_argument for rows the sequence does not hold, or a model with sliding-window rings.
    KvRows export_kv(uint32_t seq, uint32_t first, uint32_t n) const;
    // Appends `rows` to sequence `seq` at positions n_past(seq).. as if they had been computed there:
    // each layer's K rotated from the rows' positions to the new ones (RoPE scores depend only on
    // the distance between positions; position-free K, as with ALiBi, is kept as it is). The rows
    // never saw what precedes them here: eval_at evaluates some of them again (CacheBlend).
    // std::invalid_argument where that cannot be done exactly enough: another KV type or shape,
    // absolute (learned) positions, M-RoPE, YaRN's magnitude scaling, a Q8_0 cache that must
    // rotate, latent attention, sliding-window rings. ContextFullError when they do not fit.
    void import_kv(uint32_t seq, const KvRows& rows);
    // Why rows cannot be moved into this model's sequences ("" when they can): sliding-window
    // rings, absolute positions or an encoder, M-RoPE, latent attention; with `rotate` (RoPE'd K
    // moved to another position) also a Q8_0 cache and YaRN. import_kv's refusals, and what
    // CacheBlend decides once per model (engine::blend_refusal).
    std::string kv_move_refusal(bool rotate) const;
    // Why `rows` do not fit this model's cache ("" when they do): another layer count, KV type or
    // row size, or layers cut short. import_kv's, and the document store's check on what it reads.
    std::string kv_rows_mismatch(const KvRows& rows) const;
    // Tokens of several sequences in one forward pass and one submission; logits row i belongs to
    // batch[i]. A sequence has one row (its next token) or, for speculative decoding, a run of up to
    // 1 + ModelOptions::draft_rows adjacent rows (its next token and the drafts after it, at
    // consecutive positions). Every row goes through the same kernels with the same reduction order
    // whatever the batch (linear layers as matvec in groups of <= 8 rows, attention and the K/V
    // store one dispatch for all rows, each through its sequence's block table with a lone token's
    // plan; with a run, attention row by row), so a row's logits are those a lone token at its
    // position would get: verifying drafts changes nothing that plain decoding computes.
    void decode(std::span<const SeqToken> batch) override;
    // Rows [0, rows) of the last logits: rows = 1 after eval(), the batch size after decode().
    void read_logits(uint32_t rows, float* dst) const override;
    // The argmax of each of those rows (computed on the device), or -1 for a row whose best logit is
    // NaN or Inf (the caller ends that sequence alone; argmax() throws instead).
    std::vector<int32_t> argmax_rows(uint32_t rows) const override;

    // Evaluates tokens at positions n_past().., in chunks of at most ubatch; afterwards the logits
    // of the last token (and their argmax) are on the device. Throws ContextFullError when the
    // tokens do not fit in the remaining context. With a probe, every layer is submitted on its
    // own and its intermediate tensors are downloaded (slow; for checking only).
    void eval(std::span<const int32_t> tokens, const LayerProbe& probe = {});
    int32_t argmax() const;  // of the last logits; reads 4 bytes; NonFiniteError (see .cpp)
    std::vector<float> logits() const;  // reads back the last logits (n_vocab floats); logic_error without an LM head
    // The hidden states of every token of the last chunk eval() ran, (n, dim): an encoder's last
    // layer output, or a decoder's after its output norm (what its LM head reads, computed on the
    // host from the downloaded rows). Pooling makes embeddings of them (model/embedding.h).
    std::vector<float> hidden_states() const;

    // Bidirectional models (encoders): several inputs, each from position 0, in one forward pass:
    // their tokens packed back to back, each attending to its own only. Every input non-empty, all
    // of them together at most ubatch tokens (std::invalid_argument otherwise). hidden_states() then
    // holds their rows in order. Replaces whatever the model held (no reset() needed).
    void eval_packed(std::span<const std::span<const int32_t>> inputs);

    // --- encoder-decoder models (AttentionDesc::cross_attention: T5's decoder)
    // The encoder's output for the next generation: `states` (n_rows, dim), n_rows at most n_ctx().
    // Projects it into every layer's cross-attention K and V (one submission) and forgets the
    // decoder's tokens (reset()). eval() and decode() need it first (std::logic_error otherwise).
    void set_encoder_output(std::span<const float> states, uint32_t n_rows);
    uint32_t encoder_rows() const { return n_enc_; }

    // Rows (n, n_vocab) of logits for tokens [first, first + n) of one eval_all_logits() call. The
    // span points into mapped memory and is valid only during the call.
    using LogitsSink = std::function<void(uint32_t first, std::span<const float> rows)>;
    // eval() that also hands the logits of every token to `sink`, one ubatch at a time. Needs
    // ModelOptions::all_logits (std::logic_error otherwise).
    void eval_all_logits(std::span<const int32_t> tokens, const LogitsSink& sink);

    ForwardStats stats() const;  // of every stage
    // Profiling: recordings are re-made with a timestamp around every dispatch; after eval() the
    // timings of the last chunk's streams are in last_timings(). Off by default (timestamps cost).
    void set_profiling(bool on);
    std::vector<DispatchTiming> last_timings() const;
    // Whether a lone token's projections take the integer-dot matvec (their input quantized to 8
    // bits): the device then differs from the f32 host reference by that quantization (--check).
    bool int_dot_matvecs() const;
    // Whether a full chunk's (ubatch tokens') projections take the integer-dot matmul: its
    // arithmetic roofline is then the packed dot's rate, not f32 FMA's (vkllm bench).
    bool int_dot_matmuls() const;

private:
    ForwardStage& head_stage() const { return *stages_.back(); }
    // The first stage's buffers: where a step's ids, positions and block tables are written.
    const ForwardBuffers& step_inputs() const { return stages_.front()->buffers(); }
    // Runs the stages in turn for step shape b (the first stage's ids, positions and tables already
    // written): each submits its streams, then hands its x rows, the positions and the tables to
    // the next.
    void run(const StepShape& b, const LayerProbe& probe);
    void check_tokens(std::span<const int32_t> tokens) const;
    static void check_seq(uint32_t seq, uint32_t n_seq);  // std::out_of_range for a sequence it lacks
    // eval_at's refusals: positions that are not ascending inside the sequence, or a model it cannot serve.
    // grows: positions may go on past the sequence's end (eval_at), each the next one.
    void check_eval_at(uint32_t seq, size_t n_tokens, std::span<const uint32_t> positions, bool grows) const;
    void require_head(const char* what) const;  // std::logic_error for a model without an LM head
    // What one evaluation takes in: token ids, or embedding rows (n, dim).
    struct StepInput {
        std::span<const int32_t> tokens;
        std::span<const uint32_t> at;  // eval_at's positions (empty: n_past(seq) on)
        std::optional<uint32_t> v_of_layer;  // eval_v: stop at this layer's V, appended to *v_out
        std::vector<float>* v_out = nullptr;
        std::span<const float> rows;
        bool bidirectional = false;  // the rows see each other (StepShape::bidirectional)
        ImageGrid grid;  // the rows are this image's (M-RoPE positions)
    };
    void eval_impl(uint32_t seq, const StepInput& in, const LayerProbe& probe, const LogitsSink& sink);
    // Gives sequence `seq` KV blocks for its first `rows` rows; rows from `write_from` on are about
    // to be written (a shared block among them is copied first, on every stage).
    void hold_rows(uint32_t seq, uint32_t rows, uint32_t write_from = UINT32_MAX);
    // Row `row` of the first stage's block tables for sequence `seq`.
    void write_tables(uint32_t row, uint32_t seq);

    const GgufFile& file_;
    ModelConfig cfg_;
    ModelOptions opts_;
    std::vector<std::unique_ptr<ForwardStage>> stages_;  // in layer order; the first embeds, the last has the head
    // Full-context layers' blocks, handed out as sequences grow; the tables reach the other stages
    // with the positions.
    KvBlockPool pool_;
    std::vector<uint32_t> n_past_;  // per sequence
    // Per sequence, the RoPE position of each KV row (images under M-RoPE; the row itself otherwise),
    // written into the step's rel_pos, ModelConfig::pos_width() components per token.
    std::vector<RopePositions> rope_pos_;
    uint32_t n_enc_ = 0;  // encoder rows of an encoder-decoder's cross-attention
    uint32_t last_rows_ = 1;  // logits rows of the last evaluation
    uint32_t last_chunk_ = 0;  // tokens of the last chunk eval() ran
};

}  // namespace vkllm
