#include "model/llama_config.h"

#include <charconv>
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
        throw LlamaConfigError(fmt::format("{}: {}: {}", f_.name(), what, reason));
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
            if (required) fail("tensor " + quote_name(name), fmt::format("required tensor is missing (expected shape {})", shape(want)));
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

// "blk.12.attn_q.weight" -> 12
std::optional<uint64_t> layer_of(std::string_view name) {
    if (!name.starts_with("blk.")) return std::nullopt;
    name.remove_prefix(4);
    uint64_t n = 0;
    auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
    if (ec != std::errc() || p == name.data() || p == name.data() + name.size() || *p != '.') return std::nullopt;
    return n;
}

LlamaConfig read(const GgufFile& f) {
    Checker c(f);
    const std::string_view arch = f.get_string("general.architecture");
    if (arch != "llama")
        c.fail("key 'general.architecture'",
               fmt::format("architecture {} is not supported; supported: llama", quote_name(arch)));

    LlamaConfig cfg;
    cfg.dim = c.positive("llama.embedding_length");
    cfg.n_layers = c.positive("llama.block_count");
    cfg.ffn_dim = c.positive("llama.feed_forward_length");
    cfg.n_ctx_train = c.positive("llama.context_length");
    cfg.n_heads = c.positive("llama.attention.head_count");
    cfg.n_kv_heads = f.has("llama.attention.head_count_kv") ? c.positive("llama.attention.head_count_kv") : cfg.n_heads;
    if (cfg.n_heads % cfg.n_kv_heads != 0)
        c.fail("key 'llama.attention.head_count_kv'",
               fmt::format("{} KV heads do not divide {} query heads", cfg.n_kv_heads, cfg.n_heads));
    if (cfg.dim % cfg.n_heads != 0)
        c.fail("key 'llama.attention.head_count'",
               fmt::format("{} heads do not divide embedding length {}", cfg.n_heads, cfg.dim));
    cfg.head_dim = cfg.dim / cfg.n_heads;
    for (const char* key : {"llama.attention.key_length", "llama.attention.value_length"}) {
        if (auto v = f.find_u32(key); v && *v != cfg.head_dim)
            c.fail(Checker::key_what(key), fmt::format("head size {} differs from embedding_length / head_count = {}; "
                                                       "not supported",
                                                       *v, cfg.head_dim));
    }

    cfg.rms_eps = f.get_f32("llama.attention.layer_norm_rms_epsilon");
    if (!(cfg.rms_eps > 0) || !std::isfinite(cfg.rms_eps))
        c.fail("key 'llama.attention.layer_norm_rms_epsilon'", fmt::format("must be positive, got {}", cfg.rms_eps));
    cfg.rope_base = f.find_f32("llama.rope.freq_base").value_or(10000.0f);
    if (!(cfg.rope_base > 0) || !std::isfinite(cfg.rope_base))
        c.fail("key 'llama.rope.freq_base'", fmt::format("must be positive, got {}", cfg.rope_base));
    cfg.rope_dim = f.find_u32("llama.rope.dimension_count").value_or(cfg.head_dim);
    if (cfg.rope_dim == 0 || cfg.rope_dim % 2 != 0 || cfg.rope_dim > cfg.head_dim)
        c.fail("key 'llama.rope.dimension_count'",
               fmt::format("rope dimension {} must be even, positive and at most the head dim {}", cfg.rope_dim,
                           cfg.head_dim));

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
    if (auto n = f.find_u32("llama.vocab_size"); n && *n != cfg.n_vocab)
        c.fail("key 'llama.vocab_size'",
               fmt::format("vocab_size {} but token_embd.weight has {} rows", *n, cfg.n_vocab));

    const uint64_t d = cfg.dim, kv = uint64_t(cfg.n_kv_heads) * cfg.head_dim, ff = cfg.ffn_dim;
    c.expect_shape("output_norm.weight", {d});
    cfg.tied_embeddings = f.find_tensor("output.weight") == nullptr;
    c.expect_shape("output.weight", {d, cfg.n_vocab}, false);
    for (uint32_t l = 0; l < cfg.n_layers; ++l) {
        const std::string p = fmt::format("blk.{}.", l);
        c.expect_shape(p + "attn_norm.weight", {d});
        c.expect_shape(p + "attn_q.weight", {d, d});
        c.expect_shape(p + "attn_k.weight", {d, kv});
        c.expect_shape(p + "attn_v.weight", {d, kv});
        c.expect_shape(p + "attn_output.weight", {d, d});
        c.expect_shape(p + "ffn_norm.weight", {d});
        c.expect_shape(p + "ffn_gate.weight", {d, ff});
        c.expect_shape(p + "ffn_up.weight", {d, ff});
        c.expect_shape(p + "ffn_down.weight", {ff, d});
    }
    for (const GgufTensorInfo& t : f.tensors()) {
        if (auto l = layer_of(t.name); l && *l >= cfg.n_layers)
            c.fail("tensor " + quote_name(t.name),
                   fmt::format("belongs to layer {} but block_count is {}", *l, cfg.n_layers));
    }
    return cfg;
}

}  // namespace

LlamaConfig LlamaConfig::from_gguf(const GgufFile& file) {
    try {
        return read(file);
    } catch (const LlamaConfigError&) {
        throw;
    } catch (const GgufError& e) {
        // Missing / mistyped keys and tensors surface from GgufFile's getters; re-type them so
        // callers can tell "not a runnable LLaMA" from "not a readable GGUF".
        throw LlamaConfigError(e.what());
    }
}

}  // namespace vkllm
