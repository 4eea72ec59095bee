// The decoder forward pass on the device, for every architecture model/arch describes. Three
// layers of decision, each made once: the tensor schema (model/arch/tensor_schema.h) says which
// tensors a model reads, the weight layout (model_weights.h) where they live and which fuse, and the
// layer plans (layer_plan.h) which kernels and folds each recording uses; the recorders here follow
// the plans top to bottom, and the start-up warm-up lists the pipelines of the same plans.
//
// Each decoder layer is one CommandStream recorded once per chunk size and re-submitted for every
// step: token positions and ids live in small host-visible buffers that the kernels read, so
// generating a token costs two tiny host writes, one vkQueueSubmit of (n_layers + 2) command
// buffers, a fence wait and a 4-byte read of the argmax. No descriptor updates, no allocations and
// no re-recording per generated token (see stats()). A model split over devices (ModelStage) does the
// same on each device in turn, one submission each.
#pragma once

#include "model/gguf.h"
#include "model/arch/model_config.h"
#include "model/forward/layer_plan.h"
#include "model/forward/model_weights.h"
#include "runtime/context.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/op_types.h"

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace vkllm {

struct ModelOptions {
    uint32_t n_ctx = 0;     // KV cache rows; 0 = the model's context, capped by device memory
    uint32_t ubatch = 64;   // prompt tokens per forward chunk (scratch is sized by this)
    ops::KvType kv_type = ops::KvType::F16;
    // Also compute the logits of every token of a ubatch into an (ubatch, n_vocab) buffer, for
    // perplexity (eval_all_logits). Off by default: generation needs only the last token's.
    bool all_logits = false;
    // Sequences (a server's slots), each up to n_ctx rows. decode() advances up to n_seq of them by
    // one token in one forward pass.
    uint32_t n_seq = 1;
    // Rows (tokens) of each full-context layer's KV pool, shared by all sequences: the memory a server
    // is given, whatever its slots and context. 0: n_seq x n_ctx (no sequence ever waits for a block).
    // A sequence still holds at most n_ctx rows; n_ctx defaults to min(the model's, kv_budget).
    uint32_t kv_budget = 0;
    // A token embedding already on this model's device (T5's decoder's, for its encoder), read
    // instead of uploading the file's again; it must outlive this model. Null: the model's own.
    const DeviceTensor* shared_token_embd = nullptr;
};

// Device memory a model needs, computed before anything is allocated.
struct MemoryPlan {
    uint32_t n_ctx = 0;
    uint64_t weights = 0, kv_cache = 0, scratch = 0;  // scratch includes attention_scratch
    // What the KV cache would take if sliding-window layers kept every row (the naive cache), for
    // reporting; equal to kv_cache for models without windows.
    uint64_t kv_cache_full = 0;
    uint64_t attention_scratch = 0;  // split-K partials of decode attention at n_ctx
    // (ubatch, n_vocab) f32 with ModelOptions::all_logits, else 0. Counted in scratch, so checked
    // against the device-local heap although it lives in host-readable memory: conservative on
    // discrete GPUs, exact on unified-memory devices (phones, CPU drivers).
    uint64_t all_logits = 0;
    uint64_t available = 0;  // device-local heap bytes
    uint32_t n_seq = 1;      // kv_cache and kv_cache_full cover all sequences
    uint32_t kv_budget = 0;  // rows of a full-context layer's pool (ModelOptions::kv_budget, or n_seq x n_ctx in blocks)
    uint64_t total() const { return weights + kv_cache + scratch; }
};

// "12.3 MiB": sizes as plan_memory's errors (and the split plan's) name them.
std::string format_mib(uint64_t bytes);

// Resolves the default context and checks the fit; throws DeviceLimitError naming every size when
// the model cannot fit, or when a requested --ctx cannot, or when one ubatch's logits (all_logits)
// would exceed maxStorageBufferRange.
// `layers`: the range one device would hold (its weights, KV cache and scratch; the logits, and
// their check, only with the last layer); the default, all of them.
MemoryPlan plan_memory(const DeviceCaps& caps, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts,
                       LayerRange layers = {});

class ContextFullError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The last logits hold NaN or Inf (NaN/Inf weights, or an overflow): raised instead of decoding garbage.
class NonFiniteError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};
// A bidirectional model (ModelConfig::causal false) attends over one whole input: it must start at
// position 0 (std::logic_error) and fit one ubatch (ContextFullError, naming both sizes). Nothing
// for causal models.
void check_bidirectional(const ModelConfig& cfg, uint32_t n_past, size_t n_tokens, uint32_t ubatch);

