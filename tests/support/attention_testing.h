// Shared by the attention tests (decode and window cases in test_attention.cpp, prefill in
// test_attention_prefill.cpp: two CTest entries, so that the two halves compile their pipelines in
// parallel on slow drivers): problem set-up, the NaN-poisoned cache, and check_attention, which
// records one shape, runs it for several position sets and compares with ref::attention.
#pragma once

#include "support/test_context.h"

#include "runtime/ops/attention.h"
#include "runtime/ops/kv_store.h"
#include "runtime/quant/tensor_types.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace vkllm::test::attention {

using ops::AttentionParams;
using ops::KvType;

// Every KV type is read exactly (f16 widening is exact, a q8_0 value d * q is one f32 product, and
// the reference reads the same bytes), so the only error is f32 arithmetic against double: far
// inside the project's 5e-4 budget for f16 KV.
inline constexpr test::Tolerance kTol{1e-9, 2e-5, 1e-4};

inline const char* kv_name(KvType t) { return ops::kv_type_name(t); }

// Whether a cache of type t can hold rows of n_kv_heads x head_dim (q8_0: whole blocks of 32).
inline bool kv_fits(KvType t, uint32_t n_kv_heads, uint32_t head_dim) {
    return (n_kv_heads * head_dim) % ops::kv_row_multiple(t) == 0;
}

inline AttentionParams params(uint32_t n_tokens, uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim, uint32_t n_ctx,
                              KvType t) {
    return {n_tokens, n_heads, n_kv_heads, head_dim, n_ctx, 1.0f / std::sqrt(float(head_dim)), t};
}

// V of its own width: v_head_dim, read from the K rows' tails with v_in_k.
inline AttentionParams with_v(AttentionParams p, uint32_t v_head_dim, bool v_in_k) {
    p.v_head_dim = v_head_dim;
    p.v_in_k = v_in_k;
    return p;
}

// DeepSeek-V2-Lite / V3 attention in MLA's absorbed form: n_heads query heads over one latent KV
// head of 576 = 64 RoPE dims + 512 latent (kv_lora_rank), V the latent (the last 512 of each K row);
// scores scaled by 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) = 1/sqrt(192), as the model does.
inline AttentionParams mla(uint32_t n_tokens, uint32_t n_heads, uint32_t n_ctx, KvType t) {
    AttentionParams p = with_v(params(n_tokens, n_heads, 1, 576, n_ctx, t), 512, true);
    p.scale = 1.0f / std::sqrt(192.0f);
    return p;
}

// (n_heads, n_kv_heads): 1:1, 2:1, 4:1, 8:1 (= MQA at 8 heads), MQA at 32 heads, and a group of 3.
using Heads = std::pair<uint32_t, uint32_t>;
inline const Heads kGqa[] = {{8, 8}, {8, 4}, {8, 2}, {8, 1}, {32, 1}, {6, 2}};

inline std::vector<int32_t> consecutive(uint32_t n_tokens, uint32_t n_past) {
    std::vector<int32_t> pos(n_tokens);
    for (uint32_t i = 0; i < n_tokens; ++i) pos[i] = int32_t(n_past + i);
    return pos;
}

// Worst figures per case class, printed by report_worst() for the report.
struct Worst {
    double nmse = 0, max_abs = 0;
    size_t checks = 0;
};
inline std::map<std::string, Worst>& worst() {
    static std::map<std::string, Worst> w;
    return w;
}
// Folds one comparison into its case class (cls and KV type).
inline void record_worst(const std::string& cls, KvType t, const test::Compare& c) {
    Worst& w = worst()[fmt::format("{} {}", cls, kv_name(t))];
    w.nmse = std::max(w.nmse, c.nmse);
    w.max_abs = std::max(w.max_abs, c.max_abs);
    ++w.checks;
}

