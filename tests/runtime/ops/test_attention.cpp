// Attention (decode split-K + merge; prefill in test_attention_prefill.cpp) against the
// double-precision reference, over every device variant, every KV type, head_dim 4..256, GQA ratios
// 1:1..8:1 and MQA, real LLaMA shapes, KV lengths from 1 to 4096; sliding windows, ring caches and
// soft-capping for decode and prefill; DeepSeek's multi-head latent attention (K heads of 576, V the
// last 512 of each K row) and other V widths. Cache rows past the largest KV length a case uses hold NaN:
// a kernel that reads one poisons its output. One command buffer is recorded per shape and re-submitted with
// new positions (the KV length lives on the device), so the tests also prove that a recording
// follows the position.
#include "support/attention_testing.h"

#include <bit>

using namespace vkllm;
using namespace vkllm::test::attention;

TEST_CASE("attention decode: head_dim 4..256, every KV type, KV length 1..200 with one recording") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes)
            for (uint32_t d : {4u, 8u, 64u, 80u, 96u, 128u, 256u}) {
                if (!kv_fits(t, 2, d)) continue;  // q8_0: not 4 or 8 (rows of 8, 16); 80 straddles blocks
                // KV lengths 1 and 3 leave most splits empty; 65 and 200 are not multiples of anything.
                // Enough rows for several splits also where CPU splits hold >= 16384 values (256
                // rows at head_dim 64, 4096 at 4).
                const uint32_t n_ctx = std::max(1100u, 4 * 16384 / d + 100);
                // A KV length past two CPU splits (>= 16384 values each): several non-empty splits merged.
                const int32_t far = int32_t(std::min(n_ctx - 1, 2 * std::max(256u, 16384 / d) + 100));
                auto plan = check_attention(ctx, "decode head_dim", params(1, 8, 2, d, n_ctx, t),
                                            {{0}, {2}, {6}, {63}, {64}, {199}, {far}}, {.seed = d});
                CHECK(plan.n_splits > 3);  // more splits than KV rows at lengths 1 and 3
            }
        // Four heads of 8 share each q8_0 block.
        check_attention(ctx, "decode head_dim", params(1, 8, 4, 8, 300, KvType::Q8_0), {{0}, {63}, {199}}, {.seed = 8});
    }
}

TEST_CASE("attention decode: one split writes the output directly") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            auto plan = check_attention(ctx, "decode 1 split", params(1, 4, 4, 64, 50, t), {{0}, {6}, {49}});
            CHECK(plan.n_splits == 1);
        }
    }
}

TEST_CASE("attention decode: GQA 1:1, 2:1, 4:1, 8:1, MQA") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes)
            for (auto [h, kvh] : kGqa)
                check_attention(ctx, "decode gqa", params(1, h, kvh, 64, 1000, t), {{0}, {2}, {99}, {511}, {776}},
                                {.seed = h * 10 + kvh});
    }
}

TEST_CASE("attention decode: LLaMA 32/8/128 and TinyLlama 32/4/64 at KV length 2048 and 4096") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            check_attention(ctx, "decode real", params(1, 32, 8, 128, 4096, t), {{2047}, {4095}, {2999}, {0}, {2}},
                            {.timing = spec.empty()});
            check_attention(ctx, "decode real", params(1, 32, 4, 64, 4096, t), {{2047}, {4095}, {1300}});
        }
    }
}

// --- V narrower than K, V inside K (DeepSeek's MLA, absorbed form) ---------------------------------

TEST_CASE("attention MLA: the reference's V inside K is a V cache of the K rows' tails") {
    // One key: the output is its V, the last 2 of K's 8 elements per head.
    {
        AttentionParams p = with_v(params(1, 2, 1, 8, 1, KvType::F32), 2, true);
        const std::vector<float> q(16, 0.5f), k{1, 2, 3, 4, 5, 6, 7.5f, -8};
        const std::vector<int32_t> pos{0};
        std::vector<float> out(4, NAN);
        ref::attention(p, q.data(), k.data(), nullptr, pos.data(), out.data());
        CHECK(out == std::vector<float>{7.5f, -8, 7.5f, -8});
    }
    // Many keys and two kv heads: the same numbers as an explicit V cache holding those tails.
    for (KvType t : ops::kAllKvTypes) {
        CAPTURE(kv_name(t));
        const AttentionParams p = with_v(params(5, 8, 2, 96, 40, t), 32, true);
        const std::vector<int32_t> pos = consecutive(5, 30);
        const auto k = make_cache(p, 35, 3);
        const auto q = test::random_floats(size_t(5) * 8 * 96, 4, -2.0f, 2.0f);
        std::vector<float> kf(size_t(35) * 2 * 96), vf(size_t(35) * 2 * 32);
        if (t == KvType::Q8_0)
            ref::kv_dequantize_q8_0(reinterpret_cast<const uint32_t*>(k.data()), kf.data(), uint32_t(kf.size()));
        else if (t == KvType::F16)
            for (size_t i = 0; i < kf.size(); ++i) kf[i] = f16_to_f32(reinterpret_cast<const uint16_t*>(k.data())[i]);
        else
            std::memcpy(kf.data(), k.data(), kf.size() * 4);
        for (size_t r = 0; r < 35 * 2; ++r) std::copy_n(kf.data() + r * 96 + 64, 32, vf.data() + r * 32);
        AttentionParams sep = with_v(p, 32, false);
        sep.kv_type = KvType::F32;  // the widened values, exactly
        std::vector<float> want(size_t(5) * 8 * 32), got(want.size());
        ref::attention(sep, q.data(), kf.data(), vf.data(), pos.data(), want.data());
        ref::attention(p, q.data(), k.data(), nullptr, pos.data(), got.data());
        CHECK(got == want);
    }
}

