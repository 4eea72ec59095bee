#include "model/forward/forward_stage.h"

#include "model/forward/position_bias.h"
#include "model/forward/stage_recorder.h"

#include "runtime/ops/get_rows.h"
#include "runtime/ops/elementwise.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace vkllm {

namespace {

// The upload counts the file's bytes; a split's progress runs over the stages' device bytes
// (layout sizes: f32 norms, derived buffers), so each stage's fraction is scaled to its share.
UploadProgress stage_progress(const UploadProgress& progress, uint64_t before, uint64_t stage_bytes, uint64_t total) {
    if (!progress || total == 0) return progress;
    return [progress, before, stage_bytes, total](uint64_t done, uint64_t of) {
        const uint64_t part =
            of == 0 || done >= of ? stage_bytes : uint64_t(double(stage_bytes) * double(done) / double(of));
        progress(before + part, total);
    };
}

}  // namespace

ForwardStage::ForwardStage(Context& ctx, const GgufFile& file, const ModelConfig& cfg, const ModelOptions& opts,
                           LayerRange range, StagePlace where, const UploadProgress& progress)
    : ctx_(ctx), file_(file), cfg_(cfg), opts_(opts), range_(range.resolved(cfg)) {
    plan_ = plan_memory(ctx_.caps(), file, cfg, opts_, range_);
    layout_ = plan_weights(file, cfg, plan_.n_ctx, range_, opts_.shared_token_embd != nullptr);
    if (const DeviceTensor* e = opts_.shared_token_embd) {
        const TensorPlace& own = layout_.token_embd;
        if (!where.alone || !e->present() || e->type != own.type || e->row_elems != own.row_elems ||
            e->rows != own.rows)
            throw std::invalid_argument(
                fmt::format("a shared token embedding must be this file's token_embd ({} rows of {}) "
                            "on a single device",
                            own.rows, own.row_elems));
    }
    // token_embd fits one binding: its rows are looked up on the device.
    gpu_embed_ = layout_.token_embd.bytes() <= ctx_.caps().max_storage_buffer_range;
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
        w_ = ModelWeights::upload(ctx_, file, layout_,
                                  stage_progress(progress, where.before, layout_.bytes, where.total));
        if (opts_.shared_token_embd) w_.token_embd = *opts_.shared_token_embd;
    } catch (...) {
        compiler.join();
        throw;
    }
    compiler.join();
    if (compile_error) std::rethrow_exception(compile_error);

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
        ctx_.upload(pos_bias_.back(), table.data(), table.size() * 4);
        layers_[l].pos_bias = int32_t(pos_bias_.size() - 1);
    }
    for (uint32_t l = range_.first; l < range_.end(); ++l) {
        LayerState& L = layers_[l];
        L.pool_rows = uint32_t(layer_pool_rows(cfg, opts_, plan_.n_ctx, l));
        L.ring = L.kv_rows != plan_.n_ctx;
        if (!L.ring) kv_block_bytes_ += kv_caches(cfg) * kKvBlockRows * kv_row;
        L.k_cache = ctx_.create_buffer(kv_row * L.pool_rows, MemoryUsage::Device, fmt::format("k_cache.{}", l));
        // Latent attention reads V from the K rows: no V cache.
        if (!cfg.v_in_k())
            L.v_cache = ctx_.create_buffer(kv_row * L.pool_rows, MemoryUsage::Device, fmt::format("v_cache.{}", l));
    }
    // Every stage's tables have the same shape (one context for all): the first stage fills them.
    for (uint32_t l = 0; l < cfg.n_layers; ++l)
        if (const uint32_t rows = kv_cache_rows(cfg, l, plan_.n_ctx, opts_.ubatch); rows != plan_.n_ctx)
            ring_rows_ = rows;
    buf_ = ForwardBuffers::allocate(ctx_, cfg, opts_, plan_, range_, ring_rows_);
}

