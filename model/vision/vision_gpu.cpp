#include "model/vision/vision_gpu.h"

#include "model/vision/vision_stages.h"
#include "runtime/command_stream.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/rope.h"
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
    return upload_f32(ctx, name, tensor_f32(f, t), uint32_t(t.ne[0]));
}

// A matrix stored as its transpose (Gemma 3's input projection: ne0 the output width): rows of ne1,
// f32 (the decoded values, exactly).
VisionDeviceTensor upload_transposed(Context& ctx, const GgufFile& f, const std::string& name) {
    const GgufTensorInfo& t = f.tensor(name);
    const std::vector<float> src = tensor_f32(f, t);
    const uint64_t cols = t.ne[0], rows = t.ne[1];
    std::vector<float> dst(src.size());
    for (uint64_t r = 0; r < rows; ++r)
        for (uint64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
    return upload_f32(ctx, name, dst, uint32_t(rows));
}

// Qwen2-VL's two patch kernels as one: its patch embedding is a 3-D convolution over pairs of frames,
// kept in the file as one kernel per frame, and a still image is the same frame twice, so
// conv(x, w0) + conv(x, w1) = conv(x, w0 + w1). Summed once here, the encoder runs one matmul over
// the patches instead of two and a sum; the sum is kept in f32 (no second rounding to the file's type).
VisionDeviceTensor upload_summed_kernels(Context& ctx, const GgufFile& f, const std::string& a, const std::string& b) {
    const GgufTensorInfo &ta = f.tensor(a), &tb = f.tensor(b);
    std::vector<float> sum = tensor_f32(f, ta);
    const std::vector<float> other = tensor_f32(f, tb);  // the config checked both shapes
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += other[i];
    return upload_f32(ctx, a, sum, uint32_t(ta.n_elements / ta.ne[ta.n_dims - 1]));
}

uint64_t bytes_f32(uint64_t rows, uint64_t width) { return std::max<uint64_t>(rows * width * 4, 16); }

// The device op of the ViT's feed-forward activation.
enum class FfnOp : uint8_t { Gelu, GeluQuick, Swiglu, Geglu };

// Which op runs a config's feed-forward; MmprojError for an activation without a device op.
FfnOp ffn_op(const VisionConfig& cfg) {
    const VisionActivation a = cfg.activation;
    if (cfg.desc->gated_ffn) {
        if (a == VisionActivation::Silu) return FfnOp::Swiglu;
        if (a == VisionActivation::Gelu) return FfnOp::Geglu;
        throw MmprojError(fmt::format("{}: clip.use_silu: a gated quick-GELU feed-forward is not supported", cfg.file));
    }
    if (a == VisionActivation::Gelu) return FfnOp::Gelu;
    if (a == VisionActivation::GeluQuick) return FfnOp::GeluQuick;
    throw MmprojError(fmt::format("{}: clip.use_silu: a SiLU vision encoder is not supported", cfg.file));
}

}  // namespace

struct VisionGpu::Weights {
    VisionDeviceTensor patch, patch_b, cls, pos, pre_w, pre_b, post_w, post_b;
    // The unfolded pixels rounded to half as ggml's convolution does for an F16 kernel in the file.
    bool round_patches = false;
    FfnOp ffn = FfnOp::Gelu;
    struct Layer {  // norm biases: LayerNorm only; gate: gated feed-forward only
        VisionDeviceTensor ln1_w, ln1_b, q, qb, k, kb, v, vb, o, ob, ln2_w, ln2_b, gate, gate_b, up, up_b, down, down_b;
        // The attention as matmuls (vision_attention.h), where the device takes it: Wv in f32 and the
        // out projection's bias with V's folded in.
        VisionDeviceTensor v_f32, ob_folded;
    };
    std::vector<Layer> layers;
    // The projector's tensors by name (ProjectorDesc::projector), matrices as the kernels read them.
    std::map<std::string, VisionDeviceTensor, std::less<>> proj;
    const VisionDeviceTensor& p(std::string_view name) const { return proj.find(name)->second; }
};

