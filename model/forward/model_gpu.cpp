#include "model/forward/model_gpu.h"

#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/get_rows.h"
#include "runtime/ops/kv_store.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/rope.h"
#include "runtime/ops/sampling_ops.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

namespace vkllm {

namespace {

std::string mib(uint64_t b) { return fmt::format("{:.1f} MiB", double(b) / (1 << 20)); }

uint64_t kv_row_bytes(const ModelConfig& cfg, ops::KvType t) { return ops::kv_row_bytes(t, cfg.kv_dim()); }

// Attention of a layer whose cache holds n_ctx rows (no window: the worst case for scratch).
ops::AttentionParams plain_attention_params(const ModelConfig& cfg, uint32_t n_tokens, uint32_t n_ctx, ops::KvType t) {
    ops::AttentionParams p{n_tokens, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, n_ctx, cfg.attn_scale, t};
    p.softcap = cfg.attn_softcap;
    return p;
}

}  // namespace

// --- memory plan -----------------------------------------------------------------------------------

namespace {

// Rows of the activation scratch: a prompt chunk or one decode token per sequence.
uint32_t scratch_rows(const ModelOptions& o) { return std::max(o.ubatch, o.n_seq); }

// The scratch buffers ModelGpu allocates, but the attention partials (see attention_scratch).
uint64_t scratch_bytes(const ModelConfig& cfg, const ModelOptions& o) {
    const uint32_t rows = scratch_rows(o);
    // x, xn, tmp, embed_in (dim); q, att (q_dim); k, v (kv_dim); gate, up (ffn); position and token id.
    uint64_t per_token = 4ull * (4ull * cfg.dim + 2ull * cfg.q_dim() + 2ull * cfg.kv_dim() + 2ull * cfg.ffn_dim) + 8;
    // last (dim), qkv (q_dim + 2 kv_dim), gate_up (2 ffn); logits (n_vocab) and argmax per sequence.
    uint64_t fixed = 4ull * (cfg.dim + cfg.q_dim() + 2ull * cfg.kv_dim() + 2ull * cfg.ffn_dim) +
                     4ull * o.n_seq * (uint64_t(cfg.n_vocab) + 1);
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

uint64_t kv_cache_bytes(const ModelConfig& cfg, const ModelOptions& o, uint32_t n_ctx) {
    uint64_t rows = 0;
    for (uint32_t l = 0; l < cfg.n_layers; ++l) rows += kv_cache_rows(cfg, l, n_ctx, o.ubatch);
    return 2 * rows * kv_row_bytes(cfg, o.kv_type) * o.n_seq;
}

}  // namespace

uint32_t kv_cache_rows(const ModelConfig& cfg, uint32_t layer, uint32_t n_ctx, uint32_t ubatch) {
    if (!cfg.is_local(layer) || cfg.window >= n_ctx) return n_ctx;
    return cfg.window + ubatch - 1;
}

MemoryPlan plan_memory(const DeviceCaps& caps, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts) {
    if (opts.n_seq == 0) throw std::invalid_argument("n_seq must be > 0");
    if (cfg.kv_dim() % ops::kv_row_multiple(opts.kv_type) != 0)
        throw std::invalid_argument(fmt::format(
            "--kv-type {}: this model's K/V rows have {} values (n_kv_heads {} x head_dim {}), not a multiple of {}; "
            "use --kv-type f16", ops::kv_type_name(opts.kv_type), cfg.kv_dim(), cfg.n_kv_heads, cfg.head_dim,
            ops::kv_row_multiple(opts.kv_type)));
    MemoryPlan p;
    p.n_seq = opts.n_seq;
    p.available = caps.device_local_bytes;
    p.weights = ModelWeights::device_bytes(file, cfg);
    if (opts.all_logits) {
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
    p.scratch = scratch_bytes(cfg, opts) + p.all_logits +
                opts.n_seq * attention_scratch_per_seq(caps, cfg, opts.ubatch, ctx_bound, opts.kv_type);
    // Full-context layers grow with n_ctx; a sliding-window layer's ring is fixed once n_ctx
    // passes window + ubatch - 1, so the fit is solved for the full layers with the rings at
    // their largest.
    const uint64_t kv_row = kv_row_bytes(cfg, opts.kv_type);
    uint32_t n_full = 0;
    uint64_t ring_bytes = 0;
    for (uint32_t l = 0; l < cfg.n_layers; ++l) {
        if (cfg.is_local(l) && cfg.window > 0) ring_bytes += 2ull * kv_row * (cfg.window + opts.ubatch - 1) * opts.n_seq;
        else ++n_full;
    }
    const uint64_t per_token = 2ull * kv_row * std::max(n_full, 1u) * opts.n_seq;
    // One layer's K (or V) cache is one binding: it must fit maxStorageBufferRange.
    uint64_t max_ctx_binding = caps.max_storage_buffer_range / kv_row;
    // Keep 10% of the heap for the driver, staging and other processes.
    uint64_t budget = p.available / 10 * 9;
    uint64_t fixed = p.weights + p.scratch;
    if (fixed > budget)
        throw DeviceLimitError(fmt::format(
            "model does not fit on the device: weights {} + scratch {} = {}, but only {} of device memory is usable "
            "(of {})", mib(p.weights), mib(p.scratch), mib(fixed), mib(budget), mib(p.available)));
    uint64_t max_ctx_memory = budget - fixed > ring_bytes ? (budget - fixed - ring_bytes) / per_token : 0;
    const uint32_t train_ctx = cfg.n_ctx_train ? cfg.n_ctx_train : 2048;
    if (opts.n_ctx == 0) {
        p.n_ctx = uint32_t(std::min<uint64_t>({train_ctx, max_ctx_memory, max_ctx_binding}));
        if (p.n_ctx < 16)
            throw DeviceLimitError(fmt::format("model leaves room for only {} tokens of KV cache ({} per token); the "
                                               "device has {}", p.n_ctx, mib(per_token), mib(p.available)));
    } else {
        p.n_ctx = opts.n_ctx;
        if (cfg.arch->positions == PositionKind::Learned && p.n_ctx > cfg.n_ctx_train)
            throw DeviceLimitError(fmt::format("--ctx {}: this {} model has learned positions for {} tokens only",
                                               p.n_ctx, cfg.arch->name, cfg.n_ctx_train));
        if (p.n_ctx > max_ctx_memory)
            throw DeviceLimitError(fmt::format(
                "--ctx {} needs {} of KV cache{}, but after weights ({}) and scratch ({}) only {} is usable: at most "
                "--ctx {}", p.n_ctx, mib(kv_cache_bytes(cfg, opts, p.n_ctx)),
                opts.n_seq > 1 ? fmt::format(" for {} sequences", opts.n_seq) : std::string(), mib(p.weights),
                mib(p.scratch), mib(budget - fixed), max_ctx_memory));
        if (p.n_ctx > max_ctx_binding)
            throw DeviceLimitError(fmt::format("--ctx {}: one layer's KV cache would be {} bytes, more than this "
                                               "device's maxStorageBufferRange ({}); at most --ctx {}",
                                               p.n_ctx, kv_row * p.n_ctx, caps.max_storage_buffer_range,
                                               max_ctx_binding));
    }
    p.kv_cache = kv_cache_bytes(cfg, opts, p.n_ctx);
    p.kv_cache_full = 2ull * kv_row * cfg.n_layers * p.n_ctx * opts.n_seq;
    p.attention_scratch = opts.n_seq * attention_scratch_per_seq(caps, cfg, opts.ubatch, p.n_ctx, opts.kv_type);
    p.scratch = scratch_bytes(cfg, opts) + p.all_logits + p.attention_scratch;
    return p;
}

// --- construction ----------------------------------------------------------------------------------

struct ModelGpu::Recording {
    std::vector<std::unique_ptr<CommandStream>> streams;  // embed, layers..., head
    uint64_t last_used = 0;
};

ModelGpu::ModelGpu(Context& ctx, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts,
                   const UploadProgress& progress)
    : ctx_(ctx), file_(file), cfg_(cfg), opts_(opts) {
    if (opts_.ubatch == 0) throw std::invalid_argument("ubatch must be > 0");
    if (opts_.n_seq == 0) throw std::invalid_argument("n_seq must be > 0");
    n_past_.assign(opts_.n_seq, 0);
    plan_ = plan_memory(ctx.caps(), file, cfg, opts_);
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
        w_ = ModelWeights::upload(ctx, file, cfg, plan_.n_ctx, progress);
    } catch (...) {
        compiler.join();
        throw;
    }
    compiler.join();
    if (compile_error) std::rethrow_exception(compile_error);

    const uint32_t U = scratch_rows(opts_), dim = cfg.dim, qd = cfg.q_dim(), kv = cfg.kv_dim(), ffn = cfg.ffn_dim;
    const uint64_t kv_row = kv_row_bytes(cfg, opts_.kv_type);
    for (uint32_t l = 0; l < cfg.n_layers; ++l) kv_rows_.push_back(kv_cache_rows(cfg, l, plan_.n_ctx, opts_.ubatch));
    for (uint32_t q = 0; q < opts_.n_seq; ++q)
        for (uint32_t l = 0; l < cfg.n_layers; ++l) {
            const std::string sfx = opts_.n_seq > 1 ? fmt::format("{}.{}", q, l) : fmt::format("{}", l);
            k_cache_.push_back(ctx.create_buffer(kv_row * kv_rows_[l], MemoryUsage::Device, "k_cache." + sfx));
            v_cache_.push_back(ctx.create_buffer(kv_row * kv_rows_[l], MemoryUsage::Device, "v_cache." + sfx));
        }
    auto dev = [&](uint64_t floats, const char* name) { return ctx.create_buffer(floats * 4, MemoryUsage::Device, name); };
    x_ = dev(uint64_t(U) * dim, "x");
    xn_ = dev(uint64_t(U) * dim, "xn");
    tmp_ = dev(uint64_t(U) * dim, "tmp");
    q_ = dev(uint64_t(U) * qd, "q");
    k_ = dev(uint64_t(U) * kv, "k");
    v_ = dev(uint64_t(U) * kv, "v");
    att_ = dev(uint64_t(U) * qd, "att");
    gate_ = dev(uint64_t(U) * ffn, "gate");
    up_ = dev(uint64_t(U) * ffn, "up");
    last_ = dev(dim, "last");
    qkv_ = dev(uint64_t(qd) + 2ull * kv, "qkv");
    gate_up_ = dev(2ull * ffn, "gate_up");
    logits_ = ctx.create_buffer(uint64_t(opts_.n_seq) * cfg.n_vocab * 4, MemoryUsage::DeviceHostVisible, "logits");
    // Readback (host-cached) memory: the host reads every byte of it after each ubatch.
    if (opts_.all_logits) all_logits_ = ctx.create_buffer(plan_.all_logits, MemoryUsage::Readback, "all_logits");
    argmax_ = ctx.create_buffer(4ull * opts_.n_seq, MemoryUsage::Readback, "argmax");
    positions_ = ctx.create_buffer(uint64_t(U) * 4, MemoryUsage::Upload, "positions");
    ids_ = ctx.create_buffer(uint64_t(U) * 4, MemoryUsage::Upload, "ids");
    gpu_embed_ = w_.token_embd.view.size <= ctx.caps().max_storage_buffer_range;
    if (!gpu_embed_) embed_in_ = ctx.create_buffer(uint64_t(U) * dim * 4, MemoryUsage::Upload, "embed_in");
    attn_scratch_ = ctx.create_buffer(std::max<uint64_t>(plan_.attention_scratch, 16), MemoryUsage::Device, "attn_scratch");
}

ModelGpu::~ModelGpu() = default;

std::vector<PipelineDesc> ModelGpu::pipelines() const {
    std::vector<PipelineDesc> out;
    auto add = [&](std::vector<PipelineDesc> v) {
        for (auto& d : v)
            if (std::none_of(out.begin(), out.end(), [&](const PipelineDesc& o) { return o.key() == d.key(); }))
                out.push_back(std::move(d));
    };
    const ModelConfig& c = cfg_;
    auto type_of = [&](const std::string& name) { return file_.tensor(name).type; };
    TensorType out_t = c.tied_embeddings ? type_of("token_embd.weight") : type_of("output.weight");
    const uint32_t qd = c.q_dim(), kv = c.kv_dim();
    // Every layer's own types: mixed files (Q4_K_M: Q6_K attn_v / ffn_down in some layers) need
    // several variants of one op.
    // Row counts: decode (1), a full prompt chunk, and the decode batches of 2..8 sequences (larger
    // batches run as groups of <= 8 rows).
    std::vector<uint32_t> row_counts{1u, opts_.ubatch};
    for (uint32_t m = 2; m <= std::min(opts_.n_seq, 8u); ++m) row_counts.push_back(m);
    std::sort(row_counts.begin(), row_counts.end());
    row_counts.erase(std::unique(row_counts.begin(), row_counts.end()), row_counts.end());
    for (uint32_t m : row_counts) {
        for (uint32_t l = 0; l < c.n_layers; ++l) {
            auto type = [&](const char* t) { return type_of(fmt::format("blk.{}.{}.weight", l, t)); };
            // A lone token (m == 1) of an RMSNorm model reads q/k/v and gate/up only through the fused
            // norm (layer_slices' fold_norm), and down through the fused GLU unless the layer has
            // an up bias (fold_glu): the plain variants below are then never recorded.
            const bool has_up_bias = file_.find_tensor(fmt::format("blk.{}.ffn_up.bias", l)) != nullptr;
            const bool folds_norm = m == 1 && c.arch->norm == NormKind::Rms;
            const bool folds_glu = m == 1 && c.arch->ffn != FfnKind::Gelu && !has_up_bias;
            if (folds_norm) {
                // q/k/v and gate/up: only the fused forms below
            } else if (c.arch->fused_qkv) {
                add(ops::linear_pipelines(ctx_, type("attn_qkv"), m, m == 1 ? qd + 2 * kv : qd, c.dim));
                add(ops::linear_pipelines(ctx_, type("attn_qkv"), m, kv, c.dim));
            } else {
                add(ops::linear_pipelines(ctx_, type("attn_q"), m, qd, c.dim));
                add(ops::linear_pipelines(ctx_, type("attn_k"), m, kv, c.dim));
                add(ops::linear_pipelines(ctx_, type("attn_v"), m, kv, c.dim));
                if (m == 1) add(ops::linear_pipelines(ctx_, type("attn_q"), m, qd + 2 * kv, c.dim));
            }
            add(ops::linear_pipelines(ctx_, type("attn_output"), m, c.dim, qd));
            if (folds_norm) {
                // fused below
            } else if (c.arch->fused_gate_up) {
                add(ops::linear_pipelines(ctx_, type("ffn_up"), m, m == 1 ? 2 * c.ffn_dim : c.ffn_dim, c.dim));
            } else {
                if (c.arch->ffn != FfnKind::Gelu) add(ops::linear_pipelines(ctx_, type("ffn_gate"), m, c.ffn_dim, c.dim));
                add(ops::linear_pipelines(ctx_, type("ffn_up"), m, c.ffn_dim, c.dim));
                if (m == 1 && c.arch->ffn != FfnKind::Gelu)
                    add(ops::linear_pipelines(ctx_, type("ffn_gate"), m, 2 * c.ffn_dim, c.dim));
            }
            if (!folds_glu) add(ops::linear_pipelines(ctx_, type("ffn_down"), m, c.dim, c.ffn_dim));
            if (m <= 8) {  // decode steps fold the norms and the GLU into the matvecs (layer_slices)
                using K = ops::MatvecInput::Kind;
                if (folds_norm) {
                    // A lone token: one q/k/v matvec where the weights are fused (ModelWeights: one
                    // type), one gate/up matvec likewise, else one matvec per weight.
                    if (c.arch->fused_qkv || (type("attn_q") == type("attn_k") && type("attn_k") == type("attn_v"))) {
                        add(ops::linear_pipelines(ctx_, type(c.arch->fused_qkv ? "attn_qkv" : "attn_q"), 1,
                                                  qd + 2 * kv, c.dim, K::RmsNorm));
                    } else {
                        add(ops::linear_pipelines(ctx_, type("attn_q"), 1, qd, c.dim, K::RmsNorm));
                        add(ops::linear_pipelines(ctx_, type("attn_k"), 1, kv, c.dim, K::RmsNorm));
                        add(ops::linear_pipelines(ctx_, type("attn_v"), 1, kv, c.dim, K::RmsNorm));
                    }
                    if (c.arch->fused_gate_up ||
                        (c.arch->ffn != FfnKind::Gelu && type("ffn_gate") == type("ffn_up"))) {
                        add(ops::linear_pipelines(ctx_, type(c.arch->fused_gate_up ? "ffn_up" : "ffn_gate"), 1,
                                                  2 * c.ffn_dim, c.dim, K::RmsNorm));
                    } else {
                        if (c.arch->ffn != FfnKind::Gelu)
                            add(ops::linear_pipelines(ctx_, type("ffn_gate"), 1, c.ffn_dim, c.dim, K::RmsNorm));
                        add(ops::linear_pipelines(ctx_, type("ffn_up"), 1, c.ffn_dim, c.dim, K::RmsNorm));
                    }
                } else if (c.arch->norm == NormKind::Rms) {  // decode batches of m sequences: one matvec per weight
                    add(ops::linear_pipelines(ctx_, type(c.arch->fused_qkv ? "attn_qkv" : "attn_q"), m, qd, c.dim,
                                              K::RmsNorm));
                    add(ops::linear_pipelines(ctx_, type(c.arch->fused_qkv ? "attn_qkv" : "attn_k"), m, kv, c.dim,
                                              K::RmsNorm));
                    if (!c.arch->fused_qkv) add(ops::linear_pipelines(ctx_, type("attn_v"), m, kv, c.dim, K::RmsNorm));
                    if (c.arch->ffn != FfnKind::Gelu)
                        add(ops::linear_pipelines(ctx_, type(c.arch->fused_gate_up ? "ffn_up" : "ffn_gate"), m,
                                                  c.ffn_dim, c.dim, K::RmsNorm));
                    add(ops::linear_pipelines(ctx_, type("ffn_up"), m, c.ffn_dim, c.dim, K::RmsNorm));
                }
                if (c.arch->ffn != FfnKind::Gelu && !has_up_bias)
                    add(ops::linear_pipelines(ctx_, type("ffn_down"), m, c.dim, c.ffn_dim,
                                              c.arch->ffn == FfnKind::GeGlu ? K::GeGlu : K::SwiGlu));
            }
            // Decode steps (and each row of a decode batch) run RoPE, the K/V store and attention
            // as one kernel where it takes the shape (layer_slices' fold_store).
            const ops::AttentionParams ap = attention_params(l, m);
            add(m == 1 && ops::attention_store_supported(ap) ? ops::attention_store_pipelines(ctx_, ap)
                                                             : ops::attention_pipelines(ctx_, ap));
        }
    }
    // Runs before the upload decides gpu_embed_: the same test on the file's size.
    if (file_.tensor("token_embd.weight").n_bytes <= ctx_.caps().max_storage_buffer_range)
        add(ops::get_rows_pipelines(ctx_, type_of("token_embd.weight")));
    if (c.arch->positions == PositionKind::Learned) add(ops::get_rows_pipelines(ctx_, type_of("position_embd.weight")));
    for (uint32_t m = 1; m <= std::min(opts_.n_seq, 8u); ++m) add(ops::linear_pipelines(ctx_, out_t, m, c.n_vocab, c.dim));
    if (c.arch->norm == NormKind::Rms)
        for (uint32_t m = 1; m <= std::min(opts_.n_seq, 8u); ++m)
            add(ops::linear_pipelines(ctx_, out_t, m, c.n_vocab, c.dim, ops::MatvecInput::Kind::RmsNorm));
    if (opts_.all_logits) add(ops::linear_pipelines(ctx_, out_t, opts_.ubatch, c.n_vocab, c.dim));
    add(ops::small_op_pipelines(ctx_, opts_.kv_type));
    return out;
}

ops::AttentionParams ModelGpu::attention_params(uint32_t layer, uint32_t n_tokens) const {
    const uint32_t rows = kv_cache_rows(cfg_, layer, plan_.n_ctx, opts_.ubatch);
    ops::AttentionParams p = plain_attention_params(cfg_, n_tokens, rows, opts_.kv_type);
    // A window as long as the context never masks anything.
    if (cfg_.is_local(layer) && cfg_.window < plan_.n_ctx) p.window = cfg_.window;
    return p;
}

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
                      positions_.slice(0, 4ull * n), n, rows);
        ops::add(ctx_, s, x, rows, x, n * cfg_.dim);
    }
}