TEST_CASE("attention MLA decode: 16 heads of 576 over one latent KV head, V its last 512 (DeepSeek-V2-Lite), every KV type, KV lengths 1, 7, 200") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            // n_ctx 200: one split on CPU drivers (the output written directly); 700: three.
            check_attention(ctx, "mla decode", mla(1, 16, 200, t), {{0}, {6}, {199}}, {.seed = 41});
            auto plan = check_attention(ctx, "mla decode", mla(1, 16, 700, t), {{0}, {6}, {199}, {699}}, {.seed = 42});
            CHECK(plan.n_splits > 1);
        }
    }
}

TEST_CASE("attention MLA decode: DeepSeek-V2-Lite model sizes at KV length 2048 and DeepSeek-V3's 128 heads") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            auto plan = check_attention(ctx, "mla decode real", mla(1, 16, 2048, t), {{2047}, {1000}, {0}, {6}, {199}},
                                        {.seed = 43, .timing = spec.empty()});
            CHECK(plan.n_splits > 2);
            MESSAGE(fmt::format("[{}] DeepSeek-V2-Lite {} KV length 2048 {}", spec, kv_name(t), describe(plan)));
            plan = check_attention(ctx, "mla decode real", mla(1, 128, 300, t), {{0}, {6}, {299}}, {.seed = 44});
            MESSAGE(fmt::format("[{}] DeepSeek-V3 {} KV length 300 {}", spec, kv_name(t), describe(plan)));
        }
    }
}

TEST_CASE("attention decode: V narrower than K: 100 / 36 inside K (GQA), 192 / 128 as a V cache of its own") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32}) {
            // 9 column groups of V: 7 key partitions of the value phase, one invocation idle.
            auto plan = check_attention(ctx, "narrow v decode", with_v(params(1, 8, 2, 100, 1100, t), 36, true),
                                        {{0}, {6}, {63}, {64}, {199}, {1099}}, {.seed = 45});
            CHECK(plan.n_splits > 1);
            check_attention(ctx, "narrow v decode", with_v(params(1, 8, 2, 100, 50, t), 36, true), {{0}, {49}}, {.seed = 46});
        }
        for (KvType t : ops::kAllKvTypes) {
            auto plan = check_attention(ctx, "narrow v decode", with_v(params(1, 4, 4, 192, 1100, t), 128, false),
                                        {{0}, {6}, {199}, {1099}}, {.seed = 47});
            CHECK(plan.n_splits > 1);
            check_attention(ctx, "narrow v decode", with_v(params(1, 4, 4, 192, 50, t), 128, false), {{0}, {49}},
                            {.seed = 48});
        }
    }
}

TEST_CASE("attention decode: peaked softmax (online rescaling across tiles and splits)") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        // Scores spread over roughly +-40: the running max moves often and most weights underflow.
        check_attention(ctx, "decode peaked", params(1, 8, 2, 128, 1500, KvType::F16), {{1499}, {700}, {130}},
                        {.q_amp = 12.0f, .scale = 0.25f, .seed = 5});
    }
}

// --- sliding window, ring cache, soft-capping ------------------------------------------------------
//
// The expected values come from the definition, without the ring: a logical K/V history (one row
// per position) and a naive masked softmax over each query's window. The device and ref::attention
// read the same history laid out as the ring (position j in row j % n_ctx), so the comparison also
// checks the ring mapping. Ring rows that hold no position of [lo(first query), last query] are NaN:
// a kernel that reads past the window (or the whole history) poisons its output.

