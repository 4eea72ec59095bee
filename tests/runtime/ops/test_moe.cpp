// The mixture-of-experts kernels against their references: the router (moe_route), the expert
// projections that read only the chosen experts (moe_matvec, matvec.comp's matvec_id variants) and
// the weighted residual add (moe_combine).
#include "support/test_context.h"

#include "support/linear_testing.h"
#include "support/small_ops_testing.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/moe.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

using namespace vkllm;
using small_ops_testing::ShiftedBuffer;

namespace {

// The router on the device against ref::moe_route: ids exactly, weights within float rounding.
// bias: DeepSeek-V3's selection bias (p.bias), f32 [E].
void run_route(Context& ctx, const std::vector<float>& logits, uint32_t n, const ops::MoeRouteParams& p, const char* what,
               uint32_t shift = 0, const std::vector<float>& bias = {}) {
    CAPTURE(what);
    CAPTURE(p.n_expert);
    CAPTURE(p.k);
    CAPTURE(n);
    std::vector<uint32_t> ref_ids(size_t(n) * p.k);
    std::vector<float> ref_w(size_t(n) * p.k);
    ref::moe_route(logits.data(), n, p, ref_ids.data(), ref_w.data(), p.bias ? bias.data() : nullptr);
    ShiftedBuffer dl(ctx, logits.size() * 4, shift, "logits"), di(ctx, ref_ids.size() * 4, shift, "ids"),
        dw(ctx, ref_w.size() * 4, shift, "weights"), db(ctx, std::max<size_t>(bias.size(), 1) * 4, shift, "bias");
    dl.upload(logits.data(), logits.size() * 4);
    if (p.bias) db.upload(bias.data(), bias.size() * 4);
    const BufferSlice bias_slice = db.slice();
    CommandStream s(ctx);
    s.begin();
    ops::moe_route(ctx, s, p, dl.slice(), di.slice(), dw.slice(), n, p.bias ? &bias_slice : nullptr);
    s.end();
    s.submit_and_wait();
    std::vector<uint32_t> ids(ref_ids.size());
    di.download(ids.data(), ids.size() * 4);
    size_t bad = 0;
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] != ref_ids[i] && bad++ < 5)
            MESSAGE(fmt::format("{}: token {} rank {}: gpu expert {}, ref {}", what, i / p.k, i % p.k, ids[i], ref_ids[i]));
    CHECK(bad == 0);
    test::validate_result(fmt::format("{} weights", what), dw.download_floats(ref_w.size()), ref_w, {1e-12, 1e-6, 1e-5});
    di.check_guards();
    dw.check_guards();
}

// n tokens of E logits, spread as real routers' are.
std::vector<float> router_logits(uint32_t n, uint32_t E, uint32_t seed) {
    return test::random_floats(size_t(n) * E, seed, -4.0f, 4.0f);
}

// Expert ids for `slots` slots: random with repeats, expert `skip` never chosen (an expert with no token).
std::vector<uint32_t> random_ids(uint32_t slots, uint32_t E, uint32_t seed, uint32_t skip) {
    std::mt19937 rng(seed);
    std::vector<uint32_t> ids(slots);
    for (uint32_t& e : ids) {
        do e = rng() % E;
        while (E > 1 && e == skip);
    }
    return ids;
}

// Routed slots: each of `tokens` tokens picks k distinct experts of E (as moe_route does), expert
// `skip` never; slot t * k + j is token t's j-th.
std::vector<uint32_t> routed_ids(uint32_t tokens, uint32_t k, uint32_t E, uint32_t seed, uint32_t skip) {
    std::mt19937 rng(seed);
    std::vector<uint32_t> ids;
    for (uint32_t t = 0; t < tokens; ++t) {
        std::vector<uint32_t> mine;
        while (mine.size() < k) {
            const uint32_t e = rng() % E;
            if ((e != skip || E <= k) && std::find(mine.begin(), mine.end(), e) == mine.end()) mine.push_back(e);
        }
        ids.insert(ids.end(), mine.begin(), mine.end());
    }
    return ids;
}

