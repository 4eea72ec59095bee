// Attention (decode split-K + merge, prefill) against the double-precision reference, over every
// device variant, both KV types, head_dim 4..256, GQA ratios 1:1..8:1 and MQA, real LLaMA shapes,
// KV lengths from 1 to 4096. Cache rows past the largest KV length a case uses hold NaN: a kernel
// that reads one poisons its output. One command buffer is recorded per shape and re-submitted with
// new positions (the KV length lives on the device), so the tests also prove that a recording
// follows the position.
#include "support/test_context.h"

#include "runtime/ops/attention.h"
#include "runtime/tensor_types.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

using namespace vkllm;
using ops::AttentionParams;
using ops::KvType;

namespace {

// Both KV types are read exactly (f16 widening is exact and the reference sees the same halves), so
// the only error is f32 arithmetic against double: far inside the project's 5e-4 budget for f16 KV.
constexpr test::Tolerance kTol{1e-9, 2e-5, 1e-4};

const char* kv_name(KvType t) { return t == KvType::F16 ? "f16" : "f32"; }

AttentionParams params(uint32_t n_tokens, uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim, uint32_t n_ctx,
                       KvType t) {
    return {n_tokens, n_heads, n_kv_heads, head_dim, n_ctx, 1.0f / std::sqrt(float(head_dim)), t};
}

// (n_heads, n_kv_heads): 1:1, 2:1, 4:1, 8:1 (= MQA at 8 heads), MQA at 32 heads, and a group of 3.
using Heads = std::pair<uint32_t, uint32_t>;
const Heads kGqa[] = {{8, 8}, {8, 4}, {8, 2}, {8, 1}, {32, 1}, {6, 2}};

std::vector<int32_t> consecutive(uint32_t n_tokens, uint32_t n_past) {
    std::vector<int32_t> pos(n_tokens);
    for (uint32_t i = 0; i < n_tokens; ++i) pos[i] = int32_t(n_past + i);
    return pos;
}

// Worst figures per case class, printed by the last test case for the report.
struct Worst {
    double nmse = 0, max_abs = 0;
    size_t checks = 0;
};
std::map<std::string, Worst>& worst() {
    static std::map<std::string, Worst> w;
    return w;
}

// One layer's cache in device layout: rows [0, filled) random in [-1, 1] (rounded to f16 for F16:
// the reference reads these very bytes), rows [filled, n_ctx) NaN.
std::vector<uint8_t> make_cache(const AttentionParams& p, uint32_t filled, uint32_t seed) {
    const size_t n = size_t(p.n_ctx) * p.n_kv_heads * p.head_dim;
    const size_t valid = size_t(filled) * p.n_kv_heads * p.head_dim;
    const std::vector<float> x = test::random_floats(valid, seed);
    std::vector<uint8_t> bytes(n * kv_type_bytes(p.kv_type));
    if (p.kv_type == KvType::F16) {
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
// submits, and compares with the reference. Returns the plan used.
ops::detail::AttentionPlan check_attention(Context& ctx, const std::string& cls, AttentionParams p,
                                           const std::vector<std::vector<int32_t>>& pos_sets, const Options& o = {}) {
    if (o.scale != 0.0f) p.scale = o.scale;
    const auto plan = ops::detail::attention_plan(ctx.caps(), p);
    CAPTURE(cls);
    CAPTURE(p.n_tokens);
    CAPTURE(p.n_heads);
    CAPTURE(p.n_kv_heads);
    CAPTURE(p.head_dim);
    CAPTURE(p.n_ctx);
    CAPTURE(plan.n_splits);
    uint32_t filled = 0;
    for (auto& pos : pos_sets) {
        REQUIRE(pos.size() == p.n_tokens);
        for (int32_t x : pos) filled = std::max<uint32_t>(filled, uint32_t(x) + 1);
    }
    REQUIRE(filled <= p.n_ctx);
    const size_t act = size_t(p.n_tokens) * p.n_heads * p.head_dim;
    const auto k = make_cache(p, filled, o.seed * 7 + 1), v = make_cache(p, filled, o.seed * 7 + 2);
    const auto q = test::random_floats(act, o.seed * 7 + 3, -o.q_amp, o.q_amp);

    Buffer kb = ctx.create_buffer(k.size(), MemoryUsage::Device, "k_cache");
    Buffer vb = ctx.create_buffer(v.size(), MemoryUsage::Device, "v_cache");
    ctx.upload(kb, k.data(), k.size());
    ctx.upload(vb, v.data(), v.size());
    test::GuardedBuffer qb(ctx, act * 4, "q"), ob(ctx, act * 4, "out"), pb(ctx, p.n_tokens * 4, "positions");
    const size_t scratch_bytes = ops::attention_scratch_bytes(ctx, p);
    CHECK(scratch_bytes == (plan.decode && plan.n_splits > 1 ? size_t(plan.n_splits) * p.n_heads * (p.head_dim + 2) * 4 : 0));
    test::GuardedBuffer sb(ctx, std::max<size_t>(scratch_bytes, 4), "scratch");
    qb.upload(q.data(), act * 4);

    CommandStream s(ctx);
    s.begin(o.timing);
    ops::attention(ctx, s, p, qb.slice(), kb.slice(), vb.slice(), pb.slice(), ob.slice(), sb.slice());
    s.end();
    CHECK(s.stats().dispatches == (plan.decode && plan.n_splits > 1 ? 2u : 1u));

    const std::vector<float> poison(act, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> ref(act);
    for (const auto& pos : pos_sets) {
        CAPTURE(pos.back());
        pb.upload(pos.data(), pos.size() * 4);
        ob.upload(poison.data(), act * 4);
        s.submit_and_wait();
        if (o.timing) {
            double ns = 0;
            for (const auto& t : s.timings()) ns += t.ns;
            MESSAGE(fmt::format("{} {} {}/{}/{} n_tokens {} kv length {}: {:.3f} ms on {} ({} splits)", cls,
                                kv_name(p.kv_type), p.n_heads, p.n_kv_heads, p.head_dim, p.n_tokens, pos.back() + 1,
                                ns * 1e-6, ctx.caps().name, plan.n_splits));
        }
        ref::attention(p, q.data(), k.data(), v.data(), pos.data(), ref.data());
        const auto c = test::validate_result("attention out", ob.download_floats(act), ref, o.tol);
        Worst& w = worst()[fmt::format("{} {}", cls, kv_name(p.kv_type))];
        w.nmse = std::max(w.nmse, c.nmse);
        w.max_abs = std::max(w.max_abs, c.max_abs);
        ++w.checks;
    }
    ob.check_guards();
    sb.check_guards();
    return plan;
}

}  // namespace

TEST_CASE("attention decode: head_dim 4..256, both KV types, KV length 1..200 with one recording") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32})
            for (uint32_t d : {4u, 8u, 64u, 80u, 96u, 128u, 256u}) {
                // KV lengths 1 and 3 leave most splits empty; 65 and 200 are not multiples of anything.
                auto plan = check_attention(ctx, "decode head_dim", params(1, 8, 2, d, 300, t),
                                            {{0}, {2}, {6}, {63}, {64}, {199}}, {.seed = d});
                CHECK(plan.n_splits > 3);  // more splits than KV rows at lengths 1 and 3
            }
    }
}

