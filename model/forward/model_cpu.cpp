#include "model/forward/model_cpu.h"

#include "model/forward/position_bias.h"

#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/get_rows.h"
#include "runtime/ops/kv_store.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/moe.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/rope.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace vkllm {

ModelCpu::ModelCpu(const GgufFile& file, const ModelConfig& cfg, uint32_t n_ctx, ops::KvType kv_type, uint32_t ubatch)
    : file_(file),
      cfg_(cfg),
      n_ctx_(n_ctx),
      ubatch_(ubatch),
      kv_type_(kv_type),
      kv_row_bytes_(ops::kv_row_bytes(kv_type, cfg.kv_dim())),
      layout_(plan_weights(file, cfg, n_ctx)) {
    if (cfg.kv_dim() % ops::kv_row_multiple(kv_type) != 0)
        throw std::invalid_argument(
            fmt::format("ModelCpu: a {} cache needs K/V rows of a multiple of {} values, not {}",
                        ops::kv_type_name(kv_type), ops::kv_row_multiple(kv_type), cfg.kv_dim()));
    for (uint32_t l = 0; l < cfg.n_layers; ++l) {
        kv_rows_.push_back(kv_cache_rows(cfg, l, n_ctx, ubatch));
        if (cfg.arch->attn.mla) {  // the latent rows, kept as floats after the cache type's rounding
            mla_cache_.emplace_back(size_t(kv_rows_[l]) * cfg.kv_dim());
            k_cache_.emplace_back();
            v_cache_.emplace_back();
            continue;
        }
        k_cache_.emplace_back(size_t(kv_rows_[l]) * kv_row_bytes_);
        v_cache_.emplace_back(k_cache_.back().size());
    }
}

void ModelCpu::set_encoder_output(std::span<const float> states, uint32_t n_rows) {
    if (!cfg_.arch->attn.cross_attention) throw std::logic_error("ModelCpu::set_encoder_output: no cross-attention");
    if (n_rows == 0 || n_rows > n_ctx_ || states.size() != size_t(n_rows) * cfg_.dim)
        throw std::invalid_argument(fmt::format("ModelCpu::set_encoder_output: {} rows", n_rows));
    const uint32_t kv = cfg_.kv_dim();
    cross_k_.assign(cfg_.n_layers, std::vector<uint8_t>(size_t(n_rows) * kv_row_bytes_));
    cross_v_.assign(cfg_.n_layers, std::vector<uint8_t>(size_t(n_rows) * kv_row_bytes_));
    std::vector<float> y(size_t(n_rows) * kv);
    std::vector<int32_t> rows(n_rows);
    for (uint32_t i = 0; i < n_rows; ++i) rows[i] = int32_t(i);
    for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
        const LayerPlaces& L = layout_.layers[l];
        for (auto [role, out] : {std::pair{Role::WkCross, &cross_k_[l]}, std::pair{Role::WvCross, &cross_v_[l]}}) {
            const TensorPlace& w = L[role];
            ref::linear(w.source->type, file_.tensor_data(*w.source).data() + row_bytes(w.source->type, w.first),
                        states.data(), y.data(), n_rows, w.rows, w.row_elems);
            ref::kv_store(y.data(), out->data(), rows.data(), n_rows, kv, n_rows,
                          kv_type_);  // rounded as the cache stores
        }
    }
    n_enc_ = n_rows;
    n_past_ = 0;
}

std::vector<float> ModelCpu::eval(std::span<const int32_t> tokens, const LayerProbe& probe) {
    if (tokens.empty() || tokens.size() > n_ctx_ - n_past_)
        throw ContextFullError(fmt::format("ModelCpu: {} tokens do not fit", tokens.size()));
    if (cfg_.arch->attn.cross_attention && n_enc_ == 0)
        throw std::logic_error("ModelCpu::eval: an encoder-decoder model needs the encoder's output first");
    check_bidirectional(cfg_, n_past_, tokens.size(), ubatch_);
    // In ubatch chunks as on the device: a sliding-window ring holds window + ubatch - 1 rows.
    std::vector<float> logits;
    for (size_t done = 0; done < tokens.size(); done += ubatch_)
        logits = eval_chunk(tokens.subspan(done, std::min<size_t>(ubatch_, tokens.size() - done)), probe);
    return logits;
}