ModelGpu::LayerSlices ModelGpu::layer_slices(uint32_t l, uint32_t n, bool decode_batch) const {
    const LayerWeights& L = w_.layers[l];
    const uint32_t qd = cfg_.q_dim(), kv = cfg_.kv_dim(), ffn = cfg_.ffn_dim;
    auto rows = [&](const Buffer& b, uint64_t width) { return b.slice(0, 4ull * width * n); };
    LayerSlices r;
    // Decoding one token is bound by dispatch count on small models: Q, K and V come from one
    // matvec over the fused weights into one (q_dim + 2 kv) vector; gate and up likewise.
    r.fuse_qkv = n == 1 && L.wqkv.present();
    r.fuse_ffn = n == 1 && L.w_gate_up.present();
    if (r.fuse_qkv) {
        r.q = qkv_.slice(0, 4ull * qd);
        r.k = qkv_.slice(4ull * qd, 4ull * kv);
        r.v = qkv_.slice(4ull * (qd + kv), 4ull * kv);
    } else {
        r.q = rows(q_, qd), r.k = rows(k_, kv), r.v = rows(v_, kv);
    }
    // Decode steps (one token, or a batch of sequences, which must compute what a lone token does:
    // batch invariance) fold the norms and the GLU into the matvecs. Only RMSNorm (no bias) folds;
    // a GLU with an up bias keeps its own ops.
    const bool decode = n == 1 || decode_batch;
    r.fold_norm = decode && cfg_.arch->norm == NormKind::Rms;
    r.fold_glu = decode && cfg_.arch->ffn != FfnKind::Gelu && !L.b_up.present();
    r.fold_rope = decode && cfg_.arch->positions == PositionKind::Rope;
    r.fold_store = decode && ops::attention_store_supported(attention_params(l, 1));
    if (r.fuse_ffn) {
        r.gate = gate_up_.slice(0, 4ull * ffn);
        r.up = gate_up_.slice(4ull * ffn, 4ull * ffn);
    } else {
        r.gate = rows(gate_, ffn), r.up = rows(up_, ffn);
    }
    return r;
}

