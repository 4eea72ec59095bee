#include "model/arch/model_config.h"

#include "model/arch/tensor_schema.h"

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include <fmt/format.h>

namespace vkllm {

namespace {

class Checker {
public:
    explicit Checker(const GgufFile& f) : f_(f) {}

    [[noreturn]] void fail(std::string_view what, std::string_view reason) const {
        throw ModelConfigError(fmt::format("{}: {}: {}", f_.name(), what, reason));
    }

    uint32_t positive(std::string_view key) const {
        uint32_t v = f_.get_u32(key);
        if (v == 0) fail(key_what(key), "must be > 0, got 0");
        return v;
    }

    static std::string key_what(std::string_view key) { return "key " + quote_name(key); }

    // ggml dims; missing trailing dims count as 1, as GGUF writers drop them.
    void expect_shape(std::string_view name, std::vector<uint64_t> want, bool required = true) const {
        const GgufTensorInfo* t = f_.find_tensor(name);
        if (!t) {
            if (required)
                fail("tensor " + quote_name(name),
                     fmt::format("required tensor is missing (expected shape {})", shape(want)));
            return;
        }
        uint64_t w[kGgufMaxDims] = {1, 1, 1, 1};
        for (size_t i = 0; i < want.size(); ++i) w[i] = want[i];
        for (size_t i = 0; i < kGgufMaxDims; ++i)
            if (t->ne[i] != w[i])
                fail("tensor " + quote_name(name),
                     fmt::format("expected shape {}, got {}", shape(want), t->shape_string()));
    }