std::vector<float> ModelCpu::eval_embeddings(std::span<const float> rows, bool bidirectional, ImageGrid grid,
                                             const LayerProbe& probe) {
    if (rows.empty() || rows.size() % cfg_.dim != 0)
        throw std::invalid_argument(fmt::format("ModelCpu: {} floats are not rows of {}", rows.size(), cfg_.dim));
    const size_t n = rows.size() / cfg_.dim;
    if (n > n_ctx_ - n_past_) throw ContextFullError(fmt::format("ModelCpu: {} rows do not fit", n));
    if (bidirectional && n > ubatch_)
        throw ContextFullError(fmt::format("ModelCpu: {} bidirectional rows exceed a ubatch of {}", n, ubatch_));
    check_image_grid(grid, n);
    rope_pos_.truncate(n_past_);  // images a failed call registered past the end are not its own
    if (cfg_.places_images_by_grid() && !grid.empty()) rope_pos_.add_image(n_past_, grid);
    std::vector<float> logits;
    for (size_t done = 0; done < n; done += ubatch_) {
        const size_t m = std::min<size_t>(ubatch_, n - done);
        logits = eval_chunk({}, probe, {}, rows.subspan(done * cfg_.dim, m * cfg_.dim), bidirectional);
    }
    return logits;
}

void ModelCpu::truncate(uint32_t n) {
    if (n > n_past_) throw std::invalid_argument(fmt::format("ModelCpu::truncate: {} tokens kept of {}", n, n_past_));
    if (!cfg_.local.empty()) throw std::logic_error("ModelCpu::truncate: a model with sliding-window layers");
    n_past_ = n;
    rope_pos_.truncate(n);
}

std::vector<float> ModelCpu::eval_packed(std::span<const std::span<const int32_t>> inputs, const LayerProbe& probe) {
    if (cfg_.causal) throw std::logic_error("ModelCpu::eval_packed: packing needs a bidirectional model");
    std::vector<int32_t> all;
    std::vector<uint32_t> lengths;
    for (const auto& in : inputs) {
        if (in.empty()) throw std::invalid_argument("ModelCpu::eval_packed: an input has no tokens");
        all.insert(all.end(), in.begin(), in.end());
        lengths.push_back(uint32_t(in.size()));
    }
    if (inputs.empty() || all.size() > ubatch_ || all.size() > n_ctx_)
        throw std::invalid_argument("ModelCpu::eval_packed: the inputs must fit one ubatch");
    reset();
    return eval_chunk(all, probe, lengths);
}

