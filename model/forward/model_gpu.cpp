#include "model/forward/model_gpu.h"

#include "model/arch/tensor_schema.h"
#include "model/forward/position_bias.h"

#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/get_rows.h"
#include "runtime/ops/kv_store.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/moe.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/rope.h"
#include "runtime/ops/sampling_ops.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <thread>

namespace vkllm {

std::string format_mib(uint64_t b) { return fmt::format("{:.1f} MiB", double(b) / (1 << 20)); }

namespace {

uint64_t kv_row_bytes(const ModelConfig& cfg, ops::KvType t) { return ops::kv_row_bytes(t, cfg.kv_dim()); }

// Attention of a layer whose cache holds n_ctx rows (no window: the worst case for scratch).
ops::AttentionParams plain_attention_params(const ModelConfig& cfg, uint32_t n_tokens, uint32_t n_ctx, ops::KvType t) {
    ops::AttentionParams p{n_tokens, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, n_ctx, cfg.attn_scale, t};
    p.softcap = cfg.attn_softcap;
    p.v_head_dim = cfg.v_head_dim;
    p.v_in_k = cfg.v_in_k();
    return p;
}

// Caches per layer: K and V, or K alone where V is K's latent part (latent attention).
uint64_t kv_caches(const ModelConfig& cfg) { return cfg.v_in_k() ? 1 : 2; }

}  // namespace

// --- memory plan -----------------------------------------------------------------------------------

namespace {

// Rows of the activation scratch: a prompt chunk or one decode token per sequence.
uint32_t scratch_rows(const ModelOptions& o) { return std::max(o.ubatch, o.n_seq); }

// The integer-dot kernels' Q8_1 input, on devices that take them: a row per row of the activation
// scratch (a prompt chunk's tokens for the matmul, the sequences of a decode batch), each as long as
// any projection's k.
uint64_t q8_scratch_bytes(const DeviceCaps& caps, const ModelConfig& cfg, const ModelOptions& o) {
    if (!caps.int_dot_kernels) return 0;
    const uint32_t rows = scratch_rows(o);
    // Latent attention's wq_b reads q_lora_rank values and its wo H x value_length_mla.
    const uint64_t dense = rows * ops::q8_1_row_bytes(std::max(
                                      {cfg.dim, cfg.q_dim(), dense_ffn_dim(cfg), cfg.q_lora_rank, cfg.n_heads * cfg.mla_v}));
    // A mixture of experts: the down projections read one GLU row per slot (token x expert).
    const uint64_t experts =
        cfg.arch->moe ? uint64_t(rows) * cfg.n_expert_used * ops::q8_1_row_bytes(cfg.expert_ffn_dim) : 0;
    return std::max(dense, experts);
}

// The scratch buffers ModelGpu allocates for `layers`, but the attention partials (see
// attention_scratch): the logits only with the last layer (the head), a split's hand-off buffers
// at its inner boundaries.
uint64_t scratch_bytes(const DeviceCaps& caps, const ModelConfig& cfg, const ModelOptions& o, LayerRange layers) {
    const bool head = layers.end() == cfg.n_layers;
    const uint32_t rows = scratch_rows(o);
    // x, xn, tmp, embed_in (dim); q, att (q_dim); k, v (kv_dim); gate, up (ffn); position and token id.
    const uint64_t ffn = dense_ffn_dim(cfg);
    uint64_t per_token = 4ull * (4ull * cfg.dim + 2ull * cfg.q_dim() + 2ull * cfg.kv_dim() + 2ull * ffn) + 8;
    per_token += 12;  // the input-relative position and the key range (segments)
    // mixture of experts: router logits, ids and weights, each slot's gate, up and output, shared gate logit
    // (and the prefill's slots sorted per expert: one more word per slot, n_expert + 1 offsets below)
    if (cfg.arch->moe)
        per_token += 4ull * (cfg.n_expert + 3ull * cfg.n_expert_used +
                             uint64_t(cfg.n_expert_used) * (2ull * cfg.expert_ffn_dim + cfg.dim) + 1);
    // encoder-decoder: cross-attention's q and output (q_dim), its position
    if (cfg.arch->cross_attention) per_token += 4ull * (2ull * cfg.q_dim()) + 4;
    // latent attention: q_a, q (H x qk), the latent and rotary key, per head q_nope, wk_b · q_nope, wv_b · att, head ids
    if (cfg.arch->mla) {
        const uint64_t H = cfg.n_heads;
        per_token += 4ull * (cfg.q_lora_rank + H * cfg.mla_qk + cfg.kv_dim() + H * (cfg.mla_qk - cfg.rope_dim) +
                             H * cfg.kv_lora_rank + H * cfg.mla_v + 2 * H);  // + the head ids and their groups
    }
    // a split's x sent to the next device, received from the previous one (dim each)
    per_token += 4ull * cfg.dim * ((head ? 0 : 1) + (layers.first > 0 ? 1 : 0));
    // last (dim), qkv (q_dim + 2 kv_dim), gate_up (2 ffn); logits (n_vocab) and argmax per
    // sequence; the Q8_1 input of the integer-dot matvecs.
    uint64_t fixed = 4ull * (cfg.dim + cfg.q_dim() + 2ull * cfg.kv_dim() + 2ull * ffn) +
                     (head ? 4ull * o.n_seq * (uint64_t(cfg.n_vocab) + 1) : 0) + q8_scratch_bytes(caps, cfg, o);
    if (cfg.arch->moe) fixed += 4ull * (cfg.n_expert + 1);
    if (cfg.arch->mla) fixed += 4ull * (cfg.n_heads + 1);  // the per-head groups' offsets
    // T5: at most one position-bias table per layer, (n_heads, 2 x 128 + 1) floats
    if (cfg.n_rel_buckets) fixed += 4ull * cfg.n_layers * cfg.n_heads * (2 * kT5MaxDistance + 1);
    return per_token * rows + fixed;
}

// Split-K partials of attention: decode needs them (prefill does not), and their number of
// splits grows with the context, so this is exact for the n_ctx given and an upper bound below it.
// Per sequence: the sequences of a decode step attend side by side, each in its own region.
uint64_t attention_scratch_per_seq(const DeviceCaps& caps, const ModelConfig& cfg, uint32_t ubatch, uint32_t n_ctx,
                                   ops::KvType t) {
    const uint64_t b = std::max(ops::attention_scratch_bytes(caps, plain_attention_params(cfg, 1, n_ctx, t)),
                                ops::attention_scratch_bytes(caps, plain_attention_params(cfg, ubatch, n_ctx, t)));
    return (b + 255) / 256 * 256;  // each region starts on any device's storage-buffer offset alignment
}

// Bytes per context row of an encoder-decoder's cross-attention K and V (all layers), and of the
// encoder output and its row index it keeps to project them.
uint64_t cross_row_bytes(const ModelConfig& cfg, const ModelOptions& o, LayerRange layers) {
    return cfg.arch->cross_attention ? 2ull * layers.count * kv_row_bytes(cfg, o.kv_type) + 4ull * cfg.dim + 4 : 0;
}

// Rows of a layer's pool: whole blocks of `rows` (kv_cache_rows) per sequence.
uint64_t pool_rows(uint32_t rows, uint32_t n_seq) { return uint64_t(kv_blocks(rows)) * kKvBlockRows * n_seq; }
// Rows of layer l's pool: a full-context layer's is the budget where there is one; a sliding-window
// ring is every sequence's own.
uint64_t layer_pool_rows(const ModelConfig& cfg, const ModelOptions& o, uint32_t n_ctx, uint32_t l) {
    const uint32_t rows = kv_cache_rows(cfg, l, n_ctx, o.ubatch);
    if (rows == n_ctx && o.kv_budget) return uint64_t(kv_blocks(o.kv_budget)) * kKvBlockRows;
    return pool_rows(rows, o.n_seq);
}

uint64_t kv_cache_bytes(const ModelConfig& cfg, const ModelOptions& o, uint32_t n_ctx, LayerRange layers) {
    uint64_t rows = 0;
    for (uint32_t l = layers.first; l < layers.end(); ++l) rows += layer_pool_rows(cfg, o, n_ctx, l);
    return kv_caches(cfg) * rows * kv_row_bytes(cfg, o.kv_type) + cross_row_bytes(cfg, o, layers) * n_ctx;
}

}  // namespace

MemoryPlan plan_memory(const DeviceCaps& caps, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts,
                       LayerRange range) {
    if (opts.n_seq == 0) throw std::invalid_argument("n_seq must be > 0");
    const LayerRange layers = range.resolved(cfg);
    if (cfg.kv_dim() % ops::kv_row_multiple(opts.kv_type) != 0)
        throw std::invalid_argument(fmt::format(
            "--kv-type {}: this model's K/V rows have {} values (n_kv_heads {} x head_dim {}), not a multiple of {}; "
            "use --kv-type f16", ops::kv_type_name(opts.kv_type), cfg.kv_dim(), cfg.n_kv_heads, cfg.head_dim,
            ops::kv_row_multiple(opts.kv_type)));
    if (cfg.v_in_k() && (cfg.head_dim - cfg.v_dim()) % ops::kv_row_multiple(opts.kv_type) != 0)
        throw std::invalid_argument(fmt::format(
            "--kv-type {}: this model's latent starts {} values into each cached row (its rotary part), not a "
            "multiple of {}; use --kv-type f16", ops::kv_type_name(opts.kv_type), cfg.head_dim - cfg.v_dim(),
            ops::kv_row_multiple(opts.kv_type)));
    MemoryPlan p;
    p.n_seq = opts.n_seq;
    p.available = caps.device_local_bytes;
    // rope factors: one size for any n_ctx
    const WeightLayout layout = plan_weights(file, cfg, cfg.n_ctx_train, layers, opts.shared_token_embd != nullptr);
    p.weights = layout.bytes;
    // Stacked tensors (the schema's ne2: expert stacks, latent attention's per-head matrices) are
    // bound a whole slice at a time.
    const SchemaDims dims = schema_dims(cfg);
    for (const TensorSpec& spec : layer_schema(*cfg.arch)) {
        const uint64_t count = spec.ne[2] == Dim::One ? 0 : dims.get(spec.ne[2]);
        for (uint32_t l = layers.first; count > 0 && l < layers.end(); ++l) {
            const TensorPlace& t = layout.layers[l][spec.role];
            if (t.present())  // named by its buffer: the file's tensor, or what it was derived from
                ops::check_expert_binding(caps, layout.buffers[t.buffer].label, t.type, uint32_t(t.rows / count), t.row_elems);
        }
    }
    if (opts.all_logits && layers.end() == cfg.n_layers) {  // only the head's part of a split holds them
        // One ubatch of logits stays within one binding: linear() could split a larger output, but
        // a ubatch that large gains nothing over a smaller one, so name the largest that fits.
        const uint64_t row = 4ull * cfg.n_vocab;
        p.all_logits = row * opts.ubatch;
        if (p.all_logits > caps.max_storage_buffer_range)
            throw DeviceLimitError(fmt::format(
                "--ubatch {}: the logits of every token of a ubatch ({} x {} vocab) take {} bytes, more than this "
                "device's maxStorageBufferRange ({}); at most --ubatch {}", opts.ubatch, opts.ubatch, cfg.n_vocab,
                p.all_logits, caps.max_storage_buffer_range, caps.max_storage_buffer_range / row));
    }
    // The fit is checked with the attention partials of the largest context this call can pick.
    const uint32_t ctx_bound = opts.n_ctx ? opts.n_ctx : (cfg.n_ctx_train ? cfg.n_ctx_train : 2048);
    p.scratch = scratch_bytes(caps, cfg, opts, layers) + p.all_logits +
                opts.n_seq * attention_scratch_per_seq(caps, cfg, opts.ubatch, ctx_bound, opts.kv_type);
    // Full-context layers grow with n_ctx (unless a budget fixes their pools); a sliding-window
    // layer's ring is fixed once n_ctx passes window + ubatch - 1, so the fit is solved for the full
    // layers with the fixed KV (rings at their largest, budgeted pools) set aside.
    const uint64_t kv_row = kv_row_bytes(cfg, opts.kv_type);
    uint32_t n_full = 0;
    // A budget fixes the full-context layers' pools whatever n_ctx; without one they grow with it.
    const uint64_t budget_rows = uint64_t(kv_blocks(opts.kv_budget)) * kKvBlockRows;
    const uint64_t ring_rows = pool_rows(cfg.window + opts.ubatch - 1, opts.n_seq);
    uint64_t fixed_kv = 0;
    for (uint32_t l = layers.first; l < layers.end(); ++l) {
        // A local layer whose window reaches n_ctx is a full-context one: with a budget it takes the
        // budget's pool, so it is charged the larger of the two.
        if (cfg.is_local(l) && cfg.window > 0)
            fixed_kv += kv_caches(cfg) * kv_row * (opts.kv_budget ? std::max(ring_rows, budget_rows) : ring_rows);
        else ++n_full;
    }
    // The rings of all sequences are one pool, one binding, too.
    if (n_full < layers.count && ring_rows * kv_row > caps.max_storage_buffer_range)
        throw DeviceLimitError(fmt::format(
            "--parallel {}: the sliding-window layers' KV pool ({} rows of {} bytes for all sequences) would exceed this "
            "device's maxStorageBufferRange ({}); use fewer sequences or a smaller --ubatch", opts.n_seq, ring_rows, kv_row,
            caps.max_storage_buffer_range));
    if (opts.kv_budget && budget_rows * kv_row > caps.max_storage_buffer_range)
        throw DeviceLimitError(fmt::format("--kv-budget {}: one layer's KV pool would be {} bytes, more than this device's "
                                           "maxStorageBufferRange ({}); at most --kv-budget {}", opts.kv_budget,
                                           budget_rows * kv_row, caps.max_storage_buffer_range,
                                           caps.max_storage_buffer_range / kv_row / kKvBlockRows * kKvBlockRows));
    if (opts.kv_budget) fixed_kv += kv_caches(cfg) * kv_row * n_full * budget_rows;
    const uint64_t per_token = (opts.kv_budget ? 0 : kv_caches(cfg) * kv_row * std::max(n_full, 1u) * opts.n_seq) +
                               cross_row_bytes(cfg, opts, layers);
    // One layer's K (or V) pool is one binding: every sequence's whole blocks must fit maxStorageBufferRange
    // (with a budget, checked above; a sequence then holds at most the budget).
    const uint64_t max_ctx_binding = opts.kv_budget ? budget_rows
                                                    : caps.max_storage_buffer_range / kv_row / opts.n_seq / kKvBlockRows * kKvBlockRows;
    // Keep 10% of the heap for the driver, staging and other processes.
    uint64_t budget = p.available / 10 * 9;
    uint64_t fixed = p.weights + p.scratch;
    if (fixed > budget)
        throw DeviceLimitError(fmt::format(
            "model does not fit on the device: weights {} + scratch {} = {}, but only {} of device memory is usable "
            "(of {})", format_mib(p.weights), format_mib(p.scratch), format_mib(fixed), format_mib(budget), format_mib(p.available)));
    // Whole blocks: the pool rounds each sequence's rows up to them.
    if (opts.kv_budget && fixed + fixed_kv > budget)
        throw DeviceLimitError(fmt::format(
            "--kv-budget {} needs {} of KV cache, but after weights ({}) and scratch ({}) only {} is usable",
            opts.kv_budget, format_mib(fixed_kv), format_mib(p.weights), format_mib(p.scratch), format_mib(budget - fixed)));
    uint64_t max_ctx_memory = budget - fixed > fixed_kv
                                  ? per_token ? (budget - fixed - fixed_kv) / per_token / kKvBlockRows * kKvBlockRows : UINT32_MAX
                                  : 0;
    const uint32_t train_ctx = cfg.n_ctx_train ? cfg.n_ctx_train : 2048;
    if (opts.n_ctx == 0) {
        p.n_ctx = uint32_t(std::min<uint64_t>({train_ctx, max_ctx_memory, max_ctx_binding}));
        if (p.n_ctx < 16)
            throw DeviceLimitError(fmt::format("model leaves room for only {} tokens of KV cache ({} per token); the "
                                               "device has {}", p.n_ctx, format_mib(per_token), format_mib(p.available)));
    } else {
        p.n_ctx = opts.n_ctx;
        if (cfg.arch->positions == PositionKind::Learned && p.n_ctx > cfg.n_ctx_train)
            throw DeviceLimitError(fmt::format("--ctx {}: this {} model has learned positions for {} tokens only",
                                               p.n_ctx, cfg.arch->name, cfg.n_ctx_train));
        if (uint64_t(kv_blocks(p.n_ctx)) * kKvBlockRows > max_ctx_memory)
            throw DeviceLimitError(fmt::format(
                "--ctx {} needs {} of KV cache{}, but after weights ({}) and scratch ({}) only {} is usable: at most "
                "--ctx {}", p.n_ctx, format_mib(kv_cache_bytes(cfg, opts, p.n_ctx, layers)),
                opts.n_seq > 1 ? fmt::format(" for {} sequences", opts.n_seq) : std::string(), format_mib(p.weights),
                format_mib(p.scratch), format_mib(budget - fixed), max_ctx_memory));
        if (opts.kv_budget && p.n_ctx > budget_rows)
            throw std::invalid_argument(fmt::format("--ctx {} is more than the whole KV budget (--kv-budget {}): a "
                                                    "sequence holds at most the budget", p.n_ctx, opts.kv_budget));
        if (uint64_t(kv_blocks(p.n_ctx)) * kKvBlockRows > max_ctx_binding)
            throw DeviceLimitError(fmt::format("--ctx {}: one layer's KV cache would be {} bytes{}, more than this "
                                               "device's maxStorageBufferRange ({}); at most --ctx {}",
                                               p.n_ctx, kv_row * pool_rows(p.n_ctx, opts.n_seq),
                                               opts.n_seq > 1 ? fmt::format(" for {} sequences", opts.n_seq) : std::string(),
                                               caps.max_storage_buffer_range, max_ctx_binding));
    }
    p.kv_cache = kv_cache_bytes(cfg, opts, p.n_ctx, layers);
    p.kv_cache_full = kv_caches(cfg) * kv_row * layers.count * pool_rows(p.n_ctx, opts.n_seq);
    p.kv_budget = opts.kv_budget ? uint32_t(budget_rows) : uint32_t(pool_rows(p.n_ctx, opts.n_seq));
    p.attention_scratch = opts.n_seq * attention_scratch_per_seq(caps, cfg, opts.ubatch, p.n_ctx, opts.kv_type);
    p.scratch = scratch_bytes(caps, cfg, opts, layers) + p.all_logits + p.attention_scratch;
    return p;
}

// --- construction ----------------------------------------------------------------------------------

struct ModelGpu::Recording {
    std::vector<std::unique_ptr<CommandStream>> streams;  // embed, layers..., head
    uint64_t last_used = 0;
};

void check_splittable(const ModelConfig& cfg, size_t n_devices) {
    if (n_devices > 1 && (!cfg.arch->lm_head || !cfg.arch->encoder_arch.empty() || cfg.arch->cross_attention))
        throw ModelConfigError(fmt::format("a {} model is not split over devices: only decoder-only models are",
                                           cfg.arch->name));
}

// Upload progress over every stage's weights: stage i reports from the bytes of the stages before it.
struct ModelGpu::StageTag {
    uint64_t before = 0, total = 0;  // total 0: one device, progress reported as is
};

namespace {

// The options every stage of a split gets: checked stages, and one context for all of them.
ModelOptions stage_options(std::span<const ModelStage> stages, const GgufFile& file, const ModelConfig& cfg,
                           const ModelOptions& opts) {
    if (stages.empty()) throw std::invalid_argument("a model needs at least one device");
    uint32_t next = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
        if (!stages[i].ctx) throw std::invalid_argument(fmt::format("stage {} has no device context", i));
        const LayerRange r = stages[i].layers.resolved(cfg);
        if (r.first != next || r.count == 0)
            throw std::invalid_argument(fmt::format("stage {} holds layers from {} ({} of them), but the next layer to "
                                                    "place is {}: stages hold contiguous, non-empty layer ranges",
                                                    i, r.first, r.count, next));
        next = r.end();
    }
    if (next != cfg.n_layers)
        throw std::invalid_argument(fmt::format("the stages hold layers 0-{} of the model's {}", next - 1, cfg.n_layers));
    check_splittable(cfg, stages.size());
    if (stages.size() == 1 || opts.n_ctx != 0) return opts;
    ModelOptions o = opts;
    o.n_ctx = UINT32_MAX;
    for (const ModelStage& st : stages)
        o.n_ctx = std::min(o.n_ctx, plan_memory(st.ctx->caps(), file, cfg, opts, st.layers.resolved(cfg)).n_ctx);
    return o;
}

// The upload counts the file's bytes; a split's progress runs over the stages' device bytes
// (layout sizes: f32 norms, derived buffers), so each stage's fraction is scaled to its share.
UploadProgress stage_progress(const UploadProgress& progress, uint64_t before, uint64_t stage_bytes, uint64_t total) {
    if (!progress || total == 0) return progress;
    return [progress, before, stage_bytes, total](uint64_t done, uint64_t of) {
        const uint64_t part = of == 0 || done >= of ? stage_bytes : uint64_t(double(stage_bytes) * double(done) / double(of));
        progress(before + part, total);
    };
}

}  // namespace