struct VisionGpu::Batch {
    VisionPlan plan;
    Buffer patches, x, xn, q, k, v, att, gate, up, positions, segs, wsegs, rope_pos, scratch, x_out, merged, mid, out;
    VitAttentionScratch attn_mm;
    std::unique_ptr<CommandStream> vit, proj;
    uint64_t last_used = 0;
};

VisionGpu::VisionGpu(Context& ctx, const GgufFile& file, const VisionConfig& cfg)
    : ctx_(ctx), cfg_(cfg), w_(std::make_unique<Weights>()) {
    w_->ffn = ffn_op(cfg);
    if (cfg.head_dim % 4 != 0 || cfg.head_dim > 576)
        throw MmprojError(
            fmt::format("{}: clip.vision.attention.head_count: heads of {} values are not supported "
                        "(a multiple of 4 up to 576)",
                        cfg.file, cfg.head_dim));
    Weights& w = *w_;
    const std::string kernel = "v.patch_embd.weight";
    w.round_patches = file.tensor(kernel).type == TensorType::F16;
    w.patch = cfg.desc->two_patch_kernels ? upload_summed_kernels(ctx, file, kernel, kernel + ".1")
                                          : upload_matrix(ctx, file, kernel);
    if (cfg.has_patch_bias) w.patch_b = upload_vector(ctx, file, "v.patch_embd.bias");
    if (cfg.has_class_embedding) w.cls = upload_vector(ctx, file, "v.class_embd");
    if (cfg.desc->positions == VisionPositions::Learned) w.pos = upload_vector(ctx, file, "v.position_embd.weight");
    const bool norm_bias = cfg.desc->norm == VisionNorm::Layer;
    // A norm's weight, and its bias for a LayerNorm.
    auto norm = [&](const std::string& prefix, VisionDeviceTensor& wt, VisionDeviceTensor& bt) {
        wt = upload_vector(ctx, file, prefix + ".weight");
        if (norm_bias) bt = upload_vector(ctx, file, prefix + ".bias");
    };
    if (cfg.has_pre_ln) norm("v.pre_ln", w.pre_w, w.pre_b);
    if (cfg.has_post_ln) norm("v.post_ln", w.post_w, w.post_b);
    const bool attn_matmuls = vit_attention_by_matmuls(ctx.caps()), windows = uses_windows(cfg);
    for (uint32_t l = 0; l < cfg.n_layer_used; ++l) {
        auto mat = [&](std::string_view s) { return upload_matrix(ctx, file, vit_tensor_name(l, s)); };
        auto vec = [&](std::string_view s) { return upload_vector(ctx, file, vit_tensor_name(l, s)); };
        Weights::Layer& L = w.layers.emplace_back();
        norm(vit_tensor_name(l, "ln1"), L.ln1_w, L.ln1_b);
        norm(vit_tensor_name(l, "ln2"), L.ln2_w, L.ln2_b);
        L.q = mat("attn_q.weight"), L.qb = vec("attn_q.bias");
        L.k = mat("attn_k.weight"), L.kb = vec("attn_k.bias");
        L.v = mat("attn_v.weight"), L.vb = vec("attn_v.bias");
        L.o = mat("attn_out.weight"), L.ob = vec("attn_out.bias");
        if (cfg.desc->gated_ffn) L.gate = mat("ffn_gate.weight"), L.gate_b = vec("ffn_gate.bias");
        L.up = mat("ffn_up.weight"), L.up_b = vec("ffn_up.bias");
        L.down = mat("ffn_down.weight"), L.down_b = vec("ffn_down.bias");
        if (attn_matmuls && !(windows && cfg.windowed(l))) {
            const std::vector<float> wv = tensor_f32(file, file.tensor(vit_tensor_name(l, "attn_v.weight")));
            const std::vector<float> wo = tensor_f32(file, file.tensor(vit_tensor_name(l, "attn_out.weight")));
            const std::vector<float> bv = tensor_f32(file, file.tensor(vit_tensor_name(l, "attn_v.bias")));
            std::vector<float> bo = tensor_f32(file, file.tensor(vit_tensor_name(l, "attn_out.bias")));
            const uint32_t e = cfg.n_embd;
            for (uint32_t j = 0; j < e; ++j) {  // bo + Wo bv
                double acc = bo[j];
                for (uint32_t c = 0; c < e; ++c) acc += double(wo[size_t(j) * e + c]) * bv[c];
                bo[j] = float(acc);
            }
            L.v_f32 = upload_f32(ctx, vit_tensor_name(l, "attn_v.weight") + ".f32", wv, e);
            L.ob_folded = upload_f32(ctx, vit_tensor_name(l, "attn_out.bias") + ".folded", bo, e);
        }
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
    const uint64_t rows = uint64_t(nx / cfg_.patch_size) * (ny / cfg_.patch_size) + (cfg_.has_class_embedding ? 1 : 0);
    const uint64_t out_rows = tile_tokens(cfg_, nx, ny);
    // The largest buffer per tile: the transformer's widest rows, or the projector's.
    const uint64_t per_tile =
        std::max(rows * std::max<uint64_t>({cfg_.n_embd, cfg_.n_ff, 3ull * cfg_.patch_size * cfg_.patch_size}),
                 out_rows * std::max<uint64_t>(merged_width(cfg_), cfg_.text_dim)) *
        4;
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
    p.layout = vit_row_layout(cfg_, nx, ny);
    p.host_merge = cfg_.desc->merge != TokenMerge::Blocks;
    const bool windows = uses_windows(cfg_);
    p.segments = batch_segments(p.layout, tiles, p.n_pos, false);
    if (windows) p.window_segments = batch_segments(p.layout, tiles, p.n_pos, true);
    if (cfg_.desc->positions == VisionPositions::Rope2d) p.rope_positions = batch_rope_positions(p.layout, tiles);
    const uint32_t m = tiles * p.n_pos;
    p.attn_mm = plan_vit_attention(caps, cfg_, p.n_pos);
    auto lin = [&](const VisionDeviceTensor& t, uint32_t rows) {
        return ops::plan_linear(caps, t.type, rows, t.rows, t.k, true, ops::MatvecInput::Kind::Plain, false, false);
    };
    p.patch = lin(w.patch, tiles * p.n_patches);
    for (uint32_t l = 0; l < w.layers.size(); ++l) {
        const Weights::Layer& L = w.layers[l];
        const bool gated = L.gate.present();
        p.layers.push_back({lin(L.q, m), lin(L.k, m), lin(L.v, m), lin(L.o, m), gated ? lin(L.gate, m) : LinearPlan{},
                            lin(L.up, m), lin(L.down, m), gated, windows && cfg_.windowed(l),
                            p.attn_mm.on && L.v_f32.present()});
    }
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
    for (const Layer& L : layers) {
        for (const LinearPlan* l : {&L.q, &L.k, &L.v, &L.o, &L.up, &L.down}) add(l->pipelines());
        if (L.gated) add(L.gate.pipelines());
    }
    add(ops::attention_pipelines(ctx, attn));
    add(attn_mm.pipelines());
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
    const uint32_t e = cfg_.n_embd, f = cfg_.n_ff, m = tiles * p.n_pos, pk = w.patch.k, mw = merged_width(cfg_);
    const uint32_t r = tiles * p.out_rows, t = cfg_.text_dim;
    auto dev = [&](uint64_t bytes, const char* name) { return ctx_.create_buffer(bytes, MemoryUsage::Device, name); };
    // A table of the plan in a buffer the device reads (one word at least).
    auto table = [&](const std::vector<int32_t>& v, const char* name) {
        Buffer buf = ctx_.create_buffer(std::max<uint64_t>(v.size() * 4, 16), MemoryUsage::Upload, name);
        std::memcpy(buf.mapped(), v.data(), v.size() * 4);
        return buf;
    };
    b->patches = ctx_.create_buffer(bytes_f32(uint64_t(tiles) * p.n_patches, pk), MemoryUsage::Upload, "vit_patches");
    b->x = dev(bytes_f32(m, e), "vit_x");
    b->xn = dev(bytes_f32(m, e), "vit_xn");
    b->q = dev(bytes_f32(m, e), "vit_q");
    b->k = dev(bytes_f32(m, e), "vit_k");
    // V is only for the flash kernel's layers (the matmul form makes V^T itself).
    const bool flash = std::any_of(p.layers.begin(), p.layers.end(), [](const auto& L) { return !L.attn_matmuls; });
    b->v = dev(flash ? bytes_f32(m, e) : 16, "vit_v");
    b->att = dev(bytes_f32(m, e), "vit_att");
    if (cfg_.desc->gated_ffn) b->gate = dev(bytes_f32(m, f), "vit_gate");
    b->up = dev(bytes_f32(m, f), "vit_up");
    std::vector<int32_t> identity(m);
    for (uint32_t i = 0; i < m; ++i) identity[i] = int32_t(i);
    b->positions = table(identity, "vit_positions");
    b->segs = table(p.segments, "vit_segments");
    if (!p.window_segments.empty()) b->wsegs = table(p.window_segments, "vit_window_segments");
    if (!p.rope_positions.empty()) b->rope_pos = table(p.rope_positions, "vit_rope_positions");
    b->scratch = dev(std::max<uint64_t>(ops::attention_scratch_bytes(ctx_, p.attn), 16), "vit_attn_scratch");
    if (p.attn_mm.on) b->attn_mm = make_vit_attention_scratch(ctx_, cfg_, p.n_pos);
    if (p.host_merge) {
        b->x_out = ctx_.create_buffer(bytes_f32(m, e), MemoryUsage::Readback, "vit_out");
        b->merged = ctx_.create_buffer(bytes_f32(r, mw), MemoryUsage::Upload, "proj_in");
    }
    b->mid = dev(bytes_f32(r, std::max(t, mw)), "proj_mid");
    b->out = ctx_.create_buffer(bytes_f32(r, t), MemoryUsage::Readback, "proj_out");

    // --- the transformer
    const uint64_t row = uint64_t(e) * 4;
    auto rows = [&](const Buffer& buf, uint64_t first, uint64_t count, uint64_t width) {
        return buf.slice(first * width * 4, count * width * 4);
    };
    auto norm = [&](CommandStream& s, const Buffer& x, const VisionDeviceTensor& wt, const VisionDeviceTensor& bt,
                    const Buffer& y, uint32_t n) {
        if (cfg_.desc->norm == VisionNorm::Rms) {
            ops::rms_norm(ctx_, s, rows(x, 0, n, e), wt.slice(), rows(y, 0, n, e), n, e, cfg_.eps);
            return;
        }
        const BufferSlice bs = bt.slice();
        ops::layer_norm(ctx_, s, rows(x, 0, n, e), wt.slice(), &bs, rows(y, 0, n, e), n, e, cfg_.eps);
    };
    auto linear = [&](CommandStream& s, const LinearPlan& lp, const VisionDeviceTensor& wt, const BufferSlice& x,
                      const BufferSlice& y, const VisionDeviceTensor* bias, const BufferSlice* residual) {
        const BufferSlice bs = bias && bias->present() ? bias->slice() : BufferSlice{};
        ops::linear(ctx_, s, lp, wt.slice(), x, y, residual, bias && bias->present() ? &bs : nullptr);
    };
    const ops::RopeParams rope = vit_rope_params(cfg_);  // VisionPositions::Rope2d
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
        if (!w.pos.present()) continue;
        const BufferSlice xt = rows(b->x, uint64_t(i) * p.n_pos, p.n_pos, e);
        ops::add(ctx_, s, xt, w.pos.buf.slice(0, uint64_t(p.n_pos) * row), xt, p.n_pos * e);
    }
    if (cfg_.has_pre_ln) norm(s, b->x, w.pre_w, w.pre_b, b->x, m);
    const BufferSlice x = rows(b->x, 0, m, e), xn = rows(b->xn, 0, m, e), att = rows(b->att, 0, m, e);
    const BufferSlice q = rows(b->q, 0, m, e), k = rows(b->k, 0, m, e), up = rows(b->up, 0, m, f);
    for (size_t l = 0; l < w.layers.size(); ++l) {
        const Weights::Layer& L = w.layers[l];
        const VisionPlan::Layer& P = p.layers[l];
        norm(s, b->x, L.ln1_w, L.ln1_b, b->xn, m);
        linear(s, P.q, L.q, xn, q, &L.qb, nullptr);
        linear(s, P.k, L.k, xn, k, &L.kb, nullptr);
        if (!P.attn_matmuls) linear(s, P.v, L.v, xn, rows(b->v, 0, m, e), &L.vb, nullptr);
        if (!p.rope_positions.empty()) {
            ops::rope(ctx_, s, q, b->rope_pos.slice(), m, rope);
            ops::rope(ctx_, s, k, b->rope_pos.slice(), m, rope);
        }
        if (P.attn_matmuls)
            record_vit_attention(ctx_, s, p.attn_mm, cfg_, tiles, p.n_pos, q, k, xn, L.v_f32.slice(), att, b->attn_mm);
        else
            ops::attention(ctx_, s, p.attn, q, b->k.slice(), b->v.slice(), b->positions.slice(), att,
                           b->scratch.slice(), {.segments = (P.windowed ? b->wsegs : b->segs).slice()});
        linear(s, P.o, L.o, att, x, P.attn_matmuls ? &L.ob_folded : &L.ob, &x);
        norm(s, b->x, L.ln2_w, L.ln2_b, b->xn, m);
        linear(s, P.up, L.up, xn, up, &L.up_b, nullptr);
        BufferSlice act = up;  // the down projection's input
        switch (w.ffn) {
            case FfnOp::Gelu: ops::gelu(ctx_, s, up, up, m * f); break;
            case FfnOp::GeluQuick: ops::gelu_quick(ctx_, s, up, up, m * f); break;
            case FfnOp::Swiglu:
            case FfnOp::Geglu:
                act = rows(b->gate, 0, m, f);
                linear(s, P.gate, L.gate, xn, act, &L.gate_b, nullptr);
                (w.ffn == FfnOp::Swiglu ? ops::swiglu : ops::geglu)(ctx_, s, act, up, act, m * f);
                break;
        }
        linear(s, P.down, L.down, act, x, &L.down_b, &x);
    }
    if (cfg_.has_post_ln) norm(s, b->x, w.post_w, w.post_b, b->x, m);

    // --- the projector over the merged rows (r, mw) -> (r, t): read back and merged on the host in
    // between, or (Blocks) straight on: each block's merge^2 rows lie one after the other, a row of mw.
    CommandStream* ps = &s;
    if (p.host_merge) {
        s.copy(x, rows(b->x_out, 0, m, e));
        s.end();
        b->proj = std::make_unique<CommandStream>(ctx_);
        ps = b->proj.get();
        ps->begin(profiling_);
    }
    const BufferSlice in = p.host_merge ? rows(b->merged, 0, r, mw) : rows(b->x, 0, r, mw);
    const BufferSlice out = rows(b->out, 0, r, t), mid = rows(b->mid, 0, r, t);
    switch (cfg_.type) {
        case ProjectorType::Mlp:  // mm.2 · gelu(mm.0 · rows + b0) + b2
            linear(*ps, p.projector[0], w.p("mm.0.weight"), in, mid, &w.p("mm.0.bias"), nullptr);
            ops::gelu(ctx_, *ps, mid, mid, r * t);
            linear(*ps, p.projector[1], w.p("mm.2.weight"), mid, out, &w.p("mm.2.bias"), nullptr);
            break;
        case ProjectorType::Gemma3: {  // input_projection · (rms_norm(rows) * soft_emb_norm)
            const BufferSlice normed = rows(b->mid, 0, r, mw);
            ops::rms_norm(ctx_, *ps, in, w.p("mm.soft_emb_norm.weight").slice(), normed, r, mw, cfg_.eps);
            linear(*ps, p.projector[0], w.p("mm.input_projection.weight"), normed, out, nullptr, nullptr);
            break;
        }
        case ProjectorType::Idefics3:  // fc · rows
            linear(*ps, p.projector[0], w.p("mm.model.fc.weight"), in, out, nullptr, nullptr);
            break;
        case ProjectorType::Qwen2Vl:
        case ProjectorType::Qwen25Vl: {  // mm.2 · gelu(mm.0 · blocks + b0) + b2, mm.0 (mw -> mw)
            const BufferSlice wide = rows(b->mid, 0, r, mw);
            linear(*ps, p.projector[0], w.p("mm.0.weight"), in, wide, &w.p("mm.0.bias"), nullptr);
            ops::gelu(ctx_, *ps, wide, wide, r * mw);
            linear(*ps, p.projector[1], w.p("mm.2.weight"), wide, out, &w.p("mm.2.bias"), nullptr);
            break;
        }
    }
    ps->end();
    // Inserted only once complete: a batch that failed to build (out of memory) leaves nothing behind.
    return *batches_.emplace(std::array<uint32_t, 3>{tiles, nx, ny}, std::move(b)).first->second;
}