void ModelGpu::linear(CommandStream& s, const DeviceTensor& w, const BufferSlice& x, const BufferSlice& y,
                      uint32_t rows, uint32_t n, uint32_t k, bool residual, const DeviceTensor* bias, bool decode_batch,
                      const ops::MatvecInput& input) {
    const BufferSlice b = bias && bias->present() ? bias->slice() : BufferSlice{};
    const BufferSlice* bp = bias && bias->present() ? &b : nullptr;
    // A decode batch's rows must not take another kernel than a lone token's (matmul's tiles sum
    // in another order than matvec): groups of at most 8 rows, each one matvec pass over W.
    const uint32_t group = decode_batch ? 8u : rows;
    const bool fused = input.kind != ops::MatvecInput::Kind::Plain;
    if (fused && rows > 8 && !decode_batch) throw std::logic_error("ModelGpu::linear: a fused input needs matvec rows");
    for (uint32_t r0 = 0; r0 < rows; r0 += group) {
        const uint32_t m = std::min(group, rows - r0);
        const BufferSlice xs{x.buffer, x.offset + 4ull * k * r0, 4ull * k * m};
        const BufferSlice ys{y.buffer, y.offset + 4ull * n * r0, 4ull * n * m};
        if (!fused) {
            ops::linear(ctx_, s, w.type, w.slice(), xs, ys, m, n, k, residual ? &ys : nullptr, bp);
            continue;
        }
        ops::MatvecInput in = input;
        if (in.up.buffer != VK_NULL_HANDLE) in.up = BufferSlice{in.up.buffer, in.up.offset + 4ull * k * r0, 4ull * k * m};
        ops::matvec(ctx_, s, w.type, w.slice(), xs, ys, m, n, k, residual ? &ys : nullptr, bp, in);
    }
}