std::vector<PipelineDesc> ForwardStage::pipelines() const {
    std::vector<PipelineDesc> out;
    auto add = [&](std::vector<PipelineDesc> v) {
        for (auto& d : v)
            if (std::none_of(out.begin(), out.end(), [&](const PipelineDesc& o) { return o.key() == d.key(); }))
                out.push_back(std::move(d));
    };
    const DeviceCaps& caps = ctx_.caps();
    // The shapes a model records all the time: a lone token, a full prompt chunk, and decode batches
    // of 2..8 rows (sequences, or their drafts to verify, whose attention is a lone token's) with
    // prompt chunks of as many tokens (larger batches run as groups of <= 8 rows). Every layer's own
    // plan: mixed files (Q4_K_M: Q6_K attn_v / ffn_down in some layers) need several variants of one op.
    std::vector<StepShape> shapes{{1, false}, {opts_.ubatch, false}};
    for (uint32_t m = 2; m <= std::min(decode_rows(opts_), 8u); ++m) {
        if (m <= opts_.ubatch) shapes.push_back({m, false});  // a chunk is never longer than ubatch
        shapes.push_back({m, true});
    }
    for (const StepShape& shape : shapes) {
        for (uint32_t l = range_.first; l < range_.end(); ++l)
            add(plan_layer(caps, cfg_, layout_.layers[l], l, shape, kv_geometry()).pipelines(ctx_));
        if (head()) add(plan_head(caps, cfg_, layout_, shape, opts_.all_logits).out.pipelines());
    }
    // An encoder-decoder's cross K/V projections run once per encoder output, in chunks of the
    // scratch's rows (a short prompt, or the last chunk: fewer; up to 8 rows take their own forms).
    std::vector<uint32_t> cross_rows{scratch_rows(opts_)};
    for (uint32_t rows = 1; rows <= std::min(8u, scratch_rows(opts_)); ++rows) cross_rows.push_back(rows);
    if (cfg_.arch->attn.cross_attention)
        for (uint32_t rows : cross_rows)
            for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
                const CrossKvPlan kp = plan_cross_kv(caps, layout_.layers[l], rows);
                add(kp.k.kernel.pipelines());
                add(kp.v.kernel.pipelines());
            }
    if (gpu_embed_ && first()) add(ops::get_rows_pipelines(ctx_, layout_.token_embd.type));
    if (layout_.position_embd.present()) add(ops::get_rows_pipelines(ctx_, layout_.position_embd.type));
    add(ops::small_op_pipelines(ctx_, opts_.kv_type));
    return out;
}

bool ForwardStage::int_dot_layers(const StepShape& shape) const {
    for (uint32_t l = range_.first; l < range_.end(); ++l) {
        const LayerPlan p = plan_layer(ctx_.caps(), cfg_, layout_.layers[l], l, shape, kv_geometry());
        for (const LinearStep* s :
             {&p.attn.qkv, &p.attn.q, &p.attn.k, &p.attn.v, &p.attn.wo, &p.attn.q_a, &p.attn.q_b, &p.attn.kv_a,
              &p.cross.q, &p.cross.o, &p.ffn.gate_up, &p.ffn.gate, &p.ffn.up, &p.ffn.down})
            if (s->runs() && s->kernel.int_dot()) return true;
        const MoePlan& m = p.ffn.moe;
        if (m.runs && (m.grouped ? m.gate_mm.int_dot() || m.up_mm.int_dot() || m.down_mm.int_dot()
                                 : m.gate.int_dot() || m.up.int_dot() || m.down.int_dot()))
            return true;
    }
    return false;
}

Recording& ForwardStage::recording(const StepShape& b) {
    auto it = recordings_.find(b);
    if (it != recordings_.end()) {
        it->second->last_used = ++recording_clock_;
        return *it->second;
    }
    // Prompt remainders of many sizes and ever-changing sets of decoding sequences would pile up:
    // keep the most recently used few (decode steps and full chunks are used all the time).
    const size_t keep = 6 + 3 * size_t(decode_rows(opts_));
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
    const StageRecorder recorder(*this);
    if (first())
        add([&](CommandStream& s) { recorder.record_embed(s, b); });
    else
        add([&](CommandStream& s) { s.copy(buf_.recv.slice(0, rows), buf_.x.slice(0, rows)); });
    if (b.v_of_layer) {  // eval_v: the layers before it, its projections, nothing after
        if (*b.v_of_layer < range_.first || *b.v_of_layer >= range_.end())
            throw std::logic_error("a V-only chunk recorded by a stage that does not hold its layer");
        for (uint32_t l = range_.first; l < *b.v_of_layer; ++l)
            add([&](CommandStream& s) { recorder.record_layer(s, l, b); });
        add([&](CommandStream& s) { recorder.record_projections(s, *b.v_of_layer, b); });
        return *recordings_.emplace(b, std::move(rec)).first->second;
    }
    for (uint32_t l = range_.first; l < range_.end(); ++l)
        add([&](CommandStream& s) { recorder.record_layer(s, l, b); });
    if (!last())
        add([&](CommandStream& s) { s.copy(buf_.x.slice(0, rows), buf_.send.slice(0, rows)); });
    else if (cfg_.arch->stack.lm_head)
        add([&](CommandStream& s) { recorder.record_head(s, b); });
    return *recordings_.emplace(b, std::move(rec)).first->second;
}

