#include "model/forward/stage_recorder.h"

#include "runtime/ops/linear.h"
#include "runtime/ops/norm.h"

namespace vkllm {

StageRecorder::StageRecorder(const ForwardStage& stage)
    : st_(stage),
      ctx_(stage.context()),
      cfg_(stage.config()),
      opts_(stage.options()),
      w_(stage.weights()),
      b_(stage.buffers()) {}

ops::MatvecInput StageRecorder::rms_input(const DeviceTensor& w) const {
    return {ops::MatvecInput::Kind::RmsNorm, w.slice(), cfg_.norm_eps};
}

void StageRecorder::norm(CommandStream& s, const BufferSlice& x, const DeviceTensor& w, const DeviceTensor& b,
                         const BufferSlice& y, uint32_t rows) const {
    if (cfg_.arch->norm.kind == NormKind::Layer) {
        const BufferSlice bias = b.slice();
        ops::layer_norm(ctx_, s, x, w.slice(), b.present() ? &bias : nullptr, y, rows, cfg_.dim, cfg_.norm_eps);
    } else {
        ops::rms_norm(ctx_, s, x, w.slice(), y, rows, cfg_.dim, cfg_.norm_eps);
    }
}

ops::MatvecInput StageRecorder::with_q8(const ops::LinearPlan& plan, ops::MatvecInput input, SharedQ8* shared) const {
    if (!plan.int_dot()) return input;
    input.q8 = b_.xq.slice(0, uint64_t(plan.m) * ops::q8_1_row_bytes(plan.k));
    if (shared) {
        input.q8_ready = shared->ready;
        shared->ready = true;
    }
    return input;
}

void StageRecorder::project(CommandStream& s, const LayerWeights& L, const LinearStep& st, const BufferSlice& x,
                            const BufferSlice& y, const ops::MatvecInput& input, SharedQ8* shared) const {
    const BufferSlice bias = st.bias != kNoRole ? L[st.bias].slice() : BufferSlice{};
    ops::linear(ctx_, s, st.kernel, L[st.w].slice(), x, y, st.residual ? &y : nullptr,
                st.bias != kNoRole ? &bias : nullptr, with_q8(st.kernel, input, shared));
}

StageRecorder::Activations StageRecorder::activations(const LayerPlan& p) const {
    const uint32_t n = p.shape.n, qd = cfg_.q_dim(), kv = cfg_.kv_dim(), ffn = dense_ffn_dim(cfg_);
    auto rows = [&](const Buffer& b, uint64_t width) { return b.slice(0, 4ull * width * n); };
    Activations a;
    if (p.attn.fused_qkv) {  // one (q + 2 kv) vector
        a.q = b_.qkv.slice(0, 4ull * qd);
        a.k = b_.qkv.slice(4ull * qd, 4ull * kv);
        a.v = b_.qkv.slice(4ull * (qd + kv), 4ull * kv);
    } else {
        a.q = rows(b_.q, qd), a.k = rows(b_.k, kv), a.v = rows(b_.v, kv);
    }
    if (p.ffn.fused_gate_up) {  // one (2 ffn) vector
        a.gate = b_.gate_up.slice(0, 4ull * ffn);
        a.up = b_.gate_up.slice(4ull * ffn, 4ull * ffn);
    } else {
        a.gate = rows(b_.gate, ffn), a.up = rows(b_.up, ffn);
    }
    return a;
}

void StageRecorder::record_layer(CommandStream& s, uint32_t l, const StepShape& batch) const {
    const LayerPlan plan = plan_layer(ctx_.caps(), cfg_, st_.weight_layout().layers[l], l, batch, st_.kv_geometry());
    const Activations act = activations(plan);
    if (plan.attn.mla)
        record_mla(s, l, plan.attn, batch);
    else
        record_attention(s, l, plan.attn, batch, act);
    if (plan.cross.runs) record_cross(s, l, plan.cross, batch.n);
    record_ffn(s, l, plan.ffn, batch.n, act);
}

void StageRecorder::record_projections(CommandStream& s, uint32_t l, const StepShape& batch) const {
    const LayerPlan plan = plan_layer(ctx_.caps(), cfg_, st_.weight_layout().layers[l], l, batch, st_.kv_geometry());
    if (plan.attn.mla) throw std::invalid_argument("latent attention keeps no per-token V to read");
    record_qkv(s, l, plan.attn, batch.n, activations(plan));
}

BufferSlice StageRecorder::segment_rows(const BufferSlice& b, uint64_t width, size_t i, uint32_t rows) {
    return BufferSlice{b.buffer, b.offset + 4ull * width * rows * i, 4ull * width * rows};
}

ops::KvPages StageRecorder::kv_pages(uint32_t l, uint32_t row, bool per_token) const {
    const LayerState& L = st_.layer(l);
    const Buffer& tables = L.ring ? b_.ring_tables : b_.kv_tables;
    const uint64_t stride = 4ull * kv_blocks(L.kv_rows);
    return {tables.slice(stride * row, tables.size() - stride * row), kKvBlockRows, L.pool_rows, per_token};
}

BufferSlice StageRecorder::attention_scratch_region(size_t i) const {
    if (st_.memory_plan().attention_scratch == 0) return b_.attn_scratch.slice();
    const uint64_t region = st_.memory_plan().attention_scratch / decode_rows(opts_);
    return b_.attn_scratch.slice(region * i, region);
}

}  // namespace vkllm