// moe_group then moe_matmul on the device: the groups equal ref::moe_group's, and Y[s] =
// W[ids[s]] · X[s / x_div] (+ the expert's bias) against ref::linear slot by slot. int_dot: the
// integer-dot form (the context must take it), against ref::linear of X quantized to Q8_1 (its
// integer sums are exact).
void run_moe_matmul(Context& ctx, TensorType t, uint32_t E, uint32_t n, uint32_t k, const std::vector<uint32_t>& ids,
                    uint32_t tokens, uint32_t x_div, uint32_t seed, const std::string& spec, bool bias = false,
                    bool int_dot = false) {
    const uint32_t slots = uint32_t(ids.size()), rows = slots / x_div;
    const ops::MoeMatmulPlan plan = ops::plan_moe_matmul(ctx.caps(), t, n, k, tokens, int_dot);
    REQUIRE(plan.int_dot() == int_dot);
    const std::string what = fmt::format("{} E={} n={} k={} tokens={} slots={} x_div={}{} {} [{}]", type_traits(t).name,
                                         E, n, k, tokens, slots, x_div, bias ? " +bias" : "", plan.pipeline().shader, spec);
    CAPTURE(what);
    const std::vector<uint8_t> w = test::linear::make_weights(t, E * n, k, seed);
    const std::vector<float> x = test::random_floats(size_t(rows) * k, seed + 1);
    const std::vector<float> b = test::random_floats(size_t(E) * n, seed + 3, -2.0f, 2.0f);
    const uint64_t expert_bytes = uint64_t(n) * row_bytes(t, k);
    std::vector<float> xr = x;  // X as the kernel multiplies it
    if (int_dot)
        for (uint32_t r = 0; r < rows; ++r) ref::quantize_q8_1(x.data() + size_t(r) * k, xr.data() + size_t(r) * k, k);
    std::vector<float> want(size_t(slots) * n);
    // The cooperative-matrix form multiplies X and W rounded to half (ref::linear_f16).
    const auto reference = plan.mm.kernel == ops::MatmulPlan::Kernel::Coopmat ? ref::linear_f16 : ref::linear;
    for (uint32_t sl = 0; sl < slots; ++sl)
        reference(t, w.data() + ids[sl] * expert_bytes, xr.data() + size_t(sl / x_div) * k, want.data() + size_t(sl) * n,
                  1, n, k, nullptr, bias ? b.data() + size_t(ids[sl]) * n : nullptr);
    std::vector<uint32_t> groups_want(ops::moe_group_words(slots, E));
    ref::moe_group(ids.data(), slots, E, groups_want.data());

    Buffer dw = ctx.create_buffer(w.size(), MemoryUsage::Device, "w");
    ctx.upload(dw, w.data(), w.size());
    ShiftedBuffer dx(ctx, x.size() * 4, 0, "x"), di(ctx, slots * 4, 4, "ids");
    dx.upload(x.data(), x.size() * 4);
    di.upload(ids.data(), slots * 4);
    test::GuardedBuffer dy(ctx, want.size() * 4, "y"), db(ctx, b.size() * 4, "bias"),
        dg(ctx, groups_want.size() * 4, "groups");
    db.upload(b.data(), b.size() * 4);
    const BufferSlice bias_slice = db.slice();
    test::GuardedBuffer dq(ctx, std::max<uint64_t>(uint64_t(rows) * ops::q8_1_row_bytes(k), 4), "xq");
    ops::MatvecInput q8;
    if (int_dot) q8.q8 = dq.slice();
    CommandStream s(ctx);
    s.begin();
    ops::moe_group(ctx, s, di.slice(), dg.slice(), slots, E);
    ops::moe_matmul(ctx, s, plan, dw.slice(), E, dx.slice(), x_div, dg.slice(), dy.slice(), tokens, slots, n, k,
                    bias ? &bias_slice : nullptr, q8);
    s.end();
    s.submit_and_wait();
    std::vector<uint32_t> groups(groups_want.size());
    dg.download(groups.data(), groups.size() * 4);
    CHECK(groups == groups_want);
    // The integer-dot form: exact integer sums; the device's reciprocal may move a value at a rounding
    // tie one level, which the element bound allows and a wrong block's error (~1e-3 NMSE) does not.
    test::validate_result(what, dy.download_floats(want.size()), want,
                          int_dot ? test::Tolerance{1e-8, 5e-2, 1e-2} : test::linear::tolerance(k));
    dy.check_guards();
    dg.check_guards();
    db.check_guards();
    dq.check_guards();
}