void ModelGpu::record_layer(CommandStream& s, uint32_t l, const BatchShape& batch) {
    const uint32_t n = batch.n;
    const bool db = batch.decode_batch();
    const LayerWeights& L = w_.layers[l];
    const ModelConfig& c = cfg_;
    const ArchDesc& A = *c.arch;
    const uint32_t dim = c.dim, qd = c.q_dim(), kv = c.kv_dim(), ffn = c.ffn_dim;
    auto rows = [&](const Buffer& b, uint64_t width) { return b.slice(0, 4ull * width * n); };
    BufferSlice x = rows(x_, dim), xn = rows(xn_, dim), tmp = rows(tmp_, dim), att = rows(att_, qd);
    BufferSlice pos = positions_.slice(0, 4ull * n);
    const LayerSlices ls = layer_slices(l, n, db);
    const BufferSlice &q = ls.q, &k = ls.k, &v = ls.v, &gate = ls.gate, &up = ls.up;
    // Biases ride in the linear epilogue (Y = X W^T + b (+ R)); nullptr when the model has none.
    const BufferSlice bqkv = L.bqkv.slice(), b_up = L.b_up.slice();
    auto opt = [](const DeviceTensor& t, const BufferSlice& s) { return t.present() ? &s : nullptr; };

    // --- attention block: x += post_norm(wo · attention(rope(norm_q(wq · norm(x))), ...))
    // Decode steps fold the RMSNorm into the projections (matvec reads x and normalizes it).
    const ops::MatvecInput attn_in = ls.fold_norm ? rms_input(L.attn_norm) : ops::MatvecInput{};
    const BufferSlice& attn_x = ls.fold_norm ? x : xn;
    if (!ls.fold_norm) norm(s, x, L.attn_norm, L.attn_norm_b, xn, n);
    if (ls.fuse_qkv && (L.bqkv.present() || !(L.bq.present() || L.bk.present() || L.bv.present()))) {
        // qkv [qd + 2 kv] = wqkv · norm(x) (+ bqkv)
        ops::matvec(ctx_, s, L.wqkv.type, L.wqkv.slice(), attn_x, qkv_.slice(), 1, qd + 2 * kv, dim, nullptr,
                    opt(L.bqkv, bqkv), attn_in);
    } else {
        linear(s, L.wq, attn_x, q, n, qd, dim, false, &L.bq, db, attn_in);
        linear(s, L.wk, attn_x, k, n, kv, dim, false, &L.bk, db, attn_in);
        linear(s, L.wv, attn_x, v, n, kv, dim, false, &L.bv, db, attn_in);
    }
    if (A.qk_norm) {  // every head of q and k is RMS-normalized on its own
        ops::rms_norm(ctx_, s, q, L.q_norm.slice(), q, n * c.n_heads, c.head_dim, c.norm_eps);
        ops::rms_norm(ctx_, s, k, L.k_norm.slice(), k, n * c.n_kv_heads, c.head_dim, c.norm_eps);
    }
    const RopeConfig& rc = c.rope_for(l);
    const ops::RopeParams rope_q{c.n_heads, c.head_dim, c.rope_dim, rc.base, A.rope_layout, rc.freq_scale,
                                 rc.ext_factor, rc.attn_factor, rc.beta_fast, rc.beta_slow, rc.n_ctx_orig};
    const BufferSlice factors = w_.rope_factors.slice();
    const BufferSlice* ff = w_.rope_factors.present() ? &factors : nullptr;
    if (A.positions == PositionKind::Rope && !ls.fold_rope) {  // prompt chunks of n > 1 (decode steps: below)
        ops::rope(ctx_, s, q, pos, n, rope_q, ff);
        ops::RopeParams rope_k = rope_q;
        rope_k.n_heads = c.n_kv_heads;
        ops::rope(ctx_, s, k, pos, n, rope_k, ff);
    }
    // Each sequence stores into and attends over its own cache: a chunk is one segment of n rows,
    // a decode batch one row per sequence (rows bound in place, at any offset).
    const uint32_t kv_rows = kv_rows_[l];
    const uint32_t seg_rows = db ? 1 : n;
    const uint64_t scratch_region = plan_.attention_scratch / opts_.n_seq;
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const uint32_t seq = batch.seqs[i], r0 = uint32_t(i) * seg_rows;
        const size_t cache = size_t(seq) * c.n_layers + l;
        auto seg = [&](const BufferSlice& b, uint64_t width) {
            return BufferSlice{b.buffer, b.offset + 4ull * width * r0, 4ull * width * seg_rows};
        };
        const BufferSlice sp = seg(pos, 1);
        const BufferSlice scratch = plan_.attention_scratch
                                        ? attn_scratch_.slice(scratch_region * i, scratch_region)
                                        : attn_scratch_.slice();
        if (ls.fold_store) {  // rope(q), rope(k), the K/V store and attention: one kernel
            const ops::NewKv new_kv{seg(k, kv), seg(v, kv), A.positions == PositionKind::Rope ? &rope_q : nullptr,
                                    A.positions == PositionKind::Rope ? ff : nullptr};
            ops::attention_store(ctx_, s, attention_params(l, 1), seg(q, qd), new_kv, k_cache_[cache].slice(),
                                 v_cache_[cache].slice(), sp, seg(att, qd), scratch);
            continue;
        }
        if (ls.fold_rope)  // q rotated in place, k rotated into the cache
            ops::kv_store_pair_rope(ctx_, s, seg(q, qd), seg(k, kv), k_cache_[cache].slice(), seg(v, kv),
                                    v_cache_[cache].slice(), sp, seg_rows, c.n_kv_heads, kv_rows, opts_.kv_type,
                                    rope_q, ff);
        else
            ops::kv_store_pair(ctx_, s, seg(k, kv), k_cache_[cache].slice(), seg(v, kv), v_cache_[cache].slice(), sp,
                               seg_rows, kv, kv_rows, opts_.kv_type);
        ops::attention(ctx_, s, attention_params(l, seg_rows), seg(q, qd), k_cache_[cache].slice(),
                       v_cache_[cache].slice(), sp, seg(att, qd), scratch);
    }
    if (L.post_attn_norm.present()) {
        linear(s, L.wo, att, tmp, n, dim, qd, false, &L.bo, db);
        ops::rms_norm(ctx_, s, tmp, L.post_attn_norm.slice(), tmp, n, dim, c.norm_eps);
        ops::add(ctx_, s, x, tmp, x, n * dim);
    } else {
        linear(s, L.wo, att, x, n, dim, qd, true, &L.bo, db);  // x += wo · att + bo
    }

    // --- feed-forward block: x += post_norm(w_down · act(...))
    const ops::MatvecInput ffn_in = ls.fold_norm ? rms_input(L.ffn_norm) : ops::MatvecInput{};
    const BufferSlice& ffn_x = ls.fold_norm ? x : xn;
    if (!ls.fold_norm) norm(s, x, L.ffn_norm, L.ffn_norm_b, xn, n);
    if (ls.fuse_ffn) {
        // gate_up [2 ffn] = w_gate_up · norm(x)
        ops::matvec(ctx_, s, L.w_gate_up.type, L.w_gate_up.slice(), ffn_x, gate_up_.slice(), 1, 2 * ffn, dim, nullptr,
                    nullptr, ffn_in);
    } else {
        if (A.ffn != FfnKind::Gelu) linear(s, L.w_gate, ffn_x, gate, n, ffn, dim, false, nullptr, db, ffn_in);
        linear(s, L.w_up, ffn_x, up, n, ffn, dim, false, &L.b_up, db, ffn_in);
    }
    // Decode steps fold the GLU into the down projection: it reads gate and up and forms
    // act(gate) * up as it loads them.
    ops::MatvecInput down_in{};
    if (ls.fold_glu) {
        down_in.kind = A.ffn == FfnKind::GeGlu ? ops::MatvecInput::Kind::GeGlu : ops::MatvecInput::Kind::SwiGlu;
        down_in.up = up;
    } else {
        if (ls.fuse_ffn && L.b_up.present()) ops::add_rows(ctx_, s, up, b_up, n, ffn);
        switch (A.ffn) {  // the activation always lands in `gate`
            case FfnKind::SwiGlu: ops::swiglu(ctx_, s, gate, up, gate, n * ffn); break;
            case FfnKind::GeGlu: ops::geglu(ctx_, s, gate, up, gate, n * ffn); break;
            case FfnKind::Gelu: ops::gelu(ctx_, s, up, gate, n * ffn); break;
        }
    }
    if (L.post_ffn_norm.present()) {
        linear(s, L.w_down, gate, tmp, n, dim, ffn, false, &L.b_down, db, down_in);
        ops::rms_norm(ctx_, s, tmp, L.post_ffn_norm.slice(), tmp, n, dim, c.norm_eps);
        ops::add(ctx_, s, x, tmp, x, n * dim);
    } else {
        linear(s, L.w_down, gate, x, n, dim, ffn, true, &L.b_down, db, down_in);
    }
}

