#include "model/llama_cpu.h"

#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/get_rows.h"
#include "runtime/ops/kv_store.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/rope.h"

#include <fmt/format.h>

#include <cmath>

namespace vkllm {

LlamaCpu::LlamaCpu(const GgufFile& file, const LlamaConfig& cfg, uint32_t n_ctx, ops::KvType kv_type)
    : file_(file), cfg_(cfg), n_ctx_(n_ctx), kv_type_(kv_type),
      kv_elem_bytes_(kv_type == ops::KvType::F16 ? 2 : 4),
      k_cache_(size_t(cfg.n_layers) * n_ctx * cfg.kv_dim() * kv_elem_bytes_),
      v_cache_(k_cache_.size()) {}

std::vector<float> LlamaCpu::eval(std::span<const int32_t> tokens, const LayerProbe& probe) {
    const LlamaConfig& c = cfg_;
    const uint32_t n = uint32_t(tokens.size()), dim = c.dim, kv = c.kv_dim(), ffn = c.ffn_dim;
    if (n == 0 || n > n_ctx_ - n_past_) throw ContextFullError(fmt::format("LlamaCpu: {} tokens do not fit", n));
    auto weight = [&](const std::string& name) { return file_.tensor_data(file_.tensor(name)).data(); };
    auto type = [&](const std::string& name) { return file_.tensor(name).type; };
    auto norm_weight = [&](const std::string& name) {  // norms may be stored as f16: read as f32
        std::vector<float> w(dim);
        dequantize_row(type(name), weight(name), w.data(), dim);
        return w;
    };

    std::vector<int32_t> pos(n);
    for (uint32_t i = 0; i < n; ++i) pos[i] = int32_t(n_past_ + i);

    std::vector<float> x(size_t(n) * dim);       // (n, dim)        residual stream
    std::vector<float> xn(size_t(n) * dim);      // (n, dim)        normed
    std::vector<float> q(size_t(n) * dim);       // (n, n_heads * head_dim)
    std::vector<float> k(size_t(n) * kv);        // (n, kv_dim)
    std::vector<float> v(size_t(n) * kv);        // (n, kv_dim)
    std::vector<float> att(size_t(n) * dim);     // (n, dim)
    std::vector<float> gate(size_t(n) * ffn);    // (n, ffn)
    std::vector<float> up(size_t(n) * ffn);      // (n, ffn)

    // --- token embeddings
    ref::get_rows(type("token_embd.weight"), weight("token_embd.weight"), c.n_vocab, dim, tokens.data(), n, x.data());

    for (uint32_t l = 0; l < c.n_layers; ++l) {
        auto name = [&](const char* t) { return fmt::format("blk.{}.{}.weight", l, t); };
        const size_t layer_off = size_t(l) * n_ctx_ * kv * kv_elem_bytes_;
        uint8_t* kc = k_cache_.data() + layer_off;  // (n_ctx, kv_dim)
        uint8_t* vc = v_cache_.data() + layer_off;  // (n_ctx, kv_dim)

        // --- attention: x += wo · attention(rope(wq · norm(x)), rope(wk · norm(x)), wv · norm(x))
        ref::rms_norm(x.data(), norm_weight(name("attn_norm")).data(), xn.data(), n, dim, c.rms_eps);
        ref::linear(type(name("attn_q")), weight(name("attn_q")), xn.data(), q.data(), n, dim, dim);
        ref::linear(type(name("attn_k")), weight(name("attn_k")), xn.data(), k.data(), n, kv, dim);
        ref::linear(type(name("attn_v")), weight(name("attn_v")), xn.data(), v.data(), n, kv, dim);
        ref::rope(q.data(), pos.data(), n, c.n_heads, c.head_dim, c.rope_dim, c.rope_base, ops::RopeLayout::Adjacent);
        ref::rope(k.data(), pos.data(), n, c.n_kv_heads, c.head_dim, c.rope_dim, c.rope_base, ops::RopeLayout::Adjacent);
        ref::kv_store(k.data(), kc, pos.data(), n, kv, n_ctx_, kv_type_);
        ref::kv_store(v.data(), vc, pos.data(), n, kv, n_ctx_, kv_type_);
        ops::AttentionParams ap{n, c.n_heads, c.n_kv_heads, c.head_dim, n_ctx_, 1.0f / std::sqrt(float(c.head_dim)), kv_type_};
        ref::attention(ap, q.data(), kc, vc, pos.data(), att.data());
        ref::linear(type(name("attn_output")), weight(name("attn_output")), att.data(), x.data(), n, dim, dim, x.data());

        // --- feed-forward: x += w_down · (silu(w_gate · norm(x)) * (w_up · norm(x)))
        ref::rms_norm(x.data(), norm_weight(name("ffn_norm")).data(), xn.data(), n, dim, c.rms_eps);
        ref::linear(type(name("ffn_gate")), weight(name("ffn_gate")), xn.data(), gate.data(), n, ffn, dim);
        ref::linear(type(name("ffn_up")), weight(name("ffn_up")), xn.data(), up.data(), n, ffn, dim);
        ref::swiglu(gate.data(), up.data(), gate.data(), n * ffn);
        ref::linear(type(name("ffn_down")), weight(name("ffn_down")), gate.data(), x.data(), n, dim, ffn, x.data());

        if (probe)
            probe(l, LayerTensors{{"q_rope", q}, {"k_rope", k}, {"v", v}, {"attn_out", att}, {"ffn_in", xn},
                                  {"ffn_up", up}, {"ffn_act", gate}, {"x_out", x}});
    }

    // --- head: logits of the last token only
    std::vector<float> last(x.end() - dim, x.end());  // (dim)
    ref::rms_norm(last.data(), norm_weight("output_norm.weight").data(), last.data(), 1, dim, c.rms_eps);
    const std::string out_name = c.tied_embeddings ? "token_embd.weight" : "output.weight";
    std::vector<float> logits(c.n_vocab);             // (n_vocab)
    ref::linear(type(out_name), weight(out_name), last.data(), logits.data(), 1, c.n_vocab, dim);
    n_past_ += n;
    return logits;
}

}  // namespace vkllm
