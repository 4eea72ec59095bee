#include "model/vision/vision_gpu.h"

#include "model/vision/vision_stages.h"
#include "runtime/command_stream.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/norm.h"
#include "runtime/quant/tensor_types.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace vkllm {

namespace {

using ops::LinearPlan;

// A matrix of the file as the linear kernels read it: rows of k = ne0 elements in the file's type
// (a patch kernel's rows are its 3 * patch^2 inputs). F16 and F32 take any k; block types need whole
// blocks, which every real file has.
VisionDeviceTensor upload_matrix(Context& ctx, const GgufFile& f, const std::string& name) {
    const GgufTensorInfo& t = f.tensor(name);
    VisionDeviceTensor d;
    d.type = t.type;
    d.k = uint32_t(t.n_dims > 2 ? t.n_elements / t.ne[t.n_dims - 1] : t.ne[0]);
    d.rows = uint32_t(t.n_elements / d.k);
    const auto bytes = f.tensor_data(t);
    d.buf = ctx.create_buffer(bytes.size(), MemoryUsage::Device, name);
    ctx.upload(d.buf, bytes.data(), bytes.size());
    return d;
}

std::vector<float> read_f32(const GgufFile& f, const GgufTensorInfo& t) {
    std::vector<float> v(t.n_elements);
    dequantize_row(t.type, f.tensor_data(t).data(), v.data(), v.size());
    return v;
}

VisionDeviceTensor upload_f32(Context& ctx, const std::string& name, const std::vector<float>& v, uint32_t k) {
    VisionDeviceTensor d;
    d.k = k;
    d.rows = uint32_t(v.size() / k);
    d.buf = ctx.create_buffer(v.size() * 4, MemoryUsage::Device, name);
    ctx.upload(d.buf, v.data(), v.size() * 4);
    return d;
}

// A vector (norm, bias, embedding table) as f32 rows of ne0.
VisionDeviceTensor upload_vector(Context& ctx, const GgufFile& f, const std::string& name) {
    const GgufTensorInfo& t = f.tensor(name);
    return upload_f32(ctx, name, read_f32(f, t), uint32_t(t.ne[0]));
}

// A matrix stored as its transpose (Gemma 3's input projection: ne0 the output width): rows of ne1,
// f32 (the decoded values, exactly).
VisionDeviceTensor upload_transposed(Context& ctx, const GgufFile& f, const std::string& name) {
    const GgufTensorInfo& t = f.tensor(name);
    const std::vector<float> src = read_f32(f, t);
    const uint64_t cols = t.ne[0], rows = t.ne[1];
    std::vector<float> dst(src.size());
    for (uint64_t r = 0; r < rows; ++r)
        for (uint64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
    return upload_f32(ctx, name, dst, uint32_t(rows));
}

uint64_t bytes_f32(uint64_t rows, uint64_t width) { return std::max<uint64_t>(rows * width * 4, 16); }

}  // namespace

struct VisionGpu::Weights {
    VisionDeviceTensor patch, patch_b, cls, pos, pre_w, pre_b, post_w, post_b;
    struct Layer {
        VisionDeviceTensor ln1_w, ln1_b, q, qb, k, kb, v, vb, o, ob, ln2_w, ln2_b, up, up_b, down, down_b;
    };
    std::vector<Layer> layers;
    // The projector's tensors by name (ProjectorDesc::projector), matrices as the kernels read them.
    std::map<std::string, VisionDeviceTensor, std::less<>> proj;
    const VisionDeviceTensor& p(std::string_view name) const { return proj.find(name)->second; }
};

struct VisionGpu::Batch {
    VisionPlan plan;
    Buffer patches, x, xn, q, k, v, att, up, positions, segs, scratch, x_out, merged, mid, out;
    std::unique_ptr<CommandStream> vit, proj;
    uint64_t last_used = 0;
};

VisionGpu::VisionGpu(Context& ctx, const GgufFile& file, const VisionConfig& cfg)
    : ctx_(ctx), cfg_(cfg), w_(std::make_unique<Weights>()) {
    // Qwen2-VL / Qwen2.5-VL (2D rotary positions, block order, windows) have the host reference only.
    if (cfg.desc->positions != VisionPositions::Learned)
        throw MmprojError(fmt::format("{}: clip.projector_type: the device encoder does not run projector '{}' yet",
                                      cfg.file, cfg.desc->name));
    if (cfg.activation == VisionActivation::Silu)
        throw MmprojError(fmt::format("{}: clip.use_silu: a SiLU vision encoder is not supported", cfg.file));
    if (cfg.head_dim % 4 != 0 || cfg.head_dim > 576)
        throw MmprojError(
            fmt::format("{}: clip.vision.attention.head_count: heads of {} values are not supported "
                        "(a multiple of 4 up to 576)",
                        cfg.file, cfg.head_dim));
    Weights& w = *w_;
    w.patch = upload_matrix(ctx, file, "v.patch_embd.weight");
    if (cfg.has_patch_bias) w.patch_b = upload_vector(ctx, file, "v.patch_embd.bias");
    if (cfg.has_class_embedding) w.cls = upload_vector(ctx, file, "v.class_embd");
    w.pos = upload_vector(ctx, file, "v.position_embd.weight");
    if (cfg.has_pre_ln) {
        w.pre_w = upload_vector(ctx, file, "v.pre_ln.weight");
        w.pre_b = upload_vector(ctx, file, "v.pre_ln.bias");
    }
    if (cfg.has_post_ln) {
        w.post_w = upload_vector(ctx, file, "v.post_ln.weight");
        w.post_b = upload_vector(ctx, file, "v.post_ln.bias");
    }
    for (uint32_t l = 0; l < cfg.n_layer_used; ++l) {
        auto mat = [&](std::string_view s) { return upload_matrix(ctx, file, vit_tensor_name(l, s)); };
        auto vec = [&](std::string_view s) { return upload_vector(ctx, file, vit_tensor_name(l, s)); };
        w.layers.push_back({vec("ln1.weight"), vec("ln1.bias"), mat("attn_q.weight"), vec("attn_q.bias"),
                            mat("attn_k.weight"), vec("attn_k.bias"), mat("attn_v.weight"), vec("attn_v.bias"),
                            mat("attn_out.weight"), vec("attn_out.bias"), vec("ln2.weight"), vec("ln2.bias"),
                            mat("ffn_up.weight"), vec("ffn_up.bias"), mat("ffn_down.weight"), vec("ffn_down.bias")});
    }
    for (const ProjTensorDesc& t : cfg.desc->projector) {
        const std::string name(t.name);
        if (!t.matrix)
            w.proj.emplace(name, upload_vector(ctx, file, name));
        else if (t.transposed)
            w.proj.emplace(name, upload_transposed(ctx, file, name));
        else
            w.proj.emplace(name, upload_matrix(ctx, file, name));
    }
}

VisionGpu::~VisionGpu() = default;

uint32_t VisionGpu::batch_tiles(uint32_t nx, uint32_t ny) const {
    tile_tokens(cfg_, nx, ny);  // std::invalid_argument for a tile the encoder does not take
    const uint64_t rows = uint64_t(nx / cfg_.patch_size) * (ny / cfg_.patch_size) + (cfg_.has_class_embedding ? 1 : 0);
    const uint64_t widest = std::max<uint64_t>(
        {cfg_.n_embd, cfg_.n_ff, merged_width(cfg_), cfg_.text_dim, 3ull * cfg_.patch_size * cfg_.patch_size});
    const uint64_t per_tile = rows * widest * 4;
    return uint32_t(std::clamp<uint64_t>(ctx_.caps().max_storage_buffer_range / per_tile, 1, 64));
}

VisionPlan VisionGpu::plan(uint32_t tiles, uint32_t nx, uint32_t ny) const {
    const DeviceCaps& caps = ctx_.caps();
    const Weights& w = *w_;
    VisionPlan p;
    p.tiles = tiles;
    p.n_patches = (nx / cfg_.patch_size) * (ny / cfg_.patch_size);
    p.n_pos = p.n_patches + (cfg_.has_class_embedding ? 1 : 0);
    p.out_rows = tile_tokens(cfg_, nx, ny);
    const uint32_t m = tiles * p.n_pos;
    auto lin = [&](const VisionDeviceTensor& t, uint32_t rows) {
        return ops::plan_linear(caps, t.type, rows, t.rows, t.k, true, ops::MatvecInput::Kind::Plain, false, false);
    };
    p.patch = lin(w.patch, tiles * p.n_patches);
    for (const Weights::Layer& L : w.layers)
        p.layers.push_back({lin(L.q, m), lin(L.k, m), lin(L.v, m), lin(L.o, m), lin(L.up, m), lin(L.down, m)});
    p.attn = ops::AttentionParams{
        m, cfg_.n_head, cfg_.n_head, cfg_.head_dim, m, 1.0f / std::sqrt(float(cfg_.head_dim)), ops::KvType::F32};
    p.attn.causal = false;
    p.attn.segmented = true;  // each tile sees only its own rows
    for (const ProjTensorDesc& t : cfg_.desc->projector)
        if (t.matrix) p.projector.push_back(lin(w.p(t.name), tiles * p.out_rows));
    return p;
}

std::vector<PipelineDesc> VisionPlan::pipelines(const Context& ctx) const {
    std::vector<PipelineDesc> out = patch.pipelines();
    auto add = [&](const std::vector<PipelineDesc>& v) { out.insert(out.end(), v.begin(), v.end()); };
    for (const Layer& L : layers)
        for (const LinearPlan* l : {&L.q, &L.k, &L.v, &L.o, &L.up, &L.down}) add(l->pipelines());
    add(ops::attention_pipelines(ctx, attn));
    for (const LinearPlan& l : projector) add(l.pipelines());
    add(ops::small_op_pipelines(ctx));
    return out;
}

VisionGpu::Batch& VisionGpu::batch(uint32_t tiles, uint32_t nx, uint32_t ny) {
    if (auto it = batches_.find({tiles, nx, ny}); it != batches_.end()) {
        it->second->last_used = ++clock_;
        return *it->second;
    }
    // Images of many tile counts would pile up buffers: keep the few used last.
    while (batches_.size() >= kKeptBatches)
        batches_.erase(std::min_element(batches_.begin(), batches_.end(), [](const auto& a, const auto& b) {
            return a.second->last_used < b.second->last_used;
        }));
    auto b = std::make_unique<Batch>();
    b->last_used = ++clock_;
    b->plan = plan(tiles, nx, ny);
    const VisionPlan& p = b->plan;
    ctx_.prepare_pipelines(p.pipelines(ctx_));
    const Weights& w = *w_;
    const uint32_t e = cfg_.n_embd, m = tiles * p.n_pos, pk = w.patch.k, mw = merged_width(cfg_);
    const uint32_t r = tiles * p.out_rows, t = cfg_.text_dim;
    auto dev = [&](uint64_t bytes, const char* name) { return ctx_.create_buffer(bytes, MemoryUsage::Device, name); };
    b->patches = ctx_.create_buffer(bytes_f32(uint64_t(tiles) * p.n_patches, pk), MemoryUsage::Upload, "vit_patches");
    b->x = dev(bytes_f32(m, e), "vit_x");
    b->xn = dev(bytes_f32(m, e), "vit_xn");
    b->q = dev(bytes_f32(m, e), "vit_q");
    b->k = dev(bytes_f32(m, e), "vit_k");
    b->v = dev(bytes_f32(m, e), "vit_v");
    b->att = dev(bytes_f32(m, e), "vit_att");
    b->up = dev(bytes_f32(m, cfg_.n_ff), "vit_up");
    b->positions = ctx_.create_buffer(bytes_f32(m, 1), MemoryUsage::Upload, "vit_positions");
    b->segs = ctx_.create_buffer(bytes_f32(m, 2), MemoryUsage::Upload, "vit_segments");
    b->scratch = dev(std::max<uint64_t>(ops::attention_scratch_bytes(ctx_, p.attn), 16), "vit_attn_scratch");
    b->x_out = ctx_.create_buffer(bytes_f32(m, e), MemoryUsage::Readback, "vit_out");
    b->merged = ctx_.create_buffer(bytes_f32(r, mw), MemoryUsage::Upload, "proj_in");
    b->mid = dev(bytes_f32(r, std::max(t, mw)), "proj_mid");
    b->out = ctx_.create_buffer(bytes_f32(r, t), MemoryUsage::Readback, "proj_out");
    auto* pos = static_cast<int32_t*>(b->positions.mapped());
    auto* segs = static_cast<int32_t*>(b->segs.mapped());
    for (uint32_t i = 0; i < m; ++i) {
        pos[i] = int32_t(i);
        segs[2 * i] = int32_t(i / p.n_pos * p.n_pos);
        segs[2 * i + 1] = int32_t(i / p.n_pos * p.n_pos + p.n_pos);
    }

    // --- the transformer
    const uint64_t row = uint64_t(e) * 4;
    auto rows = [&](const Buffer& buf, uint64_t first, uint64_t count, uint64_t width) {
        return buf.slice(first * width * 4, count * width * 4);
    };
    auto norm = [&](CommandStream& s, const Buffer& x, const VisionDeviceTensor& wt, const VisionDeviceTensor& bt,
                    const Buffer& y, uint32_t n) {
        const BufferSlice bs = bt.slice();
        ops::layer_norm(ctx_, s, rows(x, 0, n, e), wt.slice(), &bs, rows(y, 0, n, e), n, e, cfg_.eps);
    };
    auto linear = [&](CommandStream& s, const LinearPlan& lp, const VisionDeviceTensor& wt, const BufferSlice& x,
                      const BufferSlice& y, const VisionDeviceTensor* bias, const BufferSlice* residual) {
        const BufferSlice bs = bias && bias->present() ? bias->slice() : BufferSlice{};
        ops::linear(ctx_, s, lp, wt.slice(), x, y, residual, bias && bias->present() ? &bs : nullptr);
    };
    b->vit = std::make_unique<CommandStream>(ctx_);
    CommandStream& s = *b->vit;
    s.begin(profiling_);
    // x (m, e): each tile's patch rows, then its class row; + the position rows.
    const uint32_t np = tiles * p.n_patches;
    const bool cls = cfg_.has_class_embedding;
    linear(s, p.patch, w.patch, rows(b->patches, 0, np, pk), rows(cls ? b->xn : b->x, 0, np, e), &w.patch_b, nullptr);
    for (uint32_t i = 0; i < tiles; ++i) {
        if (cls) {
            s.copy(rows(b->xn, uint64_t(i) * p.n_patches, p.n_patches, e),
                   rows(b->x, uint64_t(i) * p.n_pos, p.n_patches, e));
            s.copy(w.cls.buf.slice(0, row), rows(b->x, uint64_t(i) * p.n_pos + p.n_patches, 1, e));
        }
        const BufferSlice xt = rows(b->x, uint64_t(i) * p.n_pos, p.n_pos, e);
        ops::add(ctx_, s, xt, w.pos.buf.slice(0, uint64_t(p.n_pos) * row), xt, p.n_pos * e);
    }
    if (cfg_.has_pre_ln) norm(s, b->x, w.pre_w, w.pre_b, b->x, m);
    const BufferSlice x = rows(b->x, 0, m, e), xn = rows(b->xn, 0, m, e), att = rows(b->att, 0, m, e);
    for (size_t l = 0; l < w.layers.size(); ++l) {
        const Weights::Layer& L = w.layers[l];
        const VisionPlan::Layer& P = p.layers[l];
        norm(s, b->x, L.ln1_w, L.ln1_b, b->xn, m);
        linear(s, P.q, L.q, xn, rows(b->q, 0, m, e), &L.qb, nullptr);
        linear(s, P.k, L.k, xn, rows(b->k, 0, m, e), &L.kb, nullptr);
        linear(s, P.v, L.v, xn, rows(b->v, 0, m, e), &L.vb, nullptr);
        ops::attention(ctx_, s, p.attn, rows(b->q, 0, m, e), b->k.slice(), b->v.slice(), b->positions.slice(), att,
                       b->scratch.slice(), {.segments = b->segs.slice()});
        linear(s, P.o, L.o, att, x, &L.ob, &x);
        norm(s, b->x, L.ln2_w, L.ln2_b, b->xn, m);
        const BufferSlice up = rows(b->up, 0, m, cfg_.n_ff);
        linear(s, P.up, L.up, xn, up, &L.up_b, nullptr);
        if (cfg_.activation == VisionActivation::GeluQuick)
            ops::gelu_quick(ctx_, s, up, up, m * cfg_.n_ff);
        else
            ops::gelu(ctx_, s, up, up, m * cfg_.n_ff);
        linear(s, P.down, L.down, up, x, &L.down_b, &x);
    }
    if (cfg_.has_post_ln) norm(s, b->x, w.post_w, w.post_b, b->x, m);
    s.copy(x, rows(b->x_out, 0, m, e));
    s.end();

    // --- the projector over the merged rows (r, mw) -> (r, t)
    b->proj = std::make_unique<CommandStream>(ctx_);
    CommandStream& ps = *b->proj;
    ps.begin(profiling_);
    const BufferSlice in = rows(b->merged, 0, r, mw), out = rows(b->out, 0, r, t), mid = rows(b->mid, 0, r, t);
    switch (cfg_.type) {
        case ProjectorType::Mlp:  // mm.2 · gelu(mm.0 · rows + b0) + b2
            linear(ps, p.projector[0], w.p("mm.0.weight"), in, mid, &w.p("mm.0.bias"), nullptr);
            ops::gelu(ctx_, ps, mid, mid, r * t);
            linear(ps, p.projector[1], w.p("mm.2.weight"), mid, out, &w.p("mm.2.bias"), nullptr);
            break;
        case ProjectorType::Gemma3: {  // input_projection · (rms_norm(rows) * soft_emb_norm)
            const BufferSlice normed = rows(b->mid, 0, r, mw);
            ops::rms_norm(ctx_, ps, in, w.p("mm.soft_emb_norm.weight").slice(), normed, r, mw, cfg_.eps);
            linear(ps, p.projector[0], w.p("mm.input_projection.weight"), normed, out, nullptr, nullptr);
            break;
        }
        case ProjectorType::Idefics3:  // fc · rows
            linear(ps, p.projector[0], w.p("mm.model.fc.weight"), in, out, nullptr, nullptr);
            break;
        case ProjectorType::Qwen2Vl:
        case ProjectorType::Qwen25Vl: throw std::logic_error("VisionGpu: a projector refused by the constructor");
    }
    ps.end();
    // Inserted only once complete: a batch that failed to build (out of memory) leaves nothing behind.
    return *batches_.emplace(std::array<uint32_t, 3>{tiles, nx, ny}, std::move(b)).first->second;
}

void VisionGpu::run_batch(Batch& b, std::span<const ImageTile> tiles, std::vector<std::vector<float>>& out) {
    const VisionPlan& p = b.plan;
    const uint32_t pk = w_->patch.k, e = cfg_.n_embd, mw = merged_width(cfg_), t = cfg_.text_dim;
    const bool f16 = w_->patch.type == TensorType::F16;
    auto* patches = static_cast<float*>(b.patches.mapped());
    for (size_t i = 0; i < tiles.size(); ++i) {
        const std::vector<float> u = unfold_patches(tiles[i], cfg_.patch_size, f16);
        std::memcpy(patches + i * size_t(p.n_patches) * pk, u.data(), u.size() * 4);
    }
    b.vit->submit_and_wait();
    if (profiling_) {
        const std::vector<DispatchTiming> t = b.vit->timings();
        timings_.insert(timings_.end(), t.begin(), t.end());
    }
    const auto* x = static_cast<const float*>(b.x_out.mapped());
    auto* merged = static_cast<float*>(b.merged.mapped());
    const uint32_t px = tiles[0].nx / cfg_.patch_size, py = tiles[0].ny / cfg_.patch_size;
    for (size_t i = 0; i < tiles.size(); ++i) {
        const std::vector<float> rows = merge_tokens(cfg_, {x + i * size_t(p.n_pos) * e, size_t(p.n_pos) * e}, px, py);
        std::memcpy(merged + i * size_t(p.out_rows) * mw, rows.data(), rows.size() * 4);
    }
    b.proj->submit_and_wait();
    if (profiling_) {
        const std::vector<DispatchTiming> t = b.proj->timings();
        timings_.insert(timings_.end(), t.begin(), t.end());
    }
    const auto* o = static_cast<const float*>(b.out.mapped());
    for (size_t i = 0; i < tiles.size(); ++i) {
        const float* first = o + i * size_t(p.out_rows) * t;
        out.emplace_back(first, first + size_t(p.out_rows) * t);
    }
}

void VisionGpu::set_profiling(bool on) {
    if (on == profiling_) return;
    profiling_ = on;
    batches_.clear();  // recorded with or without timestamps
    timings_.clear();
}

std::vector<std::vector<float>> VisionGpu::encode(std::span<const ImageTile> tiles) {
    timings_.clear();
    std::vector<std::vector<float>> out;
    out.reserve(tiles.size());
    for (size_t i = 0; i < tiles.size();) {
        const uint32_t nx = tiles[i].nx, ny = tiles[i].ny;
        tile_tokens(cfg_, nx, ny);  // std::invalid_argument for a tile the encoder does not take
        size_t j = i;  // tiles[i, j): consecutive tiles of one size, at most one batch
        const uint32_t most = batch_tiles(nx, ny);
        while (j < tiles.size() && j - i < most && tiles[j].nx == nx && tiles[j].ny == ny) ++j;
        // A partial batch records its own shape: a whole batch's buffers would do, at the cost of
        // encoding padding tiles.
        run_batch(batch(uint32_t(j - i), nx, ny), tiles.subspan(i, j - i), out);
        i = j;
    }
    return out;
}

}  // namespace vkllm