namespace {

struct WindowOptions {
    float q_amp = 2.0f;
    float scale = 0.0f;  // 0: 1/sqrt(head_dim)
    uint32_t seed = 1;
    test::Tolerance tol = kTol;
    bool timing = false;
};

AttentionParams windowed(AttentionParams p, uint32_t window, float softcap = 0.0f) {
    p.window = window;
    p.softcap = softcap;
    return p;
}

// First position query position `pos` sees.
uint32_t window_lo(const AttentionParams& p, int32_t pos) {
    const uint32_t u = uint32_t(std::max(pos, 0));
    return p.window > 0 && u >= p.window ? u - p.window + 1 : 0;
}

// ALiBi slopes of the ALiBi paper for max bias 8, written out (not computed as ref::attention and the
// kernels compute them): 2^-1 .. 2^-8 for 8 heads; for 6 and 12 heads, those of the largest power of
// two below, then every other slope of twice as many heads (llama.cpp's rule gives the same).
double alibi_slope(const AttentionParams& p, uint32_t h) {
    if (p.max_alibi_bias == 0.0f) return 0.0;
    REQUIRE(p.max_alibi_bias == 8.0f);
    static const std::map<uint32_t, std::vector<double>> table = {
        {8, {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625}},
        {6, {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125}},
        {12, {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625, 0.70710678118654752,
              0.35355339059327376, 0.17677669529663688, 0.08838834764831844}},
    };
    REQUIRE(table.count(p.n_heads) == 1);
    return table.at(p.n_heads)[h];
}

// The attention output from the definition: history rows hk/hv for positions first.. (row =
// n_kv_heads * head_dim floats each), query t sees positions window_lo(pos[t]) .. pos[t] (not causal:
// .. the last query's position, as llama.cpp masks a causal model's image chunk), key j's score biased
// by -slope_h * |pos[t] - j| under ALiBi.
std::vector<float> expected_attention(const AttentionParams& p, const std::vector<float>& q,
                                      const std::vector<float>& hk, const std::vector<float>& hv, uint32_t first,
                                      const std::vector<int32_t>& pos) {
    const uint32_t D = p.head_dim, row = p.n_kv_heads * D, group = p.n_heads / p.n_kv_heads;
    std::vector<float> out(size_t(p.n_tokens) * p.n_heads * D);
    for (uint32_t t = 0; t < p.n_tokens; ++t)
        for (uint32_t h = 0; h < p.n_heads; ++h) {
            const float* qh = q.data() + (size_t(t) * p.n_heads + h) * D;
            const uint32_t lo = window_lo(p, pos[t]), hi = uint32_t(p.causal ? pos[t] : pos.back());
            std::vector<double> s;
            for (uint32_t j = lo; j <= hi; ++j) {
                const float* kr = hk.data() + size_t(j - first) * row + (h / group) * D;
                double dot = 0;
                for (uint32_t d = 0; d < D; ++d) dot += double(qh[d]) * kr[d];
                dot *= p.scale;
                s.push_back((p.softcap > 0 ? p.softcap * std::tanh(dot / p.softcap) : dot) -
                            alibi_slope(p, h) * std::fabs(double(pos[t]) - double(j)));
            }
            const double mx = *std::max_element(s.begin(), s.end());
            double sum = 0;
            std::vector<double> o(D, 0.0);
            for (uint32_t j = lo; j <= hi; ++j) {
                const double w = std::exp(s[j - lo] - mx);
                sum += w;
                const float* vr = hv.data() + size_t(j - first) * row + (h / group) * D;
                for (uint32_t d = 0; d < D; ++d) o[d] += w * vr[d];
            }
            for (uint32_t d = 0; d < D; ++d) out[(size_t(t) * p.n_heads + h) * D + d] = float(o[d] / sum);
        }
    return out;
}

// The history laid out as the device cache: position j in ring row j % n_ctx, every other row NaN.
std::vector<uint8_t> ring_cache(const AttentionParams& p, const std::vector<float>& hist, uint32_t first) {
    const size_t row = size_t(p.n_kv_heads) * p.head_dim, n = p.n_ctx * row;
    const size_t n_pos = hist.size() / row;
    std::vector<float> ring(n, std::numeric_limits<float>::quiet_NaN());
    for (size_t i = 0; i < n_pos; ++i)
        std::copy_n(hist.data() + i * row, row, ring.data() + ((first + i) % p.n_ctx) * row);
    std::vector<uint8_t> bytes(p.n_ctx * ops::kv_row_bytes(p.kv_type, row));
    if (p.kv_type == KvType::F16) {
        auto* h = reinterpret_cast<uint16_t*>(bytes.data());
        for (size_t i = 0; i < n; ++i) h[i] = f32_to_f16(ring[i]);
    } else {
        std::memcpy(bytes.data(), ring.data(), bytes.size());
    }
    return bytes;
}

// (f16 and f32 caches only: the window cases' ring rows and rounding are not written for q8_0 yet;
// the kernels' q8_0 read path is the same load_k4 / load_v4 as above, covered there.)
// Records attention for `p` once; for each positions set builds a history covering the set's
// windows, uploads it as a ring with the positions, runs, and compares the device and
// ref::attention with the definition.
void check_window(Context& ctx, const std::string& cls, AttentionParams p,
                  const std::vector<std::vector<int32_t>>& pos_sets, const WindowOptions& o = {}) {
    if (o.scale != 0.0f) p.scale = o.scale;
    const auto plan = ops::detail::attention_plan(ctx.caps(), p);
    CAPTURE(cls);
    CAPTURE(p.n_tokens);
    CAPTURE(p.n_heads);
    CAPTURE(p.n_kv_heads);
    CAPTURE(p.head_dim);
    CAPTURE(p.n_ctx);
    CAPTURE(p.window);
    CAPTURE(p.softcap);
    CAPTURE(p.max_alibi_bias);
    CAPTURE(int(p.kv_type));
    CAPTURE(plan.n_splits);
    const size_t act = size_t(p.n_tokens) * p.n_heads * p.head_dim, row = size_t(p.n_kv_heads) * p.head_dim;
    const size_t cache_bytes = p.n_ctx * ops::kv_row_bytes(p.kv_type, row);
    const auto q = test::random_floats(act, o.seed * 7 + 3, -o.q_amp, o.q_amp);

    Buffer kb = ctx.create_buffer(cache_bytes, MemoryUsage::Device, "k_cache");
    Buffer vb = ctx.create_buffer(cache_bytes, MemoryUsage::Device, "v_cache");
    test::GuardedBuffer qb(ctx, act * 4, "q"), ob(ctx, act * 4, "out"), pb(ctx, p.n_tokens * 4, "positions");
    test::GuardedBuffer sb(ctx, std::max<size_t>(ops::attention_scratch_bytes(ctx, p), 4), "scratch");
    qb.upload(q.data(), act * 4);
    CommandStream s(ctx);
    s.begin(o.timing);
    ops::attention(ctx, s, p, qb.slice(), kb.slice(), vb.slice(), pb.slice(), ob.slice(), sb.slice());
    s.end();

    const std::vector<float> poison(act, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> ref(act);
    uint32_t set = 0;
    for (const auto& pos : pos_sets) {
        CAPTURE(pos.front());
        CAPTURE(pos.back());
        REQUIRE(pos.size() == p.n_tokens);
        uint32_t first = UINT32_MAX, last = 0;
        for (int32_t x : pos) {
            first = std::min(first, window_lo(p, x));
            last = std::max(last, uint32_t(x));
        }
        REQUIRE(last - first < p.n_ctx);  // the test's own premise: the ring holds every needed key
        // History values rounded to what the cache type holds, so every reader sees the same numbers.
        auto round = [&](std::vector<float> x) {
            if (p.kv_type == KvType::F16)
                for (float& f : x) f = f16_to_f32(f32_to_f16(f));
            return x;
        };
        const size_t n_hist = size_t(last - first + 1) * row;
        const auto hk = round(test::random_floats(n_hist, o.seed * 7 + 11 * ++set));
        const auto hv = round(test::random_floats(n_hist, o.seed * 7 + 11 * set + 5));
        const auto k = ring_cache(p, hk, first), v = ring_cache(p, hv, first);
        ctx.upload(kb, k.data(), k.size());
        ctx.upload(vb, v.data(), v.size());
        pb.upload(pos.data(), pos.size() * 4);
        ob.upload(poison.data(), act * 4);
        s.submit_and_wait();
        if (o.timing) {
            double ns = 0;
            for (const auto& t : s.timings()) ns += t.ns;
            MESSAGE(fmt::format("{} {} {}/{}/{} n_tokens {} window {} position {}: {:.3f} ms on {} ({} splits)", cls,
                                kv_name(p.kv_type), p.n_heads, p.n_kv_heads, p.head_dim, p.n_tokens, p.window,
                                pos.back(), ns * 1e-6, ctx.caps().name, plan.n_splits));
        }
        const auto want = expected_attention(p, q, hk, hv, first, pos);
        const auto c = test::validate_result("attention out", ob.download_floats(act), want, o.tol);
        ref::attention(p, q.data(), k.data(), v.data(), pos.data(), ref.data());
        test::validate_result("ref::attention over the ring", ref, want, {1e-13, 1e-6, 1e-6});
        record_worst(cls, p.kv_type, c);
    }
    ob.check_guards();
    sb.check_guards();
}

std::vector<int32_t> with_gaps(uint32_t n, uint32_t first) {
    std::vector<int32_t> pos(n);
    for (uint32_t i = 0; i < n; ++i) pos[i] = int32_t(first + 3 * i + (i * i) % 5);
    return pos;
}

}  // namespace

TEST_CASE("attention window decode: windows 1, 7, 64, 1000 and >= context, rings of window rows, positions far past n_ctx") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32}) {
            check_window(ctx, "window decode", windowed(params(1, 8, 2, 64, 1, t), 1), {{0}, {1}, {5000}});
            check_window(ctx, "window decode", windowed(params(1, 8, 2, 128, 7, t), 7),
                         {{0}, {3}, {6}, {7}, {13}, {5000}});
            check_window(ctx, "window decode", windowed(params(1, 8, 2, 64, 80, t), 7), {{6}, {79}, {80}, {5000}});
            check_window(ctx, "window decode", windowed(params(1, 8, 2, 128, 64, t), 64),
                         {{0}, {63}, {64}, {100}, {5000}});
            check_window(ctx, "window decode", windowed(params(1, 8, 2, 64, 80, t), 64), {{63}, {64}, {5000}, {5001}});
            // A window over several splits, at a position ~100 rings away.
            check_window(ctx, "window decode", windowed(params(1, 32, 8, 128, 1024, t), 1000),
                         {{999}, {1500}, {100000}});
            // A window at least the context: plain causal attention.
            check_window(ctx, "window decode", windowed(params(1, 8, 8, 64, 300, t), 300), {{0}, {150}, {299}});
            check_window(ctx, "window decode", windowed(params(1, 8, 8, 64, 4096, t), 4096), {{299}});
        }
    }
}