// Y[s] = W[ids[s]] · input(X[s / x_div]) on the device against ref::linear slot by slot.
// x_shift: bytes X (and the up rows, twice as many) start past an aligned offset; 0 lets the kernel
// read them as vec4s. bias: every expert has a bias row (gpt-oss), added to its slots' outputs.
// Returns Y as the device computed it.
std::vector<float> run_moe_matvec(Context& ctx, TensorType t, uint32_t E, uint32_t n, uint32_t k,
                                  const std::vector<uint32_t>& ids, uint32_t x_div, ops::MatvecInput::Kind input,
                                  uint32_t seed, const std::string& spec, uint32_t x_shift = 4, bool bias = false,
                                  bool int_dot = false) {
    using Kind = ops::MatvecInput::Kind;
    const uint32_t slots = uint32_t(ids.size()), rows = slots / x_div;
    const ops::MoeMatvecPlan plan = ops::plan_moe_matvec(ctx.caps(), t, n, k, rows, input, int_dot);
    REQUIRE(plan.int_dot() == int_dot);
    const std::string what = fmt::format("{} E={} n={} k={} slots={} x_div={}{} x+{} {} [{}]", type_traits(t).name, E, n,
                                         k, slots, x_div, input == Kind::Plain ? "" : input == Kind::SwiGluOai ? " +swiglu_oai" : " +swiglu",
                                         x_shift, plan.pipeline().shader, spec);
    CAPTURE(what);
    const std::vector<uint8_t> w = test::linear::make_weights(t, E * n, k, seed);
    // gpt-oss's GLU clamps gate and up at 7: inputs reach past it.
    const float amp = input == Kind::SwiGluOai ? 10.0f : 1.0f;
    const std::vector<float> x = test::random_floats(size_t(rows) * k, seed + 1, -amp, amp);
    const std::vector<float> up = test::random_floats(size_t(rows) * k, seed + 2, -amp, amp);
    const std::vector<float> b = test::random_floats(size_t(E) * n, seed + 3, -2.0f, 2.0f);  // [E][n]
    std::vector<float> xin = x;
    if (input == Kind::SwiGlu) ref::swiglu(x.data(), up.data(), xin.data(), uint32_t(x.size()));
    if (input == Kind::SwiGluOai) ref::swiglu_oai(x.data(), up.data(), xin.data(), uint32_t(x.size()));
    if (int_dot)  // the integer-dot form multiplies the GLU's output quantized to Q8_1
        for (uint32_t r = 0; r < rows; ++r) ref::quantize_q8_1(xin.data() + size_t(r) * k, xin.data() + size_t(r) * k, k);
    const uint64_t expert_bytes = uint64_t(n) * row_bytes(t, k);
    std::vector<float> want(size_t(slots) * n);
    for (uint32_t sl = 0; sl < slots; ++sl)
        ref::linear(t, w.data() + ids[sl] * expert_bytes, xin.data() + size_t(sl / x_div) * k, want.data() + size_t(sl) * n,
                    1, n, k, nullptr, bias ? b.data() + size_t(ids[sl]) * n : nullptr);

    Buffer dw = ctx.create_buffer(w.size(), MemoryUsage::Device, "w");
    ctx.upload(dw, w.data(), w.size());
    ShiftedBuffer dx(ctx, x.size() * 4, x_shift, "x"), du(ctx, up.size() * 4, 2 * x_shift, "up"),
        di(ctx, slots * 4, 4, "ids");
    dx.upload(x.data(), x.size() * 4);
    du.upload(up.data(), up.size() * 4);
    di.upload(ids.data(), slots * 4);
    test::GuardedBuffer dy(ctx, want.size() * 4, "y"), db(ctx, b.size() * 4, "bias");
    db.upload(b.data(), b.size() * 4);
    const BufferSlice bias_slice = db.slice();
    ops::MatvecInput in{};
    in.kind = input;
    if (input != ops::MatvecInput::Kind::Plain) in.up = du.slice();
    test::GuardedBuffer dq(ctx, std::max<uint64_t>(uint64_t(rows) * ops::q8_1_row_bytes(k), 4), "xq");
    if (int_dot) in.q8 = dq.slice();
    CommandStream s(ctx);
    s.begin();
    ops::moe_matvec(ctx, s, plan, dw.slice(), E, dx.slice(), x_div, di.slice(), dy.slice(), slots, n, k, in,
                    bias ? &bias_slice : nullptr);
    s.end();
    s.submit_and_wait();
    const std::vector<float> got = dy.download_floats(want.size());
    // The integer-dot form: exact integer sums (a value at a rounding tie may move one level).
    test::validate_result(what, got, want, int_dot ? test::Tolerance{1e-8, 5e-2, 1e-2} : test::linear::tolerance(k));
    dq.check_guards();
    dy.check_guards();
    dx.check_guards();
    db.check_guards();
    return got;
}

}  // namespace

TEST_CASE("moe_route: experts and weights of the reference, every gating, ties and real router sizes") {
    test::ValidationGuard guard;
    using G = ops::MoeGating;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        run_route(ctx, router_logits(1, 8, 1), 1, {8, 2, G::Softmax, true, 1.0f}, "Mixtral: 8 experts, top-2, one token");
        run_route(ctx, router_logits(7, 128, 2), 7, {128, 8, G::Softmax, true, 1.0f}, "Qwen3-30B-A3B: 128, top-8");
        run_route(ctx, router_logits(5, 60, 3), 5, {60, 4, G::Softmax, false, 1.0f}, "Qwen1.5-MoE: 60, top-4, unnormalised");
        run_route(ctx, router_logits(3, 64, 4), 3, {64, 6, G::Softmax, false, 1.0f}, "DeepSeek-V2-Lite: 64, top-6");
        run_route(ctx, router_logits(4, 256, 5), 4, {256, 8, G::Sigmoid, true, 2.5f}, "V3-shaped: sigmoid, scaled 2.5");
        run_route(ctx, router_logits(2, 32, 6), 2, {32, 4, G::SoftmaxTopK, false, 1.0f}, "gpt-oss: softmax of the chosen");
        run_route(ctx, router_logits(3, 4, 7), 3, {4, 4, G::Softmax, true, 1.0f}, "k = n_expert");
        run_route(ctx, router_logits(65, 1000, 8), 65, {1000, 64, G::Softmax, true, 1.0f}, "1000 experts, top-64, 65 tokens");
        run_route(ctx, router_logits(9, 16, 9), 9, {16, 2, G::Softmax, true, 1.0f}, "shifted slices", 4);
        // Few distinct logits: ties across the top-k boundary go to the lower index.
        std::vector<float> ties = router_logits(6, 40, 10);
        for (float& v : ties) v = std::floor(v);
        run_route(ctx, ties, 6, {40, 8, G::Softmax, true, 1.0f}, "integer logits");
        std::vector<float> same(3 * 12, 0.25f);
        run_route(ctx, same, 3, {12, 5, G::Softmax, false, 1.0f}, "all equal");
    }
}

