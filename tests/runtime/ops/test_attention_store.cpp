// attention_store (a decode step's RoPE, K/V store and attention in one kernel) against its
// definition: ref::rope of q and k, ref::kv_store of the rotated K and of V, then ref::attention over
// the cache as the kernel left it. Three checks per step:
//   - the cache: the new row within RoPE's error (plus the cache type's rounding) of the reference
//     row, every other row untouched bit for bit;
//   - the output: ref::attention with the host-rotated q over the cache the kernel wrote, so the
//     query must have attended to exactly the values it stored;
//   - the unfused path (rope, kv_store_pair, then attention) on a copy of the cache: the same V bytes,
//     and the same output within the attention tolerance (only the order in which the new key
//     enters the online softmax differs). K is not compared bit for bit: the two kernels rotate
//     with the same source, but a driver may contract x c - y s into an FMA in one and not the other.
// Cache rows no step has reached hold NaN, as in test_attention.cpp. One recording per shape is
// re-submitted for each step (positions and the new rows live on the device).
#include "support/attention_testing.h"
#include "support/small_ops_testing.h"
#include "runtime/ops/rope.h"

using namespace vkllm;
using namespace vkllm::test::attention;

namespace {

struct StoreCase {
    AttentionParams p;  // n_tokens 1
    uint32_t rot_dim = 0;  // 0: no RoPE
    ops::RopeLayout layout = ops::RopeLayout::Adjacent;
    bool scaled = false;   // YaRN and frequency factors
    std::vector<int32_t> steps;  // positions of the successive decode steps
    uint32_t filled = 0;   // cache rows [0, filled) hold data before the first step, the rest NaN
    uint32_t shift = 0;    // bytes before the new K and V rows, the position and the factors (4: their
                           // bindings start below them, so the kernel must index from *_first)
};

void check_store(Context& ctx, const std::string& cls, const StoreCase& c, uint32_t seed) {
    const AttentionParams& p = c.p;
    CAPTURE(cls);
    const std::string kv = kv_name(p.kv_type);
    CAPTURE(kv);
    CAPTURE(p.n_heads);
    CAPTURE(p.n_kv_heads);
    CAPTURE(p.head_dim);
    CAPTURE(p.n_ctx);
    CAPTURE(p.window);
    CAPTURE(c.rot_dim);
    REQUIRE(ops::attention_store_supported(p));
    const auto plan = ops::detail::attention_plan(ctx.caps(), p, true);
    CAPTURE(plan.n_splits);
    const uint32_t row = p.n_kv_heads * p.head_dim, act = p.n_heads * p.head_dim;
    const size_t row_bytes = ops::kv_row_bytes(p.kv_type, row), cache_bytes = size_t(p.n_ctx) * row_bytes;
    const std::vector<uint8_t> k0 = make_cache(p, c.filled, seed * 7 + 1), v0 = make_cache(p, c.filled, seed * 7 + 2);

    ops::RopeParams rp{p.n_heads, p.head_dim, c.rot_dim, 10000.0f, c.layout};
    std::vector<float> ff;
    if (c.scaled) {
        rp.freq_scale = 0.25f;
        rp.ext_factor = 1.0f;
        rp.n_ctx_orig = 512;
        ff = test::random_floats(c.rot_dim / 2, seed + 50, 1.0f, 4.0f);
    }
    const bool rope = c.rot_dim > 0;
    ops::RopeParams rk = rp;
    rk.n_heads = p.n_kv_heads;

    // The fused path, and the unfused one on its own caches (qu: the q it rotates in place).
    using small_ops_testing::ShiftedBuffer;
    test::GuardedBuffer kc(ctx, cache_bytes, "k cache"), vc(ctx, cache_bytes, "v cache"),
        kcu(ctx, cache_bytes, "k cache (unfused)"), vcu(ctx, cache_bytes, "v cache (unfused)"), qb(ctx, act * 4, "q"),
        qu(ctx, act * 4, "q (unfused)"), ob(ctx, act * 4, "out"), ou(ctx, act * 4, "out (unfused)");
    ShiftedBuffer kb(ctx, row * 4, c.shift, "new k"), vb(ctx, row * 4, c.shift, "new v"), pb(ctx, 4, c.shift, "position"),
        fb(ctx, std::max<size_t>(ff.size(), 1) * 4, c.shift, "ff");
    const size_t scratch_bytes = std::max<size_t>(ops::attention_scratch_bytes(ctx, p), 4);
    test::GuardedBuffer sb(ctx, scratch_bytes, "scratch"), sbu(ctx, scratch_bytes, "scratch (unfused)");
    kc.upload(k0.data(), cache_bytes);
    vc.upload(v0.data(), cache_bytes);
    kcu.upload(k0.data(), cache_bytes);
    vcu.upload(v0.data(), cache_bytes);
    if (!ff.empty()) fb.upload(ff.data(), ff.size() * 4);
    const BufferSlice ffs = fb.slice();
    const ops::NewKv nkv{kb.slice(), vb.slice(), rope ? &rp : nullptr, rope && !ff.empty() ? &ffs : nullptr};

    CommandStream fused(ctx), unfused(ctx);
    fused.begin();
    ops::attention_store(ctx, fused, p, qb.slice(), nkv, kc.slice(), vc.slice(), pb.slice(), ob.slice(), sb.slice());
    fused.end();
    CHECK(fused.stats().dispatches == (plan.n_splits > 1 ? 2u : 1u));
    unfused.begin();
    if (rope) {  // kb rotated in place: the fused stream has read it by then (submitted and waited first)
        ops::rope(ctx, unfused, qu.slice(), pb.slice(), 1, rp, ff.empty() ? nullptr : &ffs);
        ops::rope(ctx, unfused, kb.slice(), pb.slice(), 1, rk, ff.empty() ? nullptr : &ffs);
    }
    ops::kv_store_pair(ctx, unfused, kb.slice(), kcu.slice(), vb.slice(), vcu.slice(), pb.slice(), 1, row, p.n_ctx,
                       p.kv_type);
    ops::attention(ctx, unfused, p, qu.slice(), kcu.slice(), vcu.slice(), pb.slice(), ou.slice(), sbu.slice());
    unfused.end();

    std::vector<uint8_t> k_before = k0, v_before = v0, k_got(cache_bytes), v_got(cache_bytes);
    const std::vector<float> poison(act, std::numeric_limits<float>::quiet_NaN());
    for (size_t step = 0; step < c.steps.size(); ++step) {
        const int32_t pos = c.steps[step];
        CAPTURE(pos);
        const std::vector<float> q = test::random_floats(act, seed * 100 + uint32_t(step) * 3, -1.0f, 1.0f);
        const std::vector<float> k = test::random_floats(row, seed * 100 + uint32_t(step) * 3 + 1, -1.0f, 1.0f);
        const std::vector<float> v = test::random_floats(row, seed * 100 + uint32_t(step) * 3 + 2, -1.0f, 1.0f);
        qb.upload(q.data(), act * 4);
        qu.upload(q.data(), act * 4);
        kb.upload(k.data(), row * 4);
        vb.upload(v.data(), row * 4);
        pb.upload(&pos, 4);
        ob.upload(poison.data(), act * 4);
        ou.upload(poison.data(), act * 4);
        fused.submit_and_wait();
        unfused.submit_and_wait();
        CHECK(qb.download_floats(act) == q);  // q is left unrotated
        kc.download(k_got.data(), cache_bytes);
        vc.download(v_got.data(), cache_bytes);

        // The cache: only row pos % n_ctx changed (none for a negative position), as the unfused
        // path wrote it, and within RoPE's error of the definition.
        std::vector<uint8_t> ku(cache_bytes), vu(cache_bytes);
        kcu.download(ku.data(), cache_bytes);
        vcu.download(vu.data(), cache_bytes);
        CHECK(v_got == vu);
        const int64_t new_row = pos >= 0 ? pos % int64_t(p.n_ctx) : -1;
        for (uint32_t r = 0; r < p.n_ctx; ++r) {
            if (int64_t(r) == new_row) continue;
            CHECK(std::memcmp(&k_got[r * row_bytes], &k_before[r * row_bytes], row_bytes) == 0);
            CHECK(std::memcmp(&v_got[r * row_bytes], &v_before[r * row_bytes], row_bytes) == 0);
        }
        std::vector<float> q_ref = q, k_ref = k;
        if (rope) {
            ref::rope(q_ref.data(), &pos, 1, rp, ff.empty() ? nullptr : ff.data());
            ref::rope(k_ref.data(), &pos, 1, rk, ff.empty() ? nullptr : ff.data());
        }
        const double angle = double(std::max(pos, 1)) * std::ldexp(1.0, -24), rope_atol = rope ? 2e-6 + 8 * angle : 0.0;
        if (new_row >= 0) {
            std::vector<uint8_t> k_row(row_bytes), v_row(row_bytes);
            const int32_t zero = 0;
            ref::kv_store(k_ref.data(), k_row.data(), &zero, 1, row, 1, p.kv_type);
            ref::kv_store(v.data(), v_row.data(), &zero, 1, row, 1, p.kv_type);
            const std::vector<uint8_t> kg(k_got.begin() + new_row * row_bytes, k_got.begin() + (new_row + 1) * row_bytes);
            const std::vector<uint8_t> vg(v_got.begin() + new_row * row_bytes, v_got.begin() + (new_row + 1) * row_bytes);
            // K, and V in a q8_0 cache: a value near a rounding boundary of the cache type may land on
            // either side (a GPU's amax / 127 and 1 / d may be a few ulps off: Vulkan allows 2.5 ulp
            // for a division; seen on NVIDIA). f16 and f32 rows are exact conversions.
            const double type_atol = p.kv_type == KvType::Q8_0 ? 1.42 / 127 * 1.01 : 0.0;
            if (p.kv_type == KvType::Q8_0) {
                test::validate_result("new v row", small_ops_testing::cache_floats(vg, p.kv_type, 1, row),
                                      small_ops_testing::cache_floats(v_row, p.kv_type, 1, row),
                                      {1e-4, type_atol + 1e-7, 1e-4});
            } else {
                if (!rope) CHECK(kg == k_row);
                CHECK(vg == v_row);
            }
            const double type_rtol = p.kv_type == KvType::F16 ? std::ldexp(1.0, -10) : 0.0;
            test::validate_result("new k row (rotated)", small_ops_testing::cache_floats(kg, p.kv_type, 1, row),
                                  small_ops_testing::cache_floats(k_row, p.kv_type, 1, row),
                                  {p.kv_type == KvType::Q8_0 ? 1e-4 : std::max(1e-6, angle * angle),
                                   rope_atol + type_atol + 1e-7, 1e-4 + type_rtol});
        }

        // The output: the reference over the cache as written, with the host-rotated q (whose error
        // against the device's rotation moves each score by at most scale * sum |dq| |k|).
        std::vector<float> ref(act);
        const int32_t ref_pos = std::max(pos, 0);
        ref::attention(p, q_ref.data(), k_got.data(), v_got.data(), &ref_pos, ref.data());
        const double score_err = double(p.scale) * p.head_dim * rope_atol;
        const auto cmp = test::validate_result("attention_store out", ob.download_floats(act), ref,
                                               {std::max(kTol.nmse, 4 * score_err * score_err), kTol.atol + 4 * score_err,
                                                kTol.rtol});
        record_worst(cls, p.kv_type, cmp);
        test::validate_result("attention_store out vs the unfused ops", ob.download_floats(act), ou.download_floats(act), kTol);
        k_before = k_got;
        v_before = v_got;
    }
    for (const auto* b : {&kc, &vc, &qb, &ob, &sb}) b->check_guards();
    for (const auto* b : {&kb, &vb, &pb, &fb}) b->check_guards();
}

AttentionParams windowed(AttentionParams p, uint32_t window) {
    p.window = window;
    return p;
}

}  // namespace

