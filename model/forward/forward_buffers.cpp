#include "model/forward/forward_buffers.h"

#include "runtime/ops/moe.h"

#include <fmt/format.h>

#include <algorithm>

namespace vkllm {

ForwardBuffers ForwardBuffers::allocate(Context& ctx, const ModelConfig& cfg, const ModelOptions& opts,
                                        const MemoryPlan& plan, LayerRange range, uint32_t ring_rows) {
    ForwardBuffers b;
    const uint32_t U = scratch_rows(opts), dim = cfg.dim, qd = cfg.q_dim(), kv = cfg.kv_dim(), ffn = dense_ffn_dim(cfg);
    const uint64_t kv_row = kv_row_bytes(cfg, opts.kv_type);
    b.kv_tables = ctx.create_buffer(4ull * decode_rows(opts) * kv_blocks(plan.n_ctx), MemoryUsage::Upload, "kv_tables");
    if (ring_rows)
        b.ring_tables =
            ctx.create_buffer(4ull * decode_rows(opts) * kv_blocks(ring_rows), MemoryUsage::Upload, "ring_tables");
    auto dev = [&](uint64_t floats, const char* name) {
        return ctx.create_buffer(floats * 4, MemoryUsage::Device, name);
    };
    b.x = dev(uint64_t(U) * dim, "x");
    b.xn = dev(uint64_t(U) * dim, "xn");
    b.tmp = dev(uint64_t(U) * dim, "tmp");
    b.q = dev(uint64_t(U) * qd, "q");
    b.k = dev(uint64_t(U) * kv, "k");
    b.v = dev(uint64_t(U) * kv, "v");
    b.att = dev(uint64_t(U) * qd, "att");
    // max(.., 1): a mixture of experts without a shared expert has no dense FFN.
    b.gate = dev(std::max(uint64_t(U) * ffn, uint64_t(1)), "gate");
    b.up = dev(std::max(uint64_t(U) * ffn, uint64_t(1)), "up");
    if (cfg.arch->moe()) {
        const uint64_t slots = uint64_t(U) * cfg.n_expert_used;
        b.moe_logits = dev(uint64_t(U) * cfg.n_expert, "moe_logits");
        b.moe_ids = dev(slots, "moe_ids");
        b.moe_w = dev(slots, "moe_weights");
        b.moe_groups = dev(ops::moe_group_words(uint32_t(slots), cfg.n_expert), "moe_groups");
        b.moe_gate = dev(slots * cfg.expert_ffn_dim, "moe_gate");
        b.moe_up = dev(slots * cfg.expert_ffn_dim, "moe_up");
        b.moe_out = dev(slots * dim, "moe_out");
        b.moe_shared_logit = dev(U, "moe_shared_logit");
    }
    if (cfg.arch->attn.mla) {
        const uint64_t H = cfg.n_heads, slots = uint64_t(U) * H;
        b.mla_qa = dev(std::max<uint64_t>(uint64_t(U) * cfg.q_lora_rank, 1), "mla_q_a");
        b.mla_q = dev(slots * cfg.mla_qk, "mla_q");
        b.mla_kva = dev(uint64_t(U) * cfg.kv_dim(), "mla_kv_a");
        b.mla_qn = dev(slots * (cfg.mla_qk - cfg.rope_dim), "mla_q_nope");
        b.mla_qabs = dev(slots * cfg.kv_lora_rank, "mla_q_absorbed");
        b.mla_o = dev(slots * cfg.mla_v, "mla_o");
        // Slot t * H + h of the per-head matvecs reads head h's matrix.
        b.head_ids = ctx.create_buffer(slots * 4, MemoryUsage::Device, "mla_head_ids");
        b.mla_groups = dev(ops::moe_group_words(uint32_t(slots), cfg.n_heads), "mla_head_groups");
        std::vector<uint32_t> ids(slots);
        for (uint64_t i = 0; i < slots; ++i) ids[i] = uint32_t(i % H);
        ctx.upload(b.head_ids, ids.data(), ids.size() * 4);
    }
    b.last = dev(dim, "last");
    b.qkv = dev(uint64_t(qd) + 2ull * kv, "qkv");
    b.gate_up = dev(std::max(2ull * ffn, 1ull), "gate_up");
    b.xq = ctx.create_buffer(std::max<uint64_t>(q8_scratch_bytes(ctx.caps(), cfg, opts), 4), MemoryUsage::Device, "xq");
    const bool first = range.first == 0, last = range.end() == cfg.n_layers;
    if (last) {
        b.logits =
            ctx.create_buffer(uint64_t(decode_rows(opts)) * cfg.n_vocab * 4, MemoryUsage::DeviceHostVisible, "logits");
        // Readback (host-cached) memory: the host reads every byte of it after each ubatch.
        if (opts.all_logits) b.all_logits = ctx.create_buffer(plan.all_logits, MemoryUsage::Readback, "all_logits");
        b.argmax = ctx.create_buffer(4ull * decode_rows(opts), MemoryUsage::Readback, "argmax");
    }
    // A split's hand-off: this stage's last stream copies the step's rows of x into send, the host
    // copies them into the next stage's recv, whose first stream copies them into its x.
    if (!last) b.send = ctx.create_buffer(uint64_t(U) * dim * 4, MemoryUsage::Readback, "x_send");
    if (!first) b.recv = ctx.create_buffer(uint64_t(U) * dim * 4, MemoryUsage::Upload, "x_recv");
    b.positions = ctx.create_buffer(uint64_t(U) * 4, MemoryUsage::Upload, "positions");
    b.rel_pos = ctx.create_buffer(uint64_t(U) * 4 * cfg.pos_width(), MemoryUsage::Upload, "input_positions");
    b.segs = ctx.create_buffer(uint64_t(U) * 8, MemoryUsage::Upload, "segments");
    if (cfg.arch->attn.cross_attention) {
        for (uint32_t l = 0; l < cfg.n_layers; ++l) {
            b.cross_k.push_back(
                ctx.create_buffer(kv_row * plan.n_ctx, MemoryUsage::Device, fmt::format("cross_k.{}", l)));
            b.cross_v.push_back(
                ctx.create_buffer(kv_row * plan.n_ctx, MemoryUsage::Device, fmt::format("cross_v.{}", l)));
        }
        b.enc = ctx.create_buffer(uint64_t(plan.n_ctx) * dim * 4, MemoryUsage::Upload, "encoder_output");
        b.enc_rows = ctx.create_buffer(uint64_t(plan.n_ctx) * 4, MemoryUsage::Upload, "encoder_rows");
        b.cross_pos = ctx.create_buffer(uint64_t(U) * 4, MemoryUsage::Upload, "cross_positions");
        b.cross_q = dev(uint64_t(U) * qd, "cross_q");
        b.cross_att = dev(uint64_t(U) * qd, "cross_att");
        auto* rows = static_cast<int32_t*>(b.enc_rows.mapped());
        for (uint32_t i = 0; i < plan.n_ctx; ++i) rows[i] = int32_t(i);
    }
    b.ids = ctx.create_buffer(uint64_t(U) * 4, MemoryUsage::Upload, "ids");
    // Rows the host writes: embeddings given as such (an image's), or looked up from a table too
    // large to bind.
    if (first) b.embed_in = ctx.create_buffer(uint64_t(U) * dim * 4, MemoryUsage::Upload, "embed_in");
    b.attn_scratch =
        ctx.create_buffer(std::max<uint64_t>(plan.attention_scratch, 16), MemoryUsage::Device, "attn_scratch");
    return b;
}

}  // namespace vkllm
