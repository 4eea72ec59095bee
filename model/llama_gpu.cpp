#include "model/llama_gpu.h"

#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/get_rows.h"
#include "runtime/ops/kv_store.h"
#include "runtime/ops/linear.h"
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

uint64_t kv_bytes_per_token(const LlamaConfig& cfg, ops::KvType t) {
    return 2ull * cfg.n_layers * cfg.kv_dim() * (t == ops::KvType::F16 ? 2 : 4);
}

ops::AttentionParams attention_params(const LlamaConfig& cfg, uint32_t n_tokens, uint32_t n_ctx, ops::KvType t) {
    return {n_tokens, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, n_ctx, 1.0f / std::sqrt(float(cfg.head_dim)), t};
}

}  // namespace

// --- memory plan -----------------------------------------------------------------------------------

namespace {

// The scratch buffers LlamaGpu allocates, but the attention partials (see attention_scratch).
uint64_t scratch_bytes(const LlamaConfig& cfg, uint32_t ubatch) {
    // x, xn, q, att, embed_in (dim); k, v (kv_dim); gate, up (ffn); position and token id.
    uint64_t per_token = 4ull * (5ull * cfg.dim + 2ull * cfg.kv_dim() + 2ull * cfg.ffn_dim) + 8;
    // last (dim), qkv (dim + 2 kv_dim), gate_up (2 ffn), logits (n_vocab), argmax (1).
    uint64_t fixed = 4ull * (2ull * cfg.dim + 2ull * cfg.kv_dim() + 2ull * cfg.ffn_dim + cfg.n_vocab + 1);
    return per_token * ubatch + fixed;
}

// Split-K partials of attention: decode needs them (prefill does not), and their number of
// splits grows with the context, so this is exact for the n_ctx given and an upper bound below it.
uint64_t attention_scratch(const DeviceCaps& caps, const LlamaConfig& cfg, uint32_t ubatch, uint32_t n_ctx,
                           ops::KvType t) {
    return std::max(ops::attention_scratch_bytes(caps, attention_params(cfg, 1, n_ctx, t)),
                    ops::attention_scratch_bytes(caps, attention_params(cfg, ubatch, n_ctx, t)));
}

}  // namespace

MemoryPlan plan_memory(const DeviceCaps& caps, const GgufFile& file, const LlamaConfig& cfg, const LlamaOptions& opts) {
    MemoryPlan p;
    p.available = caps.device_local_bytes;
    p.weights = LlamaWeights::device_bytes(file, cfg);
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
    uint64_t per_token = kv_bytes_per_token(cfg, opts.kv_type);
    // One layer's K (or V) cache is one binding: it must fit maxStorageBufferRange.
    uint64_t per_layer_row = per_token / (2ull * cfg.n_layers);
    uint64_t max_ctx_binding = caps.max_storage_buffer_range / per_layer_row;
    // Keep 10% of the heap for the driver, staging and other processes.
    uint64_t budget = p.available / 10 * 9;
    uint64_t fixed = p.weights + p.scratch;
    if (fixed > budget)
        throw DeviceLimitError(fmt::format(
            "model does not fit on the device: weights {} + scratch {} = {}, but only {} of device memory is usable "
            "(of {})", mib(p.weights), mib(p.scratch), mib(fixed), mib(budget), mib(p.available)));
    uint64_t max_ctx_memory = (budget - fixed) / per_token;
    if (opts.n_ctx == 0) {
        p.n_ctx = uint32_t(std::min<uint64_t>({cfg.n_ctx_train ? cfg.n_ctx_train : 2048, max_ctx_memory, max_ctx_binding}));
        if (p.n_ctx < 16)
            throw DeviceLimitError(fmt::format("model leaves room for only {} tokens of KV cache ({} per token); the "
                                               "device has {}", p.n_ctx, mib(per_token), mib(p.available)));
    } else {
        p.n_ctx = opts.n_ctx;
        if (p.n_ctx > max_ctx_memory)
            throw DeviceLimitError(fmt::format(
                "--ctx {} needs {} of KV cache, but after weights ({}) and scratch ({}) only {} is usable: at most "
                "--ctx {}", p.n_ctx, mib(per_token * p.n_ctx), mib(p.weights), mib(p.scratch), mib(budget - fixed),
                max_ctx_memory));
        if (p.n_ctx > max_ctx_binding)
            throw DeviceLimitError(fmt::format("--ctx {}: one layer's KV cache would be {} bytes, more than this "
                                               "device's maxStorageBufferRange ({}); at most --ctx {}",
                                               p.n_ctx, per_layer_row * p.n_ctx, caps.max_storage_buffer_range,
                                               max_ctx_binding));
    }
    p.kv_cache = per_token * p.n_ctx;
    p.attention_scratch = attention_scratch(caps, cfg, opts.ubatch, p.n_ctx, opts.kv_type);
    p.scratch = scratch_bytes(cfg, opts.ubatch) + p.all_logits + p.attention_scratch;
    return p;
}

