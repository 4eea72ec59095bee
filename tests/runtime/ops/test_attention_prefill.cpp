// Attention prefill (n_tokens > 1 against the cache and themselves, causal or bidirectional) against
// the double-precision reference, over every device variant and KV type: head_dim 4..256, GQA ratios
// 1:1..8:1 and MQA, real shapes, positions with gaps, encoders' bidirectional calls; DeepSeek's
// multi-head latent attention (K heads of 576, V the last 512 of each K row) and other V widths. Shared set-up: attention_testing.h.
#include "support/attention_testing.h"

using namespace vkllm;
using namespace vkllm::test::attention;

TEST_CASE("attention prefill: head_dim 4..256, every KV type, n_past 0 and > 0") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes)
            for (uint32_t d : {4u, 8u, 64u, 80u, 96u, 128u, 256u}) {
                if (!kv_fits(t, 2, d)) continue;
                check_attention(ctx, "prefill head_dim", params(7, 4, 2, d, 200, t), {consecutive(7, 0), consecutive(7, 100)},
                                {.seed = d});
                check_attention(ctx, "prefill head_dim", params(64, 4, 2, d, 200, t), {consecutive(64, 0), consecutive(64, 70)},
                                {.seed = d + 1});
            }
        check_attention(ctx, "prefill head_dim", params(7, 8, 4, 8, 200, KvType::Q8_0), {consecutive(7, 0), consecutive(7, 100)},
                        {.seed = 9});
    }
}

TEST_CASE("attention prefill: GQA 1:1, 2:1, 4:1, 8:1, MQA") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes)
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
        for (KvType t : ops::kAllKvTypes) {
            check_attention(ctx, "prefill real", params(64, 32, 4, 64, 1100, t), {consecutive(64, 1000)});
            check_attention(ctx, "prefill real", params(2, 32, 8, 128, 2100, t), {consecutive(2, 2046), consecutive(2, 0)});
        }
    }
}

TEST_CASE("attention MLA prefill: 16 heads of 576 over one latent KV head, V its last 512 (DeepSeek-V2-Lite), every KV type, 7 and 33 tokens") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            check_attention(ctx, "mla prefill", mla(7, 16, 200, t), {consecutive(7, 0), consecutive(7, 100)}, {.seed = 51});
            check_attention(ctx, "mla prefill", mla(33, 16, 200, t), {consecutive(33, 0), consecutive(33, 150)}, {.seed = 52});
        }
    }
}

TEST_CASE("attention MLA prefill: DeepSeek-V2-Lite model sizes (64 tokens at n_past 0 and after 1000 cached rows) and DeepSeek-V3's 128 heads") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            auto plan = check_attention(ctx, "mla prefill real", mla(64, 16, 1100, t),
                                        {consecutive(64, 0), consecutive(64, 1000)}, {.seed = 53, .timing = spec.empty()});
            MESSAGE(fmt::format("[{}] DeepSeek-V2-Lite {} 64 tokens {}", spec, kv_name(t), describe(plan)));
            plan = check_attention(ctx, "mla prefill real", mla(16, 128, 100, t), {consecutive(16, 0), consecutive(16, 40)},
                                   {.seed = 54});
            MESSAGE(fmt::format("[{}] DeepSeek-V3 {} 16 tokens {}", spec, kv_name(t), describe(plan)));
        }
    }
}