TEST_CASE("attention window prefill: windows 1, 7, 64 and >= context, rings of window + n_tokens - 1 rows, gaps") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32}) {
            check_window(ctx, "window prefill", windowed(params(16, 8, 2, 64, 16, t), 1),
                         {consecutive(16, 0), consecutive(16, 5000)});
            check_window(ctx, "window prefill", windowed(params(16, 8, 2, 128, 22, t), 7),
                         {consecutive(16, 0), consecutive(16, 3), consecutive(16, 5000)});
            check_window(ctx, "window prefill", windowed(params(33, 8, 2, 64, 96, t), 64),
                         {consecutive(33, 0), consecutive(33, 40), consecutive(33, 5000)});
            check_window(ctx, "window prefill", windowed(params(16, 8, 2, 64, 215, t), 200),
                         {consecutive(16, 0), consecutive(16, 100)});
        }
        // Several token blocks per kv head, each walking only its own window + block span.
        check_window(ctx, "window prefill", windowed(params(128, 8, 2, 128, 191, KvType::F16), 64),
                     {consecutive(128, 0), consecutive(128, 1000)});
        // Positions with gaps: tiles in which some rows see no key at all.
        check_window(ctx, "window prefill", windowed(params(20, 8, 2, 64, 100, KvType::F32), 7),
                     {with_gaps(20, 0), with_gaps(20, 777)});
    }
}