// Its message: the logit `value` of `token` (token < 0: not known) for the token at `position`
// (the n_past of the evaluation) is NaN or Inf.
std::string non_finite_message(float value, int64_t token, uint32_t position);

struct ForwardStats {
    uint64_t recordings = 0;   // command streams recorded (per chunk size, not per token)
    uint64_t submits = 0;      // vkQueueSubmit calls
    uint64_t tokens = 0;       // tokens evaluated
};

// Intermediate tensors of one layer, for --check and the tests: name -> values (n_tokens rows).
using LayerTensors = std::map<std::string, std::vector<float>>;
using LayerProbe = std::function<void(uint32_t layer, const LayerTensors&)>;

// One token of one sequence, for a multi-sequence decode step.
struct SeqToken {
    uint32_t seq = 0;
    int32_t token = 0;
};

// One device's part of a model split over several (model/forward/device_split.h plans them).
struct ModelStage {
    Context* ctx = nullptr;
    LayerRange layers;  // contiguous; the first stage's starts at 0, the last's ends at the last layer
};

// A model split over devices is refused unless it is decoder-only with an LM head: ModelConfigError
// naming the architecture. Nothing for one device.
void check_splittable(const ModelConfig& cfg, size_t n_devices);

class ModelGpu {
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
    ~ModelGpu();
    ModelGpu(const ModelGpu&) = delete;
    ModelGpu& operator=(const ModelGpu&) = delete;

    const ModelConfig& config() const { return cfg_; }
    // The token embedding on the device (absent where this stage does not hold it): what
    // ModelOptions::shared_token_embd lets another model of the same file read.
    const DeviceTensor& token_embedding() const { return w_.token_embd; }
    // The first stage's (all of the model's on one device); stages() has every stage's.
    const MemoryPlan& memory_plan() const { return plan_; }
    const WeightLayout& weight_layout() const { return layout_; }
    struct StageInfo {
        const DeviceCaps* caps = nullptr;
        LayerRange layers;
        const MemoryPlan* memory = nullptr;
        const WeightLayout* weights = nullptr;  // its layers' places (the others empty)
    };
    std::vector<StageInfo> stages() const;  // one entry on one device
    uint32_t n_ctx() const { return plan_.n_ctx; }  // per sequence
    uint32_t n_seq() const { return opts_.n_seq; }
    uint32_t ubatch() const { return opts_.ubatch; }
    // The single-sequence interface (vkllm run, perplexity, bench) works on sequence 0.
    uint32_t n_past() const { return n_past_[0]; }
    void reset() { reset(0); }  // forget the conversation: its blocks go back to the pool

