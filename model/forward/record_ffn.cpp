#include "model/forward/stage_recorder.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/moe.h"
#include "runtime/ops/norm.h"

namespace vkllm {

void StageRecorder::record_ffn(CommandStream& s, uint32_t l, const FfnPlan& p, uint32_t n, const Activations& a) const {
    using R = Role;
    if (p.moe.runs) {
        record_moe(s, l, p, n, a);
        return;
    }
    const LayerWeights& L = st_.layer(l).w;
    const uint32_t dim = cfg_.dim, ffn = cfg_.ffn_dim;
    const BufferSlice x = b_.x.slice(0, 4ull * dim * n);  // (n, dim) residual stream
    const BufferSlice xn = b_.xn.slice(0, 4ull * dim * n);  // (n, dim) normed

    // gate (n, ffn), up (n, ffn) = W · norm(x) (+ b_up)
    const ops::MatvecInput in = p.fold_norm ? rms_input(L[R::FfnNorm]) : ops::MatvecInput{};
    const BufferSlice& src = p.fold_norm || p.norm_after ? x : xn;
    if (!p.fold_norm && !p.norm_after) norm(s, x, L[R::FfnNorm], L[R::FfnNormB], xn, n);
    if (p.fused_gate_up) {
        project(s, L, p.gate_up, src, b_.gate_up.slice(), in);  // gate|up (2 ffn)
    } else {
        SharedQ8 q8;
        if (p.gate.runs()) project(s, L, p.gate, src, a.gate, in, &q8);
        project(s, L, p.up, src, a.up, in, &q8);
    }
    // gate (n, ffn) = act(gate, up), the activation always landing in `gate`; decode steps leave it
    // to the down projection's matvec, which forms it as it loads gate and up
    ops::MatvecInput down_in{};
    if (p.fold_act) {
        down_in.kind = p.down.input;
        down_in.up = a.up;
    } else {
        if (p.up_bias_apart) ops::add_rows(ctx_, s, a.up, L[R::BUp].slice(), n, ffn);
        switch (p.act) {
            case FfnKind::SwiGlu: ops::swiglu(ctx_, s, a.gate, a.up, a.gate, n * ffn); break;
            case FfnKind::GeGlu: ops::geglu(ctx_, s, a.gate, a.up, a.gate, n * ffn); break;
            case FfnKind::Gelu: ops::gelu(ctx_, s, a.up, a.gate, n * ffn); break;
            case FfnKind::Relu: ops::relu(ctx_, s, a.up, a.gate, n * ffn); break;
            case FfnKind::SwiGluOai: ops::swiglu_oai(ctx_, s, a.gate, a.up, a.gate, n * ffn); break;
        }
    }
    // x += post_norm(w_down · gate + b_down)
    if (p.post_norm) {
        const BufferSlice tmp = b_.tmp.slice(0, 4ull * dim * n);
        project(s, L, p.down, a.gate, tmp, down_in);
        ops::rms_norm(ctx_, s, tmp, L[R::PostFfnNorm].slice(), tmp, n, dim, cfg_.norm_eps);
        ops::add(ctx_, s, x, tmp, x, n * dim);
    } else {
        project(s, L, p.down, a.gate, x, down_in);
    }
    if (p.norm_after) norm(s, x, L[R::FfnNorm], L[R::FfnNormB], x, n);  // x = norm(x + w_down · act + b_down)
}

void StageRecorder::record_moe(CommandStream& s, uint32_t l, const FfnPlan& p, uint32_t n, const Activations& a) const {
    using R = Role;
    const LayerWeights& L = st_.layer(l).w;
    const MoePlan& m = p.moe;
    const uint32_t dim = cfg_.dim, E = cfg_.n_expert, K = cfg_.n_expert_used, fe = cfg_.expert_ffn_dim, slots = n * K;
    const BufferSlice x = b_.x.slice(0, 4ull * dim * n);  // (n, dim) residual stream
    const BufferSlice xn = b_.xn.slice(0, 4ull * dim * n);  // (n, dim) normed
    norm(s, x, L[R::FfnNorm], L[R::FfnNormB], xn, n);

    // ids, w (n, K) = route(router · xn): the experts of each token and their weights
    const BufferSlice logits = b_.moe_logits.slice(0, 4ull * E * n);
    const BufferSlice ids = b_.moe_ids.slice(0, 4ull * slots), w = b_.moe_w.slice(0, 4ull * slots);
    project(s, L, m.router, xn, logits);
    const BufferSlice probs_bias = L[R::BExpProbs].slice();
    ops::moe_route(ctx_, s, m.route, logits, ids, w, n, m.route.bias ? &probs_bias : nullptr);

    // gate, up (n * K, fe) = W_e · xn[t] for slot t * K + j; out (n * K, dim) = W_down_e · act(gate, up)
    // (+ each expert's bias row, gpt-oss)
    const BufferSlice gate = b_.moe_gate.slice(0, 4ull * slots * fe), up = b_.moe_up.slice(0, 4ull * slots * fe);
    const BufferSlice out = b_.moe_out.slice(0, 4ull * slots * dim);
    const BufferSlice bg = L[R::BGateExps].slice(), bu = L[R::BUpExps].slice(), bd = L[R::BDownExps].slice();
    if (m.grouped) {
        // A chunk: the slots sorted per expert once, then each projection as matmul tiles per expert
        // (every expert's rows read once per tile of its tokens), the GLU on its own between them.
        const BufferSlice groups = b_.moe_groups.slice(0, 4ull * ops::moe_group_words(slots, E));
        ops::moe_group(ctx_, s, ids, groups, slots, E);
        // The integer-dot forms read X as Q8_1: xn's rows quantized once for gate and up.
        ops::MatvecInput xq_n, xq_act;
        if (m.gate_mm.int_dot() || m.up_mm.int_dot()) xq_n.q8 = b_.xq.slice(0, uint64_t(n) * ops::q8_1_row_bytes(dim));
        if (m.down_mm.int_dot()) xq_act.q8 = b_.xq.slice(0, uint64_t(slots) * ops::q8_1_row_bytes(fe));
        ops::moe_matmul(ctx_, s, m.gate_mm, L[R::WGateExps].slice(), E, xn, K, groups, gate, n, slots, fe, dim,
                        m.biases ? &bg : nullptr, m.gate_mm.int_dot() ? xq_n : ops::MatvecInput{});
        xq_n.q8_ready = m.gate_mm.int_dot();
        ops::moe_matmul(ctx_, s, m.up_mm, L[R::WUpExps].slice(), E, xn, K, groups, up, n, slots, fe, dim,
                        m.biases ? &bu : nullptr, m.up_mm.int_dot() ? xq_n : ops::MatvecInput{});
        switch (p.act) {
            case FfnKind::GeGlu: ops::geglu(ctx_, s, gate, up, gate, slots * fe); break;
            case FfnKind::SwiGluOai: ops::swiglu_oai(ctx_, s, gate, up, gate, slots * fe); break;
            default: ops::swiglu(ctx_, s, gate, up, gate, slots * fe); break;
        }
        ops::moe_matmul(ctx_, s, m.down_mm, L[R::WDownExps].slice(), E, gate, 1, groups, out, n, slots, dim, fe,
                        m.biases ? &bd : nullptr, m.down_mm.int_dot() ? xq_act : ops::MatvecInput{});
    } else {  // decode: a matvec per slot reading its expert's rows, the GLU formed as down loads it
        // (the integer-dot forms: xn quantized once for gate and up, the GLU as down's X is quantized)
        ops::MatvecInput xq_n;
        if (m.gate.int_dot() || m.up.int_dot()) xq_n.q8 = b_.xq.slice(0, uint64_t(n) * ops::q8_1_row_bytes(dim));
        ops::moe_matvec(ctx_, s, m.gate, L[R::WGateExps].slice(), E, xn, K, ids, gate, slots, fe, dim,
                        m.gate.int_dot() ? xq_n : ops::MatvecInput{}, m.biases ? &bg : nullptr);
        xq_n.q8_ready = m.gate.int_dot();
        ops::moe_matvec(ctx_, s, m.up, L[R::WUpExps].slice(), E, xn, K, ids, up, slots, fe, dim,
                        m.up.int_dot() ? xq_n : ops::MatvecInput{}, m.biases ? &bu : nullptr);
        ops::MatvecInput act{};
        act.kind = m.down.input;
        act.up = up;
        if (m.down.int_dot()) act.q8 = b_.xq.slice(0, uint64_t(slots) * ops::q8_1_row_bytes(fe));
        ops::moe_matvec(ctx_, s, m.down, L[R::WDownExps].slice(), E, gate, 1, ids, out, slots, dim, fe, act,
                        m.biases ? &bd : nullptr);
    }
    if (!m.shared) {
        ops::moe_combine(ctx_, s, out, w, x, n, K, dim);  // x += sum_j w_j · out_j
        return;
    }

    // The shared expert, a dense FFN of xn into tmp (n, dim), and its gate logit (n); then
    // x += sum_j w_j · out_j + sigmoid(logit) · tmp
    const uint32_t fs = cfg_.shared_ffn_dim;
    const BufferSlice tmp = b_.tmp.slice(0, 4ull * dim * n), glogit = b_.moe_shared_logit.slice(0, 4ull * n);
    SharedQ8 q8;
    project(s, L, p.gate, xn, a.gate, {}, &q8);
    project(s, L, p.up, xn, a.up, {}, &q8);
    ops::MatvecInput down_in{};
    if (p.fold_act) {
        down_in.kind = p.down.input;
        down_in.up = a.up;
    } else if (p.act == FfnKind::GeGlu) {
        ops::geglu(ctx_, s, a.gate, a.up, a.gate, n * fs);
    } else if (p.act == FfnKind::SwiGluOai) {
        ops::swiglu_oai(ctx_, s, a.gate, a.up, a.gate, n * fs);
    } else {
        ops::swiglu(ctx_, s, a.gate, a.up, a.gate, n * fs);
    }
    project(s, L, p.down, a.gate, tmp, down_in);
    if (m.shared_gate.runs()) project(s, L, m.shared_gate, xn, glogit);  // DeepSeek's shared expert has no gate
    ops::moe_combine(ctx_, s, out, w, x, n, K, dim, &tmp, m.shared_gate.runs() ? &glogit : nullptr);
}

}  // namespace vkllm