ModelGpu::ModelGpu(Context& ctx, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts,
                   const UploadProgress& progress)
    : ModelGpu(std::array{ModelStage{&ctx, {}}}, file, cfg, opts, progress) {}

ModelGpu::ModelGpu(std::span<const ModelStage> stages, const GgufFile& file, const ModelConfig& cfg,
                   const ModelOptions& opts, const UploadProgress& progress)
    : ModelGpu(StageTag{}, stages, file, cfg, stage_options(stages, file, cfg, opts), progress) {}

ModelGpu::ModelGpu(StageTag tag, std::span<const ModelStage> stages, const GgufFile& file, const ModelConfig& cfg,
                   const ModelOptions& opts, const UploadProgress& progress)
    : ctx_(*stages.front().ctx), file_(file), cfg_(cfg), opts_(opts), range_(stages.front().layers.resolved(cfg)) {
    if (opts_.ubatch == 0) throw std::invalid_argument("ubatch must be > 0");
    if (opts_.n_seq == 0) throw std::invalid_argument("n_seq must be > 0");
    if (cfg.arch->cross_attention && opts_.n_seq != 1)
        throw std::invalid_argument("an encoder-decoder model runs one sequence (n_seq 1)");
    Context& ctx = ctx_;
    n_past_.assign(opts_.n_seq, 0);
    plan_ = plan_memory(ctx.caps(), file, cfg, opts_, range_);
    layout_ = plan_weights(file, cfg, plan_.n_ctx, range_, opts_.shared_token_embd != nullptr);
    if (const DeviceTensor* e = opts_.shared_token_embd) {
        const TensorPlace& own = layout_.token_embd;
        if (stages.size() > 1 || !e->present() || e->type != own.type || e->row_elems != own.row_elems || e->rows != own.rows)
            throw std::invalid_argument(fmt::format("a shared token embedding must be this file's token_embd ({} rows of {}) "
                                                    "on a single device", own.rows, own.row_elems));
    }
    // token_embd fits one binding: its rows are looked up on the device.
    gpu_embed_ = layout_.token_embd.bytes() <= ctx.caps().max_storage_buffer_range;
    // A split reports its upload over every stage's weights.
    if (stages.size() > 1 && tag.total == 0)
        for (const ModelStage& st : stages) tag.total += plan_weights(file, cfg, plan_.n_ctx, st.layers.resolved(cfg)).bytes;
    // Compile while the weights upload: start-up is dominated by one or the other.
    std::exception_ptr compile_error;
    std::thread compiler([&] {
        try {
            auto descs = pipelines();
            ctx_.prepare_pipelines(descs);
        } catch (...) {
            compile_error = std::current_exception();
        }
    });
    try {
        w_ = ModelWeights::upload(ctx, file, layout_, stage_progress(progress, tag.before, layout_.bytes, tag.total));
        if (opts_.shared_token_embd) w_.token_embd = *opts_.shared_token_embd;
    } catch (...) {
        compiler.join();
        throw;
    }
    compiler.join();
    if (compile_error) std::rethrow_exception(compile_error);

    const uint32_t U = scratch_rows(opts_), dim = cfg.dim, qd = cfg.q_dim(), kv = cfg.kv_dim(), ffn = dense_ffn_dim(cfg);
    const uint64_t kv_row = kv_row_bytes(cfg, opts_.kv_type);
    layers_.resize(cfg.n_layers);  // indexed by layer; only this stage's are filled
    for (uint32_t l = range_.first; l < range_.end(); ++l) {
        layers_[l].w = w_.layers[l];
        layers_[l].kv_rows = kv_cache_rows(cfg, l, plan_.n_ctx, opts_.ubatch);
        if (cfg.n_rel_buckets == 0 || (l > 0 && !has_own_position_bias(file, cfg, l))) {
            layers_[l].pos_bias = cfg.n_rel_buckets ? 0 : -1;
            continue;
        }
        const std::vector<float> table = t5_position_bias(file, cfg, l);
        pos_bias_.push_back(ctx.create_buffer(table.size() * 4, MemoryUsage::Device, fmt::format("pos_bias.{}", l)));
        ctx.upload(pos_bias_.back(), table.data(), table.size() * 4);
        layers_[l].pos_bias = int32_t(pos_bias_.size() - 1);
    }
    for (uint32_t l = range_.first; l < range_.end(); ++l) {
        LayerState& L = layers_[l];
        L.pool_rows = uint32_t(layer_pool_rows(cfg, opts_, plan_.n_ctx, l));
        L.ring = L.kv_rows != plan_.n_ctx;
        if (!L.ring) kv_block_bytes_ += kv_caches(cfg) * kKvBlockRows * kv_row;
        L.k_cache = ctx.create_buffer(kv_row * L.pool_rows, MemoryUsage::Device, fmt::format("k_cache.{}", l));
        // Latent attention reads V from the K rows: no V cache.
        if (!cfg.v_in_k()) L.v_cache = ctx.create_buffer(kv_row * L.pool_rows, MemoryUsage::Device, fmt::format("v_cache.{}", l));
    }
    // Every stage's tables have the same shape (one context for all): the first stage fills them.
    for (uint32_t l = 0; l < cfg.n_layers; ++l)
        if (const uint32_t rows = kv_cache_rows(cfg, l, plan_.n_ctx, opts_.ubatch); rows != plan_.n_ctx) ring_rows_ = rows;
    kv_tables_ = ctx.create_buffer(4ull * opts_.n_seq * kv_blocks(plan_.n_ctx), MemoryUsage::Upload, "kv_tables");
    if (ring_rows_) ring_tables_ = ctx.create_buffer(4ull * opts_.n_seq * kv_blocks(ring_rows_), MemoryUsage::Upload, "ring_tables");
    pool_blocks_ = plan_.kv_budget / kKvBlockRows;
    seq_blocks_.assign(opts_.n_seq, {});
    block_refs_.assign(pool_blocks_, 0);
    for (uint32_t b = pool_blocks_; b-- > 0;) free_blocks_.push_back(b);  // handed out from block 0 up
    auto dev = [&](uint64_t floats, const char* name) { return ctx.create_buffer(floats * 4, MemoryUsage::Device, name); };
    x_ = dev(uint64_t(U) * dim, "x");
    xn_ = dev(uint64_t(U) * dim, "xn");
    tmp_ = dev(uint64_t(U) * dim, "tmp");
    q_ = dev(uint64_t(U) * qd, "q");
    k_ = dev(uint64_t(U) * kv, "k");
    v_ = dev(uint64_t(U) * kv, "v");
    att_ = dev(uint64_t(U) * qd, "att");
    // max(.., 1): a mixture of experts without a shared expert has no dense FFN.
    gate_ = dev(std::max(uint64_t(U) * ffn, uint64_t(1)), "gate");
    up_ = dev(std::max(uint64_t(U) * ffn, uint64_t(1)), "up");
    if (cfg.arch->moe) {
        const uint64_t slots = uint64_t(U) * cfg.n_expert_used;
        moe_logits_ = dev(uint64_t(U) * cfg.n_expert, "moe_logits");
        moe_ids_ = dev(slots, "moe_ids");
        moe_w_ = dev(slots, "moe_weights");
        moe_groups_ = dev(ops::moe_group_words(uint32_t(slots), cfg.n_expert), "moe_groups");
        moe_gate_ = dev(slots * cfg.expert_ffn_dim, "moe_gate");
        moe_up_ = dev(slots * cfg.expert_ffn_dim, "moe_up");
        moe_out_ = dev(slots * dim, "moe_out");
        moe_shared_logit_ = dev(U, "moe_shared_logit");
    }
    if (cfg.arch->mla) {
        const uint64_t H = cfg.n_heads, slots = uint64_t(U) * H;
        mla_qa_ = dev(std::max<uint64_t>(uint64_t(U) * cfg.q_lora_rank, 1), "mla_q_a");
        mla_q_ = dev(slots * cfg.mla_qk, "mla_q");
        mla_kva_ = dev(uint64_t(U) * cfg.kv_dim(), "mla_kv_a");
        mla_qn_ = dev(slots * (cfg.mla_qk - cfg.rope_dim), "mla_q_nope");
        mla_qabs_ = dev(slots * cfg.kv_lora_rank, "mla_q_absorbed");
        mla_o_ = dev(slots * cfg.mla_v, "mla_o");
        // Slot t * H + h of the per-head matvecs reads head h's matrix.
        head_ids_ = ctx.create_buffer(slots * 4, MemoryUsage::Device, "mla_head_ids");
        mla_groups_ = dev(ops::moe_group_words(uint32_t(slots), cfg.n_heads), "mla_head_groups");
        std::vector<uint32_t> ids(slots);
        for (uint64_t i = 0; i < slots; ++i) ids[i] = uint32_t(i % H);
        ctx.upload(head_ids_, ids.data(), ids.size() * 4);
    }
    last_ = dev(dim, "last");
    qkv_ = dev(uint64_t(qd) + 2ull * kv, "qkv");
    gate_up_ = dev(std::max(2ull * ffn, 1ull), "gate_up");
    xq_ = ctx.create_buffer(std::max<uint64_t>(q8_scratch_bytes(ctx.caps(), cfg, opts_), 4), MemoryUsage::Device, "xq");
    const bool first = range_.first == 0, last = range_.end() == cfg.n_layers;
    if (last) {
        logits_ = ctx.create_buffer(uint64_t(opts_.n_seq) * cfg.n_vocab * 4, MemoryUsage::DeviceHostVisible, "logits");
        // Readback (host-cached) memory: the host reads every byte of it after each ubatch.
        if (opts_.all_logits) all_logits_ = ctx.create_buffer(plan_.all_logits, MemoryUsage::Readback, "all_logits");
        argmax_ = ctx.create_buffer(4ull * opts_.n_seq, MemoryUsage::Readback, "argmax");
    }
    // A split's hand-off: this stage's last stream copies the step's rows of x into send_, the host
    // copies them into the next stage's recv_, whose first stream copies them into its x.
    if (!last) send_ = ctx.create_buffer(uint64_t(U) * dim * 4, MemoryUsage::Readback, "x_send");
    if (!first) recv_ = ctx.create_buffer(uint64_t(U) * dim * 4, MemoryUsage::Upload, "x_recv");
    positions_ = ctx.create_buffer(uint64_t(U) * 4, MemoryUsage::Upload, "positions");
    rel_pos_ = ctx.create_buffer(uint64_t(U) * 4, MemoryUsage::Upload, "input_positions");
    segs_ = ctx.create_buffer(uint64_t(U) * 8, MemoryUsage::Upload, "segments");
    if (cfg.arch->cross_attention) {
        for (uint32_t l = 0; l < cfg.n_layers; ++l) {
            cross_k_.push_back(ctx.create_buffer(kv_row * plan_.n_ctx, MemoryUsage::Device, fmt::format("cross_k.{}", l)));
            cross_v_.push_back(ctx.create_buffer(kv_row * plan_.n_ctx, MemoryUsage::Device, fmt::format("cross_v.{}", l)));
        }
        enc_ = ctx.create_buffer(uint64_t(plan_.n_ctx) * dim * 4, MemoryUsage::Upload, "encoder_output");
        enc_rows_ = ctx.create_buffer(uint64_t(plan_.n_ctx) * 4, MemoryUsage::Upload, "encoder_rows");
        cross_pos_ = ctx.create_buffer(uint64_t(U) * 4, MemoryUsage::Upload, "cross_positions");
        cross_q_ = dev(uint64_t(U) * qd, "cross_q");
        cross_att_ = dev(uint64_t(U) * qd, "cross_att");
        auto* rows = static_cast<int32_t*>(enc_rows_.mapped());
        for (uint32_t i = 0; i < plan_.n_ctx; ++i) rows[i] = int32_t(i);
    }
    ids_ = ctx.create_buffer(uint64_t(U) * 4, MemoryUsage::Upload, "ids");
    if (!gpu_embed_ && first) embed_in_ = ctx.create_buffer(uint64_t(U) * dim * 4, MemoryUsage::Upload, "embed_in");
    attn_scratch_ = ctx.create_buffer(std::max<uint64_t>(plan_.attention_scratch, 16), MemoryUsage::Device, "attn_scratch");
    if (stages.size() > 1)
        next_.reset(new ModelGpu(StageTag{tag.before + layout_.bytes, tag.total}, stages.subspan(1), file, cfg, opts_, progress));
    if (next_) kv_block_bytes_ += next_->kv_block_bytes_;
}