TEST_CASE("moe_route: DeepSeek's selection bias and group-limited top-k (V2 softmax 160/8 groups, V3 sigmoid 256/8)") {
    test::ValidationGuard guard;
    using G = ops::MoeGating;
    // A bias of the size of the probabilities' differences, so that it changes the choice.
    const std::vector<float> b256 = test::random_floats(256, 21, -0.05f, 0.05f);
    const std::vector<float> b64 = test::random_floats(64, 22, -0.3f, 0.3f);
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        ops::MoeRouteParams v3{256, 8, G::Sigmoid, true, 2.5f};
        v3.bias = true;
        v3.n_group = 8, v3.group_used = 4;
        run_route(ctx, router_logits(9, 256, 23), 9, v3, "DeepSeek-V3: 256 sigmoid, bias, 8 groups keep 4, top-8", 4, b256);
        ops::MoeRouteParams v2{160, 6, G::Softmax, false, 16.0f};
        v2.n_group = 8, v2.group_used = 3;
        run_route(ctx, router_logits(5, 160, 24), 5, v2, "DeepSeek-V2: 160 softmax, 8 groups keep 3, top-6, scale 16");
        ops::MoeRouteParams biased{64, 6, G::Sigmoid, true, 1.0f};
        biased.bias = true;
        run_route(ctx, router_logits(7, 64, 25), 7, biased, "bias alone: 64 sigmoid, top-6", 0, b64);
        ops::MoeRouteParams one{64, 4, G::Softmax, true, 1.0f};
        one.n_group = 16, one.group_used = 1;
        run_route(ctx, router_logits(3, 64, 26), 3, one, "16 groups of 4, one kept, k = its size");
    }
    // The bias must change some choices for this test to mean anything: without it, the V3 case differs.
    std::vector<uint32_t> with(9 * 8), without(9 * 8);
    std::vector<float> w(9 * 8);
    const std::vector<float> l = router_logits(9, 256, 23);
    ops::MoeRouteParams p{256, 8, G::Sigmoid, true, 2.5f};
    p.n_group = 8, p.group_used = 4;
    ref::moe_route(l.data(), 9, p, without.data(), w.data());
    p.bias = true;
    ref::moe_route(l.data(), 9, p, with.data(), w.data(), b256.data());
    CHECK(with != without);
    // Groups must change some choices too: the plain top-8 of the V2 case differs.
    const std::vector<float> l2 = router_logits(5, 160, 24);
    std::vector<uint32_t> grouped(5 * 6), plain(5 * 6);
    std::vector<float> w2(5 * 6);
    ops::MoeRouteParams q{160, 6, G::Softmax, false, 16.0f};
    ref::moe_route(l2.data(), 5, q, plain.data(), w2.data());
    q.n_group = 8, q.group_used = 3;
    ref::moe_route(l2.data(), 5, q, grouped.data(), w2.data());
    CHECK(grouped != plain);
}

TEST_CASE("moe_route: NaN logits still give distinct valid experts; bad parameters are refused") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const uint32_t E = 16, K = 4;
    std::vector<float> l = router_logits(2, E, 11);
    l[3] = std::numeric_limits<float>::quiet_NaN();
    for (uint32_t e = 0; e < E; ++e) l[E + e] = std::numeric_limits<float>::quiet_NaN();
    Buffer dl = ctx.create_buffer(l.size() * 4, MemoryUsage::Device, "l"), di = ctx.create_buffer(2 * K * 4, MemoryUsage::Device, "i"),
           dw = ctx.create_buffer(2 * K * 4, MemoryUsage::Device, "w");
    ctx.upload(dl, l.data(), l.size() * 4);
    CommandStream s(ctx);
    s.begin();
    ops::moe_route(ctx, s, {E, K, ops::MoeGating::Softmax, true, 1.0f}, dl.slice(), di.slice(), dw.slice(), 2);
    s.end();
    s.submit_and_wait();
    std::vector<uint32_t> ids(2 * K);
    ctx.download(di, ids.data(), ids.size() * 4);
    for (uint32_t t = 0; t < 2; ++t) {
        std::set<uint32_t> seen;
        for (uint32_t j = 0; j < K; ++j) {
            CHECK(ids[t * K + j] < E);
            seen.insert(ids[t * K + j]);
        }
        CHECK(seen.size() == K);
    }

    CommandStream bad(ctx);
    bad.begin();
    CHECK_THROWS_AS(ops::moe_route(ctx, bad, {0, 1}, dl.slice(), di.slice(), dw.slice(), 1), std::invalid_argument);
    CHECK_THROWS_AS(ops::moe_route(ctx, bad, {8, 9}, dl.slice(), di.slice(), dw.slice(), 1), std::invalid_argument);
    CHECK_THROWS_AS(ops::moe_route(ctx, bad, {2000, 8}, dl.slice(), di.slice(), dw.slice(), 1), std::invalid_argument);
    CHECK_THROWS_AS(ops::moe_route(ctx, bad, {128, 65}, dl.slice(), di.slice(), dw.slice(), 1), std::invalid_argument);
    CHECK_THROWS_AS(ops::moe_route(ctx, bad, {16, 4, ops::MoeGating::Softmax, true, NAN}, dl.slice(), di.slice(),
                                   dw.slice(), 1), std::invalid_argument);
    CHECK_THROWS_AS(ops::moe_route(ctx, bad, {16, 4}, dl.slice(), di.slice(), dw.slice(), 100), std::invalid_argument);
    ops::MoeRouteParams g{16, 4};
    g.n_group = 3;  // does not divide 16
    CHECK_THROWS_AS(ops::moe_route(ctx, bad, g, dl.slice(), di.slice(), dw.slice(), 1), std::invalid_argument);
    g.n_group = 16;  // groups of one expert
    CHECK_THROWS_AS(ops::moe_route(ctx, bad, g, dl.slice(), di.slice(), dw.slice(), 1), std::invalid_argument);
    g.n_group = 8, g.group_used = 1;  // one group of 2 leaves fewer than 4 experts
    CHECK_THROWS_AS(ops::moe_route(ctx, bad, g, dl.slice(), di.slice(), dw.slice(), 1), std::invalid_argument);
    ops::MoeRouteParams nb{16, 4};
    nb.bias = true;  // no bias slice given
    CHECK_THROWS_AS(ops::moe_route(ctx, bad, nb, dl.slice(), di.slice(), dw.slice(), 1), std::invalid_argument);
    CHECK(bad.stats().dispatches == 0);
    bad.end();
}

