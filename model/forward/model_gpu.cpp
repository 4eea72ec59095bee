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

uint64_t kv_row_bytes(const ModelConfig& cfg, ops::KvType t) { return uint64_t(cfg.kv_dim()) * ops::kv_type_bytes(t); }

// Attention of a layer whose cache holds n_ctx rows (no window: the worst case for scratch).
ops::AttentionParams plain_attention_params(const ModelConfig& cfg, uint32_t n_tokens, uint32_t n_ctx, ops::KvType t) {
    ops::AttentionParams p{n_tokens, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, n_ctx, cfg.attn_scale, t};
    p.softcap = cfg.attn_softcap;
    return p;
}

}  // namespace

// --- memory plan -----------------------------------------------------------------------------------

namespace {

// The scratch buffers ModelGpu allocates, but the attention partials (see attention_scratch).
uint64_t scratch_bytes(const ModelConfig& cfg, uint32_t ubatch) {
    // x, xn, tmp, embed_in (dim); q, att (q_dim); k, v (kv_dim); gate, up (ffn); position and token id.
    uint64_t per_token = 4ull * (4ull * cfg.dim + 2ull * cfg.q_dim() + 2ull * cfg.kv_dim() + 2ull * cfg.ffn_dim) + 8;
    // last (dim), qkv (q_dim + 2 kv_dim), gate_up (2 ffn), logits (n_vocab), argmax (1).
    uint64_t fixed = 4ull * (cfg.dim + cfg.q_dim() + 2ull * cfg.kv_dim() + 2ull * cfg.ffn_dim + cfg.n_vocab + 1);
    return per_token * ubatch + fixed;
}

// Split-K partials of attention: decode needs them (prefill does not), and their number of
// splits grows with the context, so this is exact for the n_ctx given and an upper bound below it.
uint64_t attention_scratch(const DeviceCaps& caps, const ModelConfig& cfg, uint32_t ubatch, uint32_t n_ctx,
                           ops::KvType t) {
    return std::max(ops::attention_scratch_bytes(caps, plain_attention_params(cfg, 1, n_ctx, t)),
                    ops::attention_scratch_bytes(caps, plain_attention_params(cfg, ubatch, n_ctx, t)));
}

uint64_t kv_cache_bytes(const ModelConfig& cfg, uint32_t n_ctx, uint32_t ubatch, ops::KvType t) {
    uint64_t rows = 0;
    for (uint32_t l = 0; l < cfg.n_layers; ++l) rows += kv_cache_rows(cfg, l, n_ctx, ubatch);
    return 2 * rows * kv_row_bytes(cfg, t);
}

}  // namespace

uint32_t kv_cache_rows(const ModelConfig& cfg, uint32_t layer, uint32_t n_ctx, uint32_t ubatch) {
    if (!cfg.is_local(layer) || cfg.window >= n_ctx) return n_ctx;
    return cfg.window + ubatch - 1;
}

MemoryPlan plan_memory(const DeviceCaps& caps, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts) {
    MemoryPlan p;
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
    p.scratch = scratch_bytes(cfg, opts.ubatch) + p.all_logits +
                attention_scratch(caps, cfg, opts.ubatch, ctx_bound, opts.kv_type);
    // Full-context layers grow with n_ctx; a sliding-window layer's ring is fixed once n_ctx
    // passes window + ubatch - 1, so the fit is solved for the full layers with the rings at
    // their largest.
    const uint64_t kv_row = kv_row_bytes(cfg, opts.kv_type);
    uint32_t n_full = 0;
    uint64_t ring_bytes = 0;
    for (uint32_t l = 0; l < cfg.n_layers; ++l) {
        if (cfg.is_local(l) && cfg.window > 0) ring_bytes += 2ull * kv_row * (cfg.window + opts.ubatch - 1);
        else ++n_full;
    }
    const uint64_t per_token = 2ull * kv_row * std::max(n_full, 1u);
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
                "--ctx {} needs {} of KV cache, but after weights ({}) and scratch ({}) only {} is usable: at most "
                "--ctx {}", p.n_ctx, mib(kv_cache_bytes(cfg, p.n_ctx, opts.ubatch, opts.kv_type)), mib(p.weights),
                mib(p.scratch), mib(budget - fixed), max_ctx_memory));
        if (p.n_ctx > max_ctx_binding)
            throw DeviceLimitError(fmt::format("--ctx {}: one layer's KV cache would be {} bytes, more than this "
                                               "device's maxStorageBufferRange ({}); at most --ctx {}",
                                               p.n_ctx, kv_row * p.n_ctx, caps.max_storage_buffer_range,
                                               max_ctx_binding));
    }
    p.kv_cache = kv_cache_bytes(cfg, p.n_ctx, opts.ubatch, opts.kv_type);
    p.kv_cache_full = 2ull * kv_row * cfg.n_layers * p.n_ctx;
    p.attention_scratch = attention_scratch(caps, cfg, opts.ubatch, p.n_ctx, opts.kv_type);
    p.scratch = scratch_bytes(cfg, opts.ubatch) + p.all_logits + p.attention_scratch;
    return p;
}