ModelGpu::~ModelGpu() = default;

std::vector<PipelineDesc> ModelGpu::pipelines() const {
    std::vector<PipelineDesc> out;
    auto add = [&](std::vector<PipelineDesc> v) {
        for (auto& d : v)
            if (std::none_of(out.begin(), out.end(), [&](const PipelineDesc& o) { return o.key() == d.key(); }))
                out.push_back(std::move(d));
    };
    const DeviceCaps& caps = ctx_.caps();
    // The shapes a model records all the time: a lone token, a full prompt chunk, and decode batches
    // of 2..8 sequences with prompt chunks of as many tokens (larger batches run as groups of <= 8
    // rows). Every layer's own plan: mixed files (Q4_K_M: Q6_K attn_v / ffn_down in some layers)
    // need several variants of one op.
    std::vector<StepShape> shapes{{1, false}, {opts_.ubatch, false}};
    for (uint32_t m = 2; m <= std::min(opts_.n_seq, 8u); ++m) {
        if (m <= opts_.ubatch) shapes.push_back({m, false});  // a chunk is never longer than ubatch
        shapes.push_back({m, true});
    }
    const bool head = cfg_.arch->lm_head && range_.end() == cfg_.n_layers;
    for (const StepShape& shape : shapes) {
        for (uint32_t l = range_.first; l < range_.end(); ++l)
            add(plan_layer(caps, cfg_, layout_.layers[l], l, shape, kv_geometry()).pipelines(ctx_));
        if (head) add(plan_head(caps, cfg_, layout_, shape, opts_.all_logits).out.pipelines());
    }
    // An encoder-decoder's cross K/V projections run once per encoder output, in chunks of the
    // scratch's rows (a short prompt, or the last chunk: fewer; up to 8 rows take their own forms).
    std::vector<uint32_t> cross_rows{scratch_rows(opts_)};
    for (uint32_t rows = 1; rows <= std::min(8u, scratch_rows(opts_)); ++rows) cross_rows.push_back(rows);
    if (cfg_.arch->cross_attention)
        for (uint32_t rows : cross_rows)
            for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
                const CrossKvPlan kp = plan_cross_kv(caps, layout_.layers[l], rows);
                add(kp.k.kernel.pipelines());
                add(kp.v.kernel.pipelines());
            }
    if (gpu_embed_ && range_.first == 0) add(ops::get_rows_pipelines(ctx_, layout_.token_embd.type));
    if (layout_.position_embd.present()) add(ops::get_rows_pipelines(ctx_, layout_.position_embd.type));
    add(ops::small_op_pipelines(ctx_, opts_.kv_type));
    return out;
}

bool ModelGpu::int_dot_layers(const StepShape& shape) const {
    if (next_ && next_->int_dot_layers(shape)) return true;
    for (uint32_t l = range_.first; l < range_.end(); ++l) {
        const LayerPlan p = plan_layer(ctx_.caps(), cfg_, layout_.layers[l], l, shape, kv_geometry());
        for (const LinearStep* s : {&p.attn.qkv, &p.attn.q, &p.attn.k, &p.attn.v, &p.attn.wo, &p.attn.q_a, &p.attn.q_b,
                                    &p.attn.kv_a, &p.cross.q, &p.cross.o, &p.ffn.gate_up, &p.ffn.gate, &p.ffn.up,
                                    &p.ffn.down})
            if (s->runs() && s->kernel.int_dot()) return true;
        const MoePlan& m = p.ffn.moe;
        if (m.runs && (m.grouped ? m.gate_mm.int_dot() || m.up_mm.int_dot() || m.down_mm.int_dot()
                                 : m.gate.int_dot() || m.up.int_dot() || m.down.int_dot()))
            return true;
    }
    return false;
}