TEST_CASE("attention prefill: V narrower than K: 100 / 36 inside K (GQA), 192 / 128 as a V cache of its own") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : {KvType::F16, KvType::F32}) {
            check_attention(ctx, "narrow v prefill", with_v(params(7, 8, 2, 100, 200, t), 36, true),
                            {consecutive(7, 0), consecutive(7, 100)}, {.seed = 55});
            check_attention(ctx, "narrow v prefill", with_v(params(40, 8, 2, 100, 200, t), 36, true),
                            {consecutive(40, 0), consecutive(40, 120)}, {.seed = 56});
        }
        for (KvType t : ops::kAllKvTypes) {
            check_attention(ctx, "narrow v prefill", with_v(params(7, 4, 4, 192, 200, t), 128, false),
                            {consecutive(7, 0), consecutive(7, 100)}, {.seed = 57});
            check_attention(ctx, "narrow v prefill", with_v(params(40, 4, 4, 192, 200, t), 128, false),
                            {consecutive(40, 0), consecutive(40, 120)}, {.seed = 58});
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

namespace {
// An encoder's call: every query sees the whole call (causal off).
AttentionParams bidir(AttentionParams p) {
    p.causal = false;
    return p;
}
}  // namespace

TEST_CASE("attention prefill: bidirectional (encoders): every query sees the whole call") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            // The shapes of the causal cases above: the flag is a push constant, so these reuse their
            // pipelines (slow drivers compile nothing more).
            check_attention(ctx, "prefill bidirectional", bidir(params(7, 4, 2, 64, 200, t)), {consecutive(7, 0)}, {.seed = 3});
            check_attention(ctx, "prefill bidirectional", bidir(params(33, 8, 2, 64, 300, t)),
                            {consecutive(33, 0), consecutive(33, 41)}, {.seed = 4});
            // jina-bert-v2: ALiBi both ways, -slope * |i - j| for keys after the query too.
            AttentionParams alibi = bidir(params(33, 8, 2, 64, 300, t));
            alibi.max_alibi_bias = 8.0f;
            check_attention(ctx, "prefill bidirectional alibi", alibi, {consecutive(33, 0)}, {.seed = 5});
        }
    }
}

TEST_CASE("attention prefill: a position-bias table (T5's relative buckets), both ways, causal, one token") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            // The shapes above again (the table is a push constant and a binding: same pipelines).
            // Range 4 against 33 tokens: most distances clamp to the table's ends, both ways.
            AttentionParams enc = bidir(params(33, 8, 2, 64, 300, t));
            enc.pos_bias_range = 4;
            check_attention(ctx, "prefill bidirectional table", enc, {consecutive(33, 0)}, {.seed = 6});
            // t5-small's shape: 8 heads of 64, R 128 (T5's max distance), no score scaling.
            AttentionParams t5 = bidir(params(7, 4, 2, 64, 200, t));
            t5.pos_bias_range = 128;
            check_attention(ctx, "prefill bidirectional table", t5, {consecutive(7, 0)}, {.scale = 1.0f, .seed = 7});
            // A decoder's self-attention: causal, a chunk after cached rows, and one token (the
            // prefill kernel runs it: the decode kernels take no table).
            AttentionParams dec = params(7, 4, 2, 64, 200, t);
            dec.pos_bias_range = 16;
            check_attention(ctx, "prefill causal table", dec, {consecutive(7, 0), consecutive(7, 41)}, {.seed = 8});
            AttentionParams one = params(1, 8, 2, 64, 300, t);
            one.pos_bias_range = 16;
            CHECK_FALSE(check_attention(ctx, "prefill causal table", one, {consecutive(1, 0), consecutive(1, 40)},
                                        {.seed = 9}).decode);
            CHECK_FALSE(ops::attention_store_supported(one));
        }
    }
}