// --- construction ----------------------------------------------------------------------------------

struct ModelGpu::Recording {
    std::vector<std::unique_ptr<CommandStream>> streams;  // embed, layers..., head
};

ModelGpu::ModelGpu(Context& ctx, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts,
                   const UploadProgress& progress)
    : ctx_(ctx), file_(file), cfg_(cfg), opts_(opts) {
    if (opts_.ubatch == 0) throw std::invalid_argument("ubatch must be > 0");
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

    const uint32_t U = opts_.ubatch, dim = cfg.dim, qd = cfg.q_dim(), kv = cfg.kv_dim(), ffn = cfg.ffn_dim;
    const uint64_t kv_row = kv_row_bytes(cfg, opts_.kv_type);
    for (uint32_t l = 0; l < cfg.n_layers; ++l) {
        kv_rows_.push_back(kv_cache_rows(cfg, l, plan_.n_ctx, U));
        k_cache_.push_back(ctx.create_buffer(kv_row * kv_rows_[l], MemoryUsage::Device, fmt::format("k_cache.{}", l)));
        v_cache_.push_back(ctx.create_buffer(kv_row * kv_rows_[l], MemoryUsage::Device, fmt::format("v_cache.{}", l)));
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
    logits_ = ctx.create_buffer(uint64_t(cfg.n_vocab) * 4, MemoryUsage::DeviceHostVisible, "logits");
    // Readback (host-cached) memory: the host reads every byte of it after each ubatch.
    if (opts_.all_logits) all_logits_ = ctx.create_buffer(plan_.all_logits, MemoryUsage::Readback, "all_logits");
    argmax_ = ctx.create_buffer(4, MemoryUsage::Readback, "argmax");
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
    for (uint32_t m : {1u, opts_.ubatch}) {
        for (uint32_t l = 0; l < c.n_layers; ++l) {
            auto type = [&](const char* t) { return type_of(fmt::format("blk.{}.{}.weight", l, t)); };
            if (c.arch->fused_qkv) {
                add(ops::linear_pipelines(ctx_, type("attn_qkv"), m, m == 1 ? qd + 2 * kv : qd, c.dim));
                add(ops::linear_pipelines(ctx_, type("attn_qkv"), m, kv, c.dim));
            } else {
                add(ops::linear_pipelines(ctx_, type("attn_q"), m, qd, c.dim));
                add(ops::linear_pipelines(ctx_, type("attn_k"), m, kv, c.dim));
                add(ops::linear_pipelines(ctx_, type("attn_v"), m, kv, c.dim));
                if (m == 1) add(ops::linear_pipelines(ctx_, type("attn_q"), m, qd + 2 * kv, c.dim));
            }
            add(ops::linear_pipelines(ctx_, type("attn_output"), m, c.dim, qd));
            if (c.arch->fused_gate_up) {
                add(ops::linear_pipelines(ctx_, type("ffn_up"), m, m == 1 ? 2 * c.ffn_dim : c.ffn_dim, c.dim));
            } else {
                if (c.arch->ffn != FfnKind::Gelu) add(ops::linear_pipelines(ctx_, type("ffn_gate"), m, c.ffn_dim, c.dim));
                add(ops::linear_pipelines(ctx_, type("ffn_up"), m, c.ffn_dim, c.dim));
                if (m == 1 && c.arch->ffn != FfnKind::Gelu)
                    add(ops::linear_pipelines(ctx_, type("ffn_gate"), m, 2 * c.ffn_dim, c.dim));
            }
            add(ops::linear_pipelines(ctx_, type("ffn_down"), m, c.dim, c.ffn_dim));
            add(ops::attention_pipelines(ctx_, attention_params(l, m)));
        }
    }
    // Runs before the upload decides gpu_embed_: the same test on the file's size.
    if (file_.tensor("token_embd.weight").n_bytes <= ctx_.caps().max_storage_buffer_range)
        add(ops::get_rows_pipelines(ctx_, type_of("token_embd.weight")));
    if (c.arch->positions == PositionKind::Learned) add(ops::get_rows_pipelines(ctx_, type_of("position_embd.weight")));
    add(ops::linear_pipelines(ctx_, out_t, 1, c.n_vocab, c.dim));
    if (opts_.all_logits) add(ops::linear_pipelines(ctx_, out_t, opts_.ubatch, c.n_vocab, c.dim));
    add(ops::small_op_pipelines(ctx_));
    return out;
}

ops::AttentionParams ModelGpu::attention_params(uint32_t layer, uint32_t n_tokens) const {
    const uint32_t rows = kv_cache_rows(cfg_, layer, plan_.n_ctx, opts_.ubatch);
    ops::AttentionParams p = plain_attention_params(cfg_, n_tokens, rows, opts_.kv_type);
    // A window as long as the context never masks anything.
    if (cfg_.is_local(layer) && cfg_.window < plan_.n_ctx) p.window = cfg_.window;
    return p;
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

ModelGpu::LayerSlices ModelGpu::layer_slices(uint32_t l, uint32_t n) const {
    const LayerWeights& L = w_.layers[l];
    const uint32_t qd = cfg_.q_dim(), kv = cfg_.kv_dim(), ffn = cfg_.ffn_dim;
    auto rows = [&](const Buffer& b, uint64_t width) { return b.slice(0, 4ull * width * n); };
    LayerSlices r;
    // Decoding one token is bound by dispatch count on small models: Q, K and V come from one
    // matvec over the fused weights into one (q_dim + 2 kv) vector, which also makes q and k one
    // contiguous run of heads for a single RoPE dispatch; gate and up likewise.
    r.fuse_qkv = n == 1 && L.wqkv.present();
    r.fuse_ffn = n == 1 && L.w_gate_up.present();
    if (r.fuse_qkv) {
        r.q = qkv_.slice(0, 4ull * qd);
        r.k = qkv_.slice(4ull * qd, 4ull * kv);
        r.v = qkv_.slice(4ull * (qd + kv), 4ull * kv);
    } else {
        r.q = rows(q_, qd), r.k = rows(k_, kv), r.v = rows(v_, kv);
    }
    if (r.fuse_ffn) {
        r.gate = gate_up_.slice(0, 4ull * ffn);
        r.up = gate_up_.slice(4ull * ffn, 4ull * ffn);
    } else {
        r.gate = rows(gate_, ffn), r.up = rows(up_, ffn);
    }
    return r;
}

void ModelGpu::record_layer(CommandStream& s, uint32_t l, uint32_t n) {
    const LayerWeights& L = w_.layers[l];
    const ModelConfig& c = cfg_;
    const ArchDesc& A = *c.arch;
    const uint32_t dim = c.dim, qd = c.q_dim(), kv = c.kv_dim(), ffn = c.ffn_dim;
    auto rows = [&](const Buffer& b, uint64_t width) { return b.slice(0, 4ull * width * n); };
    BufferSlice x = rows(x_, dim), xn = rows(xn_, dim), tmp = rows(tmp_, dim), att = rows(att_, qd);
    BufferSlice pos = positions_.slice(0, 4ull * n);
    const LayerSlices ls = layer_slices(l, n);
    const BufferSlice &q = ls.q, &k = ls.k, &v = ls.v, &gate = ls.gate, &up = ls.up;
    // Biases ride in the linear epilogue (Y = X W^T + b (+ R)); nullptr when the model has none.
    const BufferSlice bq = L.bq.slice(), bk = L.bk.slice(), bv = L.bv.slice(), bqkv = L.bqkv.slice(),
                      bo = L.bo.slice(), b_up = L.b_up.slice(), b_down = L.b_down.slice();
    auto opt = [](const DeviceTensor& t, const BufferSlice& s) { return t.present() ? &s : nullptr; };

    // --- attention block: x += post_norm(wo · attention(rope(norm_q(wq · norm(x))), ...))
    norm(s, x, L.attn_norm, L.attn_norm_b, xn, n);
    if (ls.fuse_qkv && (L.bqkv.present() || !(L.bq.present() || L.bk.present() || L.bv.present()))) {
        ops::linear(ctx_, s, L.wqkv.type, L.wqkv.slice(), xn, qkv_.slice(), 1, qd + 2 * kv, dim, nullptr,
                    opt(L.bqkv, bqkv));
    } else {
        ops::linear(ctx_, s, L.wq.type, L.wq.slice(), xn, q, n, qd, dim, nullptr, opt(L.bq, bq));
        ops::linear(ctx_, s, L.wk.type, L.wk.slice(), xn, k, n, kv, dim, nullptr, opt(L.bk, bk));
        ops::linear(ctx_, s, L.wv.type, L.wv.slice(), xn, v, n, kv, dim, nullptr, opt(L.bv, bv));
    }
    if (A.qk_norm) {  // every head of q and k is RMS-normalized on its own
        ops::rms_norm(ctx_, s, q, L.q_norm.slice(), q, n * c.n_heads, c.head_dim, c.norm_eps);
        ops::rms_norm(ctx_, s, k, L.k_norm.slice(), k, n * c.n_kv_heads, c.head_dim, c.norm_eps);
    }
    if (A.positions == PositionKind::Rope) {
        const RopeConfig& r = c.rope_for(l);
        ops::RopeParams rp{c.n_heads, c.head_dim, c.rope_dim, r.base, A.rope_layout, r.freq_scale, r.ext_factor,
                           r.attn_factor, r.beta_fast, r.beta_slow, r.n_ctx_orig};
        const BufferSlice factors = w_.rope_factors.slice();
        const BufferSlice* ff = w_.rope_factors.present() ? &factors : nullptr;
        if (ls.fuse_qkv) {  // q and k are one run of n_heads + n_kv_heads heads
            rp.n_heads = c.n_heads + c.n_kv_heads;
            ops::rope(ctx_, s, qkv_.slice(0, 4ull * (qd + kv)), pos, 1, rp, ff);
        } else {
            ops::rope(ctx_, s, q, pos, n, rp, ff);
            rp.n_heads = c.n_kv_heads;
            ops::rope(ctx_, s, k, pos, n, rp, ff);
        }
    }
    const uint32_t kv_rows = kv_rows_[l];
    ops::kv_store(ctx_, s, k, k_cache_[l].slice(), pos, n, kv, kv_rows, opts_.kv_type);
    ops::kv_store(ctx_, s, v, v_cache_[l].slice(), pos, n, kv, kv_rows, opts_.kv_type);
    ops::attention(ctx_, s, attention_params(l, n), q, k_cache_[l].slice(), v_cache_[l].slice(), pos, att,
                   attn_scratch_.slice());
    if (L.post_attn_norm.present()) {
        ops::linear(ctx_, s, L.wo.type, L.wo.slice(), att, tmp, n, dim, qd, nullptr, opt(L.bo, bo));
        ops::rms_norm(ctx_, s, tmp, L.post_attn_norm.slice(), tmp, n, dim, c.norm_eps);
        ops::add(ctx_, s, x, tmp, x, n * dim);
    } else {
        ops::linear(ctx_, s, L.wo.type, L.wo.slice(), att, x, n, dim, qd, &x, opt(L.bo, bo));  // x += wo · att + bo
    }

    // --- feed-forward block: x += post_norm(w_down · act(...))
    norm(s, x, L.ffn_norm, L.ffn_norm_b, xn, n);
    if (ls.fuse_ffn) {
        ops::linear(ctx_, s, L.w_gate_up.type, L.w_gate_up.slice(), xn, gate_up_.slice(), 1, 2 * ffn, dim);
    } else {
        if (A.ffn != FfnKind::Gelu) ops::linear(ctx_, s, L.w_gate.type, L.w_gate.slice(), xn, gate, n, ffn, dim);
        ops::linear(ctx_, s, L.w_up.type, L.w_up.slice(), xn, up, n, ffn, dim, nullptr, opt(L.b_up, b_up));
    }
    if (ls.fuse_ffn && L.b_up.present()) ops::add_rows(ctx_, s, up, b_up, n, ffn);
    switch (A.ffn) {  // the activation always lands in `gate`
        case FfnKind::SwiGlu: ops::swiglu(ctx_, s, gate, up, gate, n * ffn); break;
        case FfnKind::GeGlu: ops::geglu(ctx_, s, gate, up, gate, n * ffn); break;
        case FfnKind::Gelu: ops::gelu(ctx_, s, up, gate, n * ffn); break;
    }
    if (L.post_ffn_norm.present()) {
        ops::linear(ctx_, s, L.w_down.type, L.w_down.slice(), gate, tmp, n, dim, ffn, nullptr, opt(L.b_down, b_down));
        ops::rms_norm(ctx_, s, tmp, L.post_ffn_norm.slice(), tmp, n, dim, c.norm_eps);
        ops::add(ctx_, s, x, tmp, x, n * dim);
    } else {
        ops::linear(ctx_, s, L.w_down.type, L.w_down.slice(), gate, x, n, dim, ffn, &x, opt(L.b_down, b_down));
    }
}

void ModelGpu::record_head(CommandStream& s, uint32_t n) {
    const uint64_t row = uint64_t(cfg_.dim) * 4;
    const DeviceTensor& out = w_.output_tensor();
    if (opts_.all_logits) {
        // Every token's logits (perplexity). xn is free once the last layer has run. The last row
        // is copied to logits_ so that logits() and argmax() see the same values as the rows.
        const uint64_t vrow = uint64_t(cfg_.n_vocab) * 4;
        const BufferSlice rows = all_logits_.slice(0, vrow * n);
        norm(s, x_.slice(0, row * n), w_.output_norm, w_.output_norm_b, xn_.slice(0, row * n), n);
        ops::linear(ctx_, s, out.type, out.slice(), xn_.slice(0, row * n), rows, n, cfg_.n_vocab, cfg_.dim);
        if (cfg_.final_softcap > 0) ops::softcap(ctx_, s, rows, n * cfg_.n_vocab, cfg_.final_softcap);
        s.copy(all_logits_.slice(vrow * (n - 1), vrow), logits_.slice());
    } else {
        // Only the last token's logits are needed; copying its row also avoids binding x at an
        // offset that may not meet minStorageBufferOffsetAlignment.
        s.copy(x_.slice(row * (n - 1), row), last_.slice());
        norm(s, last_.slice(), w_.output_norm, w_.output_norm_b, last_.slice(), 1);
        ops::linear(ctx_, s, out.type, out.slice(), last_.slice(), logits_.slice(), 1, cfg_.n_vocab, cfg_.dim);
        if (cfg_.final_softcap > 0) ops::softcap(ctx_, s, logits_.slice(), cfg_.n_vocab, cfg_.final_softcap);
    }
    ops::argmax(ctx_, s, logits_.slice(), argmax_.slice(), 1, cfg_.n_vocab);
}

ModelGpu::Recording& ModelGpu::recording(uint32_t n) {
    auto it = recordings_.find(n);
    if (it != recordings_.end()) return *it->second;
    // Prompt remainders of many sizes would pile up: keep the decode (n = 1) and full-ubatch
    // recordings, drop the others before adding one.
    for (auto i = recordings_.begin(); i != recordings_.end();)
        i = (i->first != 1 && i->first != opts_.ubatch) ? recordings_.erase(i) : std::next(i);
    auto rec = std::make_unique<Recording>();
    auto add = [&](auto&& fn) {
        auto s = std::make_unique<CommandStream>(ctx_);
        s->begin(profiling_);
        fn(*s);
        s->end();
        rec->streams.push_back(std::move(s));
        ++stats_.recordings;
    };
    add([&](CommandStream& s) { record_embed(s, n); });
    for (uint32_t l = 0; l < cfg_.n_layers; ++l) add([&](CommandStream& s) { record_layer(s, l, n); });
    add([&](CommandStream& s) { record_head(s, n); });
    return *recordings_.emplace(n, std::move(rec)).first->second;
}

// --- evaluation ------------------------------------------------------------------------------------

LayerTensors ModelGpu::read_layer_tensors(uint32_t layer, uint32_t n) const {
    const LayerSlices ls = layer_slices(layer, n);
    LayerTensors t;
    auto get = [&](const char* name, const BufferSlice& s, uint64_t width) {
        std::vector<float> v(width * n);
        ctx_.download(s, v.data(), v.size() * 4);
        t[name] = std::move(v);
    };
    get("q_rope", ls.q, cfg_.q_dim());
    get("k_rope", ls.k, cfg_.kv_dim());
    get("v", ls.v, cfg_.kv_dim());
    get("attn_out", att_.slice(), cfg_.q_dim());
    get("ffn_in", xn_.slice(), cfg_.dim);
    get("ffn_up", ls.up, cfg_.ffn_dim);
    get("ffn_act", ls.gate, cfg_.ffn_dim);
    get("x_out", x_.slice(), cfg_.dim);
    return t;
}

void ModelGpu::eval(std::span<const int32_t> tokens, const LayerProbe& probe) { eval_impl(tokens, probe, {}); }

void ModelGpu::eval_all_logits(std::span<const int32_t> tokens, const LogitsSink& sink) {
    if (!opts_.all_logits)
        throw std::logic_error("eval_all_logits: the model was loaded without ModelOptions::all_logits");
    eval_impl(tokens, {}, sink);
}

void ModelGpu::eval_impl(std::span<const int32_t> tokens, const LayerProbe& probe, const LogitsSink& sink) {
    if (tokens.empty()) throw std::invalid_argument("eval: no tokens");
    if (tokens.size() > plan_.n_ctx - n_past_)
        throw ContextFullError(fmt::format("{} tokens do not fit: the context holds {} tokens and {} are used "
                                           "(raise --ctx, or start a new conversation)",
                                           tokens.size(), plan_.n_ctx, n_past_));
    for (int32_t id : tokens)
        if (id < 0 || uint32_t(id) >= cfg_.n_vocab)
            throw std::out_of_range(fmt::format("token id {} outside the vocabulary (0..{})", id, cfg_.n_vocab - 1));
    for (size_t done = 0; done < tokens.size();) {
        uint32_t n = uint32_t(std::min<size_t>(opts_.ubatch, tokens.size() - done));
        auto* pos = static_cast<int32_t*>(positions_.mapped());
        auto* ids = static_cast<int32_t*>(ids_.mapped());
        for (uint32_t i = 0; i < n; ++i) {
            pos[i] = int32_t(n_past_ + i);
            ids[i] = tokens[done + i];
        }
        if (!gpu_embed_) {
            // Dequantize the rows straight from the mapped file into the upload buffer.
            const GgufTensorInfo& info = file_.tensor("token_embd.weight");
            auto data = file_.tensor_data(info);
            size_t row_bytes_ = row_bytes(info.type, cfg_.dim);
            auto* dst = static_cast<float*>(embed_in_.mapped());
            for (uint32_t i = 0; i < n; ++i)
                dequantize_row(info.type, data.data() + size_t(ids[i]) * row_bytes_, dst + size_t(i) * cfg_.dim, cfg_.dim);
        }
        Recording& rec = recording(n);
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
        n_past_ += n;
        stats_.tokens += n;
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
                                         best, id, n_past_));
    return int32_t(id);
}

std::vector<float> ModelGpu::logits() const {
    std::vector<float> out(cfg_.n_vocab);
    ctx_.download(logits_, out.data(), out.size() * 4);
    return out;
}

}  // namespace vkllm