TEST_CASE("attention window prefill, not causal (Gemma 3's image chunk): up to the chunk's last key, from each query's own window") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32}) {
            AttentionParams p = windowed(params(16, 8, 2, 64, 22, t), 7);
            p.causal = false;
            check_window(ctx, "window bidirectional", p, {consecutive(16, 0), consecutive(16, 3), consecutive(16, 5000)});
            AttentionParams wide = windowed(params(33, 8, 2, 128, 96, t), 64);
            wide.causal = false;
            check_window(ctx, "window bidirectional", wide, {consecutive(33, 10), consecutive(33, 5000)}, {.seed = 4});
        }
    }
}

TEST_CASE("attention window: GQA 1:1, 4:1, 8:1 x head_dim 64, 128, 256, decode and prefill at position 5000 in 80 rows") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (auto [h, kvh] : {Heads{8, 8}, Heads{8, 2}, Heads{8, 1}})
            for (uint32_t d : {64u, 128u, 256u}) {
                const KvType t = d == 128 ? KvType::F32 : KvType::F16;
                check_window(ctx, "window gqa", windowed(params(1, h, kvh, d, 80, t), 64), {{70}, {5000}},
                             {.seed = h + kvh + d});
                check_window(ctx, "window gqa", windowed(params(17, h, kvh, d, 80, t), 64),
                             {consecutive(17, 0), consecutive(17, 5000)}, {.seed = h + kvh + d});
            }
    }
}

TEST_CASE("attention softcap: 50 with large scores (tanh saturating and past fp32 exp overflow), with and without a window") {
    test::ValidationGuard guard;
    // Scores here reach hundreds (q_amp 30, scale 1) and thousands (q_amp 300): an f32 score carries an
    // absolute error of up to ~|q||k| sqrt(D) 2^-24 (~2e-5 at q_amp 30), which the cap passes on with
    // weight 1 - tanh^2 <= 1, and the softmax of the capped scores (a range of 100) onto the output.
    // Measured on lavapipe: max |error| 4e-6, nmse 5e-12; the bound leaves 10x for other drivers'
    // exp and is still far below a wrong cap (errors ~1) or a wrong mask.
    const test::Tolerance large{1e-9, 4e-5, 1e-4};
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32}) {
            // Gemma 2's regime: cap 50, ordinary scores (the cap's Taylor branch).
            check_window(ctx, "softcap", windowed(params(1, 8, 2, 128, 300, t), 0, 50.0f), {{299}, {10}},
                         {.scale = 1.0f});
            check_window(ctx, "softcap large", windowed(params(1, 8, 2, 128, 300, t), 0, 50.0f), {{299}, {10}},
                         {.q_amp = 30.0f, .scale = 1.0f, .tol = large});
            check_window(ctx, "softcap large", windowed(params(1, 8, 2, 128, 80, t), 64, 50.0f), {{5000}},
                         {.q_amp = 300.0f, .scale = 1.0f, .tol = large});
            check_window(ctx, "softcap large", windowed(params(24, 8, 2, 128, 100, t), 0, 50.0f),
                         {consecutive(24, 0), consecutive(24, 50)}, {.q_amp = 30.0f, .scale = 1.0f, .tol = large});
            check_window(ctx, "softcap large", windowed(params(24, 8, 2, 64, 30, t), 7, 50.0f),
                         {consecutive(24, 5000)}, {.q_amp = 300.0f, .scale = 1.0f, .tol = large});
        }
    }
}

// The shapes of the softcap and window cases (ALiBi is push constants: no new pipelines).
TEST_CASE("attention ALiBi: 8, 6 and 12 heads (non-power-of-two slopes), decode with splits and prefill, windows, far positions") {
    test::ValidationGuard guard;
    auto alibi = [](AttentionParams p, uint32_t window = 0) {
        p = windowed(p, window);
        p.max_alibi_bias = 8.0f;
        return p;
    };
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32}) {
            check_window(ctx, "alibi decode", alibi(params(1, 8, 2, 128, 300, t)), {{299}, {10}, {0}}, {.seed = 21});
            check_window(ctx, "alibi decode", alibi(params(1, 6, 2, 64, 300, t)), {{299}, {77}}, {.seed = 22});
            check_window(ctx, "alibi decode", alibi(params(1, 8, 2, 128, 80, t), 64), {{5000}}, {.seed = 23});
            check_window(ctx, "alibi prefill", alibi(params(24, 8, 2, 128, 100, t)), {consecutive(24, 0), consecutive(24, 70)},
                         {.seed = 24});
            check_window(ctx, "alibi prefill", alibi(params(24, 12, 12, 64, 30, t), 7), {consecutive(24, 4000)}, {.seed = 25});
            check_window(ctx, "alibi prefill", alibi(params(24, 6, 2, 64, 300, t)), {with_gaps(24, 5)}, {.seed = 26});
        }
    }
}

