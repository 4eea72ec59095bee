#include "model/testgen/model_shape.h"

#include "model/arch/architecture.h"
#include "model/arch/model_config.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace vkllm {

MlaDims mla_dims(const ModelShape& s) {
    const uint32_t head_dim = s.head_dim ? s.head_dim : s.dim / s.n_heads;
    MlaDims m;
    m.rope = s.rope_dim ? s.rope_dim : 32;
    m.kv_lora = s.kv_lora ? s.kv_lora : 128;
    m.q_lora = s.q_lora;
    m.v = s.v_head_dim ? s.v_head_dim : (head_dim > m.rope ? head_dim - m.rope : 4);
    return m;
}

ModelShape test_shape(const ArchDesc& a) {
    const TestShape& t = a.test;
    ModelShape s;
    s.arch = a.name;
    s.variant = a.variant;
    s.n_kv_heads = t.n_kv_heads;
    s.n_layers = t.n_layers;
    s.head_dim = t.head_dim;
    s.window = t.window;
    s.clamp_kqv = t.clamp_kqv;
    s.optional_biases = t.optional_biases;
    s.n_expert = t.n_expert;
    s.n_expert_used = t.n_expert_used;
    s.expert_ffn = t.expert_ffn;
    s.shared_ffn = t.shared_ffn;
    s.rope_dim = t.rope_dim;
    s.kv_lora = t.kv_lora;
    s.q_lora = t.q_lora;
    s.v_head_dim = t.v_head_dim;
    s.n_dense_lead = t.n_dense_lead;
    return s;
}

const ArchDesc& ModelShape::arch_desc() const {
    const ArchDesc* a = find_arch(arch, variant);
    if (!a)
        throw std::invalid_argument(fmt::format("unknown architecture '{}' (variant '{}'); supported: {}", arch,
                                                variant, supported_arch_list()));
    if (n_expert > 0 && variant.empty() && !a->moe())
        if (const ArchDesc* moe = find_arch(arch, "moe")) return *moe;
    return *a;
}