TEST_CASE("moe_matvec: only the chosen experts' rows, every weight type") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        uint32_t seed = 100;
        for (TensorType t : test::linear::kTypes) {
            // 6 experts of 40 rows (not a multiple of any rows-per-workgroup), 3 tokens x top-2
            // reading their token's row; expert 5 gets no token, some get several.
            const uint32_t k = test::linear::blocks_k(t, 3);
            run_moe_matvec(ctx, t, 6, 40, k, random_ids(6, 6, seed, 5), 2, ops::MatvecInput::Kind::Plain, seed, spec);
            seed += 10;
        }
        // The down projection: each slot its own input row, SwiGLU formed as the rows load.
        for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K}) {
            const uint32_t k = test::linear::blocks_k(t, 2);
            run_moe_matvec(ctx, t, 5, 33, k, random_ids(8, 5, seed, 1), 1, ops::MatvecInput::Kind::SwiGlu, seed, spec);
            seed += 10;
        }
        // X and the up rows on 16 bytes: read as vec4s.
        run_moe_matvec(ctx, TensorType::Q4_K, 5, 24, 256, random_ids(6, 5, seed, 0), 2, ops::MatvecInput::Kind::Plain,
                       seed, spec, 0);
        run_moe_matvec(ctx, TensorType::F16, 5, 24, 64, random_ids(6, 5, seed + 1, 0), 1, ops::MatvecInput::Kind::SwiGlu,
                       seed + 1, spec, 0);
        // Every token to one expert; k = n_expert.
        run_moe_matvec(ctx, TensorType::Q4_0, 4, 64, 96, std::vector<uint32_t>(12, 2), 3, ops::MatvecInput::Kind::Plain, 7, spec);
        run_moe_matvec(ctx, TensorType::Q8_0, 3, 16, 64, {0, 1, 2, 2, 1, 0}, 3, ops::MatvecInput::Kind::Plain, 8, spec);
    }
}

TEST_CASE("moe_matvec: the integer-dot form (--caps int-dot), every integer-dot type, GLU inputs, biases, windows") {
    test::ValidationGuard guard;
    using Kind = ops::MatvecInput::Kind;
    for (const std::string spec : {"int-dot", "int-dot,gpu-tuning", "int-dot,gpu-tuning,no-subgroup-ops"}) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        REQUIRE(ctx.caps().int_dot_kernels);
        uint32_t seed = 600;
        for (TensorType t : test::linear::kTypes) {
            const uint32_t k = test::linear::blocks_k(t, 3);
            if (!ops::int_dot_type(t)) {
                CHECK_FALSE(ops::plan_moe_matvec(ctx.caps(), t, 40, k, 3, Kind::Plain, true).int_dot());
                continue;
            }
            run_moe_matvec(ctx, t, 6, 40, k, random_ids(6, 6, seed, 5), 2, Kind::Plain, seed, spec, 4, false, true);
            run_moe_matvec(ctx, t, 5, 33, k, random_ids(8, 5, seed + 1, 1), 1, Kind::SwiGlu, seed + 1, spec, 4, true, true);
            seed += 10;
        }
        run_moe_matvec(ctx, TensorType::MXFP4, 8, 40, 96, random_ids(12, 8, 42, 3), 1, Kind::SwiGluOai, 42, spec, 4, true, true);
        run_moe_matvec(ctx, TensorType::Q4_0, 4, 64, 96, std::vector<uint32_t>(12, 2), 3, Kind::Plain, 7, spec, 4, false, true);
    }
    Context& ctx = test::context_for("int-dot,gpu-tuning");
    run_moe_matvec(ctx, TensorType::Q4_K, 128, 768, 2048, random_ids(8, 128, 21, 0), 8, Kind::Plain, 21, "real", 4, false, true);
    run_moe_matvec(ctx, TensorType::Q6_K, 128, 2048, 768, random_ids(8, 128, 22, 0), 1, Kind::SwiGlu, 22, "real", 4, false, true);
    Context& small = test::context_for("int-dot,max-storage-range=64k");
    run_moe_matvec(small, TensorType::Q8_0, 10, 96, 256, random_ids(9, 10, 81, 4), 3, Kind::Plain, 81, "windows", 4, false, true);
}