TEST_CASE("attention sinks: the reference from the definition, then decode with one split and several, prefill, GQA, windows") {
    test::ValidationGuard guard;
    {
        // One key of score s and value v, sink z: out = v * e^s / (e^s + e^z).
        AttentionParams p = params(1, 2, 1, 4, 1, KvType::F32);
        p.sinks = true;
        p.scale = 1.0f;
        const std::vector<float> q{1, 0, 0, 0, 0, 2, 0, 0}, k{1.5f, 1, 1, 1}, v{2, -4, 8, 1}, sinks{0.5f, 40.0f};
        const std::vector<int32_t> pos{0};
        std::vector<float> out(8);
        ref::attention(p, q.data(), k.data(), v.data(), pos.data(), out.data(), nullptr, nullptr, sinks.data());
        const double w0 = std::exp(1.5) / (std::exp(1.5) + std::exp(0.5)), w1 = std::exp(2.0) / (std::exp(2.0) + std::exp(40.0));
        for (uint32_t d = 0; d < 4; ++d) {
            CHECK(out[d] == doctest::Approx(w0 * v[d]).epsilon(1e-6));
            CHECK(out[4 + d] == doctest::Approx(w1 * v[d]).epsilon(1e-6));
        }
    }
    auto sunk = [](AttentionParams p, uint32_t window = 0) {
        p = windowed(p, window);
        p.sinks = true;
        return p;
    };
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            // gpt-oss-20b: 64 heads of 64 over 8 KV heads, every other layer a window of 128.
            auto plan = check_attention(ctx, "sinks decode", sunk(params(1, 64, 8, 64, 1000, t)), {{0}, {5}, {999}}, {.seed = 31});
            CHECK(plan.n_splits > 1);
            plan = check_attention(ctx, "sinks decode", sunk(params(1, 4, 4, 64, 50, t)), {{0}, {49}}, {.seed = 32});
            CHECK(plan.n_splits == 1);
            check_attention(ctx, "sinks decode", sunk(params(1, 16, 2, 64, 300, t), 128), {{127}, {299}}, {.seed = 33});
            check_attention(ctx, "sinks prefill", sunk(params(24, 16, 2, 64, 300, t)), {consecutive(24, 0), consecutive(24, 70)},
                            {.seed = 34});
            check_attention(ctx, "sinks prefill", sunk(params(24, 16, 2, 64, 300, t), 128), {consecutive(24, 250)},
                            {.seed = 35});
        }
    }
}

TEST_CASE("attention window: Gemma-like 8/4/256, window 4096, softcap 50, far past the ring's length") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        check_window(ctx, "window real", windowed(params(1, 8, 4, 256, 4096, KvType::F16), 4096, 50.0f),
                     {{4095}, {20000}}, {.timing = spec.empty()});
    }
    check_window(test::context(), "window real", windowed(params(16, 8, 4, 256, 4096 + 15, KvType::F16), 4096, 50.0f),
                 {consecutive(16, 9000)});
}

TEST_CASE("attention window: too short rings and bad soft caps are rejected; a window bounds splits and scratch") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 20, MemoryUsage::Device, "b");
    const BufferSlice x = b.slice();
    CommandStream s(ctx);
    s.begin();
    auto run = [&](const AttentionParams& p) { ops::attention(ctx, s, p, x, x, x, x, x, x); };
    // n_ctx >= window + n_tokens - 1.
    CHECK_THROWS_AS(run(windowed(params(17, 8, 2, 64, 79, KvType::F16), 64)), std::invalid_argument);
    CHECK_THROWS_AS(run(windowed(params(1, 8, 2, 64, 63, KvType::F16), 64)), std::invalid_argument);
    CHECK_NOTHROW(run(windowed(params(17, 8, 2, 64, 80, KvType::F16), 64)));
    CHECK_NOTHROW(run(windowed(params(1, 8, 2, 64, 64, KvType::F16), 64)));
    CHECK_THROWS_AS(run(windowed(params(1, 8, 2, 64, 64, KvType::F16), 0, -1.0f)), std::invalid_argument);
    CHECK_THROWS_AS(run(windowed(params(1, 8, 2, 64, 64, KvType::F16), 0, NAN)), std::invalid_argument);
    CHECK_THROWS_AS(run(windowed(params(1, 8, 2, 64, 64, KvType::F16), 0, INFINITY)), std::invalid_argument);
    s.end();
    for (const auto& spec : test::device_variants()) {
        const DeviceCaps& caps = test::context_for(spec).caps();
        // A window of one split's length needs no split however large the ring.
        const auto plan = ops::detail::attention_plan(caps, windowed(params(1, 32, 8, 128, 1 << 20, KvType::F16), 64));
        CHECK(plan.n_splits == 1);
        CHECK(ops::attention_scratch_bytes(caps, windowed(params(1, 32, 8, 128, 1 << 20, KvType::F16), 64)) == 0);
        CHECK(ops::attention_scratch_bytes(caps, windowed(params(1, 32, 8, 128, 8192, KvType::F16), 4096)) <=
              ops::attention_scratch_bytes(caps, params(1, 32, 8, 128, 8192, KvType::F16)));
        // Prefill plans with the window's extra per-row state still fit at head_dim 256.
        const auto pp = ops::detail::attention_plan(caps, windowed(params(512, 16, 8, 256, 8192, KvType::F16), 4096));
        CHECK(pp.shared_bytes <= caps.max_shared_memory);
    }
}