// One layer's cache in device layout, `dim` elements per head (0: head_dim; a V cache: p.v_dim()):
// rows [0, filled) random in [-1, 1] (rounded to f16 for F16, quantized for Q8_0: the reference reads
// these very bytes), rows [filled, n_ctx) NaN.
inline std::vector<uint8_t> make_cache(const AttentionParams& p, uint32_t filled, uint32_t seed, uint32_t dim = 0) {
    if (dim == 0) dim = p.head_dim;
    const size_t n = size_t(p.n_ctx) * p.n_kv_heads * dim;
    const size_t valid = size_t(filled) * p.n_kv_heads * dim;
    const std::vector<float> x = test::random_floats(valid, seed);
    const size_t row = size_t(p.n_kv_heads) * dim;
    std::vector<uint8_t> bytes(p.n_ctx * ops::kv_row_bytes(p.kv_type, row));
    if (p.kv_type == KvType::Q8_0) {
        auto* w = reinterpret_cast<uint32_t*>(bytes.data());
        ref::kv_quantize_q8_0(x.data(), w, uint32_t(valid));
        for (size_t b = valid / ops::kKvQ8Block; b < n / ops::kKvQ8Block; ++b) w[b * ops::kKvQ8BlockWords] = 0x7FC00000u;
    } else if (p.kv_type == KvType::F16) {
        auto* h = reinterpret_cast<uint16_t*>(bytes.data());
        for (size_t i = 0; i < n; ++i) h[i] = i < valid ? f32_to_f16(x[i]) : uint16_t(0x7E00);
    } else {
        auto* f = reinterpret_cast<float*>(bytes.data());
        for (size_t i = 0; i < n; ++i) f[i] = i < valid ? x[i] : std::numeric_limits<float>::quiet_NaN();
    }
    return bytes;
}

struct Options {
    float q_amp = 2.0f;     // q uniform in [-q_amp, q_amp]: larger means a peakier softmax
    float scale = 0.0f;     // 0: 1/sqrt(head_dim)
    uint32_t seed = 1;
    test::Tolerance tol = kTol;
    bool timing = false;    // report the device time of each submission (where timestamps exist)
};