    // --- several sequences (ModelOptions::n_seq). The KV cache is paged: per layer one pool of blocks
    // of kKvBlockRows rows, a sequence holding blocks as it grows (up to n_ctx rows) and letting them go
    // when truncated or reset; sequences that share a prefix share its blocks (share_prefix).
    uint32_t n_past(uint32_t seq) const;
    void reset(uint32_t seq);
    // Keeps the first n tokens of sequence `seq` (n <= n_past(seq)) so that a prompt sharing them
    // evaluates only the rest. False, changing nothing, when a sliding-window layer's ring has already
    // overwritten keys that a token after n would need: the caller starts over with reset().
    bool truncate(uint32_t seq, uint32_t n);
    // Sequence `dst` starts from the first n tokens of sequence `src` (n <= n_past(src); a system
    // prompt every slot shares) without evaluating them: it forgets what it held and shares src's KV
    // blocks holding them, n_past(dst) = n. Either sequence copies a shared block before it writes
    // into it (copy on write), so both continue as if each had evaluated the tokens itself. False,
    // changing nothing, for a model with sliding-window layers (their rings are per sequence).
    bool share_prefix(uint32_t dst, uint32_t src, uint32_t n);
    // The paged KV cache's use: blocks held by some sequence (a shared block once) of the pool of a
    // full-context layer, and the bytes one block takes over all such layers of the model (every
    // stage), K and V. Sliding-window rings are fixed per sequence and not counted.
    struct KvUsage {
        uint32_t blocks_used = 0, blocks_total = 0, block_rows = 0;
        uint64_t block_bytes = 0;
        uint64_t bytes_used() const { return uint64_t(blocks_used) * block_bytes; }
    };
    KvUsage kv_usage() const;
    // Free blocks sequence `seq` takes to add n tokens: new blocks, and copies of shared ones it would
    // write into. A caller that makes this many free first never sees the pool run out.
    uint32_t kv_blocks_needed(uint32_t seq, uint32_t n) const;
    // eval() for sequence `seq`: its tokens at positions n_past(seq).., in chunks of ubatch; the last
    // token's logits are row 0 afterwards.
    void eval(uint32_t seq, std::span<const int32_t> tokens);
    // One token for each of several distinct sequences (at most n_seq) in one forward pass and one
    // submission; logits row i belongs to batch[i]. Every row goes through the same kernels with
    // the same reduction order whatever the batch (linear layers as matvec in groups of <= 8 rows,
    // attention and the K/V store one dispatch for all rows, each through its sequence's block table
    // with a lone token's plan), so a sequence's logits do not depend on what runs beside it.
    void decode(std::span<const SeqToken> batch);
    // Rows [0, rows) of the last logits: rows = 1 after eval(), the batch size after decode().
    void read_logits(uint32_t rows, float* dst) const;
    // The argmax of each of those rows (computed on the device), or -1 for a row whose best logit is
    // NaN or Inf (the caller ends that sequence alone; argmax() throws instead).
    std::vector<int32_t> argmax_rows(uint32_t rows) const;

    // Evaluates tokens at positions n_past().., in chunks of at most ubatch; afterwards the logits
    // of the last token (and their argmax) are on the device. Throws ContextFullError when the
    // tokens do not fit in the remaining context. With a probe, every layer is submitted on its
    // own and its intermediate tensors are downloaded (slow; for checking only).
    void eval(std::span<const int32_t> tokens, const LayerProbe& probe = {});
    int32_t argmax() const;            // of the last logits; reads 4 bytes; NonFiniteError (see .cpp)
    std::vector<float> logits() const; // reads back the last logits (n_vocab floats); logic_error without an LM head
    // The hidden states of every token of the last chunk eval() ran, (n, dim): an encoder's last
    // layer output, or a decoder's after its output norm (what its LM head reads, computed on the
    // host from the downloaded rows). Pooling makes embeddings of them (model/embedding.h).
    std::vector<float> hidden_states() const;

    // Bidirectional models (encoders): several inputs, each from position 0, in one forward pass:
    // their tokens packed back to back, each attending to its own only. Every input non-empty, all
    // of them together at most ubatch tokens (std::invalid_argument otherwise). hidden_states() then
    // holds their rows in order. Replaces whatever the model held (no reset() needed).
    void eval_packed(std::span<const std::span<const int32_t>> inputs);