bool ModelGpu::int_dot_matvecs() const {
    const StepShape lone{1, false};
    if (int_dot_layers(lone)) return true;
    const ModelGpu& last = tail();
    return last.cfg_.arch->lm_head &&
           plan_head(last.ctx_.caps(), last.cfg_, last.layout_, lone, last.opts_.all_logits).out.int_dot();
}

bool ModelGpu::int_dot_matmuls() const { return opts_.ubatch > 1 && int_dot_layers({opts_.ubatch, false}); }

KvGeometry ModelGpu::kv_geometry() const { return {plan_.n_ctx, opts_.ubatch, opts_.kv_type}; }

ops::MatvecInput ModelGpu::rms_input(const DeviceTensor& w) const {
    return {ops::MatvecInput::Kind::RmsNorm, w.slice(), cfg_.norm_eps};
}

void ModelGpu::norm(CommandStream& s, const BufferSlice& x, const DeviceTensor& w, const DeviceTensor& b,
                    const BufferSlice& y, uint32_t rows) {
    if (cfg_.arch->norm == NormKind::Layer) {
        const BufferSlice bias = b.slice();
        ops::layer_norm(ctx_, s, x, w.slice(), b.present() ? &bias : nullptr, y, rows, cfg_.dim, cfg_.norm_eps);
    } else {
        ops::rms_norm(ctx_, s, x, w.slice(), y, rows, cfg_.dim, cfg_.norm_eps);
    }
}

ops::MatvecInput ModelGpu::with_q8(const ops::LinearPlan& plan, ops::MatvecInput input, SharedQ8* shared) {
    if (!plan.int_dot()) return input;
    input.q8 = xq_.slice(0, uint64_t(plan.m) * ops::q8_1_row_bytes(plan.k));
    if (shared) {
        input.q8_ready = shared->ready;
        shared->ready = true;
    }
    return input;
}

void ModelGpu::project(CommandStream& s, const LayerWeights& L, const LinearStep& st, const BufferSlice& x,
                       const BufferSlice& y, const ops::MatvecInput& input, SharedQ8* shared) {
    const BufferSlice bias = st.bias != kNoRole ? L[st.bias].slice() : BufferSlice{};
    ops::linear(ctx_, s, st.kernel, L[st.w].slice(), x, y, st.residual ? &y : nullptr,
                st.bias != kNoRole ? &bias : nullptr, with_q8(st.kernel, input, shared));
}

// --- recording -------------------------------------------------------------------------------------

void ModelGpu::record_embed(CommandStream& s, uint32_t n) {
    const uint64_t row = uint64_t(cfg_.dim) * 4;
    const BufferSlice x = x_.slice(0, row * n);
    if (gpu_embed_)
        ops::get_rows(ctx_, s, w_.token_embd.type, w_.token_embd.slice(), cfg_.n_vocab, cfg_.dim, ids_.slice(0, 4ull * n),
                      n, x);
    else
        s.copy(embed_in_.slice(0, row * n), x);
    if (cfg_.arch->embed_scale) ops::scale(ctx_, s, x, n * cfg_.dim, std::sqrt(float(cfg_.dim)));
    if (cfg_.arch->positions == PositionKind::Learned) {
        // x += position_embd[pos]: the positions buffer doubles as the row ids.
        const BufferSlice rows = tmp_.slice(0, row * n);
        ops::get_rows(ctx_, s, w_.position_embd.type, w_.position_embd.slice(), w_.position_embd.rows, cfg_.dim,
                      rel_pos_.slice(0, 4ull * n), n, rows);
        ops::add(ctx_, s, x, rows, x, n * cfg_.dim);
    }
    // Encoders: x += token_types[0] (every token is of type 0), then x = norm(x).
    if (w_.token_types.present()) {
        const BufferSlice type0{w_.token_types.view.buffer, w_.token_types.view.offset, row};
        ops::add_rows(ctx_, s, x, type0, n, cfg_.dim);
    }
    if (w_.embd_norm.present()) norm(s, x, w_.embd_norm, w_.embd_norm_b, x, n);
}

ModelGpu::Activations ModelGpu::activations(const LayerPlan& p) const {
    const uint32_t n = p.shape.n, qd = cfg_.q_dim(), kv = cfg_.kv_dim(), ffn = dense_ffn_dim(cfg_);
    auto rows = [&](const Buffer& b, uint64_t width) { return b.slice(0, 4ull * width * n); };
    Activations a;
    if (p.attn.fused_qkv) {  // one (q + 2 kv) vector
        a.q = qkv_.slice(0, 4ull * qd);
        a.k = qkv_.slice(4ull * qd, 4ull * kv);
        a.v = qkv_.slice(4ull * (qd + kv), 4ull * kv);
    } else {
        a.q = rows(q_, qd), a.k = rows(k_, kv), a.v = rows(v_, kv);
    }
    if (p.ffn.fused_gate_up) {  // one (2 ffn) vector
        a.gate = gate_up_.slice(0, 4ull * ffn);
        a.up = gate_up_.slice(4ull * ffn, 4ull * ffn);
    } else {
        a.gate = rows(gate_, ffn), a.up = rows(up_, ffn);
    }
    return a;
}

void ModelGpu::record_layer(CommandStream& s, uint32_t l, const BatchShape& batch) {
    const LayerPlan plan = plan_layer(ctx_.caps(), cfg_, layout_.layers[l], l, batch,
                                      kv_geometry());
    const Activations act = activations(plan);
    if (plan.attn.mla) record_mla(s, l, plan.attn, batch);
    else record_attention(s, l, plan.attn, batch, act);
    if (plan.cross.runs) record_cross(s, l, plan.cross, batch.n);
    record_ffn(s, l, plan.ffn, batch.n, act);
}

void ModelGpu::record_cross(CommandStream& s, uint32_t l, const CrossPlan& p, uint32_t n) {
    using R = Role;
    const LayerWeights& L = layers_[l].w;
    const uint32_t dim = cfg_.dim, qd = cfg_.q_dim();
    const BufferSlice x = x_.slice(0, 4ull * dim * n);    // (n, dim) residual stream
    const BufferSlice xn = xn_.slice(0, 4ull * dim * n);  // (n, dim) normed
    const BufferSlice q = cross_q_.slice(0, 4ull * qd * n);     // (n, q_dim)
    const BufferSlice att = cross_att_.slice(0, 4ull * qd * n); // (n, q_dim)
    // q = wq_x · norm(x); att = attention over the encoder rows; x += wo_x · att
    const ops::MatvecInput in = p.fold_norm ? rms_input(L[R::CrossNorm]) : ops::MatvecInput{};
    if (!p.fold_norm) norm(s, x, L[R::CrossNorm], {}, xn, n);
    project(s, L, p.q, p.fold_norm ? x : xn, q, in);
    ops::attention(ctx_, s, p.attn, q, cross_k_[l].slice(), cross_v_[l].slice(), cross_pos_.slice(0, 4ull * n), att,
                   attn_scratch_.slice());
    project(s, L, p.o, att, x);
}

void ModelGpu::set_encoder_output(std::span<const float> states, uint32_t n_rows) {
    if (!cfg_.arch->cross_attention)
        throw std::logic_error(fmt::format("set_encoder_output: a {} model has no cross-attention", cfg_.arch->name));
    if (n_rows == 0 || n_rows > plan_.n_ctx)
        throw ContextFullError(fmt::format("{} encoder rows: the cross-attention holds 1..{} (the context)", n_rows,
                                           plan_.n_ctx));
    if (states.size() != size_t(n_rows) * cfg_.dim)
        throw std::invalid_argument(fmt::format("set_encoder_output: {} floats for {} rows of {}", states.size(), n_rows,
                                                cfg_.dim));
    std::memcpy(enc_.mapped(), states.data(), states.size() * 4);
    const uint32_t kv = cfg_.kv_dim(), dim = cfg_.dim, chunk = scratch_rows(opts_);
    CommandStream s(ctx_);
    s.begin();
    // K_x|V_x rows [r0, r0 + m) = W_x · encoder rows, in chunks of the scratch's rows, stored as the cache type.
    for (uint32_t r0 = 0; r0 < n_rows; r0 += chunk) {
        const uint32_t m = std::min(chunk, n_rows - r0);
        const BufferSlice src = enc_.slice(4ull * dim * r0, 4ull * dim * m);
        const BufferSlice k = k_.slice(0, 4ull * kv * m), v = v_.slice(0, 4ull * kv * m);
        for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
            const CrossKvPlan kp = plan_cross_kv(ctx_.caps(), layout_.layers[l], m);
            project(s, layers_[l].w, kp.k, src, k);
            project(s, layers_[l].w, kp.v, src, v);
            ops::kv_store_pair(ctx_, s, k, cross_k_[l].slice(), v, cross_v_[l].slice(), enc_rows_.slice(4ull * r0, 4ull * m),
                               m, kv, plan_.n_ctx, opts_.kv_type);
        }
    }
    s.end();
    s.submit_and_wait();
    auto* pos = static_cast<int32_t*>(cross_pos_.mapped());
    for (uint32_t i = 0; i < scratch_rows(opts_); ++i) pos[i] = int32_t(n_rows - 1);
    n_enc_ = n_rows;
    n_past_[0] = 0;
}

BufferSlice ModelGpu::segment_rows(const BufferSlice& b, uint64_t width, size_t i, uint32_t rows) {
    return BufferSlice{b.buffer, b.offset + 4ull * width * rows * i, 4ull * width * rows};
}

ops::KvPages ModelGpu::kv_pages(uint32_t l, uint32_t row, bool per_token) const {
    const LayerState& L = layers_[l];
    const Buffer& tables = L.ring ? ring_tables_ : kv_tables_;
    const uint64_t stride = 4ull * kv_blocks(L.kv_rows);
    return {tables.slice(stride * row, tables.size() - stride * row), kKvBlockRows, L.pool_rows, per_token};
}

BufferSlice ModelGpu::attention_scratch_region(size_t i) const {
    if (plan_.attention_scratch == 0) return attn_scratch_.slice();
    const uint64_t region = plan_.attention_scratch / opts_.n_seq;
    return attn_scratch_.slice(region * i, region);
}