void validate_model_shape(const ModelShape& s) {
    auto bad = [](const std::string& m) { throw std::invalid_argument(m); };
    auto positive = [&](uint32_t v, const char* field) {
        if (v == 0) bad(fmt::format("{} must be positive", field));
    };
    const ArchDesc* arch = find_arch(s.arch);
    if (!arch) bad(fmt::format("unknown architecture '{}'; supported: {}", s.arch, supported_arch_list()));
    if (!find_arch(s.arch, s.variant)) bad(fmt::format("architecture '{}' has no variant '{}'", s.arch, s.variant));
    positive(s.dim, "dim");
    positive(s.n_layers, "layers");
    positive(s.n_heads, "heads");
    positive(s.n_kv_heads, "kv-heads");
    positive(s.ffn_dim, "ffn");
    positive(s.n_ctx, "ctx");
    if (s.head_dim == 0 && s.dim % s.n_heads != 0)
        bad(fmt::format("heads ({}) must divide dim ({})", s.n_heads, s.dim));
    if (s.n_heads % s.n_kv_heads != 0)
        bad(fmt::format("kv-heads ({}) must divide heads ({})", s.n_kv_heads, s.n_heads));
    const uint32_t head_dim = s.head_dim ? s.head_dim : s.dim / s.n_heads;
    if (head_dim % 4 != 0 || head_dim > 256)
        bad(fmt::format("head dim {} must be a multiple of 4 and at most 256", head_dim));
    const bool mla = arch->attn.mla;
    if (mla) {
        const MlaDims m = mla_dims(s);
        if (m.rope % 2 != 0 || m.rope >= head_dim || (head_dim - m.rope) % 4 != 0)
            bad(fmt::format("rope-dim {} must be even and leave a multiple of 4 of the head dim {}", m.rope, head_dim));
        if (m.kv_lora % 4 != 0 || m.kv_lora + m.rope > 576 || m.v % 4 != 0 || m.v == 0)
            bad(fmt::format("kv-lora {} (a multiple of 4, at most 576 - rope-dim) and v-head-dim {} (a multiple of 4)",
                            m.kv_lora, m.v));
        if (s.n_dense_lead > s.n_layers) bad(fmt::format("dense-layers {} of {} layers", s.n_dense_lead, s.n_layers));
        if (s.n_shared_experts == 0) bad("shared-experts must be positive (DeepSeek has 1 or 2)");
        if (s.expert_groups == 0 || (s.n_expert && s.n_expert % s.expert_groups != 0) || s.groups_used == 0 ||
            s.groups_used > s.expert_groups)
            bad(fmt::format("expert-groups {} must divide the experts, groups-used {} be 1..that", s.expert_groups,
                            s.groups_used));
        if (s.expert_groups > 1 && s.n_expert &&
            (s.n_expert / s.expert_groups < 2 || s.groups_used * (s.n_expert / s.expert_groups) < s.n_expert_used))
            bad(
                fmt::format("expert-groups {} of {} experts: each group needs 2 or more, and groups-used {} must hold "
                            "the {} experts per token",
                            s.expert_groups, s.n_expert, s.groups_used, s.n_expert_used));
    }
    if (s.rope_freqs && s.arch != "llama") bad("rope factors (rope_freqs) are written for the llama architecture only");
    if (s.rope_scaling != "none" && s.rope_scaling != "linear" && s.rope_scaling != "yarn")
        bad(fmt::format("rope scaling '{}' must be none, linear or yarn", s.rope_scaling));
    if (s.rope_scaling != "none" && !(s.rope_factor >= 1.0f && s.rope_factor <= 1024.0f))
        bad(fmt::format("rope factor {} must be in [1, 1024]", s.rope_factor));
    if (s.rope_scaling != "none" && arch->attn.positions != PositionKind::Rope)
        bad(fmt::format("{} has no RoPE to scale", s.arch));
    if (s.pooling == uint32_t(Pooling::Rank) && arch->stack.lm_head)
        bad(fmt::format("pooling rank (a reranker's classification head) is written for encoders only, not {}",
                        s.arch));
    if (s.n_expert > 0 && !s.arch_desc().moe()) bad(fmt::format("{} has no mixture-of-experts form", s.arch));
    if (s.split_experts && s.n_expert == 0) bad("--split-experts needs --experts");
    if (s.mla_kv_b && !arch->attn.mla)
        bad(fmt::format("--kv-b (an older DeepSeek file's attn_kv_b) is for deepseek2, not {}", s.arch));
    if (s.arch_desc().moe()) {
        if (s.n_expert == 0 || s.n_expert > 1024) bad(fmt::format("experts ({}) must be in 1..1024", s.n_expert));
        // Mixtral's and OLMoE's files carry no expert_feed_forward_length: their experts are --ffn wide.
        if (s.arch_desc().experts.width == ExpertWidth::Ffn && s.expert_ffn && s.expert_ffn != s.ffn_dim)
            bad(
                fmt::format("a {} mixture of experts has experts of the model's ffn ({}), not {}: its files carry no "
                            "expert_feed_forward_length",
                            s.arch, s.ffn_dim, s.expert_ffn));
        if (s.n_expert_used == 0 || s.n_expert_used > std::min(s.n_expert, 64u))
            bad(fmt::format("experts-used ({}) must be in 1..min(experts, 64)", s.n_expert_used));
        if (s.split_experts && !s.arch_desc().experts.per_expert_tensors)
            bad(fmt::format("experts one tensor each (--split-experts) are written for Mixtral (llama) only, not {}",
                            s.arch));
        // A mix's 256-element types fall back per tensor, its 32-element ones have no fallback.
        const uint64_t b = s.mix ? 32 : type_traits(s.weight_type).block_elems;
        for (uint32_t f : {s.expert_ffn, s.shared_ffn})
            if (f % b != 0)
                bad(fmt::format("{} need expert and shared-expert ffn sizes of whole {}-element blocks, not {}",
                                s.mix ? fmt::format("the {} mix's weights", quant_mix_info(*s.mix).name)
                                      : fmt::format("{} weights", type_traits(s.weight_type).name),
                                b, f));
    }
    if (s.clamp_kqv != 0 && !arch->attn.clamp_kqv) bad(fmt::format("{} has no clamp_kqv (mpt has)", s.arch));
    if (!(s.clamp_kqv >= 0) || !std::isfinite(s.clamp_kqv)) bad("clamp-kqv must be finite and >= 0");
    // Rows are dim long (token_embd, attn_*, ffn_gate, ffn_up, output) or ffn long (ffn_down). A
    // mix's 256-element types fall back per tensor, but its 32-element ones have no fallback.
    const std::string what = s.mix ? fmt::format("the {} mix needs", quant_mix_info(*s.mix).name)
                                   : fmt::format("{} weights need", type_traits(s.weight_type).name);
    const uint64_t block = s.mix ? 32 : type_traits(s.weight_type).block_elems;
    if (s.dim % block != 0)
        bad(fmt::format(
            "{} rows that are whole {}-element blocks, but dim = {} is the row length of "
            "token_embd.weight, blk.*.attn_q/k/v/output.weight, blk.*.ffn_gate/up.weight and "
            "output.weight{}",
            what, block, s.dim, block == 256 ? "; a llama.cpp mix such as q4_k_m falls back per tensor" : ""));
    if (mla) {
        const MlaDims m = mla_dims(s);
        // An older file's attn_kv_b holds rows of kv_lora; the k rows the loader transposes from it
        // are F16, whatever their length.
        const std::pair<uint64_t, const char*> rows[] = {
            {uint64_t(s.n_heads) * m.v, "blk.*.attn_output.weight"},
            {s.mla_kv_b ? block : head_dim - m.rope, "blk.*.attn_k_b.weight"},
            {m.kv_lora, s.mla_kv_b ? "blk.*.attn_kv_b.weight" : "blk.*.attn_v_b.weight"},
            {m.q_lora ? m.q_lora : block, "blk.*.attn_q_b.weight"},
            {s.expert_ffn ? s.expert_ffn : s.ffn_dim, "blk.*.ffn_down_exps.weight"}};
        for (const auto& [len, tensor] : rows)
            if (len % block != 0)
                bad(fmt::format("{} rows that are whole {}-element blocks, but {} is the row length of {}", what, block,
                                len, tensor));
    } else if (s.q_dim() % block != 0) {
        bad(
            fmt::format("{} rows that are whole {}-element blocks, but heads x head dim = {} is the row length of "
                        "blk.*.attn_output.weight",
                        what, block, s.q_dim()));
    }
    if (s.ffn_dim % block != 0)
        bad(fmt::format(
            "{} rows that are whole {}-element blocks, but ffn = {} is the row length of "
            "blk.*.ffn_down.weight{}",
            what, block, s.ffn_dim, block == 256 ? "; a llama.cpp mix such as q4_k_m falls back per tensor" : ""));
    if (s.n_vocab < 259)
        bad(fmt::format("vocab ({}) must be at least 259 (3 special tokens + 256 byte tokens)", s.n_vocab));
    if (s.fim_tokens && s.n_vocab < 259 + 16)
        bad(fmt::format("vocab ({}) is too small for the fill-in-the-middle tokens (at least 275)", s.n_vocab));
    if (!s.control_tokens.empty() && s.n_vocab < 259 + 16 + 6 + s.control_tokens.size())
        bad(fmt::format("vocab ({}) is too small for {} control tokens (at least {})", s.n_vocab,
                        s.control_tokens.size(), 259 + 16 + 6 + s.control_tokens.size()));
    if (s.n_vocab > (1u << 24)) bad(fmt::format("vocab ({}) must be at most {}", s.n_vocab, 1u << 24));
    if (!(s.rms_eps > 0) || !std::isfinite(s.rms_eps)) bad("rms eps must be positive");
    if (!(s.rope_base > 0) || !std::isfinite(s.rope_base)) bad("rope base must be positive");
}

}  // namespace vkllm