    // --- encoder-decoder models (ArchDesc::cross_attention: T5's decoder)
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
    // The pipelines the model needs; compiled in parallel at construction.
    std::vector<PipelineDesc> pipelines() const;
    // Whether a lone token's projections take the integer-dot matvec (their input quantized to 8
    // bits): the device then differs from the f32 host reference by that quantization (--check).
    bool int_dot_matvecs() const;
    // Whether a full chunk's (ubatch tokens') projections take the integer-dot matmul: its
    // arithmetic roofline is then the packed dot's rate, not f32 FMA's (vkllm bench).
    bool int_dot_matmuls() const;

private:
    // Whether a layer projection of this stage or a later one takes an integer-dot kernel at `shape`
    // (the plans' own choice: plan_layer's steps and expert plans).
    bool int_dot_layers(const StepShape& shape) const;
    // One stage of a model (the first of `stages`); it constructs the rest as next_.
    struct StageTag;
    ModelGpu(StageTag, std::span<const ModelStage> stages, const GgufFile& file, const ModelConfig& cfg,
             const ModelOptions& opts, const UploadProgress& progress);
    const ModelGpu& tail() const { return next_ ? next_->tail() : *this; }
    struct Recording;
    // What a recording computes: a chunk of n tokens of one sequence, or a decode step of one token
    // for each of n sequences. Which sequences is no part of it: every cache access goes through the
    // block tables, written before each submission, so one recording serves any of them.
    using BatchShape = StepShape;
    Recording& recording(const BatchShape& b);
    // The recorders follow the plans of layer_plan.h: a layer is its attention block, then its FFN
    // block; every decision they read was made by plan_layer / plan_head.
    void record_embed(CommandStream& s, uint32_t n);
    void record_layer(CommandStream& s, uint32_t layer, const BatchShape& b);
    // Where a layer's q, k, v, gate and up live for a plan: rows of the scratch buffers, or the fused
    // projections' vectors (qkv_, gate_up_) of a lone token.
    struct Activations {
        BufferSlice q, k, v, gate, up;
    };
    Activations activations(const LayerPlan& p) const;
    void record_attention(CommandStream& s, uint32_t layer, const AttentionPlan& p, const BatchShape& b,
                          const Activations& a);
    void record_cross(CommandStream& s, uint32_t layer, const CrossPlan& p, uint32_t n);
    void record_mla(CommandStream& s, uint32_t layer, const AttentionPlan& p, const BatchShape& b);
    // Entry i of a batch's attention loop: its `rows` rows of `width` floats in b, and its own region of
    // the split-K scratch (the whole scratch when there are no partials).
    static BufferSlice segment_rows(const BufferSlice& b, uint64_t width, size_t i, uint32_t rows);
    BufferSlice attention_scratch_region(size_t i) const;
    void record_ffn(CommandStream& s, uint32_t layer, const FfnPlan& p, uint32_t n, const Activations& a);
    void record_moe(CommandStream& s, uint32_t layer, const FfnPlan& p, uint32_t n, const Activations& a);
    void record_head(CommandStream& s, const BatchShape& b);
    // logits [rows][n_vocab] = output · norm(x [rows][dim]) (+ softcap); `normed` holds norm(x) where
    // the norm does not ride in the matvec.
    void record_logits(CommandStream& s, const HeadPlan& h, const BufferSlice& x, const BufferSlice& normed,
                       const BufferSlice& logits);
    // Whether xq_ holds the Q8_1 form of the input a group of projections shares (Q, K and V;
    // gate and up): the first integer-dot projection of the group records the quantization, the
    // others read it. A new group (another input) starts from a fresh one.
    struct SharedQ8 { bool ready = false; };
    // y (+)= W · input(x) (+ b), as the step's plan says; an integer-dot plan reads x through xq_.
    void project(CommandStream& s, const LayerWeights& L, const LinearStep& st, const BufferSlice& x,
                 const BufferSlice& y, const ops::MatvecInput& input = {}, SharedQ8* shared = nullptr);
    // input with xq_ as its Q8_1 scratch where `plan` takes the integer-dot kernel.
    ops::MatvecInput with_q8(const ops::LinearPlan& plan, ops::MatvecInput input, SharedQ8* shared);
    // Records (or reuses) this stage's streams for `b`, submits them, then hands the residual stream
    // and the step's positions to the next stage and runs it.
    void run(const BatchShape& b, const LayerProbe& probe);
    void submit(Recording& rec, const LayerProbe& probe, uint32_t n);
    void check_tokens(std::span<const int32_t> tokens) const;
    void require_head(const char* what) const;  // std::logic_error for a model without an LM head
    ops::MatvecInput rms_input(const DeviceTensor& norm_weight) const;  // RMSNorm fused into a matvec
    // y = norm(x) with the architecture's norm kind (and bias where it has one).
    void norm(CommandStream& s, const BufferSlice& x, const DeviceTensor& w, const DeviceTensor& b,
              const BufferSlice& y, uint32_t rows);
    KvGeometry kv_geometry() const;
    void eval_impl(uint32_t seq, std::span<const int32_t> tokens, const LayerProbe& probe, const LogitsSink& sink);
    LayerTensors read_layer_tensors(uint32_t layer, uint32_t n) const;