// Records attention for `p` once, then for each positions set: re-uploads positions, poisons `out`,
// submits, and compares with the reference. Returns the plan used. With p.v_in_k there is no V
// cache: attention() gets an empty v slice (it must not look at it) and V comes from the K rows.
inline ops::detail::AttentionPlan check_attention(Context& ctx, const std::string& cls, AttentionParams p,
                                                  const std::vector<std::vector<int32_t>>& pos_sets,
                                                  const Options& o = {}) {
    if (o.scale != 0.0f) p.scale = o.scale;
    const auto plan = ops::detail::attention_plan(ctx.caps(), p);
    CAPTURE(cls);
    CAPTURE(p.n_tokens);
    CAPTURE(p.n_heads);
    CAPTURE(p.n_kv_heads);
    CAPTURE(p.head_dim);
    CAPTURE(p.v_head_dim);
    CAPTURE(p.v_in_k);
    CAPTURE(p.n_ctx);
    CAPTURE(plan.n_splits);
    uint32_t filled = 0;
    for (auto& pos : pos_sets) {
        REQUIRE(pos.size() == p.n_tokens);
        for (int32_t x : pos) filled = std::max<uint32_t>(filled, uint32_t(x) + 1);
    }
    REQUIRE(filled <= p.n_ctx);
    const size_t act = size_t(p.n_tokens) * p.n_heads * p.head_dim;        // q
    const size_t act_out = size_t(p.n_tokens) * p.n_heads * p.v_dim();     // out
    const auto k = make_cache(p, filled, o.seed * 7 + 1);
    const auto v = p.v_in_k ? std::vector<uint8_t>() : make_cache(p, filled, o.seed * 7 + 2, p.v_dim());
    const auto q = test::random_floats(act, o.seed * 7 + 3, -o.q_amp, o.q_amp);

    Buffer kb = ctx.create_buffer(k.size(), MemoryUsage::Device, "k_cache");
    ctx.upload(kb, k.data(), k.size());
    Buffer vb;
    if (!p.v_in_k) {
        vb = ctx.create_buffer(v.size(), MemoryUsage::Device, "v_cache");
        ctx.upload(vb, v.data(), v.size());
    }
    test::GuardedBuffer qb(ctx, act * 4, "q"), ob(ctx, act_out * 4, "out"), pb(ctx, p.n_tokens * 4, "positions");
    const size_t scratch_bytes = ops::attention_scratch_bytes(ctx, p);
    CHECK(scratch_bytes == (plan.decode && plan.n_splits > 1 ? size_t(plan.n_splits) * p.n_heads * (p.v_dim() + 2) * 4 : 0));
    test::GuardedBuffer sb(ctx, std::max<size_t>(scratch_bytes, 4), "scratch");
    qb.upload(q.data(), act * 4);
    // A position-bias table (T5) when asked: random biases per head and distance.
    const size_t bias_n = p.pos_bias_range ? size_t(p.n_heads) * (2 * p.pos_bias_range + 1) : 1;
    const auto bias = test::random_floats(bias_n, o.seed * 7 + 4, -3.0f, 3.0f);
    test::GuardedBuffer tb(ctx, bias_n * 4, "pos_bias");
    tb.upload(bias.data(), bias_n * 4);
    // Attention sinks (gpt-oss) when asked: logits per head from far below the scores to far above
    // them (the sink then takes most of the weight).
    std::vector<float> sinks = test::random_floats(p.n_heads, o.seed * 7 + 5, -3.0f, 3.0f);
    for (uint32_t h = 0; h < p.n_heads; h += 3) sinks[h] = h % 2 ? 12.0f : -30.0f;
    test::GuardedBuffer kb_sinks(ctx, p.n_heads * 4, "sinks");
    kb_sinks.upload(sinks.data(), p.n_heads * 4);

    CommandStream s(ctx);
    s.begin(o.timing);
    ops::attention(ctx, s, p, qb.slice(), kb.slice(), p.v_in_k ? BufferSlice{} : vb.slice(), pb.slice(), ob.slice(), sb.slice(),
                   {p.pos_bias_range ? tb.slice() : BufferSlice{}, {}, p.sinks ? kb_sinks.slice() : BufferSlice{}});
    s.end();
    CHECK(s.stats().dispatches == (plan.decode && plan.n_splits > 1 ? 2u : 1u));

    const std::vector<float> poison(act_out, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> ref(act_out);
    for (const auto& pos : pos_sets) {
        CAPTURE(pos.back());
        pb.upload(pos.data(), pos.size() * 4);
        ob.upload(poison.data(), act_out * 4);
        s.submit_and_wait();
        if (o.timing) {
            double ns = 0;
            for (const auto& t : s.timings()) ns += t.ns;
            MESSAGE(fmt::format("{} {} {}/{}/{} n_tokens {} kv length {}: {:.3f} ms on {} ({} splits)", cls,
                                kv_name(p.kv_type), p.n_heads, p.n_kv_heads, p.head_dim, p.n_tokens, pos.back() + 1,
                                ns * 1e-6, ctx.caps().name, plan.n_splits));
        }
        ref::attention(p, q.data(), k.data(), p.v_in_k ? nullptr : v.data(), pos.data(), ref.data(),
                       p.pos_bias_range ? bias.data() : nullptr, nullptr, p.sinks ? sinks.data() : nullptr);
        const auto c = test::validate_result("attention out", ob.download_floats(act_out), ref, o.tol);
        record_worst(cls, p.kv_type, c);
    }
    ob.check_guards();
    sb.check_guards();
    tb.check_guards();
    kb_sinks.check_guards();
    return plan;
}

// The plan in words, for the report of a real-size case.
inline std::string describe(const ops::detail::AttentionPlan& plan) {
    return plan.decode ? fmt::format("decode: wg {}, heads per wg {}, keys per pass {}, splits {}, min chunk {}, shared {} B",
                                     plan.wg, plan.heads_per_wg, plan.kv_tile, plan.n_splits, plan.min_chunk,
                                     plan.shared_bytes)
                       : fmt::format("prefill: wg {}, heads per wg {}, tokens per wg {}, kv tile {}, shared {} B", plan.wg,
                                     plan.heads_per_wg, plan.tokens_per_wg, plan.kv_tile, plan.shared_bytes);
}

// Prints the worst figures of the cases this process ran.
inline void report_worst() {
    for (const auto& [cls, w] : worst())
        MESSAGE(fmt::format("{:<22} worst nmse {:.3g}  worst max|diff| {:.3g}  ({} checks)", cls, w.nmse, w.max_abs, w.checks));
}

}  // namespace vkllm::test::attention
