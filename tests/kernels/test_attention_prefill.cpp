// Attention prefill (n_tokens > 1 against the cache and themselves, causal) against the
// double-precision reference, over every device variant and KV type: head_dim 4..256, GQA ratios
// 1:1..8:1 and MQA, real shapes, positions with gaps. Shared set-up: attention_testing.h.
#include "kernels/attention_testing.h"

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

TEST_CASE("attention prefill: worst error per case class (report)") { report_worst(); }