std::vector<float> ForwardStage::read_v(uint32_t layer, uint32_t n) const {
    const LayerPlan p = plan_layer(ctx_.caps(), cfg_, layout_.layers[layer], layer, {n, false}, kv_geometry());
    std::vector<float> v(uint64_t(n) * cfg_.kv_dim());
    ctx_.download(StageRecorder(*this).activations(p).v, v.data(), v.size() * 4);
    return v;
}

LayerTensors ForwardStage::read_layer_tensors(uint32_t layer, uint32_t n) const {
    // Probes run single-sequence eval: the chunk's plan.
    const LayerPlan p = plan_layer(ctx_.caps(), cfg_, layout_.layers[layer], layer, {n, false}, kv_geometry());
    const StageRecorder::Activations a = StageRecorder(*this).activations(p);
    LayerTensors t;
    auto get = [&](const char* name, const BufferSlice& s, uint64_t width) {
        std::vector<float> v(width * n);
        ctx_.download(s, v.data(), v.size() * 4);
        t[name] = std::move(v);
    };
    if (p.attn.mla) {  // latent attention's own intermediates (ModelCpu::mla_attention names the same)
        get("mla_q", buf_.mla_q.slice(), uint64_t(cfg_.n_heads) * cfg_.mla_qk);
        get("kv_row", buf_.k.slice(), cfg_.kv_dim());
        get("attn_out", buf_.mla_o.slice(), uint64_t(cfg_.n_heads) * cfg_.mla_v);
    } else {
        // RoPE fused into attention rotates q and k only inside that kernel.
        if (!(p.attn.rope && p.attn.fused_store)) {
            get("q_rope", a.q, cfg_.q_dim());
            get("k_rope", a.k, cfg_.kv_dim());
        }
        get("v", a.v, cfg_.kv_dim());
        get("attn_out", buf_.att.slice(), cfg_.q_dim());
    }
    // Folded into a matvec, the norm's and the GLU's results exist only inside it; a norm after
    // the block leaves no normed input.
    if (!p.ffn.fold_norm && !p.ffn.norm_after) get("ffn_in", buf_.xn.slice(), cfg_.dim);
    if (p.ffn.moe.runs) {
        get("moe_logits", buf_.moe_logits.slice(), cfg_.n_expert);
    } else {
        get("ffn_up", a.up, cfg_.ffn_dim);
        if (!p.ffn.fold_act) get("ffn_act", a.gate, cfg_.ffn_dim);
    }
    get("x_out", buf_.x.slice(), cfg_.dim);
    return t;
}

void ForwardStage::submit(Recording& rec, const LayerProbe& probe, const StepShape& b) {
    const uint32_t n = b.n;
    // The ids are in the ids buffer; where the embedding table is too big to bind, its rows are dequantized
    // straight from the mapped file into the upload buffer instead (rows_in: the host wrote them there).
    if (!gpu_embed_ && first() && !b.rows_in) {
        const GgufTensorInfo& info = *layout_.token_embd.source;
        auto data = file_.tensor_data(info);
        const size_t rb = row_bytes(info.type, cfg_.dim);
        const auto* ids = static_cast<const int32_t*>(buf_.ids.mapped());
        auto* dst = static_cast<float*>(buf_.embed_in.mapped());
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

void ForwardStage::copy_block(uint32_t from, uint32_t to) {
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
}

std::vector<DispatchTiming> ForwardStage::last_timings() const {
    std::vector<DispatchTiming> out;
    if (!last_recording_) return out;
    for (auto& s : last_recording_->streams) {
        auto t = s->timings();
        out.insert(out.end(), t.begin(), t.end());
    }
    return out;
}

void ForwardStage::set_profiling(bool on) {
    if (on == profiling_) return;
    profiling_ = on;
    recordings_.clear();
    last_recording_ = nullptr;
}

}  // namespace vkllm