    Context& ctx_;
    const GgufFile& file_;
    ModelConfig cfg_;
    ModelOptions opts_;
    LayerRange range_;               // this stage's layers (all of them on one device)
    std::unique_ptr<ModelGpu> next_;  // the next stage of a split model
    MemoryPlan plan_;
    WeightLayout layout_;  // where every weight goes (plan_weights), read by the plans
    ModelWeights w_;
    bool gpu_embed_ = true;  // token_embd fits one binding: look rows up with get_rows on the device

    // --- per layer: everything a layer reads besides the activations. The seam along which a model
    // is split over devices: each stage fills the entries of its range_, and the residual stream x
    // passes between stages at the range boundary (send_ -> recv_).
    struct LayerState {
        LayerWeights w;        // views into w_'s buffers, by role
        uint32_t kv_rows = 0;  // kv_cache_rows(): rows a sequence addresses, n_ctx or a sliding window's ring
        // The pools every sequence's rows live in, (pool rows, n_kv_heads * head_dim) of the KV type,
        // for K and for V (none with MLA); a sequence's rows found through its block table.
        Buffer k_cache, v_cache;
        uint32_t pool_rows = 0;
        bool ring = false;     // kv_rows differs from n_ctx: fixed blocks per sequence, never shared
        int32_t pos_bias = -1;  // T5: the layer's position-bias table in pos_bias_
    };
    std::vector<LayerState> layers_;
    // The block tables a step reads, host-written before each submission: row r (a decode batch's
    // r-th sequence, or a chunk's one sequence at row 0) lists its blocks, kv_blocks(n_ctx) entries per
    // row for full-context layers (kv_tables_) and kv_blocks(ring rows) for sliding-window rings
    // (ring_tables_: sequence s owns blocks s * that.. of the ring pools, fixed).
    Buffer kv_tables_, ring_tables_;
    uint32_t ring_rows_ = 0;  // kv_rows of the sliding-window layers where they differ from n_ctx (0: none)
    // Full-context layers' blocks, handed out as sequences grow (the first stage decides; the tables
    // reach the other stages with the positions): per sequence its blocks in order, and the free ones.
    std::vector<std::vector<uint32_t>> seq_blocks_;
    std::vector<uint32_t> free_blocks_;
    std::vector<uint32_t> block_refs_;  // sequences holding each block (shared prefixes: several)
    uint32_t pool_blocks_ = 0;  // of a full-context layer's pool
    uint64_t kv_block_bytes_ = 0;  // one block over the full-context layers of this stage and the next ones, K and V
    // Gives sequence `seq` blocks for its first `rows` rows (ContextFullError when the pool is out of
    // blocks) and lets go of those past them; rows from `write_from` on are about to be written, so a
    // shared block among them is first copied into one of its own.
    void hold_rows(uint32_t seq, uint32_t rows, uint32_t write_from = UINT32_MAX);
    uint32_t take_block(uint32_t seq);
    void release_block(uint32_t b);
    // Copies block `from` into block `to` in every full-context layer's pools, on every stage.
    void copy_block(uint32_t from, uint32_t to);
    // Row `row` of the tables for sequence `seq`.
    void write_tables(uint32_t row, uint32_t seq);
    // Layer l's pool through table row `row` (with per_token, rows row.. one per token).
    ops::KvPages kv_pages(uint32_t l, uint32_t row, bool per_token) const;
    std::vector<Buffer> pos_bias_;  // T5: layer 0's table (shared by layers without attn_rel_b), then any others
    // Encoder-decoder: per layer the encoder output's cross K and V, (n_ctx, kv_dim) of the KV type; the encoder
    // output itself (n_ctx, dim), host-written; the row positions 0..n_ctx-1 the K/V store writes;
    // every query's cross-attention position, n_enc - 1 (it sees all encoder rows).
    std::vector<Buffer> cross_k_, cross_v_;
    Buffer enc_, enc_rows_, cross_pos_;
    Buffer cross_q_, cross_att_;  // (U, q_dim): cross-attention's q and output (the probe keeps self-attention's)
    uint32_t n_enc_ = 0;