void ModelGpu::record_logits(CommandStream& s, const BufferSlice& x, uint32_t rows, bool decode,
                             const BufferSlice& normed, const BufferSlice& logits) {
    const DeviceTensor& out = w_.output_tensor();
    if (decode && cfg_.arch->norm == NormKind::Rms) {  // logits = output · rms_norm(x), the norm in the matvec
        linear(s, out, x, logits, rows, cfg_.n_vocab, cfg_.dim, false, nullptr, true, rms_input(w_.output_norm));
    } else {
        norm(s, x, w_.output_norm, w_.output_norm_b, normed, rows);
        linear(s, out, normed, logits, rows, cfg_.n_vocab, cfg_.dim, false, nullptr, decode);
    }
    if (cfg_.final_softcap > 0) ops::softcap(ctx_, s, logits, rows * cfg_.n_vocab, cfg_.final_softcap);
}

void ModelGpu::record_head(CommandStream& s, const BatchShape& batch) {
    const uint32_t n = batch.n;
    const uint64_t row = uint64_t(cfg_.dim) * 4;
    const uint64_t vrow = uint64_t(cfg_.n_vocab) * 4;
    if (batch.decode_batch()) {
        // Every row is a sequence's last token: n rows of logits, one argmax each.
        const BufferSlice rows = logits_.slice(0, vrow * n);
        record_logits(s, x_.slice(0, row * n), n, true, xn_.slice(0, row * n), rows);
        ops::argmax(ctx_, s, rows, argmax_.slice(0, 4ull * n), n, cfg_.n_vocab);
        return;
    }
    const BufferSlice logits = logits_.slice(0, vrow);
    if (opts_.all_logits) {
        // Every token's logits (perplexity); a decode step's as a decode batch's. xn is free once the
        // last layer has run. The last row is copied to logits_ so that logits() and argmax() see the
        // same values as the rows.
        record_logits(s, x_.slice(0, row * n), n, n == 1, xn_.slice(0, row * n), all_logits_.slice(0, vrow * n));
        s.copy(all_logits_.slice(vrow * (n - 1), vrow), logits);
    } else {
        // Only the last token's logits are needed: x's last row is read in place (linear binds
        // windows), as a decode step's.
        record_logits(s, x_.slice(row * (n - 1), row), 1, true, last_.slice(), logits);
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
    add([&](CommandStream& s) { record_embed(s, b.n); });
    for (uint32_t l = 0; l < cfg_.n_layers; ++l) add([&](CommandStream& s) { record_layer(s, l, b); });
    add([&](CommandStream& s) { record_head(s, b); });
    return *recordings_.emplace(b, std::move(rec)).first->second;
}

// --- evaluation ------------------------------------------------------------------------------------

LayerTensors ModelGpu::read_layer_tensors(uint32_t layer, uint32_t n) const {
    const LayerSlices ls = layer_slices(layer, n, false);  // probes run single-sequence eval
    LayerTensors t;
    auto get = [&](const char* name, const BufferSlice& s, uint64_t width) {
        std::vector<float> v(width * n);
        ctx_.download(s, v.data(), v.size() * 4);
        t[name] = std::move(v);
    };
    // RoPE folded into the K/V store or attention rotates q and k only inside those kernels.
    const bool rope = cfg_.arch->positions == PositionKind::Rope;
    if (!(rope && ls.fold_store)) get("q_rope", ls.q, cfg_.q_dim());
    if (!(rope && (ls.fold_rope || ls.fold_store))) get("k_rope", ls.k, cfg_.kv_dim());
    get("v", ls.v, cfg_.kv_dim());
    get("attn_out", att_.slice(), cfg_.q_dim());
    // Folded into a matvec, the norm's and the GLU's results exist only inside it.
    if (!ls.fold_norm) get("ffn_in", xn_.slice(), cfg_.dim);
    get("ffn_up", ls.up, cfg_.ffn_dim);
    if (!ls.fold_glu) get("ffn_act", ls.gate, cfg_.ffn_dim);
    get("x_out", x_.slice(), cfg_.dim);
    return t;
}

void ModelGpu::eval(std::span<const int32_t> tokens, const LayerProbe& probe) { eval_impl(0, tokens, probe, {}); }

void ModelGpu::eval_all_logits(std::span<const int32_t> tokens, const LogitsSink& sink) {
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
    if (!gpu_embed_) {
        const GgufTensorInfo& info = file_.tensor("token_embd.weight");
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
            if (i >= 1 && i <= cfg_.n_layers) probe(uint32_t(i - 1), read_layer_tensors(uint32_t(i - 1), n));
        }
    }
    stats_.tokens += n;
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
    for (size_t done = 0; done < tokens.size();) {
        const uint32_t n = uint32_t(std::min<size_t>(opts_.ubatch, tokens.size() - done));
        auto* pos = static_cast<int32_t*>(positions_.mapped());
        auto* ids = static_cast<int32_t*>(ids_.mapped());
        for (uint32_t i = 0; i < n; ++i) {
            pos[i] = int32_t(n_past_[seq] + i);
            ids[i] = tokens[done + i];
        }
        submit(recording(BatchShape{n, {seq}}), probe, n);
        last_rows_ = 1;
        n_past_[seq] += n;
        if (sink) {
            const size_t floats = size_t(n) * cfg_.n_vocab;
            if (all_logits_.mapped()) {
                sink(uint32_t(done), {static_cast<const float*>(all_logits_.mapped()), floats});
            } else {
                std::vector<float> rows(floats);
                ctx_.download(all_logits_, rows.data(), floats * 4);
                sink(uint32_t(done), rows);
            }
        }
        done += n;
    }
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
}