void ModelGpu::record_attention(CommandStream& s, uint32_t l, const AttentionPlan& p, const BatchShape& batch,
                                const Activations& a) {
    using R = Role;
    const uint32_t n = batch.n;
    const LayerWeights& L = layers_[l].w;
    const ModelConfig& c = cfg_;
    const uint32_t dim = c.dim, qd = c.q_dim(), kv = c.kv_dim();
    const BufferSlice x = x_.slice(0, 4ull * dim * n);    // (n, dim) residual stream
    const BufferSlice xn = xn_.slice(0, 4ull * dim * n);  // (n, dim) normed
    const BufferSlice att = att_.slice(0, 4ull * qd * n); // (n, q_dim) attention output
    const BufferSlice pos = positions_.slice(0, 4ull * n);     // cache rows
    const BufferSlice in_pos = rel_pos_.slice(0, 4ull * n);   // positions in each input (RoPE)

    // q (n, q_dim), k (n, kv_dim), v (n, kv_dim) = W · norm(x) (+ b); a decode step's matvec reads x
    // and normalizes it itself
    const ops::MatvecInput in = p.fold_norm ? rms_input(L[R::AttnNorm]) : ops::MatvecInput{};
    const BufferSlice& src = p.fold_norm || p.norm_after ? x : xn;
    if (!p.fold_norm && !p.norm_after) norm(s, x, L[R::AttnNorm], L[R::AttnNormB], xn, n);
    if (p.fused_qkv) {
        project(s, L, p.qkv, src, qkv_.slice(), in);  // q|k|v (q_dim + 2 kv_dim)
    } else {
        SharedQ8 q8;  // integer-dot projections quantize norm(x) once
        project(s, L, p.q, src, a.q, in, &q8);
        project(s, L, p.k, src, a.k, in, &q8);
        project(s, L, p.v, src, a.v, in, &q8);
    }
    if (c.clamp_kqv > 0) {  // MPT: q, k, v clamped after their biases
        if (p.fused_qkv) {
            ops::clamp(ctx_, s, qkv_.slice(), qd + 2 * kv, c.clamp_kqv);
        } else {
            ops::clamp(ctx_, s, a.q, n * qd, c.clamp_kqv);
            ops::clamp(ctx_, s, a.k, n * kv, c.clamp_kqv);
            ops::clamp(ctx_, s, a.v, n * kv, c.clamp_kqv);
        }
    }
    if (p.qk_layer_norm) {  // all of q and all of k LayerNorm'd (jina-bert-v2 qk-post-norm)
        const BufferSlice qb = L[R::QNormB].slice(), kb = L[R::KNormB].slice();
        ops::layer_norm(ctx_, s, a.q, L[R::QNorm].slice(), L[R::QNormB].present() ? &qb : nullptr, a.q, n, c.q_dim(),
                        c.norm_eps);
        ops::layer_norm(ctx_, s, a.k, L[R::KNorm].slice(), L[R::KNormB].present() ? &kb : nullptr, a.k, n, c.kv_dim(),
                        c.norm_eps);
    } else if (p.qk_norm && p.qk_norm_full) {  // all of q and all of k RMS-normalized (OLMoE)
        ops::rms_norm(ctx_, s, a.q, L[R::QNorm].slice(), a.q, n, c.q_dim(), c.norm_eps);
        ops::rms_norm(ctx_, s, a.k, L[R::KNorm].slice(), a.k, n, c.kv_dim(), c.norm_eps);
    } else if (p.qk_norm) {  // every head of q and k is RMS-normalized on its own
        ops::rms_norm(ctx_, s, a.q, L[R::QNorm].slice(), a.q, n * c.n_heads, c.head_dim, c.norm_eps);
        ops::rms_norm(ctx_, s, a.k, L[R::KNorm].slice(), a.k, n * c.n_kv_heads, c.head_dim, c.norm_eps);
    }
    const RopeConfig& rc = c.rope_for(l);
    const ops::RopeParams rope_q{c.n_heads, c.head_dim, c.rope_dim, rc.base, c.arch->rope_layout, rc.freq_scale,
                                 rc.ext_factor, rc.attn_factor, rc.beta_fast, rc.beta_slow, rc.n_ctx_orig};
    const BufferSlice factors = w_.rope_factors.slice();
    const BufferSlice* ff = w_.rope_factors.present() ? &factors : nullptr;
    if (p.rope && !p.fused_store) {  // q, k rotated in place
        ops::rope(ctx_, s, a.q, in_pos, n, rope_q, ff);
        ops::RopeParams rope_k = rope_q;
        rope_k.n_heads = c.n_kv_heads;
        ops::rope(ctx_, s, a.k, in_pos, n, rope_k, ff);
    }
    // att (n, q_dim): the K/V store and attention of a chunk (n rows of one sequence), of a whole decode
    // batch at once (batched: one row per sequence, each through its table row), or of each sequence
    // of a batch in turn (rows bound in place, at any offset).
    const uint32_t seg_rows = p.batched ? n : p.attn.n_tokens;
    const size_t calls = batch.decode_batch && !p.batched ? batch.n : 1;
    const BufferSlice kc = layers_[l].k_cache.slice(), vc = layers_[l].v_cache.slice();
    for (size_t i = 0; i < calls; ++i) {
        auto seg = [&](const BufferSlice& b, uint64_t width) { return segment_rows(b, width, i, seg_rows); };
        const BufferSlice sp = seg(pos, 1);
        const BufferSlice scratch = p.batched ? attn_scratch_.slice() : attention_scratch_region(i);
        const ops::KvPages pages = kv_pages(l, uint32_t(i), p.batched);
        if (p.fused_store) {  // rope(q), rope(k), the K/V store and attention: one kernel
            const ops::NewKv new_kv{seg(a.k, kv), seg(a.v, kv), p.rope ? &rope_q : nullptr, p.rope ? ff : nullptr};
            ops::attention_store(ctx_, s, p.attn, seg(a.q, qd), new_kv, kc, vc, sp, seg(att, qd), scratch,
                                 {.sinks = L[R::Sinks].slice(), .pages = pages});
        } else {
            ops::kv_store_pair(ctx_, s, seg(a.k, kv), kc, seg(a.v, kv), vc, sp, seg_rows, kv, p.attn.n_ctx,
                               opts_.kv_type, pages);
            const BufferSlice bias = layers_[l].pos_bias >= 0 ? pos_bias_[size_t(layers_[l].pos_bias)].slice() : BufferSlice{};
            const BufferSlice segs = p.attn.segmented ? seg(segs_.slice(), 2) : BufferSlice{};
            ops::attention(ctx_, s, p.attn, seg(a.q, qd), kc, vc, sp, seg(att, qd), scratch,
                           {bias, segs, L[R::Sinks].slice(), pages});
        }
    }
    // x += post_norm(wo · att + bo)
    if (p.norm_2) s.copy(x, xn);  // the layer's input, added again after the norm
    if (p.post_norm) {
        const BufferSlice tmp = tmp_.slice(0, 4ull * dim * n);
        project(s, L, p.wo, att, tmp);
        ops::rms_norm(ctx_, s, tmp, L[R::PostAttnNorm].slice(), tmp, n, dim, c.norm_eps);
        ops::add(ctx_, s, x, tmp, x, n * dim);
    } else {
        project(s, L, p.wo, att, x);
    }
    if (p.norm_after) norm(s, x, L[R::AttnNorm], L[R::AttnNormB], x, n);  // x = norm(x + wo · att + bo)
    if (p.norm_2) {  // x = norm_2(x + the layer's input)
        ops::add(ctx_, s, x, xn, x, n * dim);
        norm(s, x, L[R::AttnNorm2], L[R::AttnNorm2B], x, n);
    }
}

void ModelGpu::record_mla(CommandStream& s, uint32_t l, const AttentionPlan& p, const BatchShape& batch) {
    using R = Role;
    const uint32_t n = batch.n;
    const LayerWeights& L = layers_[l].w;
    const ModelConfig& c = cfg_;
    const uint32_t dim = c.dim, H = c.n_heads, qk = c.mla_qk, rope = c.rope_dim, nope = qk - rope, r = c.kv_lora_rank;
    const uint32_t row = c.kv_dim(), vm = c.mla_v, slots = n * H;  // row = rope + r, a cache row and a query head
    auto rows = [&](const Buffer& b, uint64_t width) { return b.slice(0, 4ull * width * n); };
    const BufferSlice x = rows(x_, dim), xn = rows(xn_, dim);
    const BufferSlice q = rows(mla_q_, uint64_t(H) * qk);     // (n, H, qk): per head [nope | rope]
    const BufferSlice kva = rows(mla_kva_, row);              // (n, r + rope): latent, then the rotary key
    const BufferSlice krow = rows(k_, row);                   // (n, rope + r): the cached row
    const BufferSlice lat = rows(v_, r);                      // (n, r): the latent, normed
    const BufferSlice qh = rows(q_, uint64_t(H) * row);       // (n, H, rope + r): the attention's queries
    const BufferSlice att = rows(att_, uint64_t(H) * r);      // (n, H, r)
    const BufferSlice qn = rows(mla_qn_, uint64_t(H) * nope); // (n * H, nope)
    const BufferSlice qabs = rows(mla_qabs_, uint64_t(H) * r);// (n * H, r)
    const BufferSlice o = rows(mla_o_, uint64_t(H) * vm);     // (n * H, v_mla) = (n, H * v_mla)
    const BufferSlice heads = head_ids_.slice(0, 4ull * slots);
    const BufferSlice pos = positions_.slice(0, 4ull * n), in_pos = rel_pos_.slice(0, 4ull * n);

    norm(s, x, L[R::AttnNorm], L[R::AttnNormB], xn, n);
    if (p.q_a.runs()) {  // q = wq_b · rms_norm(wq_a · xn)
        const BufferSlice qa = rows(mla_qa_, c.q_lora_rank);
        project(s, L, p.q_a, xn, qa);
        ops::rms_norm(ctx_, s, qa, L[R::QANorm].slice(), qa, n, c.q_lora_rank, c.norm_eps);
        project(s, L, p.q_b, qa, q);
    } else {
        project(s, L, p.q, xn, q);
    }
    project(s, L, p.kv_a, xn, kva);
    // K rows [k_pe | rms_norm(c)], then RoPE over their first rope dims (one head of rope + r)
    ops::copy_cols(ctx_, s, {kva, row, r}, {krow, row, 0}, n, rope);
    ops::copy_cols(ctx_, s, {kva, row, 0}, {lat, r, 0}, n, r);
    ops::rms_norm(ctx_, s, lat, L[R::KvANorm].slice(), lat, n, r, c.norm_eps);
    ops::copy_cols(ctx_, s, {lat, r, 0}, {krow, row, rope}, n, r);
    // Queries [q_pe | wk_b_h · q_nope_h] per (token, head) slot, then RoPE likewise
    ops::copy_cols(ctx_, s, {q, qk, nope}, {qh, row, 0}, slots, rope);
    ops::copy_cols(ctx_, s, {q, qk, 0}, {qn, nope, 0}, slots, nope);
    // A chunk groups its slots per head once for both per-head projections (the same constant ids).
    const BufferSlice groups = mla_groups_.slice(0, 4ull * ops::moe_group_words(slots, H));
    if (p.mla_grouped) {
        ops::moe_group(ctx_, s, heads, groups, slots, H);
        ops::moe_matmul(ctx_, s, p.k_b_mm, L[R::WkB].slice(), H, qn, 1, groups, qabs, n, slots, r, nope);
    } else {
        ops::moe_matvec(ctx_, s, p.k_b, L[R::WkB].slice(), H, qn, 1, heads, qabs, slots, r, nope);
    }
    ops::copy_cols(ctx_, s, {qabs, r, 0}, {qh, row, rope}, slots, r);
    const RopeConfig& rc = c.rope_for(l);
    const ops::RopeParams rope_q{H, row, rope, rc.base, c.arch->rope_layout, rc.freq_scale, rc.ext_factor,
                                 rc.attn_factor, rc.beta_fast, rc.beta_slow, rc.n_ctx_orig};
    ops::RopeParams rope_k = rope_q;
    rope_k.n_heads = 1;
    ops::rope(ctx_, s, qh, in_pos, n, rope_q);
    ops::rope(ctx_, s, krow, in_pos, n, rope_k);

    // The K rows stored and attended over (one KV head, V = the latent): a chunk's, a whole decode
    // batch's at once (batched), or each sequence's of a batch in turn.
    const uint32_t seg_rows = p.batched ? n : p.attn.n_tokens;
    const size_t calls = batch.decode_batch && !p.batched ? batch.n : 1;
    const BufferSlice kc = layers_[l].k_cache.slice();
    for (size_t i = 0; i < calls; ++i) {
        auto seg = [&](const BufferSlice& b, uint64_t width) { return segment_rows(b, width, i, seg_rows); };
        const BufferSlice scratch = p.batched ? attn_scratch_.slice() : attention_scratch_region(i);
        const ops::KvPages pages = kv_pages(l, uint32_t(i), p.batched);
        ops::kv_store(ctx_, s, seg(krow, row), kc, seg(pos, 1), seg_rows, row, p.attn.n_ctx, opts_.kv_type, pages);
        ops::attention(ctx_, s, p.attn, seg(qh, uint64_t(H) * row), kc, kc, seg(pos, 1), seg(att, uint64_t(H) * r),
                       scratch, {.pages = pages});
    }
    // x += wo · [wv_b_h · att_h]_h
    if (p.mla_grouped) ops::moe_matmul(ctx_, s, p.v_b_mm, L[R::WvB].slice(), H, att, 1, groups, o, n, slots, vm, r);
    else ops::moe_matvec(ctx_, s, p.v_b, L[R::WvB].slice(), H, att, 1, heads, o, slots, vm, r);
    project(s, L, p.wo, o, x);
}

