#include "model/forward/memory_plan.h"

#include "model/arch/tensor_schema.h"
#include "model/forward/layer_plan.h"
#include "model/forward/position_bias.h"

#include "runtime/ops/attention.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/moe.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>

namespace vkllm {

std::string format_mib(uint64_t b) { return fmt::format("{:.1f} MiB", double(b) / (1 << 20)); }

uint64_t kv_row_bytes(const ModelConfig& cfg, ops::KvType t) { return ops::kv_row_bytes(t, cfg.kv_dim()); }

uint64_t kv_caches(const ModelConfig& cfg) { return cfg.v_in_k() ? 1 : 2; }

uint32_t scratch_rows(const ModelOptions& o) { return std::max(o.ubatch, decode_rows(o)); }

// The integer-dot kernels' Q8_1 input, on devices that take them: a row per row of the activation
// scratch (a prompt chunk's tokens for the matmul, the sequences of a decode batch), each as long as
// any projection's k.
uint64_t q8_scratch_bytes(const DeviceCaps& caps, const ModelConfig& cfg, const ModelOptions& o) {
    if (!caps.int_dot_kernels) return 0;
    const uint32_t rows = scratch_rows(o);
    // Latent attention's wq_b reads q_lora_rank values and its wo H x value_length_mla.
    const uint64_t dense = rows * ops::q8_1_row_bytes(std::max({cfg.dim, cfg.q_dim(), dense_ffn_dim(cfg),
                                                                cfg.q_lora_rank, cfg.n_heads * cfg.mla_v}));
    // A mixture of experts: the down projections read one GLU row per slot (token x expert).
    const uint64_t experts =
        cfg.arch->moe() ? uint64_t(rows) * cfg.n_expert_used * ops::q8_1_row_bytes(cfg.expert_ffn_dim) : 0;
    return std::max(dense, experts);
}

namespace {

// Attention of a layer whose cache holds n_ctx rows (no window: the worst case for scratch).
ops::AttentionParams plain_attention_params(const ModelConfig& cfg, uint32_t n_tokens, uint32_t n_ctx, ops::KvType t) {
    ops::AttentionParams p{n_tokens, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, n_ctx, cfg.attn_scale, t};
    p.softcap = cfg.attn_softcap;
    p.v_head_dim = cfg.v_head_dim;
    p.v_in_k = cfg.v_in_k();
    return p;
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
    per_token += 4ull * (cfg.pos_width() - 1);  // M-RoPE: the input-relative position's other components
    // mixture of experts: router logits, ids and weights, each slot's gate, up and output, shared gate logit
    // (and the prefill's slots sorted per expert: one more word per slot, n_expert + 1 offsets below)
    if (cfg.arch->moe())
        per_token += 4ull * (cfg.n_expert + 3ull * cfg.n_expert_used +
                             uint64_t(cfg.n_expert_used) * (2ull * cfg.expert_ffn_dim + cfg.dim) + 1);
    // encoder-decoder: cross-attention's q and output (q_dim), its position
    if (cfg.arch->attn.cross_attention) per_token += 4ull * (2ull * cfg.q_dim()) + 4;
    // latent attention: q_a, q (H x qk), the latent and rotary key, per head q_nope, wk_b · q_nope, wv_b · att, head ids
    if (cfg.arch->attn.mla) {
        const uint64_t H = cfg.n_heads;
        per_token += 4ull * (cfg.q_lora_rank + H * cfg.mla_qk + cfg.kv_dim() + H * (cfg.mla_qk - cfg.rope_dim) +
                             H * cfg.kv_lora_rank + H * cfg.mla_v + 2 * H);  // + the head ids and their groups
    }
    // a split's x sent to the next device, received from the previous one (dim each)
    per_token += 4ull * cfg.dim * ((head ? 0 : 1) + (layers.first > 0 ? 1 : 0));
    // last (dim), qkv (q_dim + 2 kv_dim), gate_up (2 ffn); logits (n_vocab) and argmax per
    // decode row; the Q8_1 input of the integer-dot matvecs.
    uint64_t fixed = 4ull * (cfg.dim + cfg.q_dim() + 2ull * cfg.kv_dim() + 2ull * ffn) +
                     (head ? 4ull * decode_rows(o) * (uint64_t(cfg.n_vocab) + 1) : 0) + q8_scratch_bytes(caps, cfg, o);
    if (cfg.arch->moe()) fixed += 4ull * (cfg.n_expert + 1);
    if (cfg.arch->attn.mla) fixed += 4ull * (cfg.n_heads + 1);  // the per-head groups' offsets
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
    return cfg.arch->attn.cross_attention ? 2ull * layers.count * kv_row_bytes(cfg, o.kv_type) + 4ull * cfg.dim + 4 : 0;
}

// Rows of a layer's pool: whole blocks of `rows` (kv_cache_rows) per sequence.
uint64_t pool_rows(uint32_t rows, uint32_t n_seq) { return uint64_t(kv_blocks(rows)) * kKvBlockRows * n_seq; }

uint64_t kv_cache_bytes(const ModelConfig& cfg, const ModelOptions& o, uint32_t n_ctx, LayerRange layers) {
    uint64_t rows = 0;
    for (uint32_t l = layers.first; l < layers.end(); ++l) rows += layer_pool_rows(cfg, o, n_ctx, l);
    return kv_caches(cfg) * rows * kv_row_bytes(cfg, o.kv_type) + cross_row_bytes(cfg, o, layers) * n_ctx;
}

}  // namespace

uint64_t layer_pool_rows(const ModelConfig& cfg, const ModelOptions& o, uint32_t n_ctx, uint32_t l) {
    const uint32_t rows = kv_cache_rows(cfg, l, n_ctx, o.ubatch);
    if (rows == n_ctx && o.kv_budget) return uint64_t(kv_blocks(o.kv_budget)) * kKvBlockRows;
    return pool_rows(rows, rows == n_ctx ? o.n_seq - o.spare_seqs : o.n_seq);
}

MemoryPlan plan_memory(const DeviceCaps& caps, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts,
                       LayerRange range) {
    if (opts.n_seq == 0) throw std::invalid_argument("n_seq must be > 0");
    if (opts.spare_seqs >= opts.n_seq)
        throw std::invalid_argument(fmt::format("{} spare sequences of {}", opts.spare_seqs, opts.n_seq));
    // The sequences the full-context pools are sized for (spare_seqs borrow from them).
    const uint32_t pooled = opts.n_seq - opts.spare_seqs;
    const LayerRange layers = range.resolved(cfg);
    if (cfg.kv_dim() % ops::kv_row_multiple(opts.kv_type) != 0)
        throw std::invalid_argument(fmt::format(
            "--kv-type {}: this model's K/V rows have {} values (n_kv_heads {} x head_dim {}), not a multiple of {}; "
            "use --kv-type f16",
            ops::kv_type_name(opts.kv_type), cfg.kv_dim(), cfg.n_kv_heads, cfg.head_dim,
            ops::kv_row_multiple(opts.kv_type)));
    if (cfg.v_in_k() && (cfg.head_dim - cfg.v_dim()) % ops::kv_row_multiple(opts.kv_type) != 0)
        throw std::invalid_argument(fmt::format(
            "--kv-type {}: this model's latent starts {} values into each cached row (its rotary part), not a "
            "multiple of {}; use --kv-type f16",
            ops::kv_type_name(opts.kv_type), cfg.head_dim - cfg.v_dim(), ops::kv_row_multiple(opts.kv_type)));
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
                ops::check_expert_binding(caps, layout.buffers[t.buffer].label, t.type, uint32_t(t.rows / count),
                                          t.row_elems);
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
                "device's maxStorageBufferRange ({}); at most --ubatch {}",
                opts.ubatch, opts.ubatch, cfg.n_vocab, p.all_logits, caps.max_storage_buffer_range,
                caps.max_storage_buffer_range / row));
    }
    // The fit is checked with the attention partials of the largest context this call can pick.
    const uint32_t ctx_bound = opts.n_ctx ? opts.n_ctx : (cfg.n_ctx_train ? cfg.n_ctx_train : 2048);
    p.scratch = scratch_bytes(caps, cfg, opts, layers) + p.all_logits +
                decode_rows(opts) * attention_scratch_per_seq(caps, cfg, opts.ubatch, ctx_bound, opts.kv_type);
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
        else
            ++n_full;
    }
    // The rings of all sequences are one pool, one binding, too.
    if (n_full < layers.count && ring_rows * kv_row > caps.max_storage_buffer_range)
        throw DeviceLimitError(
            fmt::format("--parallel {}: the sliding-window layers' KV pool ({} rows of {} bytes for all sequences) "
                        "would exceed this "
                        "device's maxStorageBufferRange ({}); use fewer sequences or a smaller --ubatch",
                        opts.n_seq, ring_rows, kv_row, caps.max_storage_buffer_range));
    if (opts.kv_budget && budget_rows * kv_row > caps.max_storage_buffer_range)
        throw DeviceLimitError(
            fmt::format("--kv-budget {}: one layer's KV pool would be {} bytes, more than this device's "
                        "maxStorageBufferRange ({}); at most --kv-budget {}",
                        opts.kv_budget, budget_rows * kv_row, caps.max_storage_buffer_range,
                        caps.max_storage_buffer_range / kv_row / kKvBlockRows * kKvBlockRows));
    if (opts.kv_budget) fixed_kv += kv_caches(cfg) * kv_row * n_full * budget_rows;
    const uint64_t per_token = (opts.kv_budget ? 0 : kv_caches(cfg) * kv_row * std::max(n_full, 1u) * pooled) +
                               cross_row_bytes(cfg, opts, layers);
    // One layer's K (or V) pool is one binding: every sequence's whole blocks must fit maxStorageBufferRange
    // (with a budget, checked above; a sequence then holds at most the budget).
    const uint64_t max_ctx_binding =
        opts.kv_budget ? budget_rows : caps.max_storage_buffer_range / kv_row / pooled / kKvBlockRows * kKvBlockRows;
    // Keep 10% of the heap for the driver, staging and other processes.
    uint64_t budget = p.available / 10 * 9;
    uint64_t fixed = p.weights + p.scratch;
    if (fixed > budget)
        throw DeviceLimitError(fmt::format(
            "model does not fit on the device: weights {} + scratch {} = {}, but only {} of device memory is usable "
            "(of {})",
            format_mib(p.weights), format_mib(p.scratch), format_mib(fixed), format_mib(budget),
            format_mib(p.available)));
    // Whole blocks: the pool rounds each sequence's rows up to them.
    if (opts.kv_budget && fixed + fixed_kv > budget)
        throw DeviceLimitError(fmt::format(
            "--kv-budget {} needs {} of KV cache, but after weights ({}) and scratch ({}) only {} is usable",
            opts.kv_budget, format_mib(fixed_kv), format_mib(p.weights), format_mib(p.scratch),
            format_mib(budget - fixed)));
    uint64_t max_ctx_memory =
        budget - fixed > fixed_kv
            ? per_token ? (budget - fixed - fixed_kv) / per_token / kKvBlockRows * kKvBlockRows : UINT32_MAX
            : 0;
    const uint32_t train_ctx = cfg.n_ctx_train ? cfg.n_ctx_train : 2048;
    if (opts.n_ctx == 0) {
        p.n_ctx = uint32_t(std::min<uint64_t>({train_ctx, max_ctx_memory, max_ctx_binding}));
        if (p.n_ctx < 16)
            throw DeviceLimitError(
                fmt::format("model leaves room for only {} tokens of KV cache ({} per token); the "
                            "device has {}",
                            p.n_ctx, format_mib(per_token), format_mib(p.available)));
    } else {
        p.n_ctx = opts.n_ctx;
        if (cfg.arch->attn.positions == PositionKind::Learned && p.n_ctx > cfg.n_ctx_train)
            throw DeviceLimitError(fmt::format("--ctx {}: this {} model has learned positions for {} tokens only",
                                               p.n_ctx, cfg.arch->name, cfg.n_ctx_train));
        if (uint64_t(kv_blocks(p.n_ctx)) * kKvBlockRows > max_ctx_memory)
            throw DeviceLimitError(fmt::format(
                "--ctx {} needs {} of KV cache{}, but after weights ({}) and scratch ({}) only {} is usable: at most "
                "--ctx {}",
                p.n_ctx, format_mib(kv_cache_bytes(cfg, opts, p.n_ctx, layers)),
                opts.n_seq > 1 ? fmt::format(" for {} sequences", opts.n_seq) : std::string(), format_mib(p.weights),
                format_mib(p.scratch), format_mib(budget - fixed), max_ctx_memory));
        if (opts.kv_budget && p.n_ctx > budget_rows)
            throw std::invalid_argument(
                fmt::format("--ctx {} is more than the whole KV budget (--kv-budget {}): a "
                            "sequence holds at most the budget",
                            p.n_ctx, opts.kv_budget));
        if (uint64_t(kv_blocks(p.n_ctx)) * kKvBlockRows > max_ctx_binding)
            throw DeviceLimitError(
                fmt::format("--ctx {}: one layer's KV cache would be {} bytes{}, more than this "
                            "device's maxStorageBufferRange ({}); at most --ctx {}",
                            p.n_ctx, kv_row * pool_rows(p.n_ctx, pooled),
                            opts.n_seq > 1 ? fmt::format(" for {} sequences", opts.n_seq) : std::string(),
                            caps.max_storage_buffer_range, max_ctx_binding));
    }
    p.kv_cache = kv_cache_bytes(cfg, opts, p.n_ctx, layers);
    p.kv_cache_full = kv_caches(cfg) * kv_row * layers.count * pool_rows(p.n_ctx, pooled);
    p.kv_budget = opts.kv_budget ? uint32_t(budget_rows) : uint32_t(pool_rows(p.n_ctx, pooled));
    p.attention_scratch = decode_rows(opts) * attention_scratch_per_seq(caps, cfg, opts.ubatch, p.n_ctx, opts.kv_type);
    p.scratch = scratch_bytes(caps, cfg, opts, layers) + p.all_logits + p.attention_scratch;
    return p;
}

}  // namespace vkllm