TEST_CASE("attention: bad parameters, small buffers and the storage-range limit are reported") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 20, MemoryUsage::Device, "b");
    const BufferSlice x = b.slice();
    CommandStream s(ctx);
    s.begin();
    auto run = [&](const AttentionParams& p) { ops::attention(ctx, s, p, x, x, x, x, x, x); };
    CHECK_THROWS_AS(run(params(1, 6, 4, 64, 16, KvType::F16)), std::invalid_argument);   // 6 % 4 != 0
    CHECK_THROWS_AS(run(params(1, 4, 4, 66, 16, KvType::F16)), std::invalid_argument);   // head_dim % 4
    CHECK_THROWS_AS(run(params(0, 4, 4, 64, 16, KvType::F16)), std::invalid_argument);
    CHECK_THROWS_AS(run(params(1, 4, 4, 64, 16384, KvType::F32)), std::invalid_argument);  // cache larger than k
    // The V width and V inside K: each refused with its reason.
    auto refused = [&](const AttentionParams& p, const char* why) {
        CAPTURE(why);
        std::string msg;
        try {
            run(p);
        } catch (const std::invalid_argument& e) {
            msg = e.what();
        }
        INFO(msg);
        CHECK(msg.find(why) != std::string::npos);
    };
    refused(params(1, 4, 4, 580, 16, KvType::F16), "head_dim must be a multiple of 4 in 4..576");
    refused(with_v(params(1, 4, 4, 64, 16, KvType::F16), 34, false), "v_head_dim 34 must be a multiple of 4");
    refused(with_v(params(1, 4, 4, 64, 16, KvType::F16), 68, true), "v_head_dim 68 must be a multiple of 4 and at most head_dim");
    refused(with_v(params(1, 4, 1, 64, 16, KvType::Q8_0), 48, true), "V inside a q8_0 K row must start on a block");
    refused(with_v(params(1, 4, 1, 64, 16, KvType::Q8_0), 16, false), "a q8_0 V cache needs n_kv_heads * v_head_dim");
    CHECK_NOTHROW(run(with_v(params(1, 4, 1, 64, 16, KvType::Q8_0), 32, true)));
    CHECK_NOTHROW(run(params(1, 4, 4, 576, 16, KvType::F16)));
    CHECK_NOTHROW(run(mla(1, 16, 16, KvType::Q8_0)));
    CHECK_NOTHROW(run(mla(9, 16, 16, KvType::Q8_0)));
    // V inside K ignores the v slice: an empty one is fine.
    CHECK_NOTHROW(ops::attention(ctx, s, mla(1, 16, 16, KvType::F16), x, x, BufferSlice{}, x, x, x));
    CHECK_THROWS_AS(ops::attention(ctx, s, with_v(params(1, 4, 4, 64, 16, KvType::F16), 32, false), x, x, BufferSlice{}, x, x, x),
                    std::invalid_argument);
    // The fused decode step keeps to V caches as wide as K.
    CHECK(ops::attention_store_supported(params(1, 4, 4, 64, 16, KvType::F16)));
    CHECK_FALSE(ops::attention_store_supported(mla(1, 16, 16, KvType::F16)));
    CHECK_FALSE(ops::attention_store_supported(with_v(params(1, 4, 4, 64, 16, KvType::F16), 32, false)));
    CHECK_FALSE(ops::attention_store_supported(with_v(params(1, 4, 4, 64, 16, KvType::F16), 64, true)));
    CHECK(ops::attention_store_supported(with_v(params(1, 4, 4, 64, 16, KvType::F16), 64, false)));
    CHECK_FALSE(ops::attention_store_supported(params(1, 4, 4, 512, 16, KvType::F16)));
    CHECK_THROWS_AS(ops::attention_store_pipelines(ctx, mla(1, 16, 16, KvType::F16)), std::invalid_argument);
    s.end();

    // A 8 MiB cache binding on a device that allows 4 MiB.
    Context& small = test::context_for("max-storage-range=4m");
    const AttentionParams p = params(1, 32, 8, 128, 4096, KvType::F16);
    Buffer big = small.create_buffer(8u << 20, MemoryUsage::Device, "kv");
    Buffer act = small.create_buffer(1 << 16, MemoryUsage::Device, "act");
    CommandStream s2(small);
    s2.begin();
    std::string msg;
    try {
        ops::attention(small, s2, p, act.slice(), big.slice(), big.slice(), act.slice(), act.slice(), act.slice());
    } catch (const DeviceLimitError& e) {
        msg = e.what();
    }
    s2.end();
    INFO(msg);
    CHECK(msg.find("maxStorageBufferRange") != std::string::npos);
    CHECK(msg.find("at most 2048 rows") != std::string::npos);
}