void ModelGpu::record_moe(CommandStream& s, uint32_t l, const FfnPlan& p, uint32_t n, const Activations& a) {
    using R = Role;
    const LayerWeights& L = layers_[l].w;
    const MoePlan& m = p.moe;
    const uint32_t dim = cfg_.dim, E = cfg_.n_expert, K = cfg_.n_expert_used, fe = cfg_.expert_ffn_dim, slots = n * K;
    const BufferSlice x = x_.slice(0, 4ull * dim * n);    // (n, dim) residual stream
    const BufferSlice xn = xn_.slice(0, 4ull * dim * n);  // (n, dim) normed
    norm(s, x, L[R::FfnNorm], L[R::FfnNormB], xn, n);

    // ids, w (n, K) = route(router · xn): the experts of each token and their weights
    const BufferSlice logits = moe_logits_.slice(0, 4ull * E * n);
    const BufferSlice ids = moe_ids_.slice(0, 4ull * slots), w = moe_w_.slice(0, 4ull * slots);
    project(s, L, m.router, xn, logits);
    const BufferSlice probs_bias = L[R::BExpProbs].slice();
    ops::moe_route(ctx_, s, m.route, logits, ids, w, n, m.route.bias ? &probs_bias : nullptr);

    // gate, up (n * K, fe) = W_e · xn[t] for slot t * K + j; out (n * K, dim) = W_down_e · act(gate, up)
    // (+ each expert's bias row, gpt-oss)
    const BufferSlice gate = moe_gate_.slice(0, 4ull * slots * fe), up = moe_up_.slice(0, 4ull * slots * fe);
    const BufferSlice out = moe_out_.slice(0, 4ull * slots * dim);
    const BufferSlice bg = L[R::BGateExps].slice(), bu = L[R::BUpExps].slice(), bd = L[R::BDownExps].slice();
    if (m.grouped) {
        // A chunk: the slots sorted per expert once, then each projection as matmul tiles per expert
        // (every expert's rows read once per tile of its tokens), the GLU on its own between them.
        const BufferSlice groups = moe_groups_.slice(0, 4ull * ops::moe_group_words(slots, E));
        ops::moe_group(ctx_, s, ids, groups, slots, E);
        // The integer-dot forms read X as Q8_1: xn's rows quantized once for gate and up.
        ops::MatvecInput xq_n, xq_act;
        if (m.gate_mm.int_dot() || m.up_mm.int_dot()) xq_n.q8 = xq_.slice(0, uint64_t(n) * ops::q8_1_row_bytes(dim));
        if (m.down_mm.int_dot()) xq_act.q8 = xq_.slice(0, uint64_t(slots) * ops::q8_1_row_bytes(fe));
        ops::moe_matmul(ctx_, s, m.gate_mm, L[R::WGateExps].slice(), E, xn, K, groups, gate, n, slots, fe, dim,
                        m.biases ? &bg : nullptr, m.gate_mm.int_dot() ? xq_n : ops::MatvecInput{});
        xq_n.q8_ready = m.gate_mm.int_dot();
        ops::moe_matmul(ctx_, s, m.up_mm, L[R::WUpExps].slice(), E, xn, K, groups, up, n, slots, fe, dim,
                        m.biases ? &bu : nullptr, m.up_mm.int_dot() ? xq_n : ops::MatvecInput{});
        switch (p.act) {
            case FfnKind::GeGlu: ops::geglu(ctx_, s, gate, up, gate, slots * fe); break;
            case FfnKind::SwiGluOai: ops::swiglu_oai(ctx_, s, gate, up, gate, slots * fe); break;
            default: ops::swiglu(ctx_, s, gate, up, gate, slots * fe); break;
        }
        ops::moe_matmul(ctx_, s, m.down_mm, L[R::WDownExps].slice(), E, gate, 1, groups, out, n, slots, dim, fe,
                        m.biases ? &bd : nullptr, m.down_mm.int_dot() ? xq_act : ops::MatvecInput{});
    } else {  // decode: a matvec per slot reading its expert's rows, the GLU formed as down loads it
        // (the integer-dot forms: xn quantized once for gate and up, the GLU as down's X is quantized)
        ops::MatvecInput xq_n;
        if (m.gate.int_dot() || m.up.int_dot()) xq_n.q8 = xq_.slice(0, uint64_t(n) * ops::q8_1_row_bytes(dim));
        ops::moe_matvec(ctx_, s, m.gate, L[R::WGateExps].slice(), E, xn, K, ids, gate, slots, fe, dim,
                        m.gate.int_dot() ? xq_n : ops::MatvecInput{}, m.biases ? &bg : nullptr);
        xq_n.q8_ready = m.gate.int_dot();
        ops::moe_matvec(ctx_, s, m.up, L[R::WUpExps].slice(), E, xn, K, ids, up, slots, fe, dim,
                        m.up.int_dot() ? xq_n : ops::MatvecInput{}, m.biases ? &bu : nullptr);
        ops::MatvecInput act{};
        act.kind = m.down.input;
        act.up = up;
        if (m.down.int_dot()) act.q8 = xq_.slice(0, uint64_t(slots) * ops::q8_1_row_bytes(fe));
        ops::moe_matvec(ctx_, s, m.down, L[R::WDownExps].slice(), E, gate, 1, ids, out, slots, dim, fe, act,
                        m.biases ? &bd : nullptr);
    }
    if (!m.shared) {
        ops::moe_combine(ctx_, s, out, w, x, n, K, dim);  // x += sum_j w_j · out_j
        return;
    }

    // The shared expert, a dense FFN of xn into tmp (n, dim), and its gate logit (n); then
    // x += sum_j w_j · out_j + sigmoid(logit) · tmp
    const uint32_t fs = cfg_.shared_ffn_dim;
    const BufferSlice tmp = tmp_.slice(0, 4ull * dim * n), glogit = moe_shared_logit_.slice(0, 4ull * n);
    SharedQ8 q8;
    project(s, L, p.gate, xn, a.gate, {}, &q8);
    project(s, L, p.up, xn, a.up, {}, &q8);
    ops::MatvecInput down_in{};
    if (p.fold_act) {
        down_in.kind = p.down.input;
        down_in.up = a.up;
    } else if (p.act == FfnKind::GeGlu) {
        ops::geglu(ctx_, s, a.gate, a.up, a.gate, n * fs);
    } else if (p.act == FfnKind::SwiGluOai) {
        ops::swiglu_oai(ctx_, s, a.gate, a.up, a.gate, n * fs);
    } else {
        ops::swiglu(ctx_, s, a.gate, a.up, a.gate, n * fs);
    }
    project(s, L, p.down, a.gate, tmp, down_in);
    if (m.shared_gate.runs()) project(s, L, m.shared_gate, xn, glogit);  // DeepSeek's shared expert has no gate
    ops::moe_combine(ctx_, s, out, w, x, n, K, dim, &tmp, m.shared_gate.runs() ? &glogit : nullptr);
}

void ModelGpu::record_ffn(CommandStream& s, uint32_t l, const FfnPlan& p, uint32_t n, const Activations& a) {
    using R = Role;
    if (p.moe.runs) {
        record_moe(s, l, p, n, a);
        return;
    }
    const LayerWeights& L = layers_[l].w;
    const uint32_t dim = cfg_.dim, ffn = cfg_.ffn_dim;
    const BufferSlice x = x_.slice(0, 4ull * dim * n);    // (n, dim) residual stream
    const BufferSlice xn = xn_.slice(0, 4ull * dim * n);  // (n, dim) normed

    // gate (n, ffn), up (n, ffn) = W · norm(x) (+ b_up)
    const ops::MatvecInput in = p.fold_norm ? rms_input(L[R::FfnNorm]) : ops::MatvecInput{};
    const BufferSlice& src = p.fold_norm || p.norm_after ? x : xn;
    if (!p.fold_norm && !p.norm_after) norm(s, x, L[R::FfnNorm], L[R::FfnNormB], xn, n);
    if (p.fused_gate_up) {
        project(s, L, p.gate_up, src, gate_up_.slice(), in);  // gate|up (2 ffn)
    } else {
        SharedQ8 q8;
        if (p.gate.runs()) project(s, L, p.gate, src, a.gate, in, &q8);
        project(s, L, p.up, src, a.up, in, &q8);
    }
    // gate (n, ffn) = act(gate, up), the activation always landing in `gate`; decode steps leave it
    // to the down projection's matvec, which forms it as it loads gate and up
    ops::MatvecInput down_in{};
    if (p.fold_act) {
        down_in.kind = p.down.input;
        down_in.up = a.up;
    } else {
        if (p.up_bias_apart) ops::add_rows(ctx_, s, a.up, L[R::BUp].slice(), n, ffn);
        switch (p.act) {
            case FfnKind::SwiGlu: ops::swiglu(ctx_, s, a.gate, a.up, a.gate, n * ffn); break;
            case FfnKind::GeGlu: ops::geglu(ctx_, s, a.gate, a.up, a.gate, n * ffn); break;
            case FfnKind::Gelu: ops::gelu(ctx_, s, a.up, a.gate, n * ffn); break;
            case FfnKind::Relu: ops::relu(ctx_, s, a.up, a.gate, n * ffn); break;
            case FfnKind::SwiGluOai: ops::swiglu_oai(ctx_, s, a.gate, a.up, a.gate, n * ffn); break;
        }
    }
    // x += post_norm(w_down · gate + b_down)
    if (p.post_norm) {
        const BufferSlice tmp = tmp_.slice(0, 4ull * dim * n);
        project(s, L, p.down, a.gate, tmp, down_in);
        ops::rms_norm(ctx_, s, tmp, L[R::PostFfnNorm].slice(), tmp, n, dim, cfg_.norm_eps);
        ops::add(ctx_, s, x, tmp, x, n * dim);
    } else {
        project(s, L, p.down, a.gate, x, down_in);
    }
    if (p.norm_after) norm(s, x, L[R::FfnNorm], L[R::FfnNormB], x, n);  // x = norm(x + w_down · act + b_down)
}

void ModelGpu::record_logits(CommandStream& s, const HeadPlan& h, const BufferSlice& x, const BufferSlice& normed,
                             const BufferSlice& logits) {
    const DeviceTensor& out = w_.output_tensor();
    if (h.fold_norm) {  // logits = output · rms_norm(x), the norm in the matvec
        ops::linear(ctx_, s, h.out, out.slice(), x, logits, nullptr, nullptr,
                    with_q8(h.out, rms_input(w_.output_norm), nullptr));
    } else {
        norm(s, x, w_.output_norm, w_.output_norm_b, normed, h.rows);
        ops::linear(ctx_, s, h.out, out.slice(), normed, logits, nullptr, nullptr, with_q8(h.out, {}, nullptr));
    }
    if (cfg_.final_softcap > 0) ops::softcap(ctx_, s, logits, h.rows * cfg_.n_vocab, cfg_.final_softcap);
}

void ModelGpu::record_head(CommandStream& s, const BatchShape& batch) {
    const uint32_t n = batch.n;
    const uint64_t row = uint64_t(cfg_.dim) * 4;
    const uint64_t vrow = uint64_t(cfg_.n_vocab) * 4;
    const HeadPlan h = plan_head(ctx_.caps(), cfg_, layout_, {n, batch.decode_batch}, opts_.all_logits);
    if (batch.decode_batch) {
        // Every row is a sequence's last token: n rows of logits, one argmax each.
        const BufferSlice rows = logits_.slice(0, vrow * n);
        record_logits(s, h, x_.slice(0, row * n), xn_.slice(0, row * n), rows);
        ops::argmax(ctx_, s, rows, argmax_.slice(0, 4ull * n), n, cfg_.n_vocab);
        return;
    }
    const BufferSlice logits = logits_.slice(0, vrow);
    if (opts_.all_logits) {
        // Every token's logits (perplexity); a decode step's as a decode batch's. xn is free once the
        // last layer has run. The last row is copied to logits_ so that logits() and argmax() see the
        // same values as the rows.
        record_logits(s, h, x_.slice(0, row * n), xn_.slice(0, row * n), all_logits_.slice(0, vrow * n));
        s.copy(all_logits_.slice(vrow * (n - 1), vrow), logits);
    } else {
        // Only the last token's logits are needed: x's last row is read in place (linear binds
        // windows), as a decode step's.
        record_logits(s, h, x_.slice(row * (n - 1), row), last_.slice(), logits);
    }
    ops::argmax(ctx_, s, logits, argmax_.slice(0, 4), 1, cfg_.n_vocab);
}