TEST_CASE("attention prefill: packed inputs (segments) each attend over their own rows only") {
    test::ValidationGuard guard;
    // Three inputs of 5, 17 and 11 tokens packed at cache rows 0..32; ALiBi and a T5 table are
    // translation invariant, so pack positions serve them too.
    const std::vector<uint32_t> lens = {5, 17, 11};
    const uint32_t n = 33;
    std::vector<int32_t> pos(n), segs(2 * n);
    for (uint32_t s = 0, at = 0; s < lens.size(); at += lens[s++])
        for (uint32_t i = 0; i < lens[s]; ++i) {
            pos[at + i] = int32_t(at + i);
            segs[2 * (at + i)] = int32_t(at);
            segs[2 * (at + i) + 1] = int32_t(at + lens[s]);
        }
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (KvType t : ops::kAllKvTypes) {
            for (int variant = 0; variant < 3; ++variant) {
                CAPTURE(variant);
                AttentionParams p = bidir(params(n, 8, 2, 64, 300, t));
                p.segmented = true;
                if (variant == 1) p.max_alibi_bias = 8.0f;
                if (variant == 2) p.pos_bias_range = 4;
                const size_t act = size_t(n) * p.n_heads * p.head_dim;
                const auto k = make_cache(p, n, 11), v = make_cache(p, n, 12);
                const auto q = test::random_floats(act, 13, -2.0f, 2.0f);
                const size_t bias_n = size_t(p.n_heads) * 9;
                const auto bias = test::random_floats(bias_n, 14, -3.0f, 3.0f);
                Buffer kb = ctx.create_buffer(k.size(), MemoryUsage::Device, "k"), vb = ctx.create_buffer(v.size(), MemoryUsage::Device, "v");
                ctx.upload(kb, k.data(), k.size());
                ctx.upload(vb, v.data(), v.size());
                test::GuardedBuffer qb(ctx, act * 4, "q"), ob(ctx, act * 4, "out"), pb(ctx, n * 4, "positions"),
                    gb(ctx, 2 * n * 4, "segments"), tb(ctx, bias_n * 4, "pos_bias"), sb(ctx, 4, "scratch");
                qb.upload(q.data(), act * 4);
                pb.upload(pos.data(), n * 4);
                gb.upload(segs.data(), 2 * n * 4);
                tb.upload(bias.data(), bias_n * 4);
                CommandStream s(ctx);
                s.begin();
                ops::attention(ctx, s, p, qb.slice(), kb.slice(), vb.slice(), pb.slice(), ob.slice(), sb.slice(),
                               {tb.slice(), gb.slice()});
                s.end();
                s.submit_and_wait();
                std::vector<float> want(act);
                ref::attention(p, q.data(), k.data(), v.data(), pos.data(), want.data(), bias.data(), segs.data());
                const auto got = ob.download_floats(act);
                record_worst("prefill segmented", t, test::validate_result("attention out", got, want, kTol));
                // The reference's segments mean what they say: the last input alone, from row 0, gives
                // its rows (the f32 cache: f16 / q8_0 rows re-encoded at other offsets would round alike,
                // but q8_0 blocks span rows).
                if (t == KvType::F32 && variant != 2) {
                    AttentionParams one = bidir(params(11, 8, 2, 64, 300, t));
                    one.max_alibi_bias = p.max_alibi_bias;
                    const size_t row = size_t(p.n_kv_heads) * p.head_dim, qrow = size_t(p.n_heads) * p.head_dim;
                    std::vector<uint8_t> k1(k.size(), 0), v1(v.size(), 0);
                    std::copy(k.begin() + 22 * row * 4, k.begin() + 33 * row * 4, k1.begin());
                    std::copy(v.begin() + 22 * row * 4, v.begin() + 33 * row * 4, v1.begin());
                    std::vector<float> alone(11 * qrow);
                    ref::attention(one, q.data() + 22 * qrow, k1.data(), v1.data(), consecutive(11, 0).data(), alone.data());
                    test::validate_result("last input alone", std::vector<float>(want.begin() + 22 * qrow, want.end()), alone,
                                          kTol);
                }
                ob.check_guards();
                gb.check_guards();
            }
        }
    }
}

TEST_CASE("attention prefill: bidirectional at real model sizes (bge-small 128 tokens, bge-base 512)") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        check_attention(ctx, "prefill bidirectional", bidir(params(128, 12, 12, 32, 512, KvType::F16)), {consecutive(128, 0)});
        if (spec.empty())  // the whole 512-token context once: its double-precision reference is slow
            check_attention(ctx, "prefill bidirectional", bidir(params(512, 12, 12, 64, 512, KvType::F16)),
                            {consecutive(512, 0)});
    }
}

TEST_CASE("attention prefill: a bidirectional call differs from a causal one but for its last query") {
    test::ValidationGuard guard;
    Context& ctx = test::context_for(test::device_variants().front());
    AttentionParams p = params(7, 4, 2, 64, 200, KvType::F32);
    const size_t act = size_t(p.n_tokens) * p.n_heads * p.head_dim, row = size_t(p.n_heads) * p.head_dim;
    const auto k = make_cache(p, p.n_tokens, 1), v = make_cache(p, p.n_tokens, 2);
    const auto q = test::random_floats(act, 3, -2.0f, 2.0f);
    const std::vector<int32_t> pos = consecutive(p.n_tokens, 0);
    Buffer kb = ctx.create_buffer(k.size(), MemoryUsage::Device, "k"), vb = ctx.create_buffer(v.size(), MemoryUsage::Device, "v");
    ctx.upload(kb, k.data(), k.size());
    ctx.upload(vb, v.data(), v.size());
    test::GuardedBuffer qb(ctx, act * 4, "q"), ob(ctx, act * 4, "out"), pb(ctx, p.n_tokens * 4, "positions"), sb(ctx, 4, "s");
    qb.upload(q.data(), act * 4);
    pb.upload(pos.data(), pos.size() * 4);
    std::vector<float> out[2];
    for (bool causal : {true, false}) {
        p.causal = causal;
        CommandStream s(ctx);
        s.begin();
        ops::attention(ctx, s, p, qb.slice(), kb.slice(), vb.slice(), pb.slice(), ob.slice(), sb.slice());
        s.end();
        s.submit_and_wait();
        out[causal ? 0 : 1] = ob.download_floats(act);
    }
    double first = 0, last = 0;
    for (size_t i = 0; i < row; ++i) {
        first = std::max(first, double(std::fabs(out[0][i] - out[1][i])));
        last = std::max(last, double(std::fabs(out[0][act - row + i] - out[1][act - row + i])));
    }
    CHECK(first > 1e-2);  // the first query now sees 6 more keys
    CHECK(last < 1e-6);   // the last one saw them all already
}