TEST_CASE("attention_store: stories260K, GQA 16:1 at unaligned offsets, head_dim 256, every KV type, successive steps") {
    test::ValidationGuard guard;
    using ops::RopeLayout;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            if (t != KvType::Q8_0) {  // heads of 8: q8_0 takes the unfused ops
                // stories260K (8 heads of 8, GQA 2:1) from an empty cache, and deep into it.
                check_store(ctx, "store tiny", {params(1, 8, 4, 8, 512, t), 8, RopeLayout::Adjacent, false, {0, 1, 2, 3}, 0}, 1);
                check_store(ctx, "store tiny", {params(1, 8, 4, 8, 512, t), 8, RopeLayout::Adjacent, false, {300, 301}, 302}, 11);
            }
            // GQA 16:1: two workgroups of 8 heads per kv head (only the first writes the row); the
            // new rows, the position and the factors at offsets their bindings must index into.
            check_store(ctx, "store GQA 16:1", {params(1, 32, 2, 64, 300, t), 64, RopeLayout::Adjacent, true, {120, 121}, 300, 4}, 12);
            // head_dim 256: more quads (2 x 64) than invocations; MQA; no RoPE.
            check_store(ctx, "store 256 MQA", {params(1, 4, 1, 256, 96, t), 0, RopeLayout::Adjacent, false, {0, 50, 95}, 96}, 5);
        }
    }
}