TEST_CASE("moe_matvec: gpt-oss's expert biases and clamped SwiGLU, MXFP4 and F16, at its real expert size") {
    test::ValidationGuard guard;
    using Kind = ops::MatvecInput::Kind;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (TensorType t : {TensorType::MXFP4, TensorType::F16}) {
            // gate / up: 3 tokens x top-4 of 8 experts reading their token's row, each expert's bias added
            run_moe_matvec(ctx, t, 8, 40, 96, random_ids(12, 8, 41, 3), 4, Kind::Plain, 41, spec, 4, true);
            // down: the clamped GLU of each slot's gate and up rows, then the bias
            run_moe_matvec(ctx, t, 8, 40, 96, random_ids(12, 8, 42, 3), 1, Kind::SwiGluOai, 42, spec, 4, true);
            run_moe_matvec(ctx, t, 8, 24, 64, random_ids(8, 8, 43, 0), 1, Kind::SwiGluOai, 43, spec, 0, true);
        }
    }
    // gpt-oss-20b: 32 experts of 2880 x 2880 in MXFP4, a token's top-4 (gate) and their down rows.
    Context& ctx = test::float_path_context();
    run_moe_matvec(ctx, TensorType::MXFP4, 32, 2880, 2880, random_ids(4, 32, 44, 0), 4, Kind::Plain, 44, "real", 4, true);
    run_moe_matvec(ctx, TensorType::MXFP4, 32, 2880, 2880, random_ids(4, 32, 45, 0), 1, Kind::SwiGluOai, 45, "real", 4, true);
}

TEST_CASE("moe_matvec: Qwen3-30B-A3B-sized experts, decode and a prefill chunk") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    // 128 experts of 768 x 2048 (gate/up) and 2048 x 768 (down) in Q4_K: a token's top-8.
    run_moe_matvec(ctx, TensorType::Q4_K, 128, 768, 2048, random_ids(8, 128, 21, 0), 8, ops::MatvecInput::Kind::Plain, 21,
                   "real");
    run_moe_matvec(ctx, TensorType::Q4_K, 128, 2048, 768, random_ids(8, 128, 22, 0), 1, ops::MatvecInput::Kind::SwiGlu,
                   22, "real");
    // Mixtral's shape class (8 experts, top-2) over a chunk of 24 tokens, at a smaller width; its
    // down projection's 48 input rows (96 KiB) are past a uniform binding on every device.
    run_moe_matvec(ctx, TensorType::Q8_0, 8, 1024, 512, random_ids(48, 8, 23, 8), 2, ops::MatvecInput::Kind::Plain, 23,
                   "real");
    run_moe_matvec(ctx, TensorType::Q4_0, 8, 512, 512, random_ids(48, 8, 24, 8), 1, ops::MatvecInput::Kind::SwiGlu, 24,
                   "real");
}

TEST_CASE("moe_matvec: DeepSeek's per-head latent projections (a head is an expert): wk_b 128 -> 512 and wv_b 512 -> 128 x 16 heads") {
    // Latent attention absorbs wk_b into each head's query and applies wv_b after attention: slot
    // t * H + h reads head h's matrix and its own input row, for a decode step and a prefill chunk.
    test::ValidationGuard guard;
    const uint32_t H = 16;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t tokens : {1u, 5u}) {
            std::vector<uint32_t> heads(tokens * H);
            for (uint32_t i = 0; i < heads.size(); ++i) heads[i] = i % H;
            for (TensorType t : {TensorType::F16, TensorType::Q8_0}) {
                run_moe_matvec(ctx, t, H, 512, 128, heads, 1, ops::MatvecInput::Kind::Plain, 40 + tokens, spec, 0);
                run_moe_matvec(ctx, t, H, 128, 512, heads, 1, ops::MatvecInput::Kind::Plain, 50 + tokens, spec, 0);
            }
        }
    }
}

TEST_CASE("moe_matvec: rows of X past one uniform binding run in dispatches of the rows that fit, bit for bit as alone") {
    // Mixtral's decode down projection reads 2 slots x 14336 floats (112 KiB); a CPU driver binds X
    // as a uniform buffer of at most 64 KiB, so each dispatch takes the rows that fit. Rows of 6144
    // floats (24 KiB): two per dispatch.
    test::ValidationGuard guard;
    using Kind = ops::MatvecInput::Kind;
    const uint32_t k = 6144;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        const ops::MoeMatvecPlan plan = ops::plan_moe_matvec(ctx.caps(), TensorType::Q4_0, 24, k, 5, Kind::SwiGlu);
        // Two rows fit 64 KiB; a device variant with a 16 KiB uniform range (or a GPU) reads X as
        // storage, all rows in one dispatch.
        const bool uniform = ctx.caps().cpu_tuning && ctx.caps().max_uniform_buffer_range >= 65536;
        CHECK(plan.uniform_x == uniform);
        CHECK(plan.x_rows_per_dispatch == (uniform ? 2u : 5u));
        const std::vector<uint32_t> ids = {3, 0, 3, 1, 2};
        for (auto [t, input] : {std::pair{TensorType::Q4_0, Kind::SwiGlu}, std::pair{TensorType::Q8_0, Kind::Plain}}) {
            const std::vector<float> all = run_moe_matvec(ctx, t, 4, 24, k, ids, 1, input, 61, spec);
            // The first slot alone (X's first row: the same seed) gives the same bits.
            const std::vector<float> one = run_moe_matvec(ctx, t, 4, 24, k, {ids[0]}, 1, input, 61, spec);
            CHECK(std::equal(one.begin(), one.end(), all.begin()));
        }
        // Three rows of X shared by two slots each (gate / up of a decode batch).
        run_moe_matvec(ctx, TensorType::Q4_0, 4, 24, k, {0, 3, 1, 2, 2, 0}, 2, Kind::Plain, 62, spec);
    }
}