TEST_CASE("attention prefill on the matrix units (--caps coopmat): head sizes, GQA, every KV type, windows, soft cap, ALiBi, sinks, tables, bidirectional, V narrower than K, real shapes") {
    // Q, K, V and the softmax weights rounded to half, f32 sums: the bound is half precision's
    // rounding compounded over a row (measured below 1e-6 NMSE), far below what a wrong block,
    // mask or rescale gives (~1e-1).
    test::ValidationGuard guard;
    Context* ctx = test::coopmat_context();
    if (!ctx) return;
    const Options half{.tol = {2e-6, 2e-3, 2e-2}};
    auto run = [&](const char* cls, const AttentionParams& p, const std::vector<std::vector<int32_t>>& pos, Options o) {
        CAPTURE(cls);
        o.tol = half.tol;
        CHECK(check_attention(*ctx, cls, p, pos, o).coopmat);
    };
    for (KvType t : ops::kAllKvTypes) {
        CAPTURE(std::string(kv_name(t)));
        for (uint32_t d : {64u, 80u, 128u, 256u})
            run("coopmat head_dim", params(37, 4, 2, d, 300, t), {consecutive(37, 0), consecutive(37, 200)}, {.seed = d});
        for (auto [h, kvh] : kGqa)
            run("coopmat gqa", params(33, h, kvh, 64, 300, t), {consecutive(33, 41)}, {.seed = h * 10 + kvh});
        AttentionParams win = params(40, 8, 2, 64, 200, t);
        win.window = 7;
        run("coopmat window", win, {consecutive(40, 100)}, {.seed = 11});
        AttentionParams cap = params(33, 8, 4, 128, 300, t);
        cap.softcap = 50.0f;
        run("coopmat softcap", cap, {consecutive(33, 0)}, {.q_amp = 8.0f, .seed = 12});
        AttentionParams alibi = bidir(params(33, 8, 2, 64, 300, t));
        alibi.max_alibi_bias = 8.0f;
        run("coopmat alibi bidirectional", alibi, {consecutive(33, 0)}, {.seed = 13});
        AttentionParams sinks = params(33, 8, 2, 64, 300, t);
        sinks.sinks = true;
        run("coopmat sinks", sinks, {consecutive(33, 10)}, {.seed = 14});
        AttentionParams table = bidir(params(33, 8, 2, 64, 300, t));
        table.pos_bias_range = 4;
        run("coopmat table", table, {consecutive(33, 0)}, {.seed = 15});
        AttentionParams narrow = params(17, 8, 2, 192, 300, t);
        narrow.v_head_dim = 128;
        run("coopmat v narrower", narrow, {consecutive(17, 5)}, {.seed = 16});
    }
    run("coopmat peaked", params(40, 8, 2, 128, 300, KvType::F16), {consecutive(40, 200)},
        {.q_amp = 12.0f, .scale = 0.25f, .seed = 17});
    run("coopmat real", params(512, 32, 8, 128, 600, KvType::F16), {consecutive(512, 0)}, {.seed = 18});
    run("coopmat real", params(64, 32, 4, 64, 1100, KvType::Q8_0), {consecutive(64, 1000)}, {.seed = 19});
}

TEST_CASE("attention prefill: worst error per case class (report)") { report_worst(); }