// x += sum_j w_j · down_e(act(gate_e · xn (+ b), up_e · xn (+ b))) (+ b) (+ sigmoid(g · xn) · shared(xn)), the experts
// e and weights w_j of each token from the router (llama.cpp's build_moe_ffn); xn = norm(x) on return.
void ModelCpu::moe_ffn(const LayerPlaces& L, float* x, float* xn, uint32_t n, std::vector<float>* logits_out) {
    using R = Role;
    const ModelConfig& c = cfg_;
    const uint32_t dim = c.dim, E = c.n_expert, K = c.n_expert_used, fe = c.expert_ffn_dim;
    auto bytes = [&](const TensorPlace& p) { return file_.tensor_data(*p.source).data(); };
    auto act = [&](const float* gate, const float* up, float* out, uint32_t count) {
        if (c.arch->ffn.kind == FfnKind::GeGlu)
            ref::geglu(gate, up, out, count);
        else if (c.arch->ffn.kind == FfnKind::SwiGluOai)
            ref::swiglu_oai(gate, up, out, count);
        else
            ref::swiglu(gate, up, out, count);
    };
    // gpt-oss: the router and every expert projection have biases, one row per expert
    const bool biased = c.arch->experts.biases;
    const std::vector<float> b_router = biased ? read_place_f32(file_, L[R::BRouter]) : std::vector<float>();
    const std::vector<float> b_gate = biased ? read_place_f32(file_, L[R::BGateExps]) : std::vector<float>();
    const std::vector<float> b_up = biased ? read_place_f32(file_, L[R::BUpExps]) : std::vector<float>();
    const std::vector<float> b_down = biased ? read_place_f32(file_, L[R::BDownExps]) : std::vector<float>();
    auto bias_row = [&](const std::vector<float>& b, uint32_t e, uint32_t width) {
        return b.empty() ? nullptr : b.data() + size_t(e) * width;
    };
    ref::rms_norm(x, read_place_f32(file_, L[R::FfnNorm]).data(), xn, n, dim, c.norm_eps);

    std::vector<float> logits(size_t(n) * E);  // (n, n_expert)
    const TensorPlace& router = L[R::WRouter];
    ref::linear(router.source->type, bytes(router), xn, logits.data(), n, E, dim, nullptr, bias_row(b_router, 0, E));
    std::vector<uint32_t> ids(size_t(n) * K);  // (n, K) chosen experts, best first
    std::vector<float> w(size_t(n) * K);  // (n, K) their weights
    const std::vector<float> probs_bias =
        c.expert_probs_bias ? read_place_f32(file_, L[R::BExpProbs]) : std::vector<float>();
    ref::moe_route(logits.data(), n, moe_route_params(c), ids.data(), w.data(),
                   probs_bias.empty() ? nullptr : probs_bias.data());

    const TensorPlace &G = L[R::WGateExps], &U = L[R::WUpExps], &D = L[R::WDownExps];
    auto expert = [&](const TensorPlace& stack, uint32_t e) { return expert_rows(file_, layout_, stack, E, e); };
    std::vector<float> gate(fe), up(fe);  // (expert_ffn) one expert's
    std::vector<float> out(size_t(n) * K * dim);  // (n * K, dim) every slot's output
    for (uint32_t t = 0; t < n; ++t)
        for (uint32_t j = 0; j < K; ++j) {
            const uint32_t e = ids[size_t(t) * K + j];
            ref::linear(G.type, expert(G, e), xn + size_t(t) * dim, gate.data(), 1, fe, dim, nullptr,
                        bias_row(b_gate, e, fe));
            ref::linear(U.type, expert(U, e), xn + size_t(t) * dim, up.data(), 1, fe, dim, nullptr,
                        bias_row(b_up, e, fe));
            act(gate.data(), up.data(), gate.data(), fe);
            ref::linear(D.type, expert(D, e), gate.data(), out.data() + (size_t(t) * K + j) * dim, 1, dim, fe, nullptr,
                        bias_row(b_down, e, dim));
        }

    if (c.arch->experts.shared == SharedExpert::None) {
        ref::moe_combine(out.data(), w.data(), x, n, K, dim);
    } else {
        const uint32_t fs = c.shared_ffn_dim;
        std::vector<float> sg(size_t(n) * fs), su(size_t(n) * fs);  // (n, shared_ffn)
        std::vector<float> sh(size_t(n) * dim), glogit(n);  // (n, dim), (n)
        auto lin = [&](Role r, const float* in, float* y) {
            const TensorPlace& p = L[r];
            ref::linear(p.source->type, bytes(p), in, y, n, p.rows, p.row_elems);
        };
        const bool gated_shared =
            c.arch->experts.shared == SharedExpert::Gated;  // Qwen2-MoE scales it by sigmoid(g · xn); DeepSeek does not
        if (gated_shared) {
            const std::vector<float> g = read_place_f32(file_, L[R::WShexpGate]);  // (dim) a vector in the file
            ref::linear(TensorType::F32, g.data(), xn, glogit.data(), n, 1, dim);
        }
        lin(R::WGateShexp, xn, sg.data());
        lin(R::WUpShexp, xn, su.data());
        act(sg.data(), su.data(), sg.data(), n * fs);
        lin(R::WDownShexp, sg.data(), sh.data());
        ref::moe_combine(out.data(), w.data(), x, n, K, dim, sh.data(), gated_shared ? glogit.data() : nullptr);
    }
    if (logits_out) *logits_out = std::move(logits);
}

namespace {

// A row as the cache holds it: stored as kv_store stores it, read back as attention reads it.
std::vector<float> as_cached(const float* row, uint32_t elems, ops::KvType t) {
    std::vector<uint8_t> bytes(ops::kv_row_bytes(t, elems));
    const int32_t at = 0;
    ref::kv_store(row, bytes.data(), &at, 1, elems, 1, t);
    std::vector<float> out(elems);
    switch (t) {
        case ops::KvType::F32: std::memcpy(out.data(), bytes.data(), elems * 4ull); break;
        case ops::KvType::F16:
            for (uint32_t i = 0; i < elems; ++i) {
                uint16_t h;
                std::memcpy(&h, bytes.data() + 2ull * i, 2);
                out[i] = f16_to_f32(h);
            }
            break;
        case ops::KvType::Q8_0: {
            std::vector<uint32_t> words(bytes.size() / 4);
            std::memcpy(words.data(), bytes.data(), bytes.size());
            ref::kv_dequantize_q8_0(words.data(), out.data(), elems);
            break;
        }
    }
    return out;
}

}  // namespace