TEST_CASE("moe_matvec: a stack larger than one binding runs in windows of whole experts") {
    test::ValidationGuard guard;
    // 64 KiB bindings: 10 experts of 96 rows x 256 Q8_0 (26 KiB each) take two experts per window.
    Context& ctx = test::context_for("max-storage-range=64k");
    run_moe_matvec(ctx, TensorType::Q8_0, 10, 96, 256, random_ids(12, 10, 31, 4), 3, ops::MatvecInput::Kind::Plain, 31,
                   "max-storage-range=64k");
    // An expert larger than a binding is refused naming the limit.
    Buffer b = ctx.create_buffer(1 << 20, MemoryUsage::Device, "b");
    const ops::MoeMatvecPlan plan = ops::plan_moe_matvec(ctx.caps(), TensorType::F32, 256, 256, 1);
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::moe_matvec(ctx, s, plan, b.slice(), 2, b.slice(), 1, b.slice(), b.slice(), 1, 256, 256),
                    DeviceLimitError);
    s.end();
}

TEST_CASE("moe_matmul: a prefill chunk grouped per expert, every weight type, empty and crowded experts") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        uint32_t seed = 500;
        for (TensorType t : test::linear::kTypes) {
            // 6 experts of 40 rows, 13 tokens x top-2: gate / up read their token's row, down each
            // slot's own; expert 5 gets no token.
            const uint32_t k = test::linear::blocks_k(t, 3);
            const std::vector<uint32_t> ids = routed_ids(13, 2, 6, seed, 5);
            run_moe_matmul(ctx, t, 6, 40, k, ids, 13, 2, seed, spec);
            run_moe_matmul(ctx, t, 6, 40, k, ids, 13, 1, seed + 1, spec, true);
            seed += 10;
        }
        // More tokens than a tile for one expert (every token's first choice), k = n_expert, one expert.
        std::vector<uint32_t> crowded = routed_ids(70, 2, 4, 61, 9);
        for (size_t i = 0; i < crowded.size(); i += 2)
            if (crowded[i] != 1 && crowded[i + 1] != 1) crowded[i] = 1;
        run_moe_matmul(ctx, TensorType::Q4_0, 4, 48, 64, crowded, 70, 2, 62, spec);
        run_moe_matmul(ctx, TensorType::F16, 3, 24, 64, routed_ids(9, 3, 3, 63, 9), 9, 3, 63, spec);
        run_moe_matmul(ctx, TensorType::Q8_0, 1, 33, 64, routed_ids(20, 1, 1, 64, 9), 20, 1, 64, spec);
    }
    // Real sizes: Qwen3-30B-A3B (128 experts of 768 x 2048, Q4_K) for 64 tokens x top-8; gpt-oss-20b
    // (32 of 2880 x 2880, MXFP4, biases) for 16 tokens x top-4.
    Context& ctx = test::float_path_context();
    run_moe_matmul(ctx, TensorType::Q4_K, 128, 768, 2048, routed_ids(64, 8, 128, 71, 0), 64, 8, 71, "real");
    run_moe_matmul(ctx, TensorType::MXFP4, 32, 2880, 2880, routed_ids(16, 4, 32, 72, 0), 16, 1, 72, "real", true);
}

TEST_CASE("moe_matmul: the integer-dot form (--caps int-dot), every integer-dot type, empty and crowded experts, real sizes") {
    test::ValidationGuard guard;
    for (const std::string spec : {"int-dot", "int-dot,gpu-tuning"}) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        REQUIRE(ctx.caps().int_dot_kernels);
        uint32_t seed = 900;
        for (TensorType t : test::linear::kTypes) {
            if (!ops::int_dot_type(t)) {
                CHECK_FALSE(ops::plan_moe_matmul(ctx.caps(), t, 40, test::linear::blocks_k(t, 3), 13, true).int_dot());
                continue;
            }
            const uint32_t k = test::linear::blocks_k(t, 3);
            const std::vector<uint32_t> ids = routed_ids(13, 2, 6, seed, 5);
            run_moe_matmul(ctx, t, 6, 40, k, ids, 13, 2, seed, spec, false, true);
            run_moe_matmul(ctx, t, 6, 40, k, ids, 13, 1, seed + 1, spec, true, true);
            seed += 10;
        }
        std::vector<uint32_t> crowded = routed_ids(70, 2, 4, 61, 9);
        for (size_t i = 0; i < crowded.size(); i += 2)
            if (crowded[i] != 1 && crowded[i + 1] != 1) crowded[i] = 1;
        run_moe_matmul(ctx, TensorType::Q4_0, 4, 48, 64, crowded, 70, 2, 62, spec, false, true);
        run_moe_matmul(ctx, TensorType::Q8_0, 1, 33, 64, routed_ids(20, 1, 1, 64, 9), 20, 1, 64, spec, false, true);
    }
    Context& ctx = test::context_for("int-dot,gpu-tuning");
    run_moe_matmul(ctx, TensorType::Q4_K, 128, 768, 2048, routed_ids(64, 8, 128, 71, 0), 64, 8, 71, "real", false, true);
    run_moe_matmul(ctx, TensorType::MXFP4, 32, 2880, 2880, routed_ids(16, 4, 32, 72, 0), 16, 1, 72, "real", true, true);
    Context& small = test::context_for("int-dot,max-storage-range=64k");
    run_moe_matmul(small, TensorType::Q8_0, 10, 96, 256, routed_ids(12, 3, 10, 81, 4), 12, 3, 81, "windows", false, true);
}

