#include "model/forward/model_cpu.h"

#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/get_rows.h"
#include "runtime/ops/kv_store.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/rope.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace vkllm {

ModelCpu::ModelCpu(const GgufFile& file, const ModelConfig& cfg, uint32_t n_ctx, ops::KvType kv_type, uint32_t ubatch)
    : file_(file), cfg_(cfg), n_ctx_(n_ctx), ubatch_(ubatch), kv_type_(kv_type),
      kv_row_bytes_(ops::kv_row_bytes(kv_type, cfg.kv_dim())) {
    if (cfg.kv_dim() % ops::kv_row_multiple(kv_type) != 0)
        throw std::invalid_argument(fmt::format("ModelCpu: a {} cache needs K/V rows of a multiple of {} values, not {}",
                                                ops::kv_type_name(kv_type), ops::kv_row_multiple(kv_type), cfg.kv_dim()));
    for (uint32_t l = 0; l < cfg.n_layers; ++l) {
        kv_rows_.push_back(kv_cache_rows(cfg, l, n_ctx, ubatch));
        k_cache_.emplace_back(size_t(kv_rows_[l]) * kv_row_bytes_);
        v_cache_.emplace_back(k_cache_.back().size());
    }
}

std::vector<float> ModelCpu::eval(std::span<const int32_t> tokens, const LayerProbe& probe) {
    if (tokens.empty() || tokens.size() > n_ctx_ - n_past_)
        throw ContextFullError(fmt::format("ModelCpu: {} tokens do not fit", tokens.size()));
    // In ubatch chunks as on the device: a sliding-window ring holds window + ubatch - 1 rows.
    std::vector<float> logits;
    for (size_t done = 0; done < tokens.size(); done += ubatch_)
        logits = eval_chunk(tokens.subspan(done, std::min<size_t>(ubatch_, tokens.size() - done)), probe);
    return logits;
}

