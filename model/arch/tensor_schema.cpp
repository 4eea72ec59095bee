#include "model/arch/tensor_schema.h"

#include <fmt/format.h>

#include <charconv>

namespace vkllm {

uint64_t SchemaDims::get(Dim d) const {
    switch (d) {
        case Dim::One: return 1;
        case Dim::Embd: return embd;
        case Dim::Q: return q;
        case Dim::Kv: return kv;
        case Dim::Qkv: return q + 2 * kv;
        case Dim::Ffn: return ffn;
        case Dim::Ffn2: return 2 * ffn;
        case Dim::HeadDim: return head_dim;
        case Dim::Vocab: return vocab;
        case Dim::CtxTrain: return ctx_train;
        case Dim::RopeHalf: return rope_dim / 2;
        case Dim::TokenTypes: return token_types;
        case Dim::ClsOut: return cls_out;
        case Dim::Heads: return heads;
        case Dim::RelBuckets: return rel_buckets;
        case Dim::Experts: return experts;
        case Dim::FfnExp: return ffn_exp;
        case Dim::FfnShexp: return ffn_shexp;
        case Dim::QLora: return q_lora;
        case Dim::KvLora: return kv_lora;
        case Dim::KvA: return kv_lora + rope_dim;
        case Dim::MlaQ: return heads * mla_qk;
        case Dim::MlaNope: return mla_qk - rope_dim;
        case Dim::MlaV: return mla_v;
        case Dim::MlaO: return heads * mla_v;
        case Dim::MlaKvB: return heads * (mla_qk - rope_dim + mla_v);
    }
    return 0;
}

namespace {

constexpr Init kMatrix{true};
constexpr Init kNormWeight{false, 1.0f, 0.05f};
constexpr Init kNormBias{false, 0.0f, 0.05f};
constexpr Init kBias{false, 0.0f, 0.1f};
constexpr Init kSinks{false, 0.0f, 1.0f};  // logits of the order of the scores

constexpr FusedGroup kGroups[] = {
    {Role::Wqkv, {Role::Wq, Role::Wk, Role::Wv}, {Dim::Q, Dim::Kv, Dim::Kv}, 3},
    {Role::Bqkv, {Role::Bq, Role::Bk, Role::Bv}, {Dim::Q, Dim::Kv, Dim::Kv}, 3},
    {Role::WGateUp, {Role::WGate, Role::WUp}, {Dim::Ffn, Dim::Ffn}, 2},
};

}  // namespace

std::span<const FusedGroup> fused_groups() { return kGroups; }

const FusedGroup* fused_group(Role whole) {
    for (const FusedGroup& g : kGroups)
        if (g.whole == whole) return &g;
    return nullptr;
}

const FusedGroup* fused_group_of_part(Role part) {
    for (const FusedGroup& g : kGroups)
        for (uint32_t i = 0; i < g.n_parts; ++i)
            if (g.parts[i] == part) return &g;
    return nullptr;
}

std::vector<TensorSpec> layer_schema(const ArchDesc& A) {
    using D = Dim;
    using R = Role;
    const bool ln =
        A.norm.kind == NormKind::Layer && A.biases != Biases::AllOptional;  // LayerNorm: every norm has a bias
    // biases of q, k, v: required, else read when present
    const bool qkv_b = A.biases == Biases::Qkv || A.biases == Biases::QkvOut || A.biases == Biases::All;
    const bool post = A.norm.placement == NormPlacement::PreAndPost;
    const bool after = A.norm.placement == NormPlacement::Post;  // BERT: the norms follow the residual adds
    std::vector<TensorSpec> s;
    auto add = [&](TensorSpec t) { s.push_back(t); };
    auto vec = [](R r, const char* name, D d, bool required, Init init) {
        return TensorSpec{r, name, {d, D::One}, required, init, true};
    };
    auto mat = [](R r, const char* name, D in, D out) { return TensorSpec{r, name, {in, out}, true, kMatrix}; };

    if (!after) {
        add(vec(R::AttnNorm, "attn_norm.weight", D::Embd, true, kNormWeight));
        add(vec(R::AttnNormB, "attn_norm.bias", D::Embd, ln, kNormBias));
    }
    if (A.attn.mla) {
        // Either wq (no q_lora_rank: V2-Lite) or wq_a, its norm and wq_b: ModelConfig requires the set
        // the file's keys imply.
        auto opt = [](TensorSpec t) {
            t.required = false;
            return t;
        };
        add(opt(mat(R::Wq, "attn_q.weight", D::Embd, D::MlaQ)));
        add(opt(mat(R::WqA, "attn_q_a.weight", D::Embd, D::QLora)));
        add(vec(R::QANorm, "attn_q_a_norm.weight", D::QLora, false, kNormWeight));
        add(opt(mat(R::WqB, "attn_q_b.weight", D::QLora, D::MlaQ)));
        add(mat(R::WkvA, "attn_kv_a_mqa.weight", D::Embd, D::KvA));
        add(vec(R::KvANorm, "attn_kv_a_norm.weight", D::KvLora, true, kNormWeight));
        // attn_k_b and attn_v_b, or in older files attn_kv_b: ModelConfig requires the file's form.
        add({R::WkB, "attn_k_b.weight", {D::MlaNope, D::KvLora, D::Heads}, false, kMatrix});
        add({R::WvB, "attn_v_b.weight", {D::KvLora, D::MlaV, D::Heads}, false, kMatrix});
        add(opt(mat(R::WkvB, "attn_kv_b.weight", D::KvLora, D::MlaKvB)));
    } else if (A.attn.fused_qkv) {
        add(mat(R::Wqkv, "attn_qkv.weight", D::Embd, D::Qkv));
        add(vec(R::Bqkv, "attn_qkv.bias", D::Qkv, qkv_b, kBias));
    } else {
        add(mat(R::Wq, "attn_q.weight", D::Embd, D::Q));
        add(vec(R::Bq, "attn_q.bias", D::Q, qkv_b, kBias));
        add(mat(R::Wk, "attn_k.weight", D::Embd, D::Kv));
        add(vec(R::Bk, "attn_k.bias", D::Kv, qkv_b, kBias));
        add(mat(R::Wv, "attn_v.weight", D::Embd, D::Kv));
        add(vec(R::Bv, "attn_v.bias", D::Kv, qkv_b, kBias));
    }
    if (A.attn.qk_norm != QkNorm::None) {
        const bool whole = A.attn.qk_norm != QkNorm::PerHead, layer_norm = A.attn.qk_norm == QkNorm::WholeLayerNorm;
        const D qd = whole ? D::Q : D::HeadDim, kd = whole ? D::Kv : D::HeadDim;
        add(vec(R::QNorm, "attn_q_norm.weight", qd, true, kNormWeight));
        if (layer_norm) add(vec(R::QNormB, "attn_q_norm.bias", qd, ln, kNormBias));
        add(vec(R::KNorm, "attn_k_norm.weight", kd, true, kNormWeight));
        if (layer_norm) add(vec(R::KNormB, "attn_k_norm.bias", kd, ln, kNormBias));
    }
    const bool t5 = A.stack.t5 != T5Stack::None;
    add(mat(R::Wo, t5 ? "attn_o.weight" : "attn_output.weight", A.attn.mla ? D::MlaO : D::Q, D::Embd));
    add(vec(R::Bo, "attn_output.bias", D::Embd, A.biases == Biases::All || A.biases == Biases::QkvOut, kBias));
    if (A.attn.sinks) add(vec(R::Sinks, "attn_sinks.weight", D::Heads, true, kSinks));
    if (post) add(vec(R::PostAttnNorm, "post_attention_norm.weight", D::Embd, true, kNormWeight));
    if (after) {
        add(vec(R::AttnNorm, "attn_output_norm.weight", D::Embd, true, kNormWeight));
        add(vec(R::AttnNormB, "attn_output_norm.bias", D::Embd, ln, kNormBias));
        if (A.norm.attn_norm_2) {
            add(vec(R::AttnNorm2, "attn_norm_2.weight", D::Embd, true, kNormWeight));
            add(vec(R::AttnNorm2B, "attn_norm_2.bias", D::Embd, ln, kNormBias));
        }
    }
    if (A.attn.cross_attention) {
        add(vec(R::CrossNorm, "cross_attn_norm.weight", D::Embd, true, kNormWeight));
        add(mat(R::WqCross, "cross_attn_q.weight", D::Embd, D::Q));
        add(mat(R::WkCross, "cross_attn_k.weight", D::Embd, D::Kv));
        add(mat(R::WvCross, "cross_attn_v.weight", D::Embd, D::Kv));
        add(mat(R::WoCross, "cross_attn_o.weight", D::Q, D::Embd));
    }
    if (!after) {
        add(vec(R::FfnNorm, A.norm.ffn_norm_name.data(), D::Embd, true, kNormWeight));
        add(vec(R::FfnNormB, "ffn_norm.bias", D::Embd, ln, kNormBias));
    }
    // A mixture of experts with leading dense layers (DeepSeek) lists both FFN forms, each for its layers.
    const size_t dense_from = s.size();
    if (A.experts.layers != ExpertLayers::All) {
        if (A.ffn.fused_gate_up) {
            add(mat(R::WGateUp, "ffn_up.weight", D::Embd, D::Ffn2));  // rows of gate, then up
        } else {
            if (gated(A.ffn.kind)) add(mat(R::WGate, "ffn_gate.weight", D::Embd, D::Ffn));
            add(mat(R::WUp, "ffn_up.weight", D::Embd, D::Ffn));
            add(vec(R::BUp, "ffn_up.bias", D::Ffn, A.biases == Biases::All, kBias));
        }
        add(mat(R::WDown, "ffn_down.weight", D::Ffn, D::Embd));
        add(vec(R::BDown, "ffn_down.bias", D::Embd, A.biases == Biases::All, kBias));
    }
    const size_t moe_from = s.size();
    if (A.moe()) {
        // The router and the shared expert's gate stay f32 in llama.cpp's files (its converter and
        // llama-quantize leave them); uploaded as f32 whatever a file stores.
        add({R::WRouter, "ffn_gate_inp.weight", {D::Embd, D::Experts}, true, kMatrix, true});
        if (A.experts.layers == ExpertLayers::AfterDense)
            add(vec(R::BExpProbs, "exp_probs_b.bias", D::Experts, false, kBias));
        // Mixtral's first conversions stored each expert apart (ffn_gate.N); llama.cpp no longer reads
        // them (build 9749 and b4748 ask for ffn_down_exps), vkllm stacks them as it uploads.
        auto stack = [&](R r, const char* name, D in, D out, const char* per_expert) {
            TensorSpec t{r, name, {in, out, D::Experts}, true, kMatrix};
            if (A.experts.per_expert_tensors) t.per_expert_name = per_expert;
            add(t);
        };
        stack(R::WGateExps, "ffn_gate_exps.weight", D::Embd, D::FfnExp, "ffn_gate.{}.weight");
        stack(R::WUpExps, "ffn_up_exps.weight", D::Embd, D::FfnExp, "ffn_up.{}.weight");
        stack(R::WDownExps, "ffn_down_exps.weight", D::FfnExp, D::Embd, "ffn_down.{}.weight");
        if (A.experts.biases) {  // f32 in llama.cpp's files; one row per expert
            add(vec(R::BRouter, "ffn_gate_inp.bias", D::Experts, true, kBias));
            add({R::BGateExps, "ffn_gate_exps.bias", {D::FfnExp, D::Experts}, true, kBias, true});
            add({R::BUpExps, "ffn_up_exps.bias", {D::FfnExp, D::Experts}, true, kBias, true});
            add({R::BDownExps, "ffn_down_exps.bias", {D::Embd, D::Experts}, true, kBias, true});
        }
        if (A.experts.shared != SharedExpert::None) {
            if (A.experts.shared == SharedExpert::Gated)
                add({R::WShexpGate, "ffn_gate_inp_shexp.weight", {D::Embd}, true, kMatrix, true});
            add(mat(R::WGateShexp, "ffn_gate_shexp.weight", D::Embd, D::FfnShexp));
            add(mat(R::WUpShexp, "ffn_up_shexp.weight", D::Embd, D::FfnShexp));
            add(mat(R::WDownShexp, "ffn_down_shexp.weight", D::FfnShexp, D::Embd));
        }
    }
    if (A.experts.layers == ExpertLayers::AfterDense) {
        for (size_t i = dense_from; i < moe_from; ++i) s[i].layers = LayerSet::Dense;
        for (size_t i = moe_from; i < s.size(); ++i) s[i].layers = LayerSet::Moe;
    }
    if (post) add(vec(R::PostFfnNorm, "post_ffw_norm.weight", D::Embd, true, kNormWeight));
    if (after) {
        add(vec(R::FfnNorm, "layer_output_norm.weight", D::Embd, true, kNormWeight));
        add(vec(R::FfnNormB, "layer_output_norm.bias", D::Embd, ln, kNormBias));
    }
    // T5: the bias table of layer 0, which the others share unless they have their own (checked by
    // ModelConfig). f32 as llama.cpp's converter writes it.
    if (A.attn.positions == PositionKind::RelativeBias)
        add({R::AttnRelB, "attn_rel_b.weight", {D::Heads, D::RelBuckets}, false, kMatrix, true});
    if (t5)
        for (TensorSpec& t : s) t.prefix = A.stack.t5 == T5Stack::Encoder ? "enc.blk." : "dec.blk.";
    return s;
}

std::vector<TensorSpec> model_schema(const ArchDesc& A) {
    using D = Dim;
    using R = Role;
    std::vector<TensorSpec> s;
    s.push_back({R::TokenEmbd, "token_embd.weight", {D::Embd, D::Vocab}, true, kMatrix});
    if (A.attn.positions == PositionKind::Learned)
        s.push_back({R::PositionEmbd, "position_embd.weight", {D::Embd, D::CtxTrain}, true, kMatrix});
    if (A.stack.token_types)  // small: uploaded as f32 and added as a bias row; some converters leave it out
        s.push_back({R::TokenTypes, "token_types.weight", {D::Embd, D::TokenTypes}, false, kMatrix, true});
    if (A.norm.embed_norm) {
        s.push_back({R::TokenEmbdNorm, "token_embd_norm.weight", {D::Embd, D::One}, true, kNormWeight, true});
        s.push_back({R::TokenEmbdNormB,
                     "token_embd_norm.bias",
                     {D::Embd, D::One},
                     A.norm.kind == NormKind::Layer && A.biases != Biases::AllOptional,
                     kNormBias,
                     true});
    }
    if (A.attn.positions == PositionKind::Rope) {
        // Frequency factors: Llama 3.x's precomputed "llama3" scaling; Phi-3's LongRoPE pair.
        s.push_back({R::RopeFreqs, "rope_freqs.weight", {D::RopeHalf, D::One}, false, {false, 2.0f, 1.0f, true}, true});
        if (A.attn.rope_factor_tensors) {
            s.push_back({R::RopeFactorsLong,
                         "rope_factors_long.weight",
                         {D::RopeHalf, D::One},
                         false,
                         {false, 4.0f, 2.0f, true},
                         true});
            s.push_back({R::RopeFactorsShort,
                         "rope_factors_short.weight",
                         {D::RopeHalf, D::One},
                         false,
                         {false, 1.0f, 0.1f, true},
                         true});
        }
    }
    if (A.stack.encoder_output_norm)  // applied to the hidden states (T5's encoder)
        s.push_back({R::OutputNorm,
                     A.stack.t5 == T5Stack::Encoder ? "enc.output_norm.weight" : "output_norm.weight",
                     {D::Embd, D::One},
                     true,
                     kNormWeight,
                     true});
    if (!A.stack.lm_head) {  // an encoder's output is its hidden states; a reranker's, its head's scores
        const D hidden = A.stack.cls_single ? D::One : D::Embd;
        s.push_back({R::Cls, "cls.weight", {D::Embd, hidden}, false, kMatrix});
        s.push_back({R::ClsB, "cls.bias", {hidden, D::One}, false, kBias, true});
        if (A.stack.cls_single) return s;
        s.push_back({R::ClsOut, "cls.output.weight", {D::Embd, D::ClsOut}, false, kMatrix});
        s.push_back({R::ClsOutB, "cls.output.bias", {D::ClsOut, D::One}, false, kBias, true});
        return s;
    }
    s.push_back({R::OutputNorm,
                 A.stack.t5 == T5Stack::Decoder ? "dec.output_norm.weight" : "output_norm.weight",
                 {D::Embd, D::One},
                 true,
                 kNormWeight,
                 true});
    s.push_back({R::OutputNormB,
                 "output_norm.bias",
                 {D::Embd, D::One},
                 A.norm.kind == NormKind::Layer && A.biases != Biases::AllOptional,
                 kNormBias,
                 true});
    // Absent: the embeddings are tied and the logits read token_embd.
    s.push_back({R::Output, "output.weight", {D::Embd, D::Vocab}, false, kMatrix});
    return s;
}

const GgufTensorInfo* find_model_tensor(const GgufFile& file, const ArchDesc& a, Role role) {
    for (const TensorSpec& t : model_schema(a))
        if (t.role == role) return file.find_tensor(t.name);
    return nullptr;
}

bool is_classifier_role(Role r) { return r == Role::Cls || r == Role::ClsB || r == Role::ClsOut || r == Role::ClsOutB; }

bool is_bias_role(Role r) {
    switch (r) {
        case Role::AttnNormB:
        case Role::Bq:
        case Role::Bk:
        case Role::Bv:
        case Role::Bqkv:
        case Role::Bo:
        case Role::FfnNormB:
        case Role::BUp:
        case Role::BDown:
        case Role::TokenEmbdNormB:
        case Role::OutputNormB:
        case Role::BRouter:
        case Role::BGateExps:
        case Role::BUpExps:
        case Role::BDownExps:
        case Role::BExpProbs: return true;
        default: return false;
    }
}

bool is_head_role(Role r) {
    return r == Role::OutputNorm || r == Role::OutputNormB || r == Role::Output || is_classifier_role(r);
}

std::string expert_tensor_name(const TensorSpec& s, uint32_t layer, uint32_t e) {
    return fmt::format("{}{}.{}", s.prefix, layer, fmt::format(fmt::runtime(s.per_expert_name), e));
}

std::optional<uint32_t> expert_of(const TensorSpec& s, uint32_t layer, std::string_view name) {
    if (!s.per_expert_name) return std::nullopt;
    const std::string_view pattern = s.per_expert_name;
    const size_t hole = pattern.find("{}");
    const std::string head = fmt::format("{}{}.{}", s.prefix, layer, pattern.substr(0, hole));
    const std::string_view tail = pattern.substr(hole + 2);
    if (name.size() <= head.size() + tail.size() || !name.starts_with(head) || !name.ends_with(tail))
        return std::nullopt;
    const std::string_view digits = name.substr(head.size(), name.size() - head.size() - tail.size());
    uint32_t e = 0;
    const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), e);
    if (ec != std::errc() || p != digits.data() + digits.size()) return std::nullopt;
    return e;
}