bool ModelGpu::truncate(uint32_t seq, uint32_t n) {
    check_seq(seq, opts_.n_seq);
    const uint32_t old = n_past_[seq];
    if (n > old) throw std::invalid_argument(fmt::format("truncate: {} tokens kept of {}", n, old));
    // A ring of R rows holds position p until position p + R is stored. The next token (at n)
    // needs positions from n - window + 1 on, so the oldest of them must not have been overwritten.
    for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
        const uint32_t rows = kv_rows_[l];
        if (rows >= plan_.n_ctx) continue;
        const uint32_t oldest = n + 1 > cfg_.window ? n + 1 - cfg_.window : 0;
        if (uint64_t(oldest) + rows < old) return false;
    }
    n_past_[seq] = n;
    return true;
}

void ModelGpu::eval(uint32_t seq, std::span<const int32_t> tokens) {
    check_seq(seq, opts_.n_seq);
    eval_impl(seq, tokens, {}, {});
}

void ModelGpu::decode(std::span<const SeqToken> batch) {
    if (batch.empty()) throw std::invalid_argument("decode: empty batch");
    if (batch.size() > opts_.n_seq)
        throw std::invalid_argument(fmt::format("decode: {} tokens for {} sequences", batch.size(), opts_.n_seq));
    BatchShape shape{uint32_t(batch.size()), {}};
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
        shape.seqs.push_back(t.seq);
        pos[i] = int32_t(n_past_[t.seq]);
        ids[i] = t.token;
    }
    submit(recording(shape), {}, shape.n);
    last_rows_ = shape.n;
    for (const SeqToken& t : batch) ++n_past_[t.seq];
}