std::vector<float> ModelCpu::eval_chunk(std::span<const int32_t> tokens, const LayerProbe& probe) {
    const ModelConfig& c = cfg_;
    const ArchDesc& A = *c.arch;
    const uint32_t n = uint32_t(tokens.size()), dim = c.dim, qd = c.q_dim(), kv = c.kv_dim(), ffn = c.ffn_dim;
    auto has = [&](const std::string& name) { return file_.find_tensor(name) != nullptr; };
    auto weight = [&](const std::string& name) { return file_.tensor_data(file_.tensor(name)).data(); };
    auto type = [&](const std::string& name) { return file_.tensor(name).type; };
    auto vec = [&](const std::string& name) {  // norms and biases may be stored as f16: read as f32
        const GgufTensorInfo& t = file_.tensor(name);
        std::vector<float> w(t.n_elements);
        dequantize_row(t.type, weight(name), w.data(), w.size());
        return w;
    };
    // y = x · W^T for the rows [first, first + out) of W (a fused tensor holds several matrices).
    auto linear = [&](const std::string& name, const float* x, float* y, uint32_t out, uint32_t in, uint32_t first = 0,
                      const float* residual = nullptr) {
        const uint8_t* w = weight(name) + size_t(first) * row_bytes(type(name), in);
        ref::linear(type(name), w, x, y, n, out, in, residual);
    };
    // y[r, :] += b[first .. first + width)
    auto bias = [&](const std::string& name, float* y, uint32_t width, uint32_t first = 0) {
        if (!has(name)) return;
        const std::vector<float> b = vec(name);
        for (uint32_t r = 0; r < n; ++r)
            for (uint32_t i = 0; i < width; ++i) y[size_t(r) * width + i] += b[first + i];
    };
    auto norm = [&](const std::string& prefix, const float* x, float* y, uint32_t rows) {
        const std::vector<float> w = vec(prefix + ".weight");
        if (A.norm == NormKind::Layer) {
            const std::vector<float> b = has(prefix + ".bias") ? vec(prefix + ".bias") : std::vector<float>();
            ref::layer_norm(x, w.data(), b.empty() ? nullptr : b.data(), y, rows, dim, c.norm_eps);
        } else {
            ref::rms_norm(x, w.data(), y, rows, dim, c.norm_eps);
        }
    };

    std::vector<int32_t> pos(n);
    for (uint32_t i = 0; i < n; ++i) pos[i] = int32_t(n_past_ + i);

    std::vector<float> x(size_t(n) * dim);       // (n, dim)        residual stream
    std::vector<float> xn(size_t(n) * dim);      // (n, dim)        normed
    std::vector<float> tmp(size_t(n) * dim);     // (n, dim)        block output before its post-norm
    std::vector<float> q(size_t(n) * qd);        // (n, n_heads * head_dim)
    std::vector<float> k(size_t(n) * kv);        // (n, kv_dim)
    std::vector<float> v(size_t(n) * kv);        // (n, kv_dim)
    std::vector<float> att(size_t(n) * qd);      // (n, n_heads * head_dim)
    std::vector<float> gate(size_t(n) * ffn);    // (n, ffn)
    std::vector<float> up(size_t(n) * ffn);      // (n, ffn)

    // --- embeddings: token rows (* sqrt(dim) for Gemma) (+ learned position rows for GPT-2)
    ref::get_rows(type("token_embd.weight"), weight("token_embd.weight"), c.n_vocab, dim, tokens.data(), n, x.data());
    if (A.embed_scale)
        for (float& e : x) e = float(double(e) * std::sqrt(double(dim)));
    if (A.positions == PositionKind::Learned) {
        ref::get_rows(type("position_embd.weight"), weight("position_embd.weight"), c.n_ctx_train, dim, pos.data(), n,
                      tmp.data());
        ref::add(x.data(), tmp.data(), x.data(), n * dim);
    }
    std::vector<float> rope_factors;
    switch (c.rope_factors_for(n_ctx_)) {
        case RopeFactors::None: break;
        case RopeFactors::Freqs: rope_factors = vec("rope_freqs.weight"); break;
        case RopeFactors::Long: rope_factors = vec("rope_factors_long.weight"); break;
        case RopeFactors::Short: rope_factors = vec("rope_factors_short.weight"); break;
    }

    for (uint32_t l = 0; l < c.n_layers; ++l) {
        auto name = [&](const char* t) { return fmt::format("blk.{}.{}", l, t); };
        uint8_t* kc = k_cache_[l].data();  // (rows, kv_dim)
        uint8_t* vc = v_cache_[l].data();  // (rows, kv_dim)

        // --- attention: x += post_norm(wo · attention(rope(norm_q(wq · norm(x))), rope(norm_k(wk · norm(x))), wv · norm(x)))
        norm(name("attn_norm"), x.data(), xn.data(), n);
        if (A.fused_qkv) {  // rows of q, then k, then v in one tensor
            linear(name("attn_qkv.weight"), xn.data(), q.data(), qd, dim, 0);
            linear(name("attn_qkv.weight"), xn.data(), k.data(), kv, dim, qd);
            linear(name("attn_qkv.weight"), xn.data(), v.data(), kv, dim, qd + kv);
            bias(name("attn_qkv.bias"), q.data(), qd, 0);
            bias(name("attn_qkv.bias"), k.data(), kv, qd);
            bias(name("attn_qkv.bias"), v.data(), kv, qd + kv);
        } else {
            linear(name("attn_q.weight"), xn.data(), q.data(), qd, dim);
            linear(name("attn_k.weight"), xn.data(), k.data(), kv, dim);
            linear(name("attn_v.weight"), xn.data(), v.data(), kv, dim);
            bias(name("attn_q.bias"), q.data(), qd);
            bias(name("attn_k.bias"), k.data(), kv);
            bias(name("attn_v.bias"), v.data(), kv);
        }
        if (A.qk_norm) {
            ref::rms_norm(q.data(), vec(name("attn_q_norm.weight")).data(), q.data(), n * c.n_heads, c.head_dim, c.norm_eps);
            ref::rms_norm(k.data(), vec(name("attn_k_norm.weight")).data(), k.data(), n * c.n_kv_heads, c.head_dim,
                          c.norm_eps);
        }
        if (A.positions == PositionKind::Rope) {
            const RopeConfig& r = c.rope_for(l);
            ops::RopeParams rp{c.n_heads, c.head_dim, c.rope_dim, r.base, A.rope_layout, r.freq_scale, r.ext_factor,
                               r.attn_factor, r.beta_fast, r.beta_slow, r.n_ctx_orig};
            const float* ff = rope_factors.empty() ? nullptr : rope_factors.data();
            ref::rope(q.data(), pos.data(), n, rp, ff);
            rp.n_heads = c.n_kv_heads;
            ref::rope(k.data(), pos.data(), n, rp, ff);
        }
        ref::kv_store(k.data(), kc, pos.data(), n, kv, kv_rows_[l], kv_type_);
        ref::kv_store(v.data(), vc, pos.data(), n, kv, kv_rows_[l], kv_type_);
        ops::AttentionParams ap{n, c.n_heads, c.n_kv_heads, c.head_dim, kv_rows_[l], c.attn_scale, kv_type_};
        ap.softcap = c.attn_softcap;
        if (c.is_local(l) && c.window < n_ctx_) ap.window = c.window;
        ref::attention(ap, q.data(), kc, vc, pos.data(), att.data());
        if (has(name("post_attention_norm.weight"))) {
            linear(name("attn_output.weight"), att.data(), tmp.data(), dim, qd);
            bias(name("attn_output.bias"), tmp.data(), dim);
            ref::rms_norm(tmp.data(), vec(name("post_attention_norm.weight")).data(), tmp.data(), n, dim, c.norm_eps);
            ref::add(x.data(), tmp.data(), x.data(), n * dim);
        } else {
            linear(name("attn_output.weight"), att.data(), x.data(), dim, qd, 0, x.data());
            bias(name("attn_output.bias"), x.data(), dim);
        }

        // --- feed-forward: x += post_norm(w_down · act(w_gate · norm(x), w_up · norm(x)))
        norm(name("ffn_norm"), x.data(), xn.data(), n);
        if (A.fused_gate_up) {  // rows of gate, then up
            linear(name("ffn_up.weight"), xn.data(), gate.data(), ffn, dim, 0);
            linear(name("ffn_up.weight"), xn.data(), up.data(), ffn, dim, ffn);
        } else {
            if (A.ffn != FfnKind::Gelu) linear(name("ffn_gate.weight"), xn.data(), gate.data(), ffn, dim);
            linear(name("ffn_up.weight"), xn.data(), up.data(), ffn, dim);
        }
        bias(name("ffn_up.bias"), up.data(), ffn);
        switch (A.ffn) {
            case FfnKind::SwiGlu: ref::swiglu(gate.data(), up.data(), gate.data(), n * ffn); break;
            case FfnKind::GeGlu: ref::geglu(gate.data(), up.data(), gate.data(), n * ffn); break;
            case FfnKind::Gelu: ref::gelu(up.data(), gate.data(), n * ffn); break;
        }
        if (has(name("post_ffw_norm.weight"))) {
            linear(name("ffn_down.weight"), gate.data(), tmp.data(), dim, ffn);
            bias(name("ffn_down.bias"), tmp.data(), dim);
            ref::rms_norm(tmp.data(), vec(name("post_ffw_norm.weight")).data(), tmp.data(), n, dim, c.norm_eps);
            ref::add(x.data(), tmp.data(), x.data(), n * dim);
        } else {
            linear(name("ffn_down.weight"), gate.data(), x.data(), dim, ffn, 0, x.data());
            bias(name("ffn_down.bias"), x.data(), dim);
        }

        if (probe)
            probe(l, LayerTensors{{"q_rope", q}, {"k_rope", k}, {"v", v}, {"attn_out", att}, {"ffn_in", xn},
                                  {"ffn_up", up}, {"ffn_act", gate}, {"x_out", x}});
    }

    // --- head: logits of the last token only (soft-capped for Gemma 2)
    std::vector<float> last(x.end() - dim, x.end());  // (dim)
    norm("output_norm", last.data(), last.data(), 1);
    const std::string out_name = c.tied_embeddings ? "token_embd.weight" : "output.weight";
    std::vector<float> logits(c.n_vocab);             // (n_vocab)
    ref::linear(type(out_name), weight(out_name), last.data(), logits.data(), 1, c.n_vocab, dim);
    if (c.final_softcap > 0) ref::softcap(logits.data(), c.n_vocab, c.final_softcap);
    n_past_ += n;
    return logits;
}

}  // namespace vkllm
