#include "model/vision/vision_attention.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/sampling_ops.h"

#include <algorithm>
#include <cmath>

namespace vkllm {

namespace {

constexpr uint64_t kMaxScoreBytes = uint64_t(64) << 20;

uint64_t score_bytes(const VisionConfig& cfg, uint32_t n_pos) { return uint64_t(cfg.n_head) * n_pos * n_pos * 4; }

ops::LinearPlan plan_f32(const DeviceCaps& caps, uint32_t m, uint32_t n, uint32_t k) {
    return ops::plan_linear(caps, TensorType::F32, m, n, k, true, ops::MatvecInput::Kind::Plain, false, false);
}

}  // namespace

std::vector<PipelineDesc> VitAttentionMatmuls::pipelines() const {
    std::vector<PipelineDesc> out;
    if (!on) return out;
    for (const ops::LinearPlan* l : {&vt, &scores, &values}) {
        const std::vector<PipelineDesc> p = l->pipelines();
        out.insert(out.end(), p.begin(), p.end());
    }
    return out;
}

bool vit_attention_by_matmuls(const DeviceCaps& caps) {
    // The kernel a large f32 product gets here: the broadcast kernel only on CPU drivers.
    const ops::LinearPlan probe = plan_f32(caps, 256, 256, 64);
    return probe.kernel == ops::LinearPlan::Kernel::Matmul && probe.matmul.kernel == ops::MatmulPlan::Kernel::Broadcast;
}

VitAttentionMatmuls plan_vit_attention(const DeviceCaps& caps, const VisionConfig& cfg, uint32_t n_pos) {
    VitAttentionMatmuls p;
    const uint64_t bytes = score_bytes(cfg, n_pos);
    if (!vit_attention_by_matmuls(caps) || bytes > std::min<uint64_t>(caps.max_storage_buffer_range, kMaxScoreBytes))
        return p;
    p.on = true;
    const uint32_t e = cfg.n_embd, d = cfg.head_dim;
    p.vt = plan_f32(caps, e, n_pos, e);
    p.scores = plan_f32(caps, n_pos, n_pos, d);
    p.values = plan_f32(caps, n_pos, d, n_pos);
    return p;
}

VitAttentionScratch make_vit_attention_scratch(Context& ctx, const VisionConfig& cfg, uint32_t n_pos) {
    const uint64_t tile = uint64_t(n_pos) * cfg.n_embd * 4;
    auto dev = [&](uint64_t bytes, const char* name) {
        return ctx.create_buffer(std::max<uint64_t>(bytes, 16), MemoryUsage::Device, name);
    };
    return {dev(tile, "vit_attn_qh"), dev(tile, "vit_attn_kh"), dev(tile, "vit_attn_vt"),
            dev(score_bytes(cfg, n_pos), "vit_attn_scores"), dev(tile, "vit_attn_oh")};
}

void record_vit_attention(Context& ctx, CommandStream& s, const VitAttentionMatmuls& p, const VisionConfig& cfg,
                          uint32_t tiles, uint32_t n_pos, const BufferSlice& q, const BufferSlice& k,
                          const BufferSlice& xn, const BufferSlice& wv_f32, const BufferSlice& att,
                          const VitAttentionScratch& sc) {
    const uint32_t e = cfg.n_embd, d = cfg.head_dim, heads = cfg.n_head;
    const uint64_t tile_bytes = uint64_t(n_pos) * e * 4, head_bytes = uint64_t(n_pos) * d * 4;
    const uint64_t score_head = uint64_t(n_pos) * n_pos * 4;
    auto part = [](const BufferSlice& b, uint64_t offset, uint64_t bytes) {
        return BufferSlice{b.buffer, b.offset + offset, bytes};
    };
    for (uint32_t t = 0; t < tiles; ++t) {
        const BufferSlice qt = part(q, t * tile_bytes, tile_bytes), kt = part(k, t * tile_bytes, tile_bytes);
        const BufferSlice xt = part(xn, t * tile_bytes, tile_bytes), at = part(att, t * tile_bytes, tile_bytes);
        ops::linear(ctx, s, p.vt, xt, wv_f32, sc.vt.slice(0, tile_bytes));  // V^T (e, n): Wv as X, xn as W rows
        for (uint32_t h = 0; h < heads; ++h) {
            ops::copy_cols(ctx, s, {qt, e, h * d}, {sc.qh.slice(h * head_bytes, head_bytes), d, 0}, n_pos, d);
            ops::copy_cols(ctx, s, {kt, e, h * d}, {sc.kh.slice(h * head_bytes, head_bytes), d, 0}, n_pos, d);
        }
        for (uint32_t h = 0; h < heads; ++h)
            ops::linear(ctx, s, p.scores, sc.kh.slice(h * head_bytes, head_bytes),
                        sc.qh.slice(h * head_bytes, head_bytes), sc.scores.slice(h * score_head, score_head));
        const BufferSlice all = sc.scores.slice(0, heads * score_head);
        ops::softmax(ctx, s, all, all, heads * n_pos, n_pos, std::sqrt(float(d)));
        for (uint32_t h = 0; h < heads; ++h)
            ops::linear(ctx, s, p.values, sc.vt.slice(uint64_t(h) * d * n_pos * 4, uint64_t(d) * n_pos * 4),
                        sc.scores.slice(h * score_head, score_head), sc.oh.slice(h * head_bytes, head_bytes));
        for (uint32_t h = 0; h < heads; ++h)
            ops::copy_cols(ctx, s, {sc.oh.slice(h * head_bytes, head_bytes), d, 0}, {at, e, h * d}, n_pos, d);
    }
}

}  // namespace vkllm