std::optional<uint64_t> layer_of(std::string_view name, std::string_view prefix) {
    if (!name.starts_with(prefix)) return std::nullopt;
    name.remove_prefix(prefix.size());
    uint64_t n = 0;
    auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
    if (ec != std::errc() || p == name.data() || p == name.data() + name.size() || *p != '.') return std::nullopt;
    return n;
}

const char* unsupported_tensor(const ArchDesc& A, std::string_view prefix, std::string_view name) {
    auto layer_suffix = [&](std::string_view s) { return layer_of(name, prefix) && name.ends_with(s); };
    if (A.attn.qk_norm == QkNorm::None && (layer_suffix(".attn_q_norm.weight") || layer_suffix(".attn_k_norm.weight")))
        return "a LayerNorm over all of q or k (MPT qk_ln) is not supported (jina-bert-v2 reads them as its "
               "qk-post-norm variant, whose first layer has them)";
    if (!A.norm.attn_norm_2 && layer_suffix(".attn_norm_2.weight"))
        return "a second attention norm is read only in jina-bert-v2's qk-post-norm variant (with attn_q_norm and "
               "attn_k_norm in every layer)";
    if (layer_suffix(".ffn_act.scales")) return "AWQ activation scales are not supported";
    if (A.attn.positions != PositionKind::Learned && name == "position_embd.weight")
        return "learned positions are not supported for this architecture (MPT without ALiBi)";
    if (A.ffn.fused_gate_up && layer_suffix(".ffn_gate.weight"))
        return "a separate ffn_gate is not supported for this architecture: vkllm reads ffn_up holding gate and up, "
               "as current llama.cpp converters write it (convert the model again)";
    if (A.ffn.fused_gate_up && layer_suffix(".ffn_up.bias"))
        return "a bias of the fused gate|up projection is not supported";
    if (A.stack.t5 != T5Stack::None && !gated(A.ffn.kind) && layer_suffix(".ffn_gate.weight"))
        return "an ffn_gate in a T5 v1.0 stack (its first layer has none: ReLU, no gate); every layer must agree";
    if (A.moe() && !A.experts.per_expert_tensors &&
        (layer_suffix(".ffn_gate.0.weight") || layer_suffix(".ffn_up.0.weight") || layer_suffix(".ffn_down.0.weight")))
        return "experts stored one tensor each (ffn_gate.N) are read for Mixtral (llama) files only: this architecture "
               "needs the stacked ffn_gate_exps / ffn_up_exps / ffn_down_exps that llama.cpp's converters write";
    if (A.attn.mla && name == "rope_freqs.weight")
        return "rope frequency factors are not applied to DeepSeek's latent attention (llama.cpp reads none for it)";
    if (A.stack.cls_single && name == "cls.output.weight")
        return "this architecture's reranker head is cls.weight and cls.bias alone (llama.cpp reads no cls.output)";
    return nullptr;
}

std::string layer_tensor_name(const ArchDesc& A, Role role, uint32_t layer) {
    for (const TensorSpec& s : layer_schema(A))
        if (s.role == role) return tensor_name(s, layer);
    return {};
}

bool in_layer(const TensorSpec& s, uint32_t layer, uint32_t n_dense_lead) {
    switch (s.layers) {
        case LayerSet::All: return true;
        case LayerSet::Dense: return layer < n_dense_lead;
        case LayerSet::Moe: return layer >= n_dense_lead;
    }
    return true;
}

std::string tensor_name(const TensorSpec& s, uint32_t layer) {
    return s.role < Role::LayerCount ? fmt::format("{}{}.{}", s.prefix, layer, s.name) : std::string(s.name);
}

}  // namespace vkllm