TEST_CASE("attention decode: one split writes the output directly") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32}) {
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
        for (KvType t : {KvType::F16, KvType::F32})
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
        for (KvType t : {KvType::F16, KvType::F32}) {
            check_attention(ctx, "decode real", params(1, 32, 8, 128, 4096, t), {{2047}, {4095}, {2999}, {0}, {2}},
                            {.timing = spec.empty()});
            check_attention(ctx, "decode real", params(1, 32, 4, 64, 4096, t), {{2047}, {4095}, {1300}});
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

TEST_CASE("attention prefill: head_dim 4..256, both KV types, n_past 0 and > 0") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32})
            for (uint32_t d : {4u, 8u, 64u, 80u, 96u, 128u, 256u}) {
                check_attention(ctx, "prefill head_dim", params(7, 4, 2, d, 200, t), {consecutive(7, 0), consecutive(7, 100)},
                                {.seed = d});
                check_attention(ctx, "prefill head_dim", params(64, 4, 2, d, 200, t), {consecutive(64, 0), consecutive(64, 70)},
                                {.seed = d + 1});
            }
    }
}

TEST_CASE("attention prefill: GQA 1:1, 2:1, 4:1, 8:1, MQA") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32})
            for (auto [h, kvh] : kGqa)
                check_attention(ctx, "prefill gqa", params(33, h, kvh, 64, 300, t), {consecutive(33, 0), consecutive(33, 41)},
                                {.seed = h * 10 + kvh});
    }
}