// DeepSeek's multi-head latent attention from its definition, in the uncompressed form it was
// trained in (the device runs the absorbed one: ModelGpu::record_mla):
//   q (n, H, qk)          = wq_b · rms_norm(wq_a · xn)  (or wq · xn), each head [nope | rope]
//   [c | k_pe] (n, r + p) = wkv_a · xn;  cached row [rope(k_pe) | rms_norm(c)], rounded as the cache holds it
//   k_h (qk)              = [k_b_h^T · c | rope(k_pe)] (the rotary key is shared by the heads)
//   v_h (v_mla)           = v_b_h · c
//   o_h                   = sum_j softmax_j(scale · q_h · k_h,j) v_h,j over the positions <= the query's
//   x                    += wo · [o_0 | ... | o_H-1]
void ModelCpu::mla_attention(const LayerPlaces& L, uint32_t layer, const float* xn, float* x, uint32_t n,
                             const int32_t* pos, LayerTensors* probe) {
    using R = Role;
    const ModelConfig& c = cfg_;
    const uint32_t H = c.n_heads, qk = c.mla_qk, rope = c.rope_dim, nope = qk - rope, r = c.kv_lora_rank;
    const uint32_t vm = c.mla_v, row = c.kv_dim();  // row = rope + r
    auto lin = [&](Role role, const float* in, float* y, uint32_t rows) {
        const TensorPlace& p = L[role];
        ref::linear(p.source->type, file_.tensor_data(*p.source).data() + row_bytes(p.source->type, p.first), in, y,
                    rows, p.rows, p.row_elems);
    };
    std::vector<float> q(size_t(n) * H * qk);  // (n, H, qk)
    if (c.q_lora_rank) {
        std::vector<float> qa(size_t(n) * c.q_lora_rank);  // (n, q_lora)
        lin(R::WqA, xn, qa.data(), n);
        ref::rms_norm(qa.data(), read_place_f32(file_, L[R::QANorm]).data(), qa.data(), n, c.q_lora_rank, c.norm_eps);
        lin(R::WqB, qa.data(), q.data(), n);
    } else {
        lin(R::Wq, xn, q.data(), n);
    }
    std::vector<float> kva(size_t(n) * (r + rope));  // (n, r + rope): latent, then the rotary key
    lin(R::WkvA, xn, kva.data(), n);

    const ops::RopeParams rp = layer_rope_params(c, layer, H, rope, rope);
    std::vector<float> q_pe(size_t(n) * H * rope), k_row(size_t(n) * row);  // (n, H, rope), (n, rope + r)
    for (uint32_t t = 0; t < n; ++t) {
        for (uint32_t h = 0; h < H; ++h)
            std::copy_n(&q[(size_t(t) * H + h) * qk + nope], rope, &q_pe[(size_t(t) * H + h) * rope]);
        std::copy_n(&kva[size_t(t) * (r + rope) + r], rope, &k_row[size_t(t) * row]);
        std::copy_n(&kva[size_t(t) * (r + rope)], r, &k_row[size_t(t) * row + rope]);
    }
    ref::rope(q_pe.data(), pos, n, rp, nullptr);
    ops::RopeParams kp = rp;
    kp.n_heads = 1, kp.head_dim = row;
    const std::vector<float> kv_norm = read_place_f32(file_, L[R::KvANorm]);
    for (uint32_t t = 0; t < n; ++t)
        ref::rms_norm(&k_row[size_t(t) * row + rope], kv_norm.data(), &k_row[size_t(t) * row + rope], 1, r, c.norm_eps);
    ref::rope(k_row.data(), pos, n, kp, nullptr);
    std::vector<float>& cache = mla_cache_[layer];  // (rows, rope + r)
    for (uint32_t t = 0; t < n; ++t) {
        const std::vector<float> stored = as_cached(&k_row[size_t(t) * row], row, kv_type_);
        std::copy(stored.begin(), stored.end(), cache.begin() + size_t(uint32_t(pos[t]) % kv_rows_[layer]) * row);
    }

    // The uncompressed keys and values of every cached position the chunk sees.
    int32_t last = 0;
    for (uint32_t t = 0; t < n; ++t) last = std::max(last, pos[t]);
    const uint32_t seen = uint32_t(last) + 1;
    std::vector<double> k_nope(size_t(seen) * H * nope), v(size_t(seen) * H * vm);
    if (c.mla_joined_kv_b) {
        // An older file's attn_kv_b: head h's rows are its nope k rows, then its v_mla v rows.
        const TensorPlace& KVB = L[R::WkvB];
        const uint64_t head = uint64_t(nope + vm) * row_bytes(KVB.type, r);
        const uint8_t* kvb = file_.tensor_data(*KVB.source).data();
        std::vector<float> kvj(nope + vm);  // (nope + v_mla)
        for (uint32_t h = 0; h < H; ++h)
            for (uint32_t j = 0; j < seen; ++j) {
                ref::linear(KVB.type, kvb + h * head, &cache[size_t(j) * row + rope], kvj.data(), 1, nope + vm, r);
                for (uint32_t i = 0; i < nope; ++i) k_nope[(size_t(j) * H + h) * nope + i] = kvj[i];
                for (uint32_t i = 0; i < vm; ++i) v[(size_t(j) * H + h) * vm + i] = kvj[nope + i];
            }
    } else {
        const TensorPlace &KB = L[R::WkB], &VB = L[R::WvB];
        const uint8_t* kb = file_.tensor_data(*KB.source).data();
        const uint8_t* vb = file_.tensor_data(*VB.source).data();
        const uint64_t kb_head = uint64_t(r) * row_bytes(KB.type, nope);  // k_b_h: r rows of nope
        const uint64_t vb_head = uint64_t(vm) * row_bytes(VB.type, r);  // v_b_h: v_mla rows of r
        std::vector<float> kb_h(size_t(r) * nope);  // (r, nope)
        std::vector<float> vj(vm);
        for (uint32_t h = 0; h < H; ++h) {
            dequantize_row(KB.type, kb + h * kb_head, kb_h.data(), kb_h.size());
            for (uint32_t j = 0; j < seen; ++j) {
                const float* cj = &cache[size_t(j) * row + rope];
                for (uint32_t i = 0; i < nope; ++i) {
                    double acc = 0;
                    for (uint32_t a = 0; a < r; ++a) acc += double(kb_h[size_t(a) * nope + i]) * cj[a];
                    k_nope[(size_t(j) * H + h) * nope + i] = acc;
                }
                ref::linear(VB.type, vb + h * vb_head, cj, vj.data(), 1, vm, r);
                for (uint32_t i = 0; i < vm; ++i) v[(size_t(j) * H + h) * vm + i] = vj[i];
            }
        }
    }
    std::vector<float> o(size_t(n) * H * vm);  // (n, H * v_mla)
    std::vector<double> sc(seen);
    for (uint32_t t = 0; t < n; ++t)
        for (uint32_t h = 0; h < H; ++h) {
            const float* qh = &q[(size_t(t) * H + h) * qk];
            const float* qr = &q_pe[(size_t(t) * H + h) * rope];
            const uint32_t lim = uint32_t(pos[t]) + 1;
            double mx = -INFINITY;
            for (uint32_t j = 0; j < lim; ++j) {
                double s = 0;
                for (uint32_t i = 0; i < nope; ++i) s += double(qh[i]) * k_nope[(size_t(j) * H + h) * nope + i];
                for (uint32_t i = 0; i < rope; ++i) s += double(qr[i]) * cache[size_t(j) * row + i];
                sc[j] = s * c.attn_scale;
                mx = std::max(mx, sc[j]);
            }
            double sum = 0;
            for (uint32_t j = 0; j < lim; ++j) sum += sc[j] = std::exp(sc[j] - mx);
            for (uint32_t i = 0; i < vm; ++i) {
                double acc = 0;
                for (uint32_t j = 0; j < lim; ++j) acc += sc[j] * v[(size_t(j) * H + h) * vm + i];
                o[(size_t(t) * H + h) * vm + i] = float(acc / sum);
            }
        }
    const TensorPlace& wo = L[R::Wo];
    ref::linear(wo.source->type, file_.tensor_data(*wo.source).data(), o.data(), x, n, wo.rows, wo.row_elems, x);
    if (probe) {
        (*probe)["mla_q"] = q;
        (*probe)["kv_row"] = k_row;
        (*probe)["attn_out"] = o;
    }
}