// --- construction ----------------------------------------------------------------------------------

struct LlamaGpu::Recording {
    std::vector<std::unique_ptr<CommandStream>> streams;  // embed, layers..., head
};

LlamaGpu::LlamaGpu(Context& ctx, const GgufFile& file, const LlamaConfig& cfg, const LlamaOptions& opts,
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
        w_ = LlamaWeights::upload(ctx, file, cfg, progress);
    } catch (...) {
        compiler.join();
        throw;
    }
    compiler.join();
    if (compile_error) std::rethrow_exception(compile_error);

    const uint32_t U = opts_.ubatch, dim = cfg.dim, kv = cfg.kv_dim(), ffn = cfg.ffn_dim;
    const uint64_t kv_row = uint64_t(kv) * (opts_.kv_type == ops::KvType::F16 ? 2 : 4);
    for (uint32_t l = 0; l < cfg.n_layers; ++l) {
        k_cache_.push_back(ctx.create_buffer(kv_row * plan_.n_ctx, MemoryUsage::Device, fmt::format("k_cache.{}", l)));
        v_cache_.push_back(ctx.create_buffer(kv_row * plan_.n_ctx, MemoryUsage::Device, fmt::format("v_cache.{}", l)));
    }
    auto dev = [&](uint64_t floats, const char* name) { return ctx.create_buffer(floats * 4, MemoryUsage::Device, name); };
    x_ = dev(uint64_t(U) * dim, "x");
    xn_ = dev(uint64_t(U) * dim, "xn");
    q_ = dev(uint64_t(U) * dim, "q");
    k_ = dev(uint64_t(U) * kv, "k");
    v_ = dev(uint64_t(U) * kv, "v");
    att_ = dev(uint64_t(U) * dim, "att");
    gate_ = dev(uint64_t(U) * ffn, "gate");
    up_ = dev(uint64_t(U) * ffn, "up");
    last_ = dev(dim, "last");
    qkv_ = dev(uint64_t(dim) + 2ull * kv, "qkv");
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

LlamaGpu::~LlamaGpu() = default;

std::vector<PipelineDesc> LlamaGpu::pipelines() const {
    std::vector<PipelineDesc> out;
    auto add = [&](std::vector<PipelineDesc> v) {
        for (auto& d : v)
            if (std::none_of(out.begin(), out.end(), [&](const PipelineDesc& o) { return o.key() == d.key(); }))
                out.push_back(std::move(d));
    };
    const LlamaConfig& c = cfg_;
    auto type_of = [&](const char* name) { return file_.tensor(name).type; };
    TensorType out_t = c.tied_embeddings ? type_of("token_embd.weight") : type_of("output.weight");
    // Every layer's own types: mixed files (Q4_K_M: Q6_K attn_v / ffn_down in some layers) need
    // several variants of one op.
    for (uint32_t m : {1u, opts_.ubatch}) {
        for (uint32_t l = 0; l < c.n_layers; ++l) {
            auto type = [&](const char* t) { return type_of(fmt::format("blk.{}.{}.weight", l, t).c_str()); };
            add(ops::linear_pipelines(ctx_, type("attn_q"), m, c.dim, c.dim));
            add(ops::linear_pipelines(ctx_, type("attn_k"), m, c.kv_dim(), c.dim));
            add(ops::linear_pipelines(ctx_, type("attn_v"), m, c.kv_dim(), c.dim));
            add(ops::linear_pipelines(ctx_, type("attn_output"), m, c.dim, c.dim));
            add(ops::linear_pipelines(ctx_, type("ffn_gate"), m, c.ffn_dim, c.dim));
            add(ops::linear_pipelines(ctx_, type("ffn_up"), m, c.ffn_dim, c.dim));
            add(ops::linear_pipelines(ctx_, type("ffn_down"), m, c.dim, c.ffn_dim));
        }
        add(ops::attention_pipelines(ctx_, attention_params(c, m, plan_.n_ctx, opts_.kv_type)));
    }
    // Runs before the upload decides gpu_embed_: the same test on the file's size.
    if (file_.tensor("token_embd.weight").n_bytes <= ctx_.caps().max_storage_buffer_range)
        add(ops::get_rows_pipelines(ctx_, type_of("token_embd.weight")));
    add(ops::linear_pipelines(ctx_, out_t, 1, c.n_vocab, c.dim));
    if (opts_.all_logits) add(ops::linear_pipelines(ctx_, out_t, opts_.ubatch, c.n_vocab, c.dim));
    add(ops::small_op_pipelines(ctx_));
    return out;
}

// --- recording -------------------------------------------------------------------------------------