TEST_CASE("attention prefill: real shapes (512-token prompt, a chunk after 1000 cached rows, 2 tokens at 2046)") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        check_attention(ctx, "prefill real", params(512, 32, 8, 128, 600, KvType::F16), {consecutive(512, 0)},
                        {.timing = spec.empty()});
        for (KvType t : {KvType::F16, KvType::F32}) {
            check_attention(ctx, "prefill real", params(64, 32, 4, 64, 1100, t), {consecutive(64, 1000)});
            check_attention(ctx, "prefill real", params(2, 32, 8, 128, 2100, t), {consecutive(2, 2046), consecutive(2, 0)});
        }
    }
}

TEST_CASE("attention prefill: positions with gaps and a peaked softmax") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        std::vector<int32_t> gaps(20);
        for (uint32_t i = 0; i < 20; ++i) gaps[i] = int32_t(3 * i + (i * i) % 5);
        check_attention(ctx, "prefill gaps", params(20, 8, 2, 64, 100, KvType::F32), {gaps});
        check_attention(ctx, "prefill peaked", params(40, 8, 2, 128, 300, KvType::F16), {consecutive(40, 200)},
                        {.q_amp = 12.0f, .scale = 0.25f, .seed = 9});
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
    CHECK_THROWS_AS(run(params(1, 4, 4, 260, 16, KvType::F16)), std::invalid_argument);  // head_dim > 256
    CHECK_THROWS_AS(run(params(0, 4, 4, 64, 16, KvType::F16)), std::invalid_argument);
    CHECK_THROWS_AS(run(params(1, 4, 4, 64, 16384, KvType::F32)), std::invalid_argument);  // cache larger than k
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
    CHECK(msg.find("at most 2048 context rows") != std::string::npos);
}

TEST_CASE("attention: plans fit every device variant and all their pipelines build") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        std::vector<PipelineDesc> all;
        for (uint32_t n : {1u, 2u, 7u, 512u})
            for (uint32_t d : {4u, 64u, 128u, 256u})
                for (auto [h, kvh] : {Heads{32, 32}, Heads{32, 8}, Heads{32, 1}}) {
                    const AttentionParams p = params(n, h, kvh, d, 8192, KvType::F16);
                    const auto plan = ops::detail::attention_plan(ctx.caps(), p);
                    CHECK(plan.shared_bytes <= ctx.caps().max_shared_memory);
                    auto descs = ops::attention_pipelines(ctx, p);
                    all.insert(all.end(), descs.begin(), descs.end());
                }
        ctx.prepare_pipelines(all);
    }
    for (const auto& [cls, w] : worst())
        MESSAGE(fmt::format("{:<22} worst nmse {:.3g}  worst max|diff| {:.3g}  ({} checks)", cls, w.nmse, w.max_abs, w.checks));
}