void VisionGpu::run_batch(Batch& b, std::span<const ImageTile> tiles, std::vector<std::vector<float>>& out) {
    const VisionPlan& p = b.plan;
    const uint32_t pk = w_->patch.k, e = cfg_.n_embd, mw = merged_width(cfg_), t = cfg_.text_dim;
    auto* patches = static_cast<float*>(b.patches.mapped());
    for (size_t i = 0; i < tiles.size(); ++i) {
        const std::vector<float> u = unfold_patches(tiles[i], cfg_.patch_size, w_->round_patches, p.layout.rows);
        std::memcpy(patches + i * size_t(p.n_patches) * pk, u.data(), u.size() * 4);
    }
    auto submit = [&](CommandStream& s) {
        s.submit_and_wait();
        if (!profiling_) return;
        const std::vector<DispatchTiming> times = s.timings();
        timings_.insert(timings_.end(), times.begin(), times.end());
    };
    submit(*b.vit);
    if (p.host_merge) {
        const auto* x = static_cast<const float*>(b.x_out.mapped());
        auto* merged = static_cast<float*>(b.merged.mapped());
        for (size_t i = 0; i < tiles.size(); ++i) {
            const std::vector<float> rows =
                merge_tokens(cfg_, {x + i * size_t(p.n_pos) * e, size_t(p.n_pos) * e}, p.layout.gx, p.layout.gy);
            std::memcpy(merged + i * size_t(p.out_rows) * mw, rows.data(), rows.size() * 4);
        }
        submit(*b.proj);
    }
    const auto* o = static_cast<const float*>(b.out.mapped());
    for (size_t i = 0; i < tiles.size(); ++i) {
        const float* first = o + i * size_t(p.out_rows) * t;
        std::vector<float>& dst = out.emplace_back(first, first + size_t(p.out_rows) * t);
        // Blocks: the projector's rows in the layout's order (windows), put in the reference's.
        for (size_t j = 0; j < p.layout.out_block.size(); ++j)
            std::memcpy(dst.data() + size_t(p.layout.out_block[j]) * t, first + j * t, size_t(t) * 4);
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