    static std::string shape(const std::vector<uint64_t>& ne) {
        std::string s = "[";
        for (size_t i = 0; i < ne.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
        return s + "]";
    }

private:
    const GgufFile& f_;
};

float positive_float(const Checker& c, const GgufFile& f, const std::string& key, float fallback) {
    const float v = f.find_f32(key).value_or(fallback);
    if (!(v > 0) || !std::isfinite(v)) c.fail(Checker::key_what(key), fmt::format("must be positive, got {}", v));
    return v;
}

void read_rope(const Checker& c, const GgufFile& f, const std::string& a, ModelConfig& cfg) {
    cfg.rope.base = positive_float(c, f, a + ".rope.freq_base", 10000.0f);
    cfg.rope.n_ctx_orig = f.find_u32(a + ".rope.scaling.original_context_length").value_or(cfg.n_ctx_train);
    std::optional<float> factor = f.find_f32(a + ".rope.scaling.factor");
    if (!factor) factor = f.find_f32(a + ".rope.scale_linear");  // older files
    std::string type = std::string(f.find_string(a + ".rope.scaling.type").value_or(factor ? "linear" : "none"));
    if (type != "none" && type != "linear" && type != "yarn")
        c.fail(Checker::key_what(a + ".rope.scaling.type"),
               fmt::format("rope scaling {} is not supported; supported: none, linear, yarn (llama3 files carry "
                           "rope_freqs.weight)",
                           quote_name(type)));
    cfg.rope_scaling = type;
    if (type != "none" && factor && *factor != 0.0f) {
        if (!(*factor > 0) || !std::isfinite(*factor))
            c.fail(Checker::key_what(a + ".rope.scaling.factor"), fmt::format("must be positive, got {}", *factor));
        cfg.rope.freq_scale = 1.0f / *factor;
    }
    if (type == "yarn") {
        cfg.rope.ext_factor = f.find_f32(a + ".rope.scaling.yarn_ext_factor").value_or(1.0f);
        cfg.rope.attn_factor = f.find_f32(a + ".rope.scaling.yarn_attn_factor").value_or(1.0f);
        cfg.rope.beta_fast = f.find_f32(a + ".rope.scaling.yarn_beta_fast").value_or(32.0f);
        cfg.rope.beta_slow = f.find_f32(a + ".rope.scaling.yarn_beta_slow").value_or(1.0f);
        if (cfg.rope.n_ctx_orig == 0)
            c.fail(Checker::key_what(a + ".rope.scaling.original_context_length"), "yarn needs the original context");
    }
    cfg.rope_local = cfg.rope;
    if (cfg.arch->attn.local_rope_base) {
        // Gemma 3: local layers rotate with their own base and no scaling.
        cfg.rope_local = RopeConfig{};
        cfg.rope_local.base = positive_float(c, f, a + ".rope.freq_base_swa", 10000.0f);
        cfg.rope_local.n_ctx_orig = cfg.n_ctx_train;
    }
}

// M-RoPE's sections: 4 counts of pairs (llama.cpp writes them as INT32), together at least one pair
// and at most the rotated dims' pairs.
void read_rope_sections(const Checker& c, const GgufFile& f, const std::string& k, ModelConfig& cfg) {
    if (!f.has(k))
        c.fail(Checker::key_what(k), "required for this architecture (M-RoPE's pairs per position component)");
    const std::vector<int32_t> v = f.get_i32_array(k);
    if (v.size() != 4) c.fail(Checker::key_what(k), fmt::format("has {} elements, expected 4", v.size()));
    uint64_t sum = 0;
    for (size_t i = 0; i < 4; ++i) {
        if (v[i] < 0) c.fail(Checker::key_what(k), fmt::format("element {} is negative ({})", i, v[i]));
        cfg.rope_sections[i] = uint32_t(v[i]);
        sum += uint32_t(v[i]);
    }
    if (sum == 0 || sum > cfg.rope_dim / 2)
        c.fail(Checker::key_what(k),
               fmt::format("sections {} {} {} {} sum to {} pairs; expected 1 to {} (rope dimension {} / 2)", v[0], v[1],
                           v[2], v[3], sum, cfg.rope_dim / 2, cfg.rope_dim));
}

// Mixture-of-experts keys, with llama.cpp's defaults and limits vkllm's router kernel has.
void read_experts(const Checker& c, const GgufFile& f, const std::string& a, ModelConfig& cfg) {
    auto key = [&](const char* k) { return a + "." + k; };
    cfg.n_expert = c.positive(key("expert_count"));
    cfg.n_expert_used = c.positive(key("expert_used_count"));
    if (cfg.n_expert > 1024)
        c.fail(Checker::key_what(key("expert_count")),
               fmt::format("{} experts: at most 1024 are supported", cfg.n_expert));
    if (cfg.n_expert_used > std::min(cfg.n_expert, 64u))
        c.fail(
            Checker::key_what(key("expert_used_count")),
            fmt::format("{} experts per token of {}: at most min(expert_count, 64)", cfg.n_expert_used, cfg.n_expert));
    if (f.has(key("expert_feed_forward_length")) || cfg.arch->experts.width == ExpertWidth::Required)
        cfg.expert_ffn_dim = c.positive(key("expert_feed_forward_length"));
    else
        cfg.expert_ffn_dim =
            cfg.arch->experts.width == ExpertWidth::FfnPerUsed ? cfg.ffn_dim / cfg.n_expert_used : cfg.ffn_dim;
    if (cfg.expert_ffn_dim == 0)
        c.fail(Checker::key_what(key("expert_feed_forward_length")),
               fmt::format("missing, and feed_forward_length {} / {} experts per token is 0", cfg.ffn_dim,
                           cfg.n_expert_used));
    if (cfg.arch->experts.shared ==
        SharedExpert::Ungated)  // DeepSeek: expert_shared_count experts of expert_ffn side by side
        cfg.shared_ffn_dim = cfg.expert_ffn_dim * c.positive(key("expert_shared_count"));
    else if (cfg.arch->experts.shared == SharedExpert::Gated)
        cfg.shared_ffn_dim = f.has(key("expert_shared_feed_forward_length"))
                                 ? c.positive(key("expert_shared_feed_forward_length"))
                                 : cfg.ffn_dim;
    cfg.n_expert_groups = f.find_u32(key("expert_group_count")).value_or(1);
    cfg.n_group_used = f.find_u32(key("expert_group_used_count")).value_or(cfg.n_expert_groups);
    if (cfg.n_expert_groups == 0) cfg.n_expert_groups = 1;
    if (cfg.n_expert_groups > 1) {
        const uint32_t per = cfg.n_expert % cfg.n_expert_groups == 0 ? cfg.n_expert / cfg.n_expert_groups : 0;
        if (cfg.n_expert_groups > 64 || per < 2)
            c.fail(Checker::key_what(key("expert_group_count")),
                   fmt::format("{} groups of {} experts: expected at most 64 groups of 2 or more experts each",
                               cfg.n_expert_groups, cfg.n_expert));
        if (cfg.n_group_used == 0 || cfg.n_group_used > cfg.n_expert_groups ||
            uint64_t(cfg.n_group_used) * per < cfg.n_expert_used)
            c.fail(Checker::key_what(key("expert_group_used_count")),
                   fmt::format("{} of {} groups of {} experts: must be 1..{} and hold the {} experts per token",
                               cfg.n_group_used, cfg.n_expert_groups, per, cfg.n_expert_groups, cfg.n_expert_used));
    }
    cfg.expert_norm =
        f.find_bool(key("expert_weights_norm")).value_or(cfg.arch->experts.gating == ExpertGating::SoftmaxNormed);
    cfg.expert_scale = f.find_f32(key("expert_weights_scale")).value_or(1.0f);
    if (!(cfg.expert_scale > 0) || !std::isfinite(cfg.expert_scale))
        c.fail(Checker::key_what(key("expert_weights_scale")),
               fmt::format("must be positive, got {}", cfg.expert_scale));
    // llama.cpp's enum: 1 softmax, 2 sigmoid, 3 softmax of the chosen logits (0: none given, softmax).
    const uint32_t gating = f.find_u32(key("expert_gating_func")).value_or(1);
    if (gating > 3)
        c.fail(Checker::key_what(key("expert_gating_func")),
               fmt::format("gating function {} is not supported; supported: 1 (softmax), 2 (sigmoid), 3 (softmax of "
                           "the chosen experts)",
                           gating));
    const bool fixed = cfg.arch->experts.gating == ExpertGating::SoftmaxOfChosen;  // whatever the file says
    cfg.expert_sigmoid = gating == 2 && !fixed;
    cfg.expert_softmax_chosen = gating == 3 || fixed;
}

// Latent attention's keys: as llama.cpp's converter writes DeepSeek-V2/V3 since 2025 (one KV head of
// kv_lora_rank + rope dims, the *_mla lengths of the uncompressed heads), or as it wrote them before
// (key_length / value_length the uncompressed heads', a KV head per query head, attn_kv_b).
void read_mla(const Checker& c, const GgufFile& f, const std::string& a, ModelConfig& cfg) {
    auto key = [&](const char* k) { return a + "." + k; };
    cfg.kv_lora_rank = c.positive(key("attention.kv_lora_rank"));
    cfg.q_lora_rank = f.find_u32(key("attention.q_lora_rank")).value_or(0);
    if (!f.has(key("attention.key_length_mla"))) {
        // An older conversion: the keys give the uncompressed heads (as llama.cpp reads them for its
        // non-absorbed path, a KV head per query head), attn_kv_b their projections.
        if (!f.find_tensor("blk.0.attn_kv_b.weight"))
            c.fail(Checker::key_what(key("attention.key_length_mla")),
                   "missing, and the file has no blk.0.attn_kv_b.weight of older conversions either");
        cfg.mla_joined_kv_b = true;
        cfg.mla_qk = cfg.head_dim;  // attention.key_length
        cfg.mla_v = c.positive(key("attention.value_length"));
        if (cfg.n_kv_heads != cfg.n_heads)
            c.fail(Checker::key_what(key("attention.head_count_kv")),
                   fmt::format("{} of {} heads: an attn_kv_b file has one KV head per query head", cfg.n_kv_heads,
                               cfg.n_heads));
        const uint32_t rope = c.positive(key("rope.dimension_count"));
        cfg.head_dim = cfg.kv_lora_rank + rope;  // the cached row, as a current conversion states it
        cfg.n_kv_heads = 1;
        cfg.v_head_dim = cfg.kv_lora_rank;
    } else {
        cfg.mla_qk = c.positive(key("attention.key_length_mla"));
        cfg.mla_v = c.positive(key("attention.value_length_mla"));
        cfg.v_head_dim = f.find_u32(key("attention.value_length")).value_or(cfg.kv_lora_rank);
    }
    if (cfg.n_kv_heads != 1)
        c.fail(Checker::key_what(key("attention.head_count_kv")),
               fmt::format("latent attention has one KV head (the latent), got {}", cfg.n_kv_heads));
    if (cfg.v_head_dim != cfg.kv_lora_rank)
        c.fail(Checker::key_what(key("attention.value_length")),
               fmt::format("{}: latent attention's values are the kv_lora_rank {} latent", cfg.v_head_dim,
                           cfg.kv_lora_rank));
    const bool old = cfg.mla_joined_kv_b;
    if (cfg.head_dim <= cfg.kv_lora_rank || cfg.head_dim > 576 || cfg.head_dim % 4 != 0 || cfg.kv_lora_rank % 4 != 0)
        c.fail(Checker::key_what(key(old ? "attention.kv_lora_rank" : "attention.key_length")),
               fmt::format("key length {} with kv_lora_rank {}: supported are kv_lora_rank a multiple of 4 plus rope "
                           "dimensions, a multiple of 4, at most 576 in all (DeepSeek: 512 + 64)",
                           cfg.head_dim, cfg.kv_lora_rank));
    const uint32_t rope = cfg.head_dim - cfg.kv_lora_rank;
    if (cfg.mla_qk <= rope || (cfg.mla_qk - rope) % 4 != 0 || cfg.mla_v % 4 != 0)
        c.fail(Checker::key_what(key(old ? "attention.key_length" : "attention.key_length_mla")),
               fmt::format("{} {} and {} {}: expected the rope dimensions {} plus a multiple of 4, and a multiple of 4",
                           old ? "key_length" : "key_length_mla", cfg.mla_qk, old ? "value_length" : "value_length_mla",
                           cfg.mla_v, rope));
}

// The row of `a`'s family the file selects: a T5 stack without ffn_gate in its first layer is T5
// v1.0 (a ReLU feed-forward), else v1.1 / flan-T5 (gated GELU), as llama.cpp tells them apart.
// A llama file with llama.expert_count > 0 is a mixture of experts (Mixtral), as llama.cpp reads it.
// A jina-bert-v2 file whose first layer has attn_q_norm is the qk-post-norm variant (llama.cpp reads
// its q/k norms and attn_norm_2 when present; that model has all three), one with ffn_gate the
// split-gate form of older conversions, or both.
const ArchDesc& arch_for_file(const ArchDesc& a, const GgufFile& f) {
    if (!a.moe()) {
        const ArchDesc* moe = find_arch(a.name, "moe");
        if (moe && f.find_u32(std::string(a.name) + ".expert_count").value_or(0) > 0) return *moe;
    }
    if (a.variant.empty() && find_arch(a.name, "qk-post-norm")) {
        const ArchDesc& qk = *find_arch(a.name, "qk-post-norm");
        const bool q_norm = f.find_tensor(layer_tensor_name(qk, Role::QNorm, 0)) != nullptr;
        const ArchDesc* split = find_arch(a.name, "split-gate");
        const bool gate = split && f.find_tensor(layer_tensor_name(*split, Role::WGate, 0)) != nullptr;
        const ArchDesc* v = find_arch(
            a.name, q_norm ? (gate ? "qk-post-norm,split-gate" : "qk-post-norm") : (gate ? "split-gate" : ""));
        return v ? *v : a;
    }
    if (a.stack.t5 == T5Stack::None || f.find_tensor(layer_tensor_name(a, Role::WGate, 0))) return a;
    const ArchDesc* v10 = find_arch(a.name, "v1.0");
    return v10 ? *v10 : a;
}

// `view`: the description to read the file as (an encoder-decoder file's encoder); null: the file's
// own architecture. Keys are always under the file's general.architecture.
ModelConfig read(const GgufFile& f, const ArchDesc* view) {
    Checker c(f);
    const std::string_view arch_name = f.get_string("general.architecture");
    ModelConfig cfg;
    cfg.arch = view ? view : find_arch(arch_name);
    if (!cfg.arch)
        c.fail("key 'general.architecture'", fmt::format("architecture {} is not supported; supported: {}",
                                                         quote_name(arch_name), supported_arch_list()));
    cfg.arch = &arch_for_file(*cfg.arch, f);
    const ArchDesc& A = *cfg.arch;
    const std::string a(arch_name);
    auto key = [&](const char* k) { return a + "." + k; };

    cfg.dim = c.positive(key("embedding_length"));
    cfg.n_layers = A.stack.t5 == T5Stack::Decoder && f.has(key("decoder_block_count"))
                       ? c.positive(key("decoder_block_count"))
                       : c.positive(key("block_count"));
    if (A.attn.cross_attention) {
        if (const GgufValue* v = f.find(key("decoder_start_token_id"))) {
            const auto x = v->as_i64();
            const bool none = x && (*x == -1 || *x == int64_t(std::numeric_limits<uint32_t>::max()));  // BOS then
            if (!x || (!none && (*x < 0 || *x >= int64_t(std::numeric_limits<int32_t>::max()))))
                c.fail(Checker::key_what(key("decoder_start_token_id")), "must be a token id");
            cfg.decoder_start_token = none ? -1 : int32_t(*x);
        }
    }
    cfg.ffn_dim = c.positive(key("feed_forward_length"));
    cfg.n_ctx_train = c.positive(key("context_length"));
    cfg.n_heads = c.positive(key("attention.head_count"));
    cfg.n_kv_heads = f.has(key("attention.head_count_kv")) ? c.positive(key("attention.head_count_kv")) : cfg.n_heads;
    if (cfg.n_heads % cfg.n_kv_heads != 0)
        c.fail(Checker::key_what(key("attention.head_count_kv")),
               fmt::format("{} KV heads do not divide {} query heads", cfg.n_kv_heads, cfg.n_heads));
    if (f.has(key("attention.key_length"))) {
        cfg.head_dim = c.positive(key("attention.key_length"));
    } else {
        if (cfg.dim % cfg.n_heads != 0)
            c.fail(Checker::key_what(key("attention.head_count")),
                   fmt::format("{} heads do not divide embedding length {}", cfg.n_heads, cfg.dim));
        cfg.head_dim = cfg.dim / cfg.n_heads;
    }
    if (A.attn.mla) {
        read_mla(c, f, a, cfg);
    } else {
        if (auto v = f.find_u32(key("attention.value_length")); v && *v != cfg.head_dim)
            c.fail(Checker::key_what(key("attention.value_length")),
                   fmt::format("value head size {} differs from key head size {}; not supported", *v, cfg.head_dim));
        if (cfg.head_dim % 4 != 0 || cfg.head_dim > 256)
            c.fail(Checker::key_what(key("attention.key_length")),
                   fmt::format("head size {} is not supported: it must be a multiple of 4, at most 256", cfg.head_dim));
    }

    const std::string eps_key =
        key(A.norm.kind == NormKind::Rms ? "attention.layer_norm_rms_epsilon" : "attention.layer_norm_epsilon");
    cfg.norm_eps = f.get_f32(eps_key);
    if (!(cfg.norm_eps > 0) || !std::isfinite(cfg.norm_eps))
        c.fail(Checker::key_what(eps_key), fmt::format("must be positive, got {}", cfg.norm_eps));

    if (A.attn.positions == PositionKind::Rope) {
        cfg.rope_dim = f.find_u32(key("rope.dimension_count")).value_or(cfg.head_dim);
        if (A.attn.mla && cfg.rope_dim != cfg.head_dim - cfg.kv_lora_rank)
            c.fail(Checker::key_what(key("rope.dimension_count")),
                   fmt::format("rope dimension {}: latent attention's key_length {} must be kv_lora_rank {} + the rope "
                               "dimension",
                               cfg.rope_dim, cfg.head_dim, cfg.kv_lora_rank));
        if (cfg.rope_dim == 0 || cfg.rope_dim % 2 != 0 || cfg.rope_dim > cfg.head_dim)
            c.fail(Checker::key_what(key("rope.dimension_count")),
                   fmt::format("rope dimension {} must be even, positive and at most the head dim {}", cfg.rope_dim,
                               cfg.head_dim));
        read_rope(c, f, a, cfg);
        if (A.attn.mrope) read_rope_sections(c, f, key("rope.dimension_sections"), cfg);
    }

    if (A.attn.swa_period > 0) {
        const std::string wk = key("attention.sliding_window");
        if (A.attn.default_window == 0 && !f.has(wk)) c.fail(Checker::key_what(wk), "required for this architecture");
        cfg.window = f.find_u32(wk).value_or(A.attn.default_window);
        cfg.local.resize(cfg.n_layers);
        for (uint32_t l = 0; l < cfg.n_layers; ++l)
            cfg.local[l] = cfg.window > 0 && l % A.attn.swa_period < A.attn.swa_period - 1;
    }
    cfg.attn_softcap = f.find_f32(key("attn_logit_softcapping")).value_or(A.attn.default_softcap);
    cfg.final_softcap = f.find_f32(key("final_logit_softcapping")).value_or(A.stack.default_final_softcap);
    for (const char* k : {"attn_logit_softcapping", "final_logit_softcapping"}) {
        const float v = k[0] == 'a' ? cfg.attn_softcap : cfg.final_softcap;
        if (v < 0 || !std::isfinite(v)) c.fail(Checker::key_what(key(k)), fmt::format("must be >= 0, got {}", v));
    }
    if (A.attn.positions == PositionKind::Alibi) {
        // llama.cpp fixes BLOOM's and jina-bert-v2's max bias and reads no key for them; MPT's is required.
        const std::string k = key("attention.max_alibi_bias");
        if (!f.has(k) && A.attn.default_max_alibi_bias == 0)
            c.fail(Checker::key_what(k), "required for this architecture");
        cfg.max_alibi_bias = A.attn.default_max_alibi_bias > 0 ? A.attn.default_max_alibi_bias : f.get_f32(k);
        if (!(cfg.max_alibi_bias > 0) || !std::isfinite(cfg.max_alibi_bias))
            c.fail(Checker::key_what(k), fmt::format("must be positive, got {}", cfg.max_alibi_bias));
    }
    if (A.attn.clamp_kqv) {
        cfg.clamp_kqv = f.find_f32(key("attention.clamp_kqv")).value_or(0.0f);
        if (!(cfg.clamp_kqv >= 0) || !std::isfinite(cfg.clamp_kqv))
            c.fail(Checker::key_what(key("attention.clamp_kqv")), fmt::format("must be >= 0, got {}", cfg.clamp_kqv));
    }
    if (A.attn.positions == PositionKind::RelativeBias) {
        // llama.cpp's bucketing (model/forward/position_bias.h) needs at least one exact bucket per
        // direction; T5 uses 32.
        const std::string k = key("attention.relative_buckets_count");
        cfg.n_rel_buckets = c.positive(k);
        if (cfg.n_rel_buckets < 4 || cfg.n_rel_buckets > 1024 || cfg.n_rel_buckets % 2 != 0)
            c.fail(Checker::key_what(k),
                   fmt::format("{} buckets: expected an even count in 4..1024 (T5: 32)", cfg.n_rel_buckets));
        const std::string rel0 = layer_tensor_name(A, Role::AttnRelB, 0);
        if (!f.find_tensor(rel0))
            c.fail("tensor " + quote_name(rel0),
                   "required tensor is missing: T5's relative-position bias (later layers share layer 0's)");
    }
    if (A.moe()) read_experts(c, f, a, cfg);
    if (A.experts.layers == ExpertLayers::AfterDense) {
        cfg.n_dense_lead = f.find_u32(key("leading_dense_block_count")).value_or(0);
        if (cfg.n_dense_lead > cfg.n_layers)
            c.fail(Checker::key_what(key("leading_dense_block_count")),
                   fmt::format("{} dense layers of {}", cfg.n_dense_lead, cfg.n_layers));
    }
    cfg.causal = f.find_bool(key("attention.causal")).value_or(A.stack.causal);
    if (!cfg.causal && cfg.window > 0)
        c.fail(Checker::key_what(key("attention.causal")),
               "bidirectional attention with a sliding window is not supported");
    if (const GgufValue* v = f.find(key("pooling_type"))) {
        const auto x = v->as_i64();
        if (!x || *x < 0 || *x > int64_t(Pooling::Rank))
            c.fail(Checker::key_what(key("pooling_type")),
                   fmt::format("pooling type {} is not one of 0 (none), 1 (mean), 2 (cls), 3 (last), 4 (rank)",
                               x ? std::to_string(*x) : v->describe_type()));
        cfg.pooling = Pooling(*x);
    }
    if (A.stack.token_types) {
        if (const GgufTensorInfo* t = f.find_tensor("token_types.weight")) {
            cfg.n_token_types = uint32_t(t->ne[1]);
            if (t->n_dims != 2 || cfg.n_token_types == 0)
                c.fail("tensor 'token_types.weight'",
                       fmt::format("expected shape [{}, n_types], got {}", cfg.dim, t->shape_string()));
        }
    }
    if (!A.stack.lm_head) {
        if (const GgufTensorInfo* t = find_model_tensor(f, A, Role::ClsOut)) {
            cfg.n_cls_out = uint32_t(t->ne[1]);
            if (t->n_dims != 2 || cfg.n_cls_out == 0)
                c.fail(fmt::format("tensor '{}'", t->name),
                       fmt::format("expected shape [{}, n_labels], got {}", cfg.dim, t->shape_string()));
        }
        cfg.cls_head = (find_model_tensor(f, A, Role::Cls) && find_model_tensor(f, A, Role::ClsB)) || cfg.n_cls_out > 0;
        if (cfg.pooling == Pooling::Rank && !cfg.cls_head)
            c.fail(Checker::key_what(key("pooling_type")),
                   "rank pooling needs a classification head: cls.weight and cls.bias, or cls.output.weight");
    }
    cfg.attn_scale = A.attn.unscaled_scores
                         ? 1.0f
                         : 1.0f / std::sqrt(float(A.attn.dim_scale_layers && cfg.n_layers == A.attn.dim_scale_layers
                                                      ? cfg.dim / cfg.n_heads
                                                  : A.attn.mla ? cfg.mla_qk
                                                               : cfg.head_dim));
    if (A.attn.mla && cfg.rope_scaling == "yarn") {
        // DeepSeek's YaRN (llama.cpp's deepseek2 graph): scores scaled by mscale^2, mscale = attn_factor
        // (1 + log_mul ln(1 / freq_scale)), and the rotation's own magnitude correction cancelled.
        const std::string k = key("rope.scaling.yarn_log_multiplier");
        const float log_mul = f.find_f32(k).value_or(0.0f);
        if (!std::isfinite(log_mul) || log_mul < 0)
            c.fail(Checker::key_what(k), fmt::format("must be >= 0, got {}", log_mul));
        const float ln = std::log(1.0f / cfg.rope.freq_scale);
        const float mscale = cfg.rope.attn_factor * (1.0f + log_mul * ln);
        cfg.attn_scale *= mscale * mscale;
        cfg.rope.attn_factor = 1.0f / (1.0f + 0.1f * ln);
        cfg.rope_local = cfg.rope;
    }

    // The embedding defines the vocab size; the tokenizer and the vocab_size key must agree.
    const GgufTensorInfo& embd = f.tensor("token_embd.weight");
    if (embd.n_dims != 2 || embd.ne[0] != cfg.dim)
        c.fail("tensor 'token_embd.weight'",
               fmt::format("expected shape [{}, n_vocab], got {}", cfg.dim, embd.shape_string()));
    if (embd.ne[1] > uint64_t(std::numeric_limits<int32_t>::max()))
        c.fail("tensor 'token_embd.weight'", fmt::format("{} rows is too many tokens", embd.ne[1]));
    cfg.n_vocab = uint32_t(embd.ne[1]);
    if (f.has("tokenizer.ggml.tokens")) {
        const uint64_t n = f.get_array_size("tokenizer.ggml.tokens");
        if (n != cfg.n_vocab)
            c.fail("key 'tokenizer.ggml.tokens'",
                   fmt::format("vocab has {} tokens but token_embd.weight has {} rows", n, cfg.n_vocab));
    }
    if (auto n = f.find_u32(key("vocab_size")); n && *n != cfg.n_vocab)
        c.fail(Checker::key_what(key("vocab_size")),
               fmt::format("vocab_size {} but token_embd.weight has {} rows", *n, cfg.n_vocab));

    // Every tensor the architecture reads (model/arch/tensor_schema.h), with its shape.
    const SchemaDims dims = schema_dims(cfg);
    auto check = [&](const TensorSpec& t, uint32_t layer) {
        std::vector<uint64_t> want{dims.get(t.ne[0])};
        if (t.ne[1] != Dim::One || t.ne[2] != Dim::One) want.push_back(dims.get(t.ne[1]));
        if (t.ne[2] != Dim::One) want.push_back(dims.get(t.ne[2]));
        if (t.per_expert_name && cfg.experts_split) {
            // The stack stored one tensor per expert (older Mixtral files): every expert, one type.
            const TensorType type = f.tensor(expert_tensor_name(t, layer, 0)).type;
            for (uint32_t e = 0; e < cfg.n_expert; ++e) {
                const std::string n = expert_tensor_name(t, layer, e);
                c.expect_shape(n, {want[0], want[1]});
                if (f.tensor(n).type != type)
                    c.fail("tensor " + quote_name(n),
                           fmt::format("is {} where expert 0 is {}: a layer's experts must share one type",
                                       type_traits(f.tensor(n).type).name, type_traits(type).name));
            }
            return;
        }
        c.expect_shape(tensor_name(t, layer), want, t.required);
    };
    const std::vector<TensorSpec> layer = layer_schema(A);
    const TensorSpec* split_probe = nullptr;  // the first expert stack that has a per-expert form
    for (const TensorSpec& t : layer)
        if (!split_probe && t.per_expert_name) split_probe = &t;
    if (split_probe)
        cfg.experts_split = !f.find_tensor(tensor_name(*split_probe, cfg.n_dense_lead)) &&
                            f.find_tensor(expert_tensor_name(*split_probe, cfg.n_dense_lead, 0));
    cfg.tied_embeddings = f.find_tensor("output.weight") == nullptr;
    cfg.has_rope_freqs = A.attn.positions == PositionKind::Rope && f.find_tensor("rope_freqs.weight") != nullptr;
    if (A.attn.rope_factor_tensors) {
        const bool lng = f.find_tensor("rope_factors_long.weight"), shrt = f.find_tensor("rope_factors_short.weight");
        if (lng != shrt)
            c.fail(lng ? "tensor 'rope_factors_short.weight'" : "tensor 'rope_factors_long.weight'",
                   "LongRoPE needs both rope_factors_long and rope_factors_short");
        cfg.has_rope_long_short = lng;
    }
    for (const TensorSpec& t : model_schema(A))
        if (t.role != Role::TokenEmbd) check(t, 0);  // checked above: it defines the vocab
    for (uint32_t l = 0; l < cfg.n_layers; ++l)
        for (const TensorSpec& t : layer)
            if (in_layer(t, l, cfg.n_dense_lead)) check(t, l);
    if (A.attn.mla) {
        // The query's projections: wq alone without q_lora_rank (V2-Lite), else wq_a, its norm and wq_b.
        const std::vector<Role> want =
            cfg.q_lora_rank ? std::vector<Role>{Role::WqA, Role::QANorm, Role::WqB} : std::vector<Role>{Role::Wq};
        const Role other = cfg.q_lora_rank ? Role::Wq : Role::WqA;
        // The key / value projections: attn_k_b and attn_v_b, or older files' attn_kv_b.
        const std::vector<Role> kv_want =
            cfg.mla_joined_kv_b ? std::vector<Role>{Role::WkvB} : std::vector<Role>{Role::WkB, Role::WvB};
        const std::vector<Role> kv_other =
            cfg.mla_joined_kv_b ? std::vector<Role>{Role::WkB, Role::WvB} : std::vector<Role>{Role::WkvB};
        const char* kv_why = cfg.mla_joined_kv_b
                                 ? "the file has no attention.key_length_mla: an older conversion's attn_kv_b"
                                 : "attention.key_length_mla is set: attn_k_b and attn_v_b";
        for (uint32_t l = 0; l < cfg.n_layers; ++l) {
            for (Role r : kv_want) {
                const std::string n = layer_tensor_name(A, r, l);
                if (!f.find_tensor(n))
                    c.fail("tensor " + quote_name(n), fmt::format("required tensor is missing ({})", kv_why));
            }
            for (Role r : kv_other) {
                const std::string n = layer_tensor_name(A, r, l);
                if (f.find_tensor(n))
                    c.fail("tensor " + quote_name(n), fmt::format("does not belong to this file ({})", kv_why));
            }
        }
        for (uint32_t l = 0; l < cfg.n_layers; ++l) {
            for (Role r : want) {
                const std::string n = layer_tensor_name(A, r, l);
                if (!f.find_tensor(n))
                    c.fail("tensor " + quote_name(n),
                           fmt::format("required tensor is missing (attention.q_lora_rank is {})", cfg.q_lora_rank));
            }
            const std::string n = layer_tensor_name(A, other, l);
            if (f.find_tensor(n))
                c.fail("tensor " + quote_name(n),
                       fmt::format("does not belong to a file whose attention.q_lora_rank is {}", cfg.q_lora_rank));
        }
    }
    if (A.moe() && !layer_tensor_name(A, Role::BExpProbs, 0).empty()) {  // the schema has V3's selection bias
        cfg.expert_probs_bias = cfg.n_layers > cfg.n_dense_lead &&
                                f.find_tensor(layer_tensor_name(A, Role::BExpProbs, cfg.n_dense_lead)) != nullptr;
        for (uint32_t l = cfg.n_dense_lead; l < cfg.n_layers; ++l)
            if ((f.find_tensor(layer_tensor_name(A, Role::BExpProbs, l)) != nullptr) != cfg.expert_probs_bias)
                c.fail("tensor " + quote_name(layer_tensor_name(A, Role::BExpProbs, l)),
                       "every mixture-of-experts layer or none must have the selection bias");
    }
    const std::string_view prefix = layer.front().prefix;
    for (const GgufTensorInfo& t : f.tensors()) {
        const std::optional<uint64_t> l = layer_of(t.name, prefix);
        if (l && *l >= cfg.n_layers)
            c.fail("tensor " + quote_name(t.name),
                   fmt::format("belongs to layer {} but {} is {}", *l,
                               A.stack.t5 == T5Stack::Decoder ? "decoder_block_count" : "block_count", cfg.n_layers));
        if (const char* why = unsupported_tensor(A, prefix, t.name)) c.fail("tensor " + quote_name(t.name), why);
        if (!l || !split_probe) continue;
        // Expert stacks: one form for the whole file, and no expert past expert_count.
        for (const TensorSpec& s : layer) {
            if (!s.per_expert_name) continue;
            if (cfg.experts_split && t.name == tensor_name(s, uint32_t(*l)))
                c.fail("tensor " + quote_name(t.name),
                       fmt::format("stacked experts, but the file stores them one tensor per expert ({}): one form "
                                   "for the whole file",
                                   expert_tensor_name(*split_probe, cfg.n_dense_lead, 0)));
            const std::optional<uint32_t> e = expert_of(s, uint32_t(*l), t.name);
            if (e && !cfg.experts_split)
                c.fail("tensor " + quote_name(t.name),
                       fmt::format("one tensor per expert, but the file stacks its experts ({}): one form for the "
                                   "whole file",
                                   tensor_name(*split_probe, cfg.n_dense_lead)));
            if (e && *e >= cfg.n_expert)
                c.fail("tensor " + quote_name(t.name), fmt::format("is past the {} experts of {}", cfg.n_expert,
                                                                   Checker::key_what(key("expert_count"))));
        }
    }
    return cfg;
}

ModelConfig read_typed(const GgufFile& file, const ArchDesc* view) {
    try {
        return read(file, view);
    } catch (const ModelConfigError&) {
        throw;
    } catch (const GgufError& e) {
        // Missing / mistyped keys and tensors surface from GgufFile's getters; re-type them so
        // callers can tell "not a runnable model" from "not a readable GGUF".
        throw ModelConfigError(e.what());
    }
}

}  // namespace

SchemaDims schema_dims(const ModelConfig& c) {
    return {c.dim,         c.q_dim(),       c.kv_dim(), c.ffn_dim,        c.head_dim,
            c.n_vocab,     c.n_ctx_train,   c.rope_dim, c.n_token_types,  c.n_cls_out,
            c.n_heads,     c.n_rel_buckets, c.n_expert, c.expert_ffn_dim, c.shared_ffn_dim,
            c.q_lora_rank, c.kv_lora_rank,  c.mla_qk,   c.mla_v};
}

namespace {
constexpr std::string_view kPoolingNames[] = {"none", "mean", "cls", "last", "rank"};
}

std::string_view pooling_name(Pooling p) { return kPoolingNames[size_t(p)]; }

std::optional<Pooling> parse_pooling(std::string_view name) {
    for (size_t i = 0; i < std::size(kPoolingNames); ++i)
        if (name == kPoolingNames[i]) return Pooling(i);
    return std::nullopt;
}

RopeFactors ModelConfig::rope_factors_for(uint32_t n_ctx) const {
    if (has_rope_freqs) return RopeFactors::Freqs;
    if (has_rope_long_short) return n_ctx > rope.n_ctx_orig ? RopeFactors::Long : RopeFactors::Short;
    return RopeFactors::None;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& file) { return read_typed(file, nullptr); }

ModelConfig ModelConfig::encoder_from_gguf(const GgufFile& file) {
    const ModelConfig decoder = from_gguf(file);
    if (decoder.arch->stack.encoder_arch.empty())
        throw ModelConfigError(fmt::format("{}: a {} model has no encoder", file.name(), decoder.arch->name));
    return read_typed(file, find_arch(decoder.arch->stack.encoder_arch));
}

}  // namespace vkllm