    // --- scratch, sized by U = max(ubatch, n_seq) rows
    Buffer x_;        // (U, dim)  residual stream
    Buffer xn_;       // (U, dim)  normed input of attention / FFN
    Buffer tmp_;      // (U, dim)  block output before its post-norm; learned position rows
    Buffer q_;        // (U, q_dim = n_heads * head_dim)
    Buffer k_;        // (U, kv_dim)
    Buffer v_;        // (U, kv_dim)
    Buffer att_;      // (U, q_dim)  attention output
    Buffer gate_;     // (U, ffn)   ffn: dense_ffn_dim (a mixture of experts' shared expert's)
    Buffer up_;       // (U, ffn)
    Buffer last_;     // (dim)     last token's hidden state
    Buffer qkv_;      // (q_dim + 2 kv_dim)  fused Q|K|V projection of one token (decode)
    Buffer gate_up_;  // (2 ffn)           fused gate|up projection of one token (decode)
    Buffer xq_;       // (max(ubatch, n_seq), q8_1_row_bytes(max k)) where the integer-dot kernels run: their X
    // mixture of experts (K = n_expert_used): router logits (U, n_expert), chosen ids and weights
    // (U, K), every slot's gate and up (U * K, expert_ffn) and output (U * K, dim), the shared expert's
    // gate logit (U)
    Buffer moe_logits_, moe_ids_, moe_w_, moe_groups_, moe_gate_, moe_up_, moe_out_, moe_shared_logit_;
    // latent attention (H heads, r = kv_lora_rank): q_a (U, q_lora), q (U, H, qk), kv_a (U, r + rope),
    // per head q_nope (U * H, qk - rope), wk_b · q_nope (U * H, r), wv_b · att (U * H, v_mla); the head of
    // each (token, head) slot (U * H) and those slots grouped per head (a chunk's). The K rows are built in k_ (U, rope + r), the latent normed in v_.
    Buffer mla_qa_, mla_q_, mla_kva_, mla_qn_, mla_qabs_, mla_o_, head_ids_, mla_groups_;

    Buffer logits_;   // (n_seq, n_vocab)
    Buffer all_logits_;  // (U, n_vocab) host-readable, only with ModelOptions::all_logits
    Buffer argmax_;   // (n_seq) uint32
    Buffer positions_;// (U) int32, host-written: each token's cache row (its position in its sequence, or in a pack)
    Buffer rel_pos_;  // (U) int32, host-written: each token's position in its input (RoPE, learned positions)
    Buffer segs_;     // (U, 2) int32, host-written: bidirectional models' key range per token
    Buffer ids_;      // (U) int32, host-written
    Buffer embed_in_; // (U, dim) host-written rows when the embedding is too large for one binding
    Buffer send_;     // (U, dim) readback: a split's stage before the last hands its x rows over in it
    Buffer recv_;     // (U, dim) host-written: a stage after the first takes its x rows from it
    Buffer attn_scratch_;  // (n_seq) x attention split-K partials: one region per decode row

    std::map<BatchShape, std::unique_ptr<Recording>> recordings_;
    uint64_t recording_clock_ = 0;  // for dropping the least recently used recording
    Recording* last_recording_ = nullptr;
    uint32_t last_rows_ = 1;        // logits rows of the last evaluation
    uint32_t last_chunk_ = 0;       // tokens of the last chunk eval() ran
    bool profiling_ = false;
    std::vector<uint32_t> n_past_;  // per sequence
    ForwardStats stats_;
};

}  // namespace vkllm