void LlamaGpu::record_embed(CommandStream& s, uint32_t n) {
    const uint64_t row = uint64_t(cfg_.dim) * 4;
    if (gpu_embed_)
        ops::get_rows(ctx_, s, w_.token_embd.type, w_.token_embd.slice(), cfg_.n_vocab, cfg_.dim, ids_.slice(0, 4ull * n),
                      n, x_.slice(0, row * n));
    else
        s.copy(embed_in_.slice(0, row * n), x_.slice(0, row * n));
}

LlamaGpu::LayerSlices LlamaGpu::layer_slices(uint32_t l, uint32_t n) const {
    const LayerWeights& L = w_.layers[l];
    const uint32_t dim = cfg_.dim, kv = cfg_.kv_dim(), ffn = cfg_.ffn_dim;
    auto rows = [&](const Buffer& b, uint64_t width) { return b.slice(0, 4ull * width * n); };
    LayerSlices r;
    // Decoding one token is bound by dispatch count on small models: Q, K and V come from one
    // matvec over the fused weights into one (dim + 2 kv) vector, which also makes q and k one
    // contiguous run of heads for a single RoPE dispatch; gate and up likewise.
    r.fuse_qkv = n == 1 && L.wqkv.rows != 0;
    r.fuse_ffn = n == 1 && L.w_gate_up.rows != 0;
    if (r.fuse_qkv) {
        r.q = qkv_.slice(0, 4ull * dim);
        r.k = qkv_.slice(4ull * dim, 4ull * kv);
        r.v = qkv_.slice(4ull * (dim + kv), 4ull * kv);
    } else {
        r.q = rows(q_, dim), r.k = rows(k_, kv), r.v = rows(v_, kv);
    }
    if (r.fuse_ffn) {
        r.gate = gate_up_.slice(0, 4ull * ffn);
        r.up = gate_up_.slice(4ull * ffn, 4ull * ffn);
    } else {
        r.gate = rows(gate_, ffn), r.up = rows(up_, ffn);
    }
    return r;
}

void LlamaGpu::record_layer(CommandStream& s, uint32_t l, uint32_t n) {
    const LayerWeights& L = w_.layers[l];
    const LlamaConfig& c = cfg_;
    const uint32_t dim = c.dim, kv = c.kv_dim(), ffn = c.ffn_dim;
    auto rows = [&](const Buffer& b, uint64_t width) { return b.slice(0, 4ull * width * n); };
    BufferSlice x = rows(x_, dim), xn = rows(xn_, dim), att = rows(att_, dim);
    BufferSlice pos = positions_.slice(0, 4ull * n);
    const LayerSlices ls = layer_slices(l, n);
    const BufferSlice &q = ls.q, &k = ls.k, &v = ls.v, &gate = ls.gate, &up = ls.up;
    const bool fuse_qkv = ls.fuse_qkv, fuse_ffn = ls.fuse_ffn;

    // --- attention block
    ops::rms_norm(ctx_, s, x, L.attn_norm.slice(), xn, n, dim, c.rms_eps);
    if (fuse_qkv) {
        ops::linear(ctx_, s, L.wqkv.type, L.wqkv.slice(), xn, qkv_.slice(), 1, dim + 2 * kv, dim);
        ops::rope(ctx_, s, qkv_.slice(0, 4ull * (dim + kv)), pos, 1, c.n_heads + c.n_kv_heads, c.head_dim, c.rope_dim,
                  c.rope_base, ops::RopeLayout::Adjacent);
    } else {
        ops::linear(ctx_, s, L.wq.type, L.wq.slice(), xn, q, n, dim, dim);
        ops::linear(ctx_, s, L.wk.type, L.wk.slice(), xn, k, n, kv, dim);
        ops::linear(ctx_, s, L.wv.type, L.wv.slice(), xn, v, n, kv, dim);
        ops::rope(ctx_, s, q, pos, n, c.n_heads, c.head_dim, c.rope_dim, c.rope_base, ops::RopeLayout::Adjacent);
        ops::rope(ctx_, s, k, pos, n, c.n_kv_heads, c.head_dim, c.rope_dim, c.rope_base, ops::RopeLayout::Adjacent);
    }
    ops::kv_store(ctx_, s, k, k_cache_[l].slice(), pos, n, kv, plan_.n_ctx, opts_.kv_type);
    ops::kv_store(ctx_, s, v, v_cache_[l].slice(), pos, n, kv, plan_.n_ctx, opts_.kv_type);
    ops::attention(ctx_, s, attention_params(c, n, plan_.n_ctx, opts_.kv_type), q, k_cache_[l].slice(),
                   v_cache_[l].slice(), pos, att, attn_scratch_.slice());
    ops::linear(ctx_, s, L.wo.type, L.wo.slice(), att, x, n, dim, dim, &x);  // x += wo · att

    // --- feed-forward block
    ops::rms_norm(ctx_, s, x, L.ffn_norm.slice(), xn, n, dim, c.rms_eps);
    if (fuse_ffn) {
        ops::linear(ctx_, s, L.w_gate_up.type, L.w_gate_up.slice(), xn, gate_up_.slice(), 1, 2 * ffn, dim);
    } else {
        ops::linear(ctx_, s, L.w_gate.type, L.w_gate.slice(), xn, gate, n, ffn, dim);
        ops::linear(ctx_, s, L.w_up.type, L.w_up.slice(), xn, up, n, ffn, dim);
    }
    ops::swiglu(ctx_, s, gate, up, gate, n * ffn);
    ops::linear(ctx_, s, L.w_down.type, L.w_down.slice(), gate, x, n, dim, ffn, &x);  // x += w_down · act
}

