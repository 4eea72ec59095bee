#include "model/forward/layer_plan.h"

#include "model/forward/position_bias.h"

#include <algorithm>

namespace vkllm {

uint32_t kv_cache_rows(const ModelConfig& cfg, uint32_t layer, uint32_t n_ctx, uint32_t ubatch) {
    if (!cfg.is_local(layer) || cfg.window >= n_ctx) return n_ctx;
    return cfg.window + ubatch - 1;
}

ops::RopeParams layer_rope_params(const ModelConfig& cfg, uint32_t layer, uint32_t n_heads, uint32_t head_dim,
                                  uint32_t rot_dim) {
    const RopeConfig& r = cfg.rope_for(layer);
    return {
        n_heads,       head_dim,    rot_dim,     r.base,       cfg.arch->attn.rope_layout, r.freq_scale, r.ext_factor,
        r.attn_factor, r.beta_fast, r.beta_slow, r.n_ctx_orig, {.n = cfg.rope_sections}};
}

ops::AttentionParams layer_attention_params(const ModelConfig& cfg, uint32_t layer, uint32_t n_tokens,
                                            const KvGeometry& kv, bool bidirectional) {
    ops::AttentionParams p{
        n_tokens,       cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, kv_cache_rows(cfg, layer, kv.n_ctx, kv.ubatch),
        cfg.attn_scale, kv.type};
    p.softcap = cfg.attn_softcap;
    p.causal = cfg.causal && !bidirectional;
    // Bidirectional models read each query's key range from a buffer, so that several inputs can
    // share one call (ModelGpu::eval_packed); one input is one range. A causal model's bidirectional
    // chunk sees all of its context (and keeps its windows).
    p.segmented = !cfg.causal;
    p.max_alibi_bias = cfg.max_alibi_bias;
    p.sinks = cfg.arch->attn.sinks;
    p.v_head_dim = cfg.v_head_dim;
    p.v_in_k = cfg.v_in_k();
    if (cfg.n_rel_buckets > 0) p.pos_bias_range = kT5MaxDistance;  // the table of t5_position_bias()
    // A window as long as the context never masks anything.
    if (cfg.is_local(layer) && cfg.window < kv.n_ctx) p.window = cfg.window;
    return p;
}

namespace {

using Kind = ops::MatvecInput::Kind;

// A projection of `rows` rows through the weight of role `w`; nothing when the model lacks it.
LinearStep step(const DeviceCaps& caps, const LayerPlaces& L, Role w, Role bias, uint32_t rows, bool batch_invariant,
                Kind input = Kind::Plain, bool residual = false) {
    LinearStep s;
    const TensorPlace& W = L[w];
    if (!W.present()) return s;
    s.w = w;
    s.bias = bias != kNoRole && L[bias].present() ? bias : kNoRole;
    s.residual = residual;
    s.input = input;
    s.kernel = ops::plan_linear(caps, W.type, rows, W.rows, W.row_elems, W.offset % 4 == 0, input, batch_invariant);
    return s;
}

// A mixture of experts reads norm(x) twice (the router and the experts), so the norm is its own
// dispatch; every expert projection reads only the chosen experts' rows (ops::moe_matvec), and the
// GLU rides in the down projection's loads at every shape.
void plan_moe(const DeviceCaps& caps, const ModelConfig& cfg, const LayerPlaces& L, const StepShape& shape,
              FfnPlan& f) {
    using R = Role;
    const uint32_t n = shape.n;
    const bool db = shape.decode_batch;
    const Kind act = cfg.arch->ffn.kind == FfnKind::GeGlu       ? Kind::GeGlu
                     : cfg.arch->ffn.kind == FfnKind::SwiGluOai ? Kind::SwiGluOai
                                                                : Kind::SwiGlu;
    MoePlan& m = f.moe;
    m.runs = true;
    m.router = step(caps, L, R::WRouter, R::BRouter, n, db);
    m.biases = cfg.arch->experts.biases;
    m.route = moe_route_params(cfg);
    // gate and up read each token's row for its K slots; down reads each slot's own row.
    const uint32_t slots = n * cfg.n_expert_used;
    // A chunk's tokens share their experts: grouped per expert, each expert's rows are read once per
    // tile of its tokens instead of once per slot. Decode steps (and decode batches, which must stay
    // batch invariant) read each slot's expert rows in a matvec.
    m.grouped = !shape.decode();
    if (m.grouped) {
        // Tiles sized by the slots an expert gets on average (gpt-oss: 8 of a 64-token chunk's 256
        // slots; Qwen3-30B-A3B: 4): the router's choice is on the device, the mean is what the
        // plan can know. (Integer dot products where the device takes them: ModelGpu gives the Q8_1
        // scratch.)
        const uint32_t rows = std::min(n, (slots + cfg.n_expert - 1) / cfg.n_expert);
        m.gate_mm = ops::plan_moe_matmul(caps, L[R::WGateExps].type, cfg.expert_ffn_dim, cfg.dim, rows, true);
        m.up_mm = ops::plan_moe_matmul(caps, L[R::WUpExps].type, cfg.expert_ffn_dim, cfg.dim, rows, true);
        m.down_mm = ops::plan_moe_matmul(caps, L[R::WDownExps].type, cfg.dim, cfg.expert_ffn_dim, rows, true);
    } else {
        m.gate = ops::plan_moe_matvec(caps, L[R::WGateExps].type, cfg.expert_ffn_dim, cfg.dim, n, Kind::Plain, true);
        m.up = ops::plan_moe_matvec(caps, L[R::WUpExps].type, cfg.expert_ffn_dim, cfg.dim, n, Kind::Plain, true);
        m.down = ops::plan_moe_matvec(caps, L[R::WDownExps].type, cfg.dim, cfg.expert_ffn_dim, slots, act, true);
    }
    f.act = cfg.arch->ffn.kind;
    m.shared = cfg.arch->experts.shared != SharedExpert::None;
    if (!m.shared) return;
    f.gate = step(caps, L, R::WGateShexp, kNoRole, n, db);
    f.up = step(caps, L, R::WUpShexp, kNoRole, n, db);
    f.fold_act = shape.decode();
    f.down = step(caps, L, R::WDownShexp, kNoRole, n, db, f.fold_act ? act : Kind::Plain);
    m.shared_gate = step(caps, L, R::WShexpGate, kNoRole, n, db);
}

}  // namespace

ops::MoeRouteParams moe_route_params(const ModelConfig& cfg) {
    ops::MoeRouteParams r;
    r.n_expert = cfg.n_expert;
    r.k = cfg.n_expert_used;
    r.gating = cfg.expert_softmax_chosen ? ops::MoeGating::SoftmaxTopK
               : cfg.expert_sigmoid      ? ops::MoeGating::Sigmoid
                                         : ops::MoeGating::Softmax;
    r.norm = cfg.expert_norm;
    r.scale = cfg.expert_scale;
    r.bias = cfg.expert_probs_bias;
    r.n_group = cfg.n_expert_groups;
    r.group_used = cfg.n_group_used;
    return r;
}

uint32_t dense_ffn_dim(const ModelConfig& cfg) {
    if (!cfg.arch->moe()) return cfg.ffn_dim;
    return std::max(cfg.n_dense_lead > 0 ? cfg.ffn_dim : 0u, cfg.shared_ffn_dim);
}

LayerPlan plan_layer(const DeviceCaps& caps, const ModelConfig& cfg, const LayerPlaces& L, uint32_t layer,
                     const StepShape& shape, const KvGeometry& kv) {
    using R = Role;
    const ArchDesc& A = *cfg.arch;
    const uint32_t n = shape.n;
    const bool decode = shape.decode(), db = shape.decode_batch;
    LayerPlan p;
    p.shape = shape;

    // --- attention. Decoding one token is bound by dispatch count on small models: Q, K and V come
    // from one matvec over the fused weights, where the biases are fused too (or absent).
    AttentionBlockPlan& a = p.attn;
    const bool norm_after = A.norm.placement == NormPlacement::Post;
    const bool fold_norm =
        decode && A.norm.kind == NormKind::Rms && !norm_after;  // only RMSNorm (no bias) before a block folds
    a.fold_norm = fold_norm;
    const Kind attn_in = a.fold_norm ? Kind::RmsNorm : Kind::Plain;
    const bool some_bias = L[R::Bq].present() || L[R::Bk].present() || L[R::Bv].present();
    a.fused_qkv = n == 1 && L[R::Wqkv].present() && (L[R::Bqkv].present() || !some_bias);
    a.mla = A.attn.mla;
    if (a.mla) {
        // Norm(x) feeds both the query and the latent: its own dispatch, as a mixture of experts' does.
        a.fold_norm = false;
        a.q = step(caps, L, R::Wq, kNoRole, n, db);
        a.q_a = step(caps, L, R::WqA, kNoRole, n, db);
        a.q_b = step(caps, L, R::WqB, kNoRole, n, db);
        a.kv_a = step(caps, L, R::WkvA, kNoRole, n, db);
        const uint32_t heads = n * cfg.n_heads, nope = cfg.mla_qk - cfg.rope_dim;  // one slot per (token, head)
        a.mla_grouped = !decode;
        if (a.mla_grouped) {
            a.k_b_mm = ops::plan_moe_matmul(caps, L[R::WkB].type, cfg.kv_lora_rank, nope, n);
            a.v_b_mm = ops::plan_moe_matmul(caps, L[R::WvB].type, cfg.mla_v, cfg.kv_lora_rank, n);
        } else {
            a.k_b = ops::plan_moe_matvec(caps, L[R::WkB].type, cfg.kv_lora_rank, nope, heads);
            a.v_b = ops::plan_moe_matvec(caps, L[R::WvB].type, cfg.mla_v, cfg.kv_lora_rank, heads);
        }
    } else if (a.fused_qkv) {
        a.qkv = step(caps, L, R::Wqkv, R::Bqkv, 1, db, attn_in);
    } else {
        a.q = step(caps, L, R::Wq, R::Bq, n, db, attn_in);
        a.k = step(caps, L, R::Wk, R::Bk, n, db, attn_in);
        a.v = step(caps, L, R::Wv, R::Bv, n, db, attn_in);
    }
    a.qk_norm = A.attn.qk_norm;
    a.rope = A.attn.positions == PositionKind::Rope;
    a.params = layer_attention_params(cfg, layer, db ? 1 : n, kv, shape.bidirectional);
    a.batched = db && !shape.repeats && a.params.pos_bias_range == 0 && a.params.causal && !a.params.segmented;
    if (a.batched) {
        a.params.n_tokens = n;
        a.params.batch = true;
    }
    // The fused kernels rotate with one position per token: M-RoPE rotates apart.
    a.fused_store =
        decode && !a.mla && !A.attn.mrope && ops::attention_store_supported(layer_attention_params(cfg, layer, 1, kv));
    a.post_norm = A.norm.placement == NormPlacement::PreAndPost;
    a.wo = step(caps, L, R::Wo, R::Bo, n, db, Kind::Plain, !a.post_norm);
    a.norm_after = norm_after;
    a.norm_2 = A.norm.attn_norm_2;

    // --- cross-attention (encoder-decoder): its q from the normed stream, its K/V already cached.
    if (A.attn.cross_attention) {
        CrossPlan& x = p.cross;
        x.runs = true;
        x.fold_norm = a.fold_norm;
        x.q = step(caps, L, R::WqCross, kNoRole, n, db, x.fold_norm ? Kind::RmsNorm : Kind::Plain);
        x.params = cross_attention_params(cfg, db ? 1 : n, kv.n_ctx, kv.type);
        x.o = step(caps, L, R::WoCross, kNoRole, n, db, Kind::Plain, true);
    }

    if (cfg.is_moe_layer(layer)) {
        plan_moe(caps, cfg, L, shape, p.ffn);
        return p;
    }

    // --- feed-forward: gate and up likewise; decode steps fold the GLU into the down projection
    // (it reads gate and up and forms act(gate) * up as it loads them), unless an up bias must be
    // added between the two.
    FfnPlan& f = p.ffn;
    f.fold_norm = fold_norm;  // also where latent attention keeps its norm apart
    const Kind ffn_in = f.fold_norm ? Kind::RmsNorm : Kind::Plain;
    f.fused_gate_up = n == 1 && L[R::WGateUp].present();
    if (f.fused_gate_up) {
        f.gate_up = step(caps, L, R::WGateUp, kNoRole, 1, db, ffn_in);
        f.up_bias_apart = L[R::BUp].present();
    } else {
        if (gated(A.ffn.kind)) f.gate = step(caps, L, R::WGate, kNoRole, n, db, ffn_in);
        f.up = step(caps, L, R::WUp, R::BUp, n, db, ffn_in);
    }
    f.act = A.ffn.kind;
    f.fold_act = decode && gated(A.ffn.kind) && !L[R::BUp].present();
    const Kind down_in = !f.fold_act                        ? Kind::Plain
                         : A.ffn.kind == FfnKind::GeGlu     ? Kind::GeGlu
                         : A.ffn.kind == FfnKind::SwiGluOai ? Kind::SwiGluOai
                                                            : Kind::SwiGlu;
    f.post_norm = a.post_norm;
    f.down = step(caps, L, R::WDown, R::BDown, n, db, down_in, !f.post_norm);
    f.norm_after = norm_after;
    return p;
}

std::vector<PipelineDesc> LayerPlan::pipelines(const Context& ctx) const {
    std::vector<PipelineDesc> out;
    for (const LinearStep* s : {&attn.qkv, &attn.q, &attn.k, &attn.v, &attn.wo, &attn.q_a, &attn.q_b, &attn.kv_a,
                                &cross.q, &cross.o, &ffn.gate_up, &ffn.gate, &ffn.up, &ffn.down})
        if (s->runs())
            for (PipelineDesc& d : s->kernel.pipelines()) out.push_back(std::move(d));
    if (attn.mla) {
        out.push_back(attn.mla_grouped ? attn.k_b_mm.pipeline() : attn.k_b.pipeline());
        out.push_back(attn.mla_grouped ? attn.v_b_mm.pipeline() : attn.v_b.pipeline());
        for (PipelineDesc& d : ops::moe_small_pipelines(ctx.caps())) out.push_back(std::move(d));
    }
    if (ffn.moe.runs) {
        for (const LinearStep* s : {&ffn.moe.router, &ffn.moe.shared_gate})
            if (s->runs())
                for (PipelineDesc& d : s->kernel.pipelines()) out.push_back(std::move(d));
        if (ffn.moe.grouped)
            for (const ops::MoeMatmulPlan* m : {&ffn.moe.gate_mm, &ffn.moe.up_mm, &ffn.moe.down_mm})
                for (PipelineDesc& d : m->pipelines()) out.push_back(std::move(d));
        else
            for (const ops::MoeMatvecPlan* m : {&ffn.moe.gate, &ffn.moe.up, &ffn.moe.down})
                for (PipelineDesc& d : m->pipelines()) out.push_back(std::move(d));
        for (PipelineDesc& d : ops::moe_small_pipelines(ctx.caps())) out.push_back(std::move(d));
    }
    for (PipelineDesc& d : attn.fused_store ? ops::attention_store_pipelines(ctx, attn.params)
                                            : ops::attention_pipelines(ctx, attn.params))
        out.push_back(std::move(d));
    if (cross.runs)
        for (PipelineDesc& d : ops::attention_pipelines(ctx, cross.params)) out.push_back(std::move(d));
    return out;
}

ops::AttentionParams cross_attention_params(const ModelConfig& cfg, uint32_t n_tokens, uint32_t n_rows,
                                            ops::KvType type) {
    ops::AttentionParams p{n_tokens, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, n_rows, cfg.attn_scale, type};
    p.causal = false;
    return p;
}

CrossKvPlan plan_cross_kv(const DeviceCaps& caps, const LayerPlaces& L, uint32_t rows) {
    return {step(caps, L, Role::WkCross, kNoRole, rows, false), step(caps, L, Role::WvCross, kNoRole, rows, false)};
}

HeadPlan plan_head(const DeviceCaps& caps, const ModelConfig& cfg, const WeightLayout& layout, const StepShape& shape,
                   bool all_logits) {
    HeadPlan h;
    bool decode = true;  // a chunk's last token alone is read as a decode step's
    if (shape.decode_batch) {
        h.rows = shape.n;
    } else if (all_logits) {
        h.rows = shape.n;
        decode = shape.n == 1;
    }
    h.fold_norm = decode && cfg.arch->norm.kind == NormKind::Rms;
    const TensorPlace& w = layout.output_tensor();
    h.out = ops::plan_linear(caps, w.type, h.rows, cfg.n_vocab, cfg.dim, w.offset % 4 == 0,
                             h.fold_norm ? Kind::RmsNorm : Kind::Plain, decode);
    return h;
}

}  // namespace vkllm