// Named so that scripts/slow_driver_tests.sh leaves it out ('*model sizes*'): each shape compiles
// the fused kernel and the unfused ops it is compared with again.
TEST_CASE("attention_store: real model sizes (stories15M, TinyLlama at 2048, head_dim 128 with YaRN), every KV type") {
    test::ValidationGuard guard;
    using ops::RopeLayout;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            if (t != KvType::Q8_0)  // stories15M: 6 heads of 48
                check_store(ctx, "store 15M", {params(1, 6, 6, 48, 256, t), 48, RopeLayout::Adjacent, false, {100, 101, 255}, 256}, 2);
            // TinyLlama 32/4/64 deep in a 2048 context: several splits, the new key in the last.
            check_store(ctx, "store TinyLlama", {params(1, 32, 4, 64, 2048, t), 64, RopeLayout::Adjacent, false, {1990, 1991, 2047}, 2048}, 3);
            // GQA 3:1, head_dim 128 with half the dimensions rotated (HalfSplit), YaRN and factors.
            check_store(ctx, "store partial rot", {params(1, 6, 2, 128, 300, t), 64, RopeLayout::HalfSplit, true, {7, 299}, 300}, 4);
        }
    }
}

TEST_CASE("attention_store: sliding windows over rings, far past n_ctx, and a negative position") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (KvType t : ops::kAllKvTypes) {
        // A ring of exactly the window: the new row replaces the one key that just left the window.
        check_store(ctx, "store window", {windowed(params(1, 8, 2, 64, 64, t), 64), 64, ops::RopeLayout::HalfSplit,
                                          false, {5000, 5001, 5063, 5064}, 64}, 6);
        // A window shorter than the ring, and a window of one key (only the new one).
        check_store(ctx, "store window", {windowed(params(1, 8, 8, 32, 100, t), 7), 32, ops::RopeLayout::Adjacent,
                                          false, {3, 250, 251}, 100}, 7);
        check_store(ctx, "store window", {windowed(params(1, 4, 2, 32, 8, t), 1), 32, ops::RopeLayout::Adjacent,
                                          false, {0, 9, 10}, 8}, 8);
        // A window longer than one split: the new key in the last of several.
        const AttentionParams long_window = windowed(params(1, 8, 2, 64, 640, t), 600);
        CHECK(ops::detail::attention_plan(ctx.caps(), long_window, true).n_splits > 1);
        check_store(ctx, "store window", {long_window, 64, ops::RopeLayout::Adjacent, false, {5000, 5001}, 640, 4}, 10);
        // ALiBi (BLOOM, MPT decode steps: no RoPE), 6 heads (slopes past the power of two), one split and several.
        AttentionParams alibi = params(1, 6, 2, 64, 300, t);
        alibi.max_alibi_bias = 8.0f;
        check_store(ctx, "store alibi", {alibi, 0, ops::RopeLayout::Adjacent, false, {120, 121}, 120}, 13);
        AttentionParams alibi_split = params(1, 8, 2, 64, 640, t);
        alibi_split.max_alibi_bias = 8.0f;
        check_store(ctx, "store alibi", {alibi_split, 0, ops::RopeLayout::Adjacent, false, {600, 601}, 600, 4}, 14);
        // A negative position (a padding row) stores nothing and attends as position 0.
        check_store(ctx, "store negative", {params(1, 4, 2, 32, 16, t), 32, ops::RopeLayout::Adjacent, false, {-1, -7}, 4}, 9);
    }
}