TEST_CASE("attention: plans fit every device variant and all their pipelines build") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        std::vector<PipelineDesc> all;
        auto add = [&](const AttentionParams& p) {
            CAPTURE(p.n_tokens);
            CAPTURE(p.n_heads);
            CAPTURE(p.n_kv_heads);
            CAPTURE(p.head_dim);
            CAPTURE(p.v_head_dim);
            const auto plan = ops::detail::attention_plan(ctx.caps(), p);
            CHECK(plan.shared_bytes <= ctx.caps().max_shared_memory);
            CHECK(plan.wg >= p.v_dim() / 4);
            auto descs = ops::attention_pipelines(ctx, p);
            all.insert(all.end(), descs.begin(), descs.end());
        };
        for (uint32_t n : {1u, 2u, 7u, 512u}) {
            for (uint32_t d : {4u, 64u, 128u, 256u})
                for (auto [h, kvh] : {Heads{32, 32}, Heads{32, 8}, Heads{32, 1}}) {
                    const AttentionParams p = params(n, h, kvh, d, 8192, KvType::F16);
                    add(p);
                    // The plans of V as wide as K are the ones they were before V got its own width;
                    // a CPU driver's decode takes the narrowest workgroup that holds V's columns.
                    const auto plan = ops::detail::attention_plan(ctx.caps(), p);
                    const uint32_t decode_wg = ctx.caps().cpu_tuning ? std::max(16u, std::bit_ceil(d / 4)) : 64u;
                    CHECK(plan.wg == (plan.decode ? decode_wg : 128u));
                    CHECK(ops::attention_pipelines(ctx, p)[0].spec.size() == (plan.decode ? 3u : 5u));
                }
            // DeepSeek-V2-Lite and V3 (MLA), the widest K and V alone, and V narrower than K.
            for (KvType t : ops::kAllKvTypes) {
                add(mla(n, 16, 8192, t));
                add(mla(n, 128, 8192, t));
            }
            add(params(n, 8, 8, 576, 8192, KvType::F16));
            add(params(n, 32, 1, 576, 8192, KvType::F16));
            add(with_v(params(n, 8, 2, 100, 8192, KvType::F16), 36, true));
            add(with_v(params(n, 4, 4, 192, 8192, KvType::F16), 128, false));
        }
        ctx.prepare_pipelines(all);
    }
}

TEST_CASE("attention: one sequence's rows of a batch, bound at unaligned offsets (decode and prefill)") {
    // A multi-sequence batch keeps every token's q, position and output in shared buffers; each
    // sequence's attention binds its rows wherever they lie. Rows of the other sequences must
    // neither be read (they hold NaN) nor written (they keep a sentinel).
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
    CAPTURE(spec);
    Context& ctx = test::context_for(spec);
    for (KvType t : {KvType::F16, KvType::F32}) {
        for (uint32_t n_tokens : {1u, 3u}) {
            for (uint32_t first_row : {1u, 5u}) {
                CAPTURE(n_tokens);
                CAPTURE(first_row);
                const uint32_t total_rows = first_row + n_tokens + 2, head_dim = 36;  // 144-byte rows
                AttentionParams p = params(n_tokens, 6, 2, head_dim, 256, t);
                const size_t row = size_t(p.n_heads) * head_dim;
                const std::vector<int32_t> pos = consecutive(n_tokens, 150);
                const auto k = make_cache(p, 160, 11), v = make_cache(p, 160, 12);
                const auto q = test::random_floats(row * n_tokens, 13, -2.0f, 2.0f);
                std::vector<float> q_all(row * total_rows, std::numeric_limits<float>::quiet_NaN());
                std::copy(q.begin(), q.end(), q_all.begin() + long(row * first_row));
                std::vector<int32_t> pos_all(total_rows, 100000);
                std::copy(pos.begin(), pos.end(), pos_all.begin() + first_row);
                const std::vector<float> sentinel(row * total_rows, 7.5f);

                Buffer kb = ctx.create_buffer(k.size(), MemoryUsage::Device, "k_cache");
                Buffer vb = ctx.create_buffer(v.size(), MemoryUsage::Device, "v_cache");
                ctx.upload(kb, k.data(), k.size());
                ctx.upload(vb, v.data(), v.size());
                test::GuardedBuffer qb(ctx, q_all.size() * 4, "q"), ob(ctx, q_all.size() * 4, "out"),
                    pb(ctx, total_rows * 4, "positions");
                const size_t scratch_bytes = std::max<size_t>(ops::attention_scratch_bytes(ctx, p), 4);
                test::GuardedBuffer sb(ctx, scratch_bytes, "scratch");
                qb.upload(q_all.data(), q_all.size() * 4);
                pb.upload(pos_all.data(), pos_all.size() * 4);
                ob.upload(sentinel.data(), sentinel.size() * 4);
                auto rows = [&](const test::GuardedBuffer& b, uint64_t width) {
                    BufferSlice s = b.slice();
                    return BufferSlice{s.buffer, s.offset + width * first_row, width * n_tokens};
                };
                CommandStream s(ctx);
                s.begin();
                ops::attention(ctx, s, p, rows(qb, row * 4), kb.slice(), vb.slice(), rows(pb, 4), rows(ob, row * 4),
                               sb.slice());
                s.end();
                s.submit_and_wait();
                std::vector<float> ref(row * n_tokens);
                ref::attention(p, q.data(), k.data(), v.data(), pos.data(), ref.data());
                const std::vector<float> out = ob.download_floats(q_all.size());
                test::validate_result("attention out rows",
                                      std::vector<float>(out.begin() + long(row * first_row),
                                                         out.begin() + long(row * (first_row + n_tokens))),
                                      ref, kTol);
                for (size_t i = 0; i < out.size(); ++i)
                    if (i < row * first_row || i >= row * (first_row + n_tokens)) REQUIRE(out[i] == 7.5f);
                ob.check_guards();
                sb.check_guards();
            }
        }
    }
    }
}

TEST_CASE("attention: worst error per case class (report)") { report_worst(); }