void ModelGpu::read_logits(uint32_t rows, float* dst) const {
    if (rows == 0 || rows > last_rows_)
        throw std::out_of_range(fmt::format("read_logits: {} rows, the last evaluation made {}", rows, last_rows_));
    ctx_.download(logits_.slice(0, 4ull * rows * cfg_.n_vocab), dst, 4ull * rows * cfg_.n_vocab);
}

std::vector<int32_t> ModelGpu::argmax_rows(uint32_t rows) const {
    if (rows == 0 || rows > last_rows_)
        throw std::out_of_range(fmt::format("argmax_rows: {} rows, the last evaluation made {}", rows, last_rows_));
    std::vector<uint32_t> ids(rows);
    std::memcpy(ids.data(), argmax_.mapped(), 4ull * rows);
    std::vector<int32_t> out(rows);
    for (uint32_t r = 0; r < rows; ++r) {
        float best = 0;
        if (ids[r] < cfg_.n_vocab) {
            if (logits_.mapped())
                std::memcpy(&best, static_cast<const uint8_t*>(logits_.mapped()) + 4ull * (uint64_t(r) * cfg_.n_vocab + ids[r]), 4);
            else
                ctx_.download(logits_.slice(4ull * (uint64_t(r) * cfg_.n_vocab + ids[r]), 4), &best, 4);
        }
        if (ids[r] >= cfg_.n_vocab || !std::isfinite(best))
            throw NonFiniteError(fmt::format("the model produced non-finite logits (best logit {} for token {}) in "
                                             "row {} of the batch: its weights hold NaN or Inf values, or the "
                                             "computation overflowed", best, ids[r], r));
        out[r] = int32_t(ids[r]);
    }
    return out;
}

