#include "model/forward/stage_recorder.h"

#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/kv_store.h"
#include "runtime/ops/moe.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/rope.h"

namespace vkllm {

void StageRecorder::record_qkv(CommandStream& s, uint32_t l, const AttentionBlockPlan& p, uint32_t n,
                               const Activations& a) const {
    using R = Role;
    const LayerWeights& L = st_.layer(l).w;
    const ModelConfig& c = cfg_;
    const uint32_t dim = c.dim, qd = c.q_dim(), kv = c.kv_dim();
    const BufferSlice x = b_.x.slice(0, 4ull * dim * n);  // (n, dim) residual stream
    const BufferSlice xn = b_.xn.slice(0, 4ull * dim * n);  // (n, dim) normed
    // q (n, q_dim), k (n, kv_dim), v (n, kv_dim) = W · norm(x) (+ b); a decode step's matvec reads x
    // and normalizes it itself
    const ops::MatvecInput in = p.fold_norm ? rms_input(L[R::AttnNorm]) : ops::MatvecInput{};
    const BufferSlice& src = p.fold_norm || p.norm_after ? x : xn;
    if (!p.fold_norm && !p.norm_after) norm(s, x, L[R::AttnNorm], L[R::AttnNormB], xn, n);
    if (p.fused_qkv) {
        project(s, L, p.qkv, src, b_.qkv.slice(), in);  // q|k|v (q_dim + 2 kv_dim)
    } else {
        SharedQ8 q8;  // integer-dot projections quantize norm(x) once
        project(s, L, p.q, src, a.q, in, &q8);
        project(s, L, p.k, src, a.k, in, &q8);
        project(s, L, p.v, src, a.v, in, &q8);
    }
    if (c.clamp_kqv > 0) {  // MPT: q, k, v clamped after their biases
        if (p.fused_qkv) {
            ops::clamp(ctx_, s, b_.qkv.slice(), qd + 2 * kv, c.clamp_kqv);
        } else {
            ops::clamp(ctx_, s, a.q, n * qd, c.clamp_kqv);
            ops::clamp(ctx_, s, a.k, n * kv, c.clamp_kqv);
            ops::clamp(ctx_, s, a.v, n * kv, c.clamp_kqv);
        }
    }
}

void StageRecorder::record_attention(CommandStream& s, uint32_t l, const AttentionBlockPlan& p, const StepShape& batch,
                                     const Activations& a) const {
    using R = Role;
    const uint32_t n = batch.n;
    const LayerWeights& L = st_.layer(l).w;
    const ModelConfig& c = cfg_;
    const uint32_t dim = c.dim, qd = c.q_dim(), kv = c.kv_dim();
    const BufferSlice x = b_.x.slice(0, 4ull * dim * n);  // (n, dim) residual stream
    const BufferSlice xn = b_.xn.slice(0, 4ull * dim * n);  // (n, dim) normed
    const BufferSlice att = b_.att.slice(0, 4ull * qd * n);  // (n, q_dim) attention output
    const BufferSlice pos = b_.positions.slice(0, 4ull * n);  // cache rows
    const BufferSlice in_pos = b_.rel_pos.slice(0, 4ull * c.pos_width() * n);  // positions in each input (RoPE)

    record_qkv(s, l, p, n, a);
    if (p.qk_norm == QkNorm::WholeLayerNorm) {  // all of q and all of k LayerNorm'd (jina-bert-v2 qk-post-norm)
        const BufferSlice qb = L[R::QNormB].slice(), kb = L[R::KNormB].slice();
        ops::layer_norm(ctx_, s, a.q, L[R::QNorm].slice(), L[R::QNormB].present() ? &qb : nullptr, a.q, n, c.q_dim(),
                        c.norm_eps);
        ops::layer_norm(ctx_, s, a.k, L[R::KNorm].slice(), L[R::KNormB].present() ? &kb : nullptr, a.k, n, c.kv_dim(),
                        c.norm_eps);
    } else if (p.qk_norm == QkNorm::Whole) {  // all of q and all of k RMS-normalized (OLMoE)
        ops::rms_norm(ctx_, s, a.q, L[R::QNorm].slice(), a.q, n, c.q_dim(), c.norm_eps);
        ops::rms_norm(ctx_, s, a.k, L[R::KNorm].slice(), a.k, n, c.kv_dim(), c.norm_eps);
    } else if (p.qk_norm == QkNorm::PerHead) {  // every head of q and k is RMS-normalized on its own
        ops::rms_norm(ctx_, s, a.q, L[R::QNorm].slice(), a.q, n * c.n_heads, c.head_dim, c.norm_eps);
        ops::rms_norm(ctx_, s, a.k, L[R::KNorm].slice(), a.k, n * c.n_kv_heads, c.head_dim, c.norm_eps);
    }
    const ops::RopeParams rope_q = layer_rope_params(c, l, c.n_heads, c.head_dim, c.rope_dim);
    const BufferSlice factors = w_.rope_factors.slice();
    const BufferSlice* ff = w_.rope_factors.present() ? &factors : nullptr;
    if (p.rope && !p.fused_store) {  // q, k rotated in place
        ops::rope(ctx_, s, a.q, in_pos, n, rope_q, ff);
        ops::RopeParams rope_k = rope_q;
        rope_k.n_heads = c.n_kv_heads;
        ops::rope(ctx_, s, a.k, in_pos, n, rope_k, ff);
    }
    // att (n, q_dim): the K/V store and attention of a chunk (n rows of one sequence), of a whole decode
    // batch at once (batched: one row per sequence, each through its table row), or of each sequence
    // of a batch in turn (rows bound in place, at any offset).
    const uint32_t seg_rows = p.batched ? n : p.params.n_tokens;
    const size_t calls = batch.decode_batch && !p.batched ? batch.n : 1;
    const BufferSlice kc = st_.layer(l).k_cache.slice(), vc = st_.layer(l).v_cache.slice();
    for (size_t i = 0; i < calls; ++i) {
        auto seg = [&](const BufferSlice& b, uint64_t width) { return segment_rows(b, width, i, seg_rows); };
        const BufferSlice sp = seg(pos, 1);
        const BufferSlice scratch = p.batched ? b_.attn_scratch.slice() : attention_scratch_region(i);
        const ops::KvPages pages = kv_pages(l, uint32_t(i), p.batched);
        if (p.fused_store) {  // rope(q), rope(k), the K/V store and attention: one kernel
            const ops::NewKv new_kv{seg(a.k, kv), seg(a.v, kv), p.rope ? &rope_q : nullptr, p.rope ? ff : nullptr};
            ops::attention_store(ctx_, s, p.params, seg(a.q, qd), new_kv, kc, vc, sp, seg(att, qd), scratch,
                                 {.sinks = L[R::Sinks].slice(), .pages = pages});
        } else {
            ops::kv_store_pair(ctx_, s, seg(a.k, kv), kc, seg(a.v, kv), vc, sp, seg_rows, kv, p.params.n_ctx,
                               opts_.kv_type, pages);
            const BufferSlice bias =
                st_.layer(l).pos_bias >= 0 ? st_.position_bias(size_t(st_.layer(l).pos_bias)).slice() : BufferSlice{};
            const BufferSlice segs = p.params.segmented ? seg(b_.segs.slice(), 2) : BufferSlice{};
            ops::attention(ctx_, s, p.params, seg(a.q, qd), kc, vc, sp, seg(att, qd), scratch,
                           {bias, segs, L[R::Sinks].slice(), pages});
        }
    }
    // x += post_norm(wo · att + bo)
    if (p.norm_2) s.copy(x, xn);  // the layer's input, added again after the norm
    if (p.post_norm) {
        const BufferSlice tmp = b_.tmp.slice(0, 4ull * dim * n);
        project(s, L, p.wo, att, tmp);
        ops::rms_norm(ctx_, s, tmp, L[R::PostAttnNorm].slice(), tmp, n, dim, c.norm_eps);
        ops::add(ctx_, s, x, tmp, x, n * dim);
    } else {
        project(s, L, p.wo, att, x);
    }
    if (p.norm_after) norm(s, x, L[R::AttnNorm], L[R::AttnNormB], x, n);  // x = norm(x + wo · att + bo)
    if (p.norm_2) {  // x = norm_2(x + the layer's input)
        ops::add(ctx_, s, x, xn, x, n * dim);
        norm(s, x, L[R::AttnNorm2], L[R::AttnNorm2B], x, n);
    }
}

void StageRecorder::record_mla(CommandStream& s, uint32_t l, const AttentionBlockPlan& p,
                               const StepShape& batch) const {
    using R = Role;
    const uint32_t n = batch.n;
    const LayerWeights& L = st_.layer(l).w;
    const ModelConfig& c = cfg_;
    const uint32_t dim = c.dim, H = c.n_heads, qk = c.mla_qk, rope = c.rope_dim, nope = qk - rope, r = c.kv_lora_rank;
    const uint32_t row = c.kv_dim(), vm = c.mla_v, slots = n * H;  // row = rope + r, a cache row and a query head
    auto rows = [&](const Buffer& b, uint64_t width) { return b.slice(0, 4ull * width * n); };
    const BufferSlice x = rows(b_.x, dim), xn = rows(b_.xn, dim);
    const BufferSlice q = rows(b_.mla_q, uint64_t(H) * qk);  // (n, H, qk): per head [nope | rope]
    const BufferSlice kva = rows(b_.mla_kva, row);  // (n, r + rope): latent, then the rotary key
    const BufferSlice krow = rows(b_.k, row);  // (n, rope + r): the cached row
    const BufferSlice lat = rows(b_.v, r);  // (n, r): the latent, normed
    const BufferSlice qh = rows(b_.q, uint64_t(H) * row);  // (n, H, rope + r): the attention's queries
    const BufferSlice att = rows(b_.att, uint64_t(H) * r);  // (n, H, r)
    const BufferSlice qn = rows(b_.mla_qn, uint64_t(H) * nope);  // (n * H, nope)
    const BufferSlice qabs = rows(b_.mla_qabs, uint64_t(H) * r);  // (n * H, r)
    const BufferSlice o = rows(b_.mla_o, uint64_t(H) * vm);  // (n * H, v_mla) = (n, H * v_mla)
    const BufferSlice heads = b_.head_ids.slice(0, 4ull * slots);
    const BufferSlice pos = b_.positions.slice(0, 4ull * n), in_pos = b_.rel_pos.slice(0, 4ull * n);

    norm(s, x, L[R::AttnNorm], L[R::AttnNormB], xn, n);
    if (p.q_a.runs()) {  // q = wq_b · rms_norm(wq_a · xn)
        const BufferSlice qa = rows(b_.mla_qa, c.q_lora_rank);
        project(s, L, p.q_a, xn, qa);
        ops::rms_norm(ctx_, s, qa, L[R::QANorm].slice(), qa, n, c.q_lora_rank, c.norm_eps);
        project(s, L, p.q_b, qa, q);
    } else {
        project(s, L, p.q, xn, q);
    }
    project(s, L, p.kv_a, xn, kva);
    // K rows [k_pe | rms_norm(c)], then RoPE over their first rope dims (one head of rope + r)
    ops::copy_cols(ctx_, s, {kva, row, r}, {krow, row, 0}, n, rope);
    ops::copy_cols(ctx_, s, {kva, row, 0}, {lat, r, 0}, n, r);
    ops::rms_norm(ctx_, s, lat, L[R::KvANorm].slice(), lat, n, r, c.norm_eps);
    ops::copy_cols(ctx_, s, {lat, r, 0}, {krow, row, rope}, n, r);
    // Queries [q_pe | wk_b_h · q_nope_h] per (token, head) slot, then RoPE likewise
    ops::copy_cols(ctx_, s, {q, qk, nope}, {qh, row, 0}, slots, rope);
    ops::copy_cols(ctx_, s, {q, qk, 0}, {qn, nope, 0}, slots, nope);
    // A chunk groups its slots per head once for both per-head projections (the same constant ids).
    const BufferSlice groups = b_.mla_groups.slice(0, 4ull * ops::moe_group_words(slots, H));
    if (p.mla_grouped) {
        ops::moe_group(ctx_, s, heads, groups, slots, H);
        ops::moe_matmul(ctx_, s, p.k_b_mm, L[R::WkB].slice(), H, qn, 1, groups, qabs, n, slots, r, nope);
    } else {
        ops::moe_matvec(ctx_, s, p.k_b, L[R::WkB].slice(), H, qn, 1, heads, qabs, slots, r, nope);
    }
    ops::copy_cols(ctx_, s, {qabs, r, 0}, {qh, row, rope}, slots, r);
    const ops::RopeParams rope_q = layer_rope_params(c, l, H, row, rope);  // one head of rope + r, rope turning
    ops::RopeParams rope_k = rope_q;
    rope_k.n_heads = 1;
    ops::rope(ctx_, s, qh, in_pos, n, rope_q);
    ops::rope(ctx_, s, krow, in_pos, n, rope_k);

    // The K rows stored and attended over (one KV head, V = the latent): a chunk's, a whole decode
    // batch's at once (batched), or each sequence's of a batch in turn.
    const uint32_t seg_rows = p.batched ? n : p.params.n_tokens;
    const size_t calls = batch.decode_batch && !p.batched ? batch.n : 1;
    const BufferSlice kc = st_.layer(l).k_cache.slice();
    for (size_t i = 0; i < calls; ++i) {
        auto seg = [&](const BufferSlice& b, uint64_t width) { return segment_rows(b, width, i, seg_rows); };
        const BufferSlice scratch = p.batched ? b_.attn_scratch.slice() : attention_scratch_region(i);
        const ops::KvPages pages = kv_pages(l, uint32_t(i), p.batched);
        ops::kv_store(ctx_, s, seg(krow, row), kc, seg(pos, 1), seg_rows, row, p.params.n_ctx, opts_.kv_type, pages);
        ops::attention(ctx_, s, p.params, seg(qh, uint64_t(H) * row), kc, kc, seg(pos, 1), seg(att, uint64_t(H) * r),
                       scratch, {.pages = pages});
    }
    // x += wo · [wv_b_h · att_h]_h
    if (p.mla_grouped)
        ops::moe_matmul(ctx_, s, p.v_b_mm, L[R::WvB].slice(), H, att, 1, groups, o, n, slots, vm, r);
    else
        ops::moe_matvec(ctx_, s, p.v_b, L[R::WvB].slice(), H, att, 1, heads, o, slots, vm, r);
    project(s, L, p.wo, o, x);
}

void StageRecorder::record_cross(CommandStream& s, uint32_t l, const CrossPlan& p, uint32_t n) const {
    using R = Role;
    const LayerWeights& L = st_.layer(l).w;
    const uint32_t dim = cfg_.dim, qd = cfg_.q_dim();
    const BufferSlice x = b_.x.slice(0, 4ull * dim * n);  // (n, dim) residual stream
    const BufferSlice xn = b_.xn.slice(0, 4ull * dim * n);  // (n, dim) normed
    const BufferSlice q = b_.cross_q.slice(0, 4ull * qd * n);  // (n, q_dim)
    const BufferSlice att = b_.cross_att.slice(0, 4ull * qd * n);  // (n, q_dim)
    // q = wq_x · norm(x); att = attention over the encoder rows; x += wo_x · att
    const ops::MatvecInput in = p.fold_norm ? rms_input(L[R::CrossNorm]) : ops::MatvecInput{};
    if (!p.fold_norm) norm(s, x, L[R::CrossNorm], {}, xn, n);
    project(s, L, p.q, p.fold_norm ? x : xn, q, in);
    ops::attention(ctx_, s, p.params, q, b_.cross_k[l].slice(), b_.cross_v[l].slice(), b_.cross_pos.slice(0, 4ull * n),
                   att, b_.attn_scratch.slice());
    project(s, L, p.o, att, x);
}

void StageRecorder::record_cross_kv(CommandStream& s, uint32_t r0, uint32_t m) const {
    const uint32_t kv = cfg_.kv_dim(), dim = cfg_.dim, n_ctx = st_.memory_plan().n_ctx;
    const BufferSlice src = b_.enc.slice(4ull * dim * r0, 4ull * dim * m);  // (m, dim) encoder rows
    const BufferSlice k = b_.k.slice(0, 4ull * kv * m), v = b_.v.slice(0, 4ull * kv * m);
    for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
        const CrossKvPlan kp = plan_cross_kv(ctx_.caps(), st_.weight_layout().layers[l], m);
        project(s, st_.layer(l).w, kp.k, src, k);
        project(s, st_.layer(l).w, kp.v, src, v);
        ops::kv_store_pair(ctx_, s, k, b_.cross_k[l].slice(), v, b_.cross_v[l].slice(),
                           b_.enc_rows.slice(4ull * r0, 4ull * m), m, kv, n_ctx, opts_.kv_type);
    }
}

}  // namespace vkllm