ModelGpu::Recording& ModelGpu::recording(const BatchShape& b) {
    auto it = recordings_.find(b);
    if (it != recordings_.end()) {
        it->second->last_used = ++recording_clock_;
        return *it->second;
    }
    // Prompt remainders of many sizes and ever-changing sets of decoding sequences would pile up:
    // keep the most recently used few (decode steps and full chunks are used all the time).
    const size_t keep = 6 + 3 * size_t(opts_.n_seq);
    while (recordings_.size() >= keep) {
        auto oldest = std::min_element(recordings_.begin(), recordings_.end(), [](const auto& x, const auto& y) {
            return x.second->last_used < y.second->last_used;
        });
        if (last_recording_ == oldest->second.get()) last_recording_ = nullptr;
        recordings_.erase(oldest);
    }
    auto rec = std::make_unique<Recording>();
    rec->last_used = ++recording_clock_;
    auto add = [&](auto&& fn) {
        auto s = std::make_unique<CommandStream>(ctx_);
        s->begin(profiling_);
        fn(*s);
        s->end();
        rec->streams.push_back(std::move(s));
        ++stats_.recordings;
    };
    // Streams: the embedding (or a split's hand-off in), every layer of the stage, the head (or the
    // hand-off out): submit() counts on the layers being streams 1..count.
    const uint64_t rows = 4ull * cfg_.dim * b.n;
    if (range_.first == 0) add([&](CommandStream& s) { record_embed(s, b.n); });
    else add([&](CommandStream& s) { s.copy(recv_.slice(0, rows), x_.slice(0, rows)); });
    for (uint32_t l = range_.first; l < range_.end(); ++l) add([&](CommandStream& s) { record_layer(s, l, b); });
    if (next_) add([&](CommandStream& s) { s.copy(x_.slice(0, rows), send_.slice(0, rows)); });
    else if (cfg_.arch->lm_head) add([&](CommandStream& s) { record_head(s, b); });
    return *recordings_.emplace(b, std::move(rec)).first->second;
}

// --- evaluation ------------------------------------------------------------------------------------

LayerTensors ModelGpu::read_layer_tensors(uint32_t layer, uint32_t n) const {
    // Probes run single-sequence eval: the chunk's plan.
    const LayerPlan p = plan_layer(ctx_.caps(), cfg_, layout_.layers[layer], layer, {n, false}, kv_geometry());
    const Activations a = activations(p);
    LayerTensors t;
    auto get = [&](const char* name, const BufferSlice& s, uint64_t width) {
        std::vector<float> v(width * n);
        ctx_.download(s, v.data(), v.size() * 4);
        t[name] = std::move(v);
    };
    if (p.attn.mla) {  // latent attention's own intermediates (ModelCpu::mla_attention names the same)
        get("mla_q", mla_q_.slice(), uint64_t(cfg_.n_heads) * cfg_.mla_qk);
        get("kv_row", k_.slice(), cfg_.kv_dim());
        get("attn_out", mla_o_.slice(), uint64_t(cfg_.n_heads) * cfg_.mla_v);
    } else {
        // RoPE fused into attention rotates q and k only inside that kernel.
        if (!(p.attn.rope && p.attn.fused_store)) {
            get("q_rope", a.q, cfg_.q_dim());
            get("k_rope", a.k, cfg_.kv_dim());
        }
        get("v", a.v, cfg_.kv_dim());
        get("attn_out", att_.slice(), cfg_.q_dim());
    }
    // Folded into a matvec, the norm's and the GLU's results exist only inside it; a norm after
    // the block leaves no normed input.
    if (!p.ffn.fold_norm && !p.ffn.norm_after) get("ffn_in", xn_.slice(), cfg_.dim);
    if (p.ffn.moe.runs) {
        get("moe_logits", moe_logits_.slice(), cfg_.n_expert);
    } else {
        get("ffn_up", a.up, cfg_.ffn_dim);
        if (!p.ffn.fold_act) get("ffn_act", a.gate, cfg_.ffn_dim);
    }
    get("x_out", x_.slice(), cfg_.dim);
    return t;
}

void ModelGpu::eval(std::span<const int32_t> tokens, const LayerProbe& probe) { eval_impl(0, tokens, probe, {}); }

void ModelGpu::require_head(const char* what) const {
    if (!cfg_.arch->lm_head)
        throw std::logic_error(fmt::format("{}: a {} model has no LM head (read hidden_states())", what, cfg_.arch->name));
}

void ModelGpu::eval_all_logits(std::span<const int32_t> tokens, const LogitsSink& sink) {
    require_head("eval_all_logits");
    if (!opts_.all_logits)
        throw std::logic_error("eval_all_logits: the model was loaded without ModelOptions::all_logits");
    eval_impl(0, tokens, {}, sink);
}

void ModelGpu::check_tokens(std::span<const int32_t> tokens) const {
    for (int32_t id : tokens)
        if (id < 0 || uint32_t(id) >= cfg_.n_vocab)
            throw std::out_of_range(fmt::format("token id {} outside the vocabulary (0..{})", id, cfg_.n_vocab - 1));
}

void ModelGpu::submit(Recording& rec, const LayerProbe& probe, uint32_t n) {
    // The ids are in ids_; where the embedding table is too big to bind, its rows are dequantized
    // straight from the mapped file into the upload buffer instead.
    if (!gpu_embed_ && range_.first == 0) {
        const GgufTensorInfo& info = *layout_.token_embd.source;
        auto data = file_.tensor_data(info);
        const size_t rb = row_bytes(info.type, cfg_.dim);
        const auto* ids = static_cast<const int32_t*>(ids_.mapped());
        auto* dst = static_cast<float*>(embed_in_.mapped());
        for (uint32_t i = 0; i < n; ++i)
            dequantize_row(info.type, data.data() + size_t(ids[i]) * rb, dst + size_t(i) * cfg_.dim, cfg_.dim);
    }
    last_recording_ = &rec;
    if (!probe) {
        std::vector<CommandStream*> streams;
        for (auto& s : rec.streams) streams.push_back(s.get());
        ctx_.submit(streams);
        ++stats_.submits;
    } else {
        for (size_t i = 0; i < rec.streams.size(); ++i) {
            rec.streams[i]->submit_and_wait();
            ++stats_.submits;
            if (i >= 1 && i <= range_.count) {
                const uint32_t layer = range_.first + uint32_t(i - 1);
                probe(layer, read_layer_tensors(layer, n));
            }
        }
    }
    stats_.tokens += n;
}

void ModelGpu::run(const BatchShape& b, const LayerProbe& probe) {
    submit(recording(b), probe, b.n);
    if (!next_) return;
    // The next stage reads the step's positions (and ids) as this one did, and its x from recv_.
    ModelGpu& nx = *next_;
    auto pass = [](const Buffer& from, const Buffer& to, size_t bytes) { std::memcpy(to.mapped(), from.mapped(), bytes); };
    pass(positions_, nx.positions_, 4ull * b.n);
    pass(rel_pos_, nx.rel_pos_, 4ull * b.n);
    pass(segs_, nx.segs_, 8ull * b.n);
    pass(ids_, nx.ids_, 4ull * b.n);
    pass(send_, nx.recv_, 4ull * cfg_.dim * b.n);
    const size_t table_rows = b.decode_batch ? b.n : 1;
    pass(kv_tables_, nx.kv_tables_, 4ull * table_rows * kv_blocks(plan_.n_ctx));
    if (ring_rows_) pass(ring_tables_, nx.ring_tables_, 4ull * table_rows * kv_blocks(ring_rows_));
    nx.run(b, probe);
}

void ModelGpu::eval_impl(uint32_t seq, std::span<const int32_t> tokens, const LayerProbe& probe,
                         const LogitsSink& sink) {
    if (tokens.empty()) throw std::invalid_argument("eval: no tokens");
    if (tokens.size() > plan_.n_ctx - n_past_[seq])
        throw ContextFullError(opts_.n_seq > 1
                                   ? fmt::format("{} tokens do not fit sequence {}: it holds {} tokens and {} are used",
                                                 tokens.size(), seq, plan_.n_ctx, n_past_[seq])
                                   : fmt::format("{} tokens do not fit: the context holds {} tokens and {} are used "
                                                 "(raise --ctx, or start a new conversation)",
                                                 tokens.size(), plan_.n_ctx, n_past_[seq]));
    check_tokens(tokens);
    check_bidirectional(cfg_, n_past_[seq], tokens.size(), opts_.ubatch);
    if (cfg_.arch->cross_attention && n_enc_ == 0)
        throw std::logic_error("eval: an encoder-decoder model needs the encoder's output first (set_encoder_output)");
    for (size_t done = 0; done < tokens.size();) {
        const uint32_t n = uint32_t(std::min<size_t>(opts_.ubatch, tokens.size() - done));
        auto* pos = static_cast<int32_t*>(positions_.mapped());
        auto* rel = static_cast<int32_t*>(rel_pos_.mapped());
        auto* segs = static_cast<int32_t*>(segs_.mapped());
        auto* ids = static_cast<int32_t*>(ids_.mapped());
        for (uint32_t i = 0; i < n; ++i) {
            pos[i] = rel[i] = int32_t(n_past_[seq] + i);
            ids[i] = tokens[done + i];
            segs[2 * i] = 0;  // bidirectional: one input, all of the call
            segs[2 * i + 1] = int32_t(n_past_[seq] + n);
        }
        hold_rows(seq, n_past_[seq] + n, n_past_[seq]);
        write_tables(0, seq);
        run(BatchShape{n, false}, probe);
        last_rows_ = 1;
        last_chunk_ = n;
        n_past_[seq] += n;
        if (sink) {
            const size_t floats = size_t(n) * cfg_.n_vocab;
            const ModelGpu& head = tail();
            if (head.all_logits_.mapped()) {
                sink(uint32_t(done), {static_cast<const float*>(head.all_logits_.mapped()), floats});
            } else {
                std::vector<float> rows(floats);
                head.ctx_.download(head.all_logits_, rows.data(), floats * 4);
                sink(uint32_t(done), rows);
            }
        }
        done += n;
    }
}

void ModelGpu::eval_packed(std::span<const std::span<const int32_t>> inputs) {
    if (cfg_.causal) throw std::logic_error("eval_packed: packing needs a bidirectional model (an encoder)");
    size_t total = 0;
    for (const auto& in : inputs) {
        if (in.empty()) throw std::invalid_argument("eval_packed: an input has no tokens");
        check_tokens(in);
        total += in.size();
    }
    if (inputs.empty()) throw std::invalid_argument("eval_packed: no inputs");
    if (total > opts_.ubatch || total > plan_.n_ctx)
        throw std::invalid_argument(fmt::format("eval_packed: {} tokens do not fit one ubatch of {}", total,
                                                std::min(opts_.ubatch, plan_.n_ctx)));
    const uint32_t n = uint32_t(total);
    auto* pos = static_cast<int32_t*>(positions_.mapped());
    auto* rel = static_cast<int32_t*>(rel_pos_.mapped());
    auto* segs = static_cast<int32_t*>(segs_.mapped());
    auto* ids = static_cast<int32_t*>(ids_.mapped());
    uint32_t at = 0;
    for (const auto& in : inputs) {
        const uint32_t begin = at, end = at + uint32_t(in.size());
        for (uint32_t i = 0; i < in.size(); ++i, ++at) {
            pos[at] = int32_t(at);  // cache row: the pack's
            rel[at] = int32_t(i);   // RoPE / learned position: the input's own
            segs[2 * at] = int32_t(begin);
            segs[2 * at + 1] = int32_t(end);
            ids[at] = in[i];
        }
    }
    hold_rows(0, n, 0);
    write_tables(0, 0);
    run(BatchShape{n, false}, {});
    last_rows_ = 1;
    last_chunk_ = n;
    n_past_[0] = n;
}

// --- several sequences -----------------------------------------------------------------------------

namespace {
void check_seq(uint32_t seq, uint32_t n_seq) {
    if (seq >= n_seq)
        throw std::out_of_range(fmt::format("sequence {} does not exist (the model was loaded with {})", seq, n_seq));
}
}  // namespace

uint32_t ModelGpu::n_past(uint32_t seq) const {
    check_seq(seq, opts_.n_seq);
    return n_past_[seq];
}

void ModelGpu::reset(uint32_t seq) {
    check_seq(seq, opts_.n_seq);
    n_past_[seq] = 0;
    hold_rows(seq, 0);
}

uint32_t ModelGpu::take_block(uint32_t seq) {
    if (free_blocks_.empty())
        throw ContextFullError(fmt::format("the KV cache has no free block for sequence {} ({} blocks of {} rows, "
                                           "all held by other sequences)", seq, pool_blocks_, kKvBlockRows));
    const uint32_t b = free_blocks_.back();
    free_blocks_.pop_back();
    block_refs_[b] = 1;
    return b;
}

void ModelGpu::release_block(uint32_t b) {
    if (--block_refs_[b] == 0) free_blocks_.push_back(b);
}