std::vector<float> ModelCpu::eval_chunk(std::span<const int32_t> tokens, const LayerProbe& probe,
                                        std::span<const uint32_t> lengths, std::span<const float> rows,
                                        bool bidirectional) {
    const ModelConfig& c = cfg_;
    const ArchDesc& A = *c.arch;
    const uint32_t dim = c.dim, qd = c.q_dim(), kv = c.kv_dim(), ffn = c.ffn_dim;
    const uint32_t n = uint32_t(rows.empty() ? tokens.size() : rows.size() / dim);
    // A role's bytes in the file: a fused tensor (attn_qkv) holds several roles' rows.
    auto data = [&](const TensorPlace& p) {
        return file_.tensor_data(*p.source).data() + row_bytes(p.source->type, p.first);
    };
    auto vec = [&](const TensorPlace& p) { return read_place_f32(file_, p); };  // norms and biases may be f16
    // y = x · W^T (+ residual)
    auto linear = [&](const TensorPlace& w, const float* x, float* y, const float* residual = nullptr) {
        ref::linear(w.source->type, data(w), x, y, n, w.rows, w.row_elems, residual);
    };
    // y[r, :] += b, for the models that have the bias
    auto bias = [&](const TensorPlace& b, float* y) {
        if (!b.present()) return;
        const std::vector<float> v = vec(b);
        for (uint32_t r = 0; r < n; ++r)
            for (uint32_t i = 0; i < b.row_elems; ++i) y[size_t(r) * b.row_elems + i] += v[i];
    };
    auto norm = [&](const TensorPlace& w, const TensorPlace& b, const float* x, float* y, uint32_t rows) {
        const std::vector<float> wv = vec(w);
        if (A.norm.kind == NormKind::Layer) {
            const std::vector<float> bv = b.present() ? vec(b) : std::vector<float>();
            ref::layer_norm(x, wv.data(), bv.empty() ? nullptr : bv.data(), y, rows, dim, c.norm_eps);
        } else {
            ref::rms_norm(x, wv.data(), y, rows, dim, c.norm_eps);
        }
    };
    const bool post_norms = A.norm.placement == NormPlacement::PreAndPost;
    const bool norm_after = A.norm.placement == NormPlacement::Post;  // BERT
    const WeightLayout& W = layout_;

    // pos: each token's cache row; in_pos: its position in its input (RoPE, learned positions), w
    // components per token (M-RoPE's 4: rope_positions.h); segs: a bidirectional model's key range per
    // token (its input's rows).
    const uint32_t w = c.pos_width();
    std::vector<int32_t> pos(n), in_pos(size_t(n) * w), segs(2 * size_t(n));
    for (uint32_t i = 0; i < n; ++i) {
        pos[i] = int32_t(n_past_ + i);
        put_position(in_pos.data(), w, i, rope_pos_.at(n_past_ + i));
    }
    for (uint32_t i = 0; i < n; ++i) segs[2 * i] = 0, segs[2 * i + 1] = int32_t(n);
    for (uint32_t s = 0, at = 0; s < lengths.size(); at += lengths[s++])
        for (uint32_t i = 0; i < lengths[s]; ++i) {
            put_position(in_pos.data(), w, at + i, RopePositions().at(i));
            segs[2 * (at + i)] = int32_t(at);
            segs[2 * (at + i) + 1] = int32_t(at + lengths[s]);
        }

    std::vector<float> x(size_t(n) * dim);  // (n, dim)        residual stream
    std::vector<float> xn(size_t(n) * dim);  // (n, dim)        normed
    std::vector<float> tmp(size_t(n) * dim);  // (n, dim)        block output before its post-norm
    std::vector<float> q(size_t(n) * qd);  // (n, n_heads * head_dim)
    std::vector<float> k(size_t(n) * kv);  // (n, kv_dim)
    std::vector<float> v(size_t(n) * kv);  // (n, kv_dim)
    std::vector<float> att(size_t(n) * qd);  // (n, n_heads * head_dim)
    std::vector<float> gate(size_t(n) * ffn);  // (n, ffn)
    std::vector<float> up(size_t(n) * ffn);  // (n, ffn)
    std::vector<float> moe_logits;  // (n, n_expert) a mixture of experts' router logits, for the probe

    // --- embeddings: token rows (* sqrt(dim) for Gemma), or the rows given (an image's, unscaled)
    //     (+ learned position rows for GPT-2)
    if (!rows.empty()) {
        std::copy(rows.begin(), rows.end(), x.begin());
    } else {
        ref::get_rows(W.token_embd.type, data(W.token_embd), c.n_vocab, dim, tokens.data(), n, x.data());
        if (A.norm.embed_scale)
            for (float& e : x) e = float(double(e) * std::sqrt(double(dim)));
    }
    if (A.attn.positions == PositionKind::Learned) {
        ref::get_rows(W.position_embd.type, data(W.position_embd), c.n_ctx_train, dim, in_pos.data(), n, tmp.data());
        ref::add(x.data(), tmp.data(), x.data(), n * dim);
    }
    // encoders: + token_types[0] (every token is of type 0), then LayerNorm
    if (W.token_types.present()) ref::add_rows(x.data(), vec(W.token_types).data(), n, dim);
    if (W.embd_norm.present()) norm(W.embd_norm, W.embd_norm_b, x.data(), x.data(), n);
    const std::vector<float> rope_factors = W.rope_factors.present() ? vec(W.rope_factors) : std::vector<float>();

    for (uint32_t l = 0; l < c.n_layers; ++l) {
        using R = Role;
        const LayerPlaces& L = W.layers[l];
        uint8_t* kc = k_cache_[l].data();  // (rows, kv_dim)
        uint8_t* vc = v_cache_[l].data();  // (rows, kv_dim)

        LayerTensors mla_probe;
        if (A.attn.mla) {  // --- latent attention: x += wo · mla(norm(x)) (mla_attention)
            norm(L[R::AttnNorm], L[R::AttnNormB], x.data(), xn.data(), n);
            mla_attention(L, l, xn.data(), x.data(), n, pos.data(), probe ? &mla_probe : nullptr);
        } else {
            // --- attention: x += post_norm(wo · attention(rope(norm_q(wq · norm(x))), rope(norm_k(wk · norm(x))), wv · norm(x)))
            //     (BERT: x = norm(x + wo · attention(wq · x, wk · x, wv · x)))
            if (norm_after)
                std::copy(x.begin(), x.end(), xn.begin());
            else
                norm(L[R::AttnNorm], L[R::AttnNormB], x.data(), xn.data(), n);
            linear(L[R::Wq], xn.data(), q.data());
            linear(L[R::Wk], xn.data(), k.data());
            linear(L[R::Wv], xn.data(), v.data());
            bias(L[R::Bq], q.data());
            bias(L[R::Bk], k.data());
            bias(L[R::Bv], v.data());
            if (c.clamp_kqv > 0) {  // MPT
                ref::clamp(q.data(), n * qd, c.clamp_kqv);
                ref::clamp(k.data(), n * kv, c.clamp_kqv);
                ref::clamp(v.data(), n * kv, c.clamp_kqv);
            }
            if (A.attn.qk_norm ==
                QkNorm::WholeLayerNorm) {  // jina-bert-v2 qk-post-norm: LayerNorm of all of q, all of k
                auto opt = [&](const TensorPlace& b) { return b.present() ? vec(b) : std::vector<float>(); };
                const std::vector<float> qb = opt(L[R::QNormB]), kb = opt(L[R::KNormB]);
                ref::layer_norm(q.data(), vec(L[R::QNorm]).data(), qb.empty() ? nullptr : qb.data(), q.data(), n, qd,
                                c.norm_eps);
                ref::layer_norm(k.data(), vec(L[R::KNorm]).data(), kb.empty() ? nullptr : kb.data(), k.data(), n, kv,
                                c.norm_eps);
            } else if (A.attn.qk_norm == QkNorm::Whole) {  // OLMoE: over all of q, all of k
                ref::rms_norm(q.data(), vec(L[R::QNorm]).data(), q.data(), n, qd, c.norm_eps);
                ref::rms_norm(k.data(), vec(L[R::KNorm]).data(), k.data(), n, kv, c.norm_eps);
            } else if (A.attn.qk_norm == QkNorm::PerHead) {
                ref::rms_norm(q.data(), vec(L[R::QNorm]).data(), q.data(), n * c.n_heads, c.head_dim, c.norm_eps);
                ref::rms_norm(k.data(), vec(L[R::KNorm]).data(), k.data(), n * c.n_kv_heads, c.head_dim, c.norm_eps);
            }
            if (A.attn.positions == PositionKind::Rope) {
                ops::RopeParams rp = layer_rope_params(c, l, c.n_heads, c.head_dim, c.rope_dim);
                const float* ff = rope_factors.empty() ? nullptr : rope_factors.data();
                ref::rope(q.data(), in_pos.data(), n, rp, ff);
                rp.n_heads = c.n_kv_heads;
                ref::rope(k.data(), in_pos.data(), n, rp, ff);
            }
            ref::kv_store(k.data(), kc, pos.data(), n, kv, kv_rows_[l], kv_type_);
            ref::kv_store(v.data(), vc, pos.data(), n, kv, kv_rows_[l], kv_type_);
            const ops::AttentionParams ap =
                layer_attention_params(c, l, n, {n_ctx_, ubatch_, kv_type_}, bidirectional && n > 1);
            const std::vector<float> pos_bias =
                ap.pos_bias_range ? t5_position_bias(file_, c, l) : std::vector<float>();
            const std::vector<float> sinks =
                A.attn.sinks ? vec(L[R::Sinks]) : std::vector<float>();  // (n_heads) gpt-oss
            ref::attention(ap, q.data(), kc, vc, pos.data(), att.data(), pos_bias.empty() ? nullptr : pos_bias.data(),
                           segs.data(), sinks.empty() ? nullptr : sinks.data());
            if (post_norms) {
                linear(L[R::Wo], att.data(), tmp.data());
                bias(L[R::Bo], tmp.data());
                ref::rms_norm(tmp.data(), vec(L[R::PostAttnNorm]).data(), tmp.data(), n, dim, c.norm_eps);
                ref::add(x.data(), tmp.data(), x.data(), n * dim);
            } else {
                linear(L[R::Wo], att.data(), x.data(), x.data());
                bias(L[R::Bo], x.data());
            }
            if (norm_after) norm(L[R::AttnNorm], L[R::AttnNormB], x.data(), x.data(), n);
            if (A.norm.attn_norm_2) {  // x = norm_2(x + the layer's input), which xn still holds
                ref::add(x.data(), xn.data(), x.data(), n * dim);
                norm(L[R::AttnNorm2], L[R::AttnNorm2B], x.data(), x.data(), n);
            }
        }

        // --- cross-attention (T5's decoder): x += wo_x · attention(wq_x · norm(x), K_x, V_x), every
        //     query over all n_enc encoder rows
        if (A.attn.cross_attention) {
            std::vector<float> qx(size_t(n) * qd), ax(size_t(n) * qd);  // (n, q_dim) each
            norm(L[R::CrossNorm], {}, x.data(), xn.data(), n);
            linear(L[R::WqCross], xn.data(), qx.data());
            const ops::AttentionParams xp = cross_attention_params(c, n, n_enc_, kv_type_);
            const std::vector<int32_t> last(n, int32_t(n_enc_ - 1));
            ref::attention(xp, qx.data(), cross_k_[l].data(), cross_v_[l].data(), last.data(), ax.data());
            linear(L[R::WoCross], ax.data(), x.data(), x.data());
        }

        // The attention intermediates the probe compares (latent attention names its own).
        auto attn_tensors = [&] {
            if (A.attn.mla) return mla_probe;
            return LayerTensors{{"q_rope", q}, {"k_rope", k}, {"v", v}, {"attn_out", att}};
        };
        if (c.is_moe_layer(l)) {
            moe_ffn(L, x.data(), xn.data(), n, probe ? &moe_logits : nullptr);
            if (probe) {
                LayerTensors t = attn_tensors();
                t.insert({{"ffn_in", xn}, {"moe_logits", moe_logits}, {"x_out", x}});
                probe(l, t);
            }
            continue;
        }

        // --- feed-forward: x += post_norm(w_down · act(w_gate · norm(x), w_up · norm(x)))
        //     (BERT: x = norm(x + w_down · gelu(w_up · x)))
        if (norm_after)
            std::copy(x.begin(), x.end(), xn.begin());
        else
            norm(L[R::FfnNorm], L[R::FfnNormB], x.data(), xn.data(), n);
        if (gated(A.ffn.kind)) linear(L[R::WGate], xn.data(), gate.data());
        linear(L[R::WUp], xn.data(), up.data());
        bias(L[R::BUp], up.data());
        switch (A.ffn.kind) {
            case FfnKind::SwiGlu: ref::swiglu(gate.data(), up.data(), gate.data(), n * ffn); break;
            case FfnKind::GeGlu: ref::geglu(gate.data(), up.data(), gate.data(), n * ffn); break;
            case FfnKind::Gelu: ref::gelu(up.data(), gate.data(), n * ffn); break;
            case FfnKind::Relu: ref::relu(up.data(), gate.data(), n * ffn); break;
            case FfnKind::SwiGluOai: ref::swiglu_oai(gate.data(), up.data(), gate.data(), n * ffn); break;
        }
        if (post_norms) {
            linear(L[R::WDown], gate.data(), tmp.data());
            bias(L[R::BDown], tmp.data());
            ref::rms_norm(tmp.data(), vec(L[R::PostFfnNorm]).data(), tmp.data(), n, dim, c.norm_eps);
            ref::add(x.data(), tmp.data(), x.data(), n * dim);
        } else {
            linear(L[R::WDown], gate.data(), x.data(), x.data());
            bias(L[R::BDown], x.data());
        }
        if (norm_after) norm(L[R::FfnNorm], L[R::FfnNormB], x.data(), x.data(), n);

        if (probe) {
            LayerTensors t = attn_tensors();
            t.insert({{"ffn_in", xn}, {"ffn_up", up}, {"ffn_act", gate}, {"x_out", x}});
            probe(l, t);
        }
    }

    n_past_ += n;
    if (!A.stack.lm_head) {  // an encoder's output: (n, dim) hidden states, through output_norm for T5's
        if (W.output_norm.present()) norm(W.output_norm, W.output_norm_b, x.data(), x.data(), n);
        return x;
    }

    // --- head: logits of the last token only (soft-capped for Gemma 2)
    std::vector<float> last(x.end() - dim, x.end());  // (dim)
    norm(W.output_norm, W.output_norm_b, last.data(), last.data(), 1);
    const TensorPlace& out = W.output_tensor();
    std::vector<float> logits(c.n_vocab);  // (n_vocab)
    ref::linear(out.source->type, data(out), last.data(), logits.data(), 1, c.n_vocab, dim);
    if (c.final_softcap > 0) ref::softcap(logits.data(), c.n_vocab, c.final_softcap);
    return logits;
}

}  // namespace vkllm