void ModelGpu::set_profiling(bool on) {
    if (on == profiling_) return;
    profiling_ = on;
    recordings_.clear();
    last_recording_ = nullptr;
}

std::vector<DispatchTiming> ModelGpu::last_timings() const {
    std::vector<DispatchTiming> out;
    if (!last_recording_) return out;
    for (auto& s : last_recording_->streams) {
        auto t = s->timings();
        out.insert(out.end(), t.begin(), t.end());
    }
    return out;
}

int32_t ModelGpu::argmax() const {
    uint32_t id = 0;
    std::memcpy(&id, argmax_.mapped(), 4);
    // The device argmax skips NaN and answers 0 for an all-NaN row, so check the winning logit
    // itself: a 4-byte read where the logits are mapped; elsewhere a read costs a submit, so only
    // the all-NaN answer (0) is checked.
    float best = 0;
    if (logits_.mapped())
        std::memcpy(&best, static_cast<const uint8_t*>(logits_.mapped()) + 4ull * id, 4);
    else if (id == 0)
        ctx_.download(logits_, &best, 4);
    if (id >= cfg_.n_vocab || !std::isfinite(best))
        throw NonFiniteError(fmt::format("the model produced non-finite logits (best logit {} for token {}) at position "
                                         "{}: its weights hold NaN or Inf values, or the computation overflowed",
                                         best, id, n_past_[0]));
    return int32_t(id);
}

std::vector<float> ModelGpu::logits() const {
    std::vector<float> out(cfg_.n_vocab);
    ctx_.download(logits_, out.data(), out.size() * 4);
    return out;
}

}  // namespace vkllm