TEST_CASE("attention_store: unsupported shapes, overlapping buffers and bad RoPE are rejected") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    // q8_0 blocks must not straddle heads; prefill is not a decode step.
    CHECK_FALSE(ops::attention_store_supported(params(1, 8, 4, 16, 64, KvType::Q8_0)));
    CHECK_FALSE(ops::attention_store_supported(params(2, 8, 4, 64, 64, KvType::F16)));
    CHECK(ops::attention_store_supported(params(1, 8, 4, 16, 64, KvType::F16)));
    CHECK_THROWS_AS(ops::attention_store_pipelines(ctx, params(1, 8, 4, 16, 64, KvType::Q8_0)), std::invalid_argument);

    const AttentionParams p = params(1, 4, 2, 32, 16, KvType::F32);
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "all");
    // Layout: q [0, 512), k [512, 768), v [768, 1024), pos [1024, 1028), out [2048, 2560),
    // caches [4096, 8192) and [8192, 12288), scratch [16384, ...).
    const BufferSlice q = b.slice(0, 512), k = b.slice(512, 256), v = b.slice(768, 256), pos = b.slice(1024, 4),
                      out = b.slice(2048, 512), kc = b.slice(4096, 4096), vc = b.slice(8192, 4096),
                      scratch = b.slice(16384, 16384);
    const ops::RopeParams rp{4, 32, 32, 10000.0f, ops::RopeLayout::Adjacent};
    CommandStream s(ctx);
    s.begin();
    ops::attention_store(ctx, s, p, q, {k, v, &rp, nullptr}, kc, vc, pos, out, scratch);  // fine
    CHECK_THROWS_AS(ops::attention_store(ctx, s, p, q, {k, v, &rp, nullptr}, kc, b.slice(4096 + 2048, 4096), pos, out,
                                         scratch),
                    std::invalid_argument);  // the caches overlap
    CHECK_THROWS_AS(ops::attention_store(ctx, s, p, q, {k, v, &rp, nullptr}, kc, vc, pos, b.slice(4096, 512), scratch),
                    std::invalid_argument);  // out inside the K cache
    CHECK_THROWS_AS(ops::attention_store(ctx, s, p, q, {k, v, &rp, nullptr}, kc, vc, pos, b.slice(256, 512), scratch),
                    std::invalid_argument);  // out over q (written while other workgroups read q)
    CHECK_THROWS_AS(ops::attention_store(ctx, s, p, q, {k, v, &rp, nullptr}, kc, vc, b.slice(2048, 4), out, scratch),
                    std::invalid_argument);  // the position inside out
    CHECK_THROWS_AS(ops::attention_store(ctx, s, p, q, {b.slice(8192, 256), v, &rp, nullptr}, kc, vc, pos, out, scratch),
                    std::invalid_argument);  // the new K row inside the V cache
    CHECK_THROWS_AS(ops::attention_store(ctx, s, p, q, {k, b.slice(768, 64), &rp, nullptr}, kc, vc, pos, out, scratch),
                    std::invalid_argument);  // a short V row
    const ops::RopeParams wrong{8, 32, 32, 10000.0f, ops::RopeLayout::Adjacent};
    CHECK_THROWS_AS(ops::attention_store(ctx, s, p, q, {k, v, &wrong, nullptr}, kc, vc, pos, out, scratch),
                    std::invalid_argument);  // RoPE of another head count
    const ops::RopeParams odd{4, 32, 7, 10000.0f, ops::RopeLayout::Adjacent};
    CHECK_THROWS_AS(ops::attention_store(ctx, s, p, q, {k, v, &odd, nullptr}, kc, vc, pos, out, scratch),
                    std::invalid_argument);  // an odd rot_dim
    const BufferSlice ff = b.slice(1536, 64);
    CHECK_THROWS_AS(ops::attention_store(ctx, s, p, q, {k, v, nullptr, &ff}, kc, vc, pos, out, scratch),
                    std::invalid_argument);  // frequency factors without RoPE
    CHECK_THROWS_AS(ops::attention_store(ctx, s, params(2, 4, 2, 32, 16, KvType::F32), b.slice(0, 1024),
                                         {k, v, &rp, nullptr}, kc, vc, b.slice(1024, 8), b.slice(2048, 1024), scratch),
                    std::invalid_argument);  // two tokens
    s.end();
}

TEST_CASE("attention_store: plans fit every device variant and all their pipelines build") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        std::vector<PipelineDesc> all;
        for (KvType t : ops::kAllKvTypes)
            for (uint32_t d : {32u, 64u, 128u, 256u})
                for (auto [h, kvh] : {Heads{32, 32}, Heads{32, 8}, Heads{32, 1}}) {
                    const AttentionParams p = params(1, h, kvh, d, 8192, t);
                    CHECK(ops::detail::attention_plan(ctx.caps(), p, true).shared_bytes <= ctx.caps().max_shared_memory);
                    auto descs = ops::attention_store_pipelines(ctx, p);
                    all.insert(all.end(), descs.begin(), descs.end());
                }
        ctx.prepare_pipelines(all);
    }
}

TEST_CASE("attention_store: worst error per case class (report)") { report_worst(); }