TEST_CASE("moe_matmul: the cooperative-matrix form (--caps coopmat), every weight type, empty and crowded experts, real sizes") {
    test::ValidationGuard guard;
    Context* ctx = test::coopmat_context();
    if (!ctx) return;
    uint32_t seed = 1300;
    for (TensorType t : test::linear::kTypes) {
        CAPTURE(type_traits(t).name);
        REQUIRE(ops::plan_moe_matmul(ctx->caps(), t, 40, test::linear::blocks_k(t, 3), 13).mm.kernel ==
                ops::MatmulPlan::Kernel::Coopmat);
        const uint32_t k = test::linear::blocks_k(t, 3);
        const std::vector<uint32_t> ids = routed_ids(13, 2, 6, seed, 5);
        run_moe_matmul(*ctx, t, 6, 40, k, ids, 13, 2, seed, "coopmat");
        run_moe_matmul(*ctx, t, 6, 40, k, ids, 13, 1, seed + 1, "coopmat", true);
        seed += 10;
    }
    std::vector<uint32_t> crowded = routed_ids(70, 2, 4, 61, 9);
    for (size_t i = 0; i < crowded.size(); i += 2)
        if (crowded[i] != 1 && crowded[i + 1] != 1) crowded[i] = 1;
    run_moe_matmul(*ctx, TensorType::Q4_0, 4, 48, 64, crowded, 70, 2, 62, "coopmat");
    run_moe_matmul(*ctx, TensorType::Q4_K, 128, 768, 2048, routed_ids(64, 8, 128, 71, 0), 64, 8, 71, "coopmat real");
    run_moe_matmul(*ctx, TensorType::MXFP4, 32, 2880, 2880, routed_ids(16, 4, 32, 72, 0), 16, 1, 72, "coopmat real", true);
}

TEST_CASE("moe_matmul: a stack larger than one binding runs in windows of whole experts") {
    test::ValidationGuard guard;
    Context& ctx = test::context_for("max-storage-range=64k");
    run_moe_matmul(ctx, TensorType::Q8_0, 10, 96, 256, routed_ids(12, 3, 10, 81, 4), 12, 3, 81, "max-storage-range=64k");
}

TEST_CASE("moe_combine: weighted expert outputs and the gated shared expert") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (const auto& [n, k, dim] : {std::tuple{1u, 2u, 64u}, std::tuple{5u, 8u, 100u}, std::tuple{17u, 4u, 2048u}}) {
            for (int shared = 0; shared < 3; ++shared) {  // none, shared, gated shared
                const std::string what = fmt::format("n={} k={} dim={} shared={} [{}]", n, k, dim, shared, spec);
                CAPTURE(what);
                const auto y = test::random_floats(size_t(n) * k * dim, n + k);
                const auto w = test::random_floats(size_t(n) * k, n + k + 1, 0.0f, 1.0f);
                const auto x0 = test::random_floats(size_t(n) * dim, n + k + 2);
                const auto sh = test::random_floats(size_t(n) * dim, n + k + 3);
                const auto g = test::random_floats(n, n + k + 4, -3.0f, 3.0f);
                std::vector<float> want = x0;
                ref::moe_combine(y.data(), w.data(), want.data(), n, k, dim, shared ? sh.data() : nullptr,
                                 shared == 2 ? g.data() : nullptr);
                ShiftedBuffer dy(ctx, y.size() * 4, 4, "y"), dw(ctx, w.size() * 4, 8, "w"), dx(ctx, x0.size() * 4, 4, "x"),
                    ds(ctx, sh.size() * 4, 12, "s"), dg(ctx, g.size() * 4, 4, "g");
                dy.upload(y.data(), y.size() * 4);
                dw.upload(w.data(), w.size() * 4);
                dx.upload(x0.data(), x0.size() * 4);
                ds.upload(sh.data(), sh.size() * 4);
                dg.upload(g.data(), g.size() * 4);
                const BufferSlice ss = ds.slice(), gs = dg.slice();
                CommandStream s(ctx);
                s.begin();
                ops::moe_combine(ctx, s, dy.slice(), dw.slice(), dx.slice(), n, k, dim, shared ? &ss : nullptr,
                                 shared == 2 ? &gs : nullptr);
                s.end();
                s.submit_and_wait();
                test::validate_result(what, dx.download_floats(want.size()), want, {1e-12, 1e-5, 1e-5});
                dx.check_guards();
            }
        }
    }
}