void LlamaGpu::record_head(CommandStream& s, uint32_t n) {
    const uint64_t row = uint64_t(cfg_.dim) * 4;
    const DeviceTensor& out = w_.output_tensor();
    if (opts_.all_logits) {
        // Every token's logits (perplexity). xn is free once the last layer has run. The last row
        // is copied to logits_ so that logits() and argmax() see the same values as the rows.
        const uint64_t vrow = uint64_t(cfg_.n_vocab) * 4;
        ops::rms_norm(ctx_, s, x_.slice(0, row * n), w_.output_norm.slice(), xn_.slice(0, row * n), n, cfg_.dim,
                      cfg_.rms_eps);
        ops::linear(ctx_, s, out.type, out.slice(), xn_.slice(0, row * n), all_logits_.slice(0, vrow * n), n,
                    cfg_.n_vocab, cfg_.dim);
        s.copy(all_logits_.slice(vrow * (n - 1), vrow), logits_.slice());
    } else {
        // Only the last token's logits are needed; copying its row also avoids binding x at an
        // offset that may not meet minStorageBufferOffsetAlignment.
        s.copy(x_.slice(row * (n - 1), row), last_.slice());
        ops::rms_norm(ctx_, s, last_.slice(), w_.output_norm.slice(), last_.slice(), 1, cfg_.dim, cfg_.rms_eps);
        ops::linear(ctx_, s, out.type, out.slice(), last_.slice(), logits_.slice(), 1, cfg_.n_vocab, cfg_.dim);
    }
    ops::argmax(ctx_, s, logits_.slice(), argmax_.slice(), 1, cfg_.n_vocab);
}

LlamaGpu::Recording& LlamaGpu::recording(uint32_t n) {
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

LayerTensors LlamaGpu::read_layer_tensors(uint32_t layer, uint32_t n) const {
    const LayerSlices ls = layer_slices(layer, n);
    LayerTensors t;
    auto get = [&](const char* name, const BufferSlice& s, uint64_t width) {
        std::vector<float> v(width * n);
        ctx_.download(s, v.data(), v.size() * 4);
        t[name] = std::move(v);
    };
    get("q_rope", ls.q, cfg_.dim);
    get("k_rope", ls.k, cfg_.kv_dim());
    get("v", ls.v, cfg_.kv_dim());
    get("attn_out", att_.slice(), cfg_.dim);
    get("ffn_in", xn_.slice(), cfg_.dim);
    get("ffn_up", ls.up, cfg_.ffn_dim);
    get("ffn_act", ls.gate, cfg_.ffn_dim);
    get("x_out", x_.slice(), cfg_.dim);
    return t;
}

void LlamaGpu::eval(std::span<const int32_t> tokens, const LayerProbe& probe) { eval_impl(tokens, probe, {}); }

void LlamaGpu::eval_all_logits(std::span<const int32_t> tokens, const LogitsSink& sink) {
    if (!opts_.all_logits)
        throw std::logic_error("eval_all_logits: the model was loaded without LlamaOptions::all_logits");
    eval_impl(tokens, {}, sink);
}

void LlamaGpu::eval_impl(std::span<const int32_t> tokens, const LayerProbe& probe, const LogitsSink& sink) {
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

void LlamaGpu::set_profiling(bool on) {
    if (on == profiling_) return;
    profiling_ = on;
    recordings_.clear();
    last_recording_ = nullptr;
}

std::vector<DispatchTiming> LlamaGpu::last_timings() const {
    std::vector<DispatchTiming> out;
    if (!last_recording_) return out;
    for (auto& s : last_recording_->streams) {
        auto t = s->timings();
        out.insert(out.end(), t.begin(), t.end());
    }
    return out;
}

int32_t LlamaGpu::argmax() const {
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

std::vector<float> LlamaGpu::logits() const {
    std::vector<float> out(cfg_.n_vocab);
    ctx_.download(logits_, out.data(), out.size() * 4);
    return out;
}

}  // namespace vkllm