void ModelGpu::hold_rows(uint32_t seq, uint32_t rows, uint32_t write_from) {
    std::vector<uint32_t>& blocks = seq_blocks_[seq];
    const uint32_t need = kv_blocks(std::min(rows, plan_.n_ctx));
    while (blocks.size() > need) {
        release_block(blocks.back());
        blocks.pop_back();
    }
    for (size_t j = write_from / kKvBlockRows; j < blocks.size(); ++j)
        if (block_refs_[blocks[j]] > 1) {  // shared: this sequence writes into a copy of its own
            const uint32_t own = take_block(seq);
            copy_block(blocks[j], own);
            release_block(blocks[j]);
            blocks[j] = own;
        }
    while (blocks.size() < need) blocks.push_back(take_block(seq));
}

void ModelGpu::copy_block(uint32_t from, uint32_t to) {
    const uint64_t bytes = kKvBlockRows * kv_row_bytes(cfg_, opts_.kv_type);
    CommandStream s(ctx_);
    s.begin();
    for (uint32_t l = range_.first; l < range_.end(); ++l) {
        const LayerState& L = layers_[l];
        if (L.ring) continue;  // a ring's blocks are never shared
        for (const Buffer* pool : {&L.k_cache, &L.v_cache})
            if (pool->size() > 0) s.copy(pool->slice(from * bytes, bytes), pool->slice(to * bytes, bytes));
    }
    s.end();
    s.submit_and_wait();
    if (next_) next_->copy_block(from, to);
}

bool ModelGpu::share_prefix(uint32_t dst, uint32_t src, uint32_t n) {
    check_seq(dst, opts_.n_seq);
    check_seq(src, opts_.n_seq);
    if (n > n_past_[src])
        throw std::invalid_argument(fmt::format("share_prefix: {} tokens of sequence {}, which holds {}", n, src, n_past_[src]));
    if (ring_rows_ != 0 || dst == src) return false;
    reset(dst);
    const std::vector<uint32_t>& from = seq_blocks_[src];
    std::vector<uint32_t>& to = seq_blocks_[dst];
    to.assign(from.begin(), from.begin() + kv_blocks(n));
    for (uint32_t b : to) ++block_refs_[b];
    n_past_[dst] = n;
    return true;
}

uint32_t ModelGpu::kv_blocks_needed(uint32_t seq, uint32_t n) const {
    check_seq(seq, opts_.n_seq);
    const std::vector<uint32_t>& blocks = seq_blocks_[seq];
    const uint32_t from = n_past_[seq], need = kv_blocks(std::min(from + n, plan_.n_ctx));
    uint32_t k = need > blocks.size() ? need - uint32_t(blocks.size()) : 0;
    for (size_t j = from / kKvBlockRows; j < std::min<size_t>(need, blocks.size()); ++j)
        if (block_refs_[blocks[j]] > 1) ++k;
    return k;
}

ModelGpu::KvUsage ModelGpu::kv_usage() const {
    KvUsage u;
    u.blocks_total = pool_blocks_;
    u.blocks_used = pool_blocks_ - uint32_t(free_blocks_.size());
    u.block_rows = kKvBlockRows;
    u.block_bytes = kv_block_bytes_;
    return u;
}

void ModelGpu::write_tables(uint32_t row, uint32_t seq) {
    const std::vector<uint32_t>& blocks = seq_blocks_[seq];
    std::memcpy(static_cast<uint32_t*>(kv_tables_.mapped()) + size_t(row) * kv_blocks(plan_.n_ctx), blocks.data(),
                blocks.size() * 4);
    if (ring_rows_) {  // a ring's blocks are its sequence's, fixed
        const uint32_t stride = kv_blocks(ring_rows_);
        auto* t = static_cast<uint32_t*>(ring_tables_.mapped()) + size_t(row) * stride;
        for (uint32_t j = 0; j < stride; ++j) t[j] = seq * stride + j;
    }
}

bool ModelGpu::truncate(uint32_t seq, uint32_t n) {
    check_seq(seq, opts_.n_seq);
    const uint32_t old = n_past_[seq];
    if (n > old) throw std::invalid_argument(fmt::format("truncate: {} tokens kept of {}", n, old));
    // A ring of R rows holds position p until position p + R is stored. The next token (at n)
    // needs positions from n - window + 1 on, so the oldest of them must not have been overwritten.
    for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
        const uint32_t rows = kv_cache_rows(cfg_, l, plan_.n_ctx, opts_.ubatch);
        if (rows >= plan_.n_ctx) continue;
        const uint32_t oldest = n + 1 > cfg_.window ? n + 1 - cfg_.window : 0;
        if (uint64_t(oldest) + rows < old) return false;
    }
    n_past_[seq] = n;
    hold_rows(seq, n);
    return true;
}

void ModelGpu::eval(uint32_t seq, std::span<const int32_t> tokens) {
    check_seq(seq, opts_.n_seq);
    eval_impl(seq, tokens, {}, {});
}

void ModelGpu::decode(std::span<const SeqToken> batch) {
    if (batch.empty()) throw std::invalid_argument("decode: empty batch");
    if (cfg_.arch->cross_attention && n_enc_ == 0)
        throw std::logic_error("decode: an encoder-decoder model needs the encoder's output first (set_encoder_output)");
    if (batch.size() > opts_.n_seq)
        throw std::invalid_argument(fmt::format("decode: {} tokens for {} sequences", batch.size(), opts_.n_seq));
    const BatchShape shape{uint32_t(batch.size()), batch.size() > 1};
    std::vector<bool> seen(opts_.n_seq, false);
    auto* pos = static_cast<int32_t*>(positions_.mapped());
    auto* ids = static_cast<int32_t*>(ids_.mapped());
    for (size_t i = 0; i < batch.size(); ++i) {
        const SeqToken& t = batch[i];
        check_seq(t.seq, opts_.n_seq);
        if (seen[t.seq]) throw std::invalid_argument(fmt::format("decode: sequence {} appears twice", t.seq));
        seen[t.seq] = true;
        if (n_past_[t.seq] >= plan_.n_ctx)
            throw ContextFullError(fmt::format("sequence {} is full ({} tokens)", t.seq, plan_.n_ctx));
        check_tokens(std::span<const int32_t>(&t.token, 1));
        hold_rows(t.seq, n_past_[t.seq] + 1, n_past_[t.seq]);
        write_tables(uint32_t(i), t.seq);
        pos[i] = int32_t(n_past_[t.seq]);
        static_cast<int32_t*>(rel_pos_.mapped())[i] = pos[i];
        auto* segs = static_cast<int32_t*>(segs_.mapped());
        segs[2 * i] = 0;  // bidirectional models: the token sees its sequence so far and itself
        segs[2 * i + 1] = pos[i] + 1;
        ids[i] = t.token;
    }
    run(shape, {});
    last_rows_ = shape.n;
    for (const SeqToken& t : batch) ++n_past_[t.seq];
}

void ModelGpu::read_logits(uint32_t rows, float* dst) const {
    require_head("read_logits");
    if (rows == 0 || rows > last_rows_)
        throw std::out_of_range(fmt::format("read_logits: {} rows, the last evaluation made {}", rows, last_rows_));
    const ModelGpu& head = tail();
    head.ctx_.download(head.logits_.slice(0, 4ull * rows * cfg_.n_vocab), dst, 4ull * rows * cfg_.n_vocab);
}

std::string non_finite_message(float value, int64_t token, uint32_t position) {
    const std::string which = token >= 0 ? fmt::format(" ({} for token {})", value, token) : std::string();
    return fmt::format("the model produced non-finite logits{} at position {}: its weights hold NaN or Inf values, or "
                       "the computation overflowed", which, position);
}

std::vector<int32_t> ModelGpu::argmax_rows(uint32_t rows) const {
    require_head("argmax_rows");
    if (rows == 0 || rows > last_rows_)
        throw std::out_of_range(fmt::format("argmax_rows: {} rows, the last evaluation made {}", rows, last_rows_));
    const ModelGpu& head = tail();
    std::vector<uint32_t> ids(rows);
    std::memcpy(ids.data(), head.argmax_.mapped(), 4ull * rows);
    std::vector<int32_t> out(rows);
    for (uint32_t r = 0; r < rows; ++r) {
        // The device argmax skips NaN and answers 0 for an all-NaN row: the winning logit itself tells.
        float best = 0;
        if (ids[r] < cfg_.n_vocab) {
            if (head.logits_.mapped())
                std::memcpy(&best, static_cast<const uint8_t*>(head.logits_.mapped()) + 4ull * (uint64_t(r) * cfg_.n_vocab + ids[r]), 4);
            else
                head.ctx_.download(head.logits_.slice(4ull * (uint64_t(r) * cfg_.n_vocab + ids[r]), 4), &best, 4);
        }
        out[r] = ids[r] < cfg_.n_vocab && std::isfinite(best) ? int32_t(ids[r]) : -1;
    }
    return out;
}

void ModelGpu::set_profiling(bool on) {
    if (on == profiling_) return;
    profiling_ = on;
    recordings_.clear();
    last_recording_ = nullptr;
    if (next_) next_->set_profiling(on);
}

std::vector<DispatchTiming> ModelGpu::last_timings() const {
    std::vector<DispatchTiming> out;
    if (!last_recording_) return out;
    for (auto& s : last_recording_->streams) {
        auto t = s->timings();
        out.insert(out.end(), t.begin(), t.end());
    }
    if (next_) {
        auto t = next_->last_timings();
        out.insert(out.end(), t.begin(), t.end());
    }
    return out;
}

ForwardStats ModelGpu::stats() const {
    ForwardStats s = stats_;
    for (const ModelGpu* st = next_.get(); st; st = st->next_.get()) {
        s.recordings += st->stats_.recordings;
        s.submits += st->stats_.submits;
    }
    return s;
}

std::vector<ModelGpu::StageInfo> ModelGpu::stages() const {
    std::vector<StageInfo> out;
    for (const ModelGpu* st = this; st; st = st->next_.get()) out.push_back({&st->ctx_.caps(), st->range_, &st->plan_, &st->layout_});
    return out;
}

int32_t ModelGpu::argmax() const {
    require_head("argmax");
    const ModelGpu& head = tail();
    uint32_t id = 0;
    std::memcpy(&id, head.argmax_.mapped(), 4);
    // The device argmax skips NaN and answers 0 for an all-NaN row, so check the winning logit
    // itself: a 4-byte read where the logits are mapped; elsewhere a read costs a submit, so only
    // the all-NaN answer (0) is checked.
    float best = 0;
    if (head.logits_.mapped())
        std::memcpy(&best, static_cast<const uint8_t*>(head.logits_.mapped()) + 4ull * id, 4);
    else if (id == 0)
        head.ctx_.download(head.logits_, &best, 4);
    if (id >= cfg_.n_vocab || !std::isfinite(best))
        throw NonFiniteError(non_finite_message(best, id, n_past_[0]));
    return int32_t(id);
}

void check_bidirectional(const ModelConfig& cfg, uint32_t n_past, size_t n_tokens, uint32_t ubatch) {
    if (cfg.causal) return;
    if (n_past != 0)
        throw std::logic_error("a bidirectional model attends over one whole input: reset() before each input");
    if (n_tokens > ubatch)
        throw ContextFullError(fmt::format("{} tokens: a bidirectional model attends over its whole input in one "
                                           "ubatch, and the ubatch holds {} (load it with a larger ubatch, up to the "
                                           "context)",
                                           n_tokens, ubatch));
}

std::vector<float> ModelGpu::hidden_states() const {
    std::vector<float> out(size_t(last_chunk_) * cfg_.dim);
    if (out.empty()) return out;
    const ModelGpu& head = tail();
    head.ctx_.download(head.x_.slice(0, out.size() * 4), out.data(), out.size() * 4);
    if (!head.layout_.output_norm.present()) return out;
    // A decoder's states as its head reads them, and T5's encoder's: output_norm (with its bias for
    // LayerNorm models).
    const std::vector<float> w = read_place_f32(file_, head.layout_.output_norm), b = read_place_f32(file_, head.layout_.output_norm_b);
    if (cfg_.arch->norm == NormKind::Layer)
        ref::layer_norm(out.data(), w.data(), b.empty() ? nullptr : b.data(), out.data(), last_chunk_, cfg_.dim, cfg_.norm_eps);
    else
        ref::rms_norm(out.data(), w.data(), out.data(), last_chunk_, cfg_.dim, cfg_.norm_eps);
    return out;
}

std::vector<float> ModelGpu::logits() const {
    require_head("logits");
    std::vector<float> out(cfg_.n_vocab);
    const ModelGpu& head = tail();
    head.ctx_.download(head.logits_, out.data(), out.size() * 4);
    return out;
}

}  // namespace vkllm
