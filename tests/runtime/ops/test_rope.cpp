#include "support/test_context.h"

#include "support/small_ops_testing.h"

#include "runtime/ops/rope.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

using namespace vkllm;
using small_ops_testing::ShiftedBuffer;
using ops::RopeLayout;

namespace {

struct RopeShape {
    uint32_t n_tokens, n_heads, head_dim, rot_dim;
    float base;
    RopeLayout layout;
};

// Tolerance for fp32 RoPE against the double reference. The device computes theta = pos * freq in
// fp32: freq = exp2(i * log2_step) carries a few ulp (the exponent is rounded, exp2 is not exact) and
// the product one more rounding, so at the fastest pairs (freq ~ 1) the angle is off by a few
// pos * 2^-24 radians, and so is a rotated element (|x| <= 1): let angle = pos * 2^-24 (6e-5 at pos
// 1000, 2.4e-4 at 4095, 2e-3 at 32767). Measured on lavapipe: max |error| = 1.4-2.1 angle and
// nmse = 0.08-0.11 angle^2 (the slow pairs, most of them, are nearly exact). Bounds: element-wise
// 2e-6 + 8 angle (4x headroom for drivers with a looser exp2; ~1e-6 of that for cos/sin), nmse
// angle^2 (10x headroom), but never looser than the f32 standard 1e-7 where that is met (positions
// below ~5000). A wrong frequency, layout or pairing gives nmse ~1 at any position.
test::Tolerance rope_tolerance(int32_t max_pos) {
    const double angle = double(max_pos) * std::ldexp(1.0, -24);
    return {std::max(1e-7, angle * angle), 2e-6 + 8 * angle, 1e-4};
}

std::vector<int32_t> positions_from(int32_t first, uint32_t n) {
    std::vector<int32_t> p(n);
    std::iota(p.begin(), p.end(), first);
    return p;
}

// Runs ops::rope with `rp` (and frequency factors when ff is not empty) and compares with
// ref::rope. max_rate bounds the per-pair angle rate (d theta / d pos, 1 for plain RoPE) that the
// tolerance scales with.
test::Compare run_rope_params(Context& ctx, uint32_t n_tokens, const ops::RopeParams& rp, const std::vector<float>& ff,
                              const std::vector<int32_t>& pos, double max_rate = 1.0, uint32_t shift = 0) {
    CAPTURE(n_tokens);
    CAPTURE(rp.n_heads);
    CAPTURE(rp.head_dim);
    CAPTURE(rp.rot_dim);
    CAPTURE(rp.base);
    CAPTURE(int(rp.layout));
    CAPTURE(rp.freq_scale);
    CAPTURE(rp.ext_factor);
    CAPTURE(ff.size());
    CAPTURE(pos.front());
    CAPTURE(shift);
    const size_t n = size_t(n_tokens) * rp.n_heads * rp.head_dim;
    auto x = test::random_floats(n, 300 + n_tokens + rp.head_dim + uint32_t(pos.front()));
    auto ref = x;
    ref::rope(ref.data(), pos.data(), n_tokens, rp, ff.empty() ? nullptr : ff.data());

    ShiftedBuffer dx(ctx, n * 4, shift, "x"), dp(ctx, pos.size() * 4, shift, "positions"),
        dff(ctx, std::max<size_t>(ff.size(), 1) * 4, shift, "freq_factors");
    dx.upload(x.data(), n * 4);
    dp.upload(pos.data(), pos.size() * 4);
    if (!ff.empty()) dff.upload(ff.data(), ff.size() * 4);
    const BufferSlice ff_slice = dff.slice();
    CommandStream s(ctx);
    s.begin();
    ops::rope(ctx, s, dx.slice(), dp.slice(), n_tokens, rp, ff.empty() ? nullptr : &ff_slice);
    s.end();
    s.submit_and_wait();
    auto got = dx.download_floats(n);
    const int32_t max_pos = *std::max_element(pos.begin(), pos.end());
    auto c = test::validate_result(
        fmt::format("rope x[{}][{}][{}] rot {} layout {} freq_scale {} ext {} ff {} pos {}..{}", n_tokens, rp.n_heads,
                    rp.head_dim, rp.rot_dim, int(rp.layout), rp.freq_scale, rp.ext_factor, ff.size(), pos.front(),
                    pos.back()),
        got, ref, rope_tolerance(int32_t(std::ceil(max_pos * max_rate))));
    // Elements past rot_dim are not touched at all.
    size_t changed = 0;
    for (size_t h = 0; h < n / rp.head_dim; ++h)
        for (uint32_t i = rp.rot_dim; i < rp.head_dim; ++i) changed += got[h * rp.head_dim + i] != x[h * rp.head_dim + i];
    CHECK(changed == 0);
    dx.check_guards();
    dp.check_guards();
    dff.check_guards();
    return c;
}

test::Compare run_rope(Context& ctx, const RopeShape& sh, const std::vector<int32_t>& pos, uint32_t shift = 0) {
    return run_rope_params(ctx, sh.n_tokens, {sh.n_heads, sh.head_dim, sh.rot_dim, sh.base, sh.layout}, {}, pos, 1.0,
                           shift);
}

// Positive frequency factors in [lo, hi], as Llama 3.x (rope_freqs) and Phi-3 (long/short factors) carry.
std::vector<float> random_factors(uint32_t n, uint32_t seed, float lo, float hi) {
    return test::random_floats(n, seed, lo, hi);
}

// The largest angle rate over the pairs (what the fp32 angle error scales with), in double.
double max_rate(const ops::RopeParams& rp, const std::vector<float>& ff) {
    double r = 0;
    for (uint32_t i = 0; i < rp.rot_dim / 2; ++i)
        r = std::max(r, std::pow(double(rp.base), -2.0 * i / rp.rot_dim) / (ff.empty() ? 1.0 : ff[i]) *
                            std::max(1.0, double(rp.freq_scale)));
    return r;
}

}  // namespace

TEST_CASE("rope: tiny shapes, both layouts, rot_dim < head_dim") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (RopeLayout layout : {RopeLayout::Adjacent, RopeLayout::HalfSplit}) {
            run_rope(ctx, {1, 1, 2, 2, 10000.0f, layout}, {5});
            run_rope(ctx, {3, 2, 8, 8, 10000.0f, layout}, {0, 1, 2});
            run_rope(ctx, {7, 3, 10, 6, 10000.0f, layout}, positions_from(0, 7));
            run_rope(ctx, {2, 5, 172, 172, 10000.0f, layout}, {3, 1});
        }
    }
}

TEST_CASE("rope: LLaMA heads (32 / 8 heads x 128, TinyLlama 32 / 4 x 64), positions 0..7 and large") {
    test::ValidationGuard guard;
    std::map<int32_t, double> worst;  // by largest position
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (RopeLayout layout : {RopeLayout::Adjacent, RopeLayout::HalfSplit}) {
            // Prefill of 8 tokens for Q and K of LLaMA-2/3 and TinyLlama.
            for (auto [heads, hd] : {std::pair{32u, 128u}, std::pair{8u, 128u}, std::pair{32u, 64u}, std::pair{4u, 64u}}) {
                auto c = run_rope(ctx, {8, heads, hd, hd, 10000.0f, layout}, positions_from(0, 8));
                worst[7] = std::max(worst[7], c.nmse);
            }
            // Decode at large positions, LLaMA-3's base, and partial rotation (rot_dim 64 of 128).
            for (int32_t p : {4095, 32767, 65535}) {
                auto c = run_rope(ctx, {1, 32, 128, 128, 10000.0f, layout}, {p});
                worst[p] = std::max(worst[p], c.nmse);
                c = run_rope(ctx, {1, 8, 128, 128, 500000.0f, layout}, {p});
                worst[p] = std::max(worst[p], c.nmse);
                c = run_rope(ctx, {2, 8, 128, 64, 10000.0f, layout}, {p - 1, p});
                worst[p] = std::max(worst[p], c.nmse);
            }
        }
        // A long prefill: 512 tokens of 32 heads (many pairs, several positions per workgroup).
        auto c = run_rope(ctx, {512, 32, 128, 128, 10000.0f, RopeLayout::Adjacent}, positions_from(3584, 512));
        worst[4095] = std::max(worst[4095], c.nmse);
    }
    for (auto [p, v] : worst) MESSAGE("rope worst nmse up to pos " << p << ": " << v);
}

TEST_CASE("rope: a recorded command buffer follows the positions buffer") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const RopeShape sh{2, 8, 128, 128, 10000.0f, RopeLayout::Adjacent};
    const size_t n = size_t(sh.n_tokens) * sh.n_heads * sh.head_dim;
    auto x = test::random_floats(n, 77);
    test::GuardedBuffer dx(ctx, n * 4, "x"), dp(ctx, 8, "positions");
    CommandStream s(ctx);
    s.begin();
    ops::rope(ctx, s, dx.slice(), dp.slice(), sh.n_tokens, sh.n_heads, sh.head_dim, sh.rot_dim, sh.base, sh.layout);
    s.end();
    for (int32_t step = 0; step < 3; ++step) {
        std::vector<int32_t> pos = {10 + 2 * step, 11 + 2 * step};
        dx.upload(x.data(), n * 4);
        dp.upload(pos.data(), 8);
        s.submit_and_wait();
        auto ref = x;
        ref::rope(ref.data(), pos.data(), sh.n_tokens, sh.n_heads, sh.head_dim, sh.rot_dim, sh.base, sh.layout);
        test::validate_result(fmt::format("rope step {}", step), dx.download_floats(n), ref, rope_tolerance(pos[1]));
    }
}

TEST_CASE("rope: split into several dispatches when a binding exceeds maxStorageBufferRange") {
    test::ValidationGuard guard;
    Context& ctx = test::context_for("max-storage-range=65536");
    // A token of 32 x 128 floats is 16 KiB: 3 tokens per window.
    run_rope(ctx, {20, 32, 128, 128, 10000.0f, RopeLayout::HalfSplit}, positions_from(100, 20));
    run_rope(ctx, {33, 5, 100, 64, 10000.0f, RopeLayout::Adjacent}, positions_from(0, 33));
    run_rope(ctx, {33, 5, 100, 64, 10000.0f, RopeLayout::HalfSplit}, positions_from(0, 33), 4);
}

TEST_CASE("rope: slices at offsets below the storage-buffer alignment") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (RopeLayout layout : {RopeLayout::Adjacent, RopeLayout::HalfSplit})
            run_rope(ctx, {3, 8, 128, 128, 10000.0f, layout}, {7, 8, 9}, 4);
    }
}

TEST_CASE("rope: bad shapes are rejected") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::rope(ctx, s, b.slice(), b.slice(), 1, 1, 64, 63, 1e4f, RopeLayout::Adjacent), std::invalid_argument);
    CHECK_THROWS_AS(ops::rope(ctx, s, b.slice(), b.slice(), 1, 1, 64, 66, 1e4f, RopeLayout::Adjacent), std::invalid_argument);
    CHECK_THROWS_AS(ops::rope(ctx, s, b.slice(), b.slice(), 1000, 1, 64, 64, 1e4f, RopeLayout::Adjacent),
                    std::invalid_argument);
    CHECK(s.stats().dispatches == 0);
    s.end();
}

TEST_CASE("rope: YaRN ramp bounds are GGML's (hand-computed for LLaMA shapes)") {
    // corr_dim(n) = 128 ln(4096 / (2 pi n)) / (2 ln 10000): 20.94 for beta_fast 32, 45.03 for beta_slow 1.
    ops::RopeParams rp{32, 128, 128, 10000.0f, RopeLayout::Adjacent, 0.25f, 1.0f, 1.0f, 32.0f, 1.0f, 4096};
    auto c = ops::rope_corr_dims(rp);
    CHECK(c.low == 20.0f);
    CHECK(c.high == 46.0f);
    // base 500000: 14.70 and 31.60.
    rp.base = 500000.0f;
    c = ops::rope_corr_dims(rp);
    CHECK(c.low == 14.0f);
    CHECK(c.high == 32.0f);
    // Clamped to [0, rot_dim - 1]: a tiny original context puts both bounds below 0, a huge one above.
    rp.n_ctx_orig = 8;
    CHECK(ops::rope_corr_dims(rp).low == 0.0f);
    rp.n_ctx_orig = 4000000000u;
    rp.rot_dim = 16;
    rp.base = 10000.0f;  // corr_dim(1) = 17.6
    CHECK(ops::rope_corr_dims(rp).high == 15.0f);
}

TEST_CASE("rope: frequency factors, linear scaling and YaRN, both layouts, rot_dim < head_dim, positions to 100k") {
    test::ValidationGuard guard;
    std::map<std::string, double> worst;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (RopeLayout layout : {RopeLayout::Adjacent, RopeLayout::HalfSplit})
            for (auto [hd, rot] : {std::pair{128u, 128u}, std::pair{128u, 64u}, std::pair{96u, 32u}}) {
                const ops::RopeParams plain{8, hd, rot, 500000.0f, layout};
                // Llama 3.x / Phi-3 frequency factors (random positive, some below 1: faster pairs).
                const auto ff = random_factors(rot / 2, 40 + rot, 0.5f, 4.0f);
                // Linear position interpolation (freq_scale 1/4).
                ops::RopeParams linear = plain;
                linear.freq_scale = 0.25f;
                // YaRN with the usual 4x extension of a 4096 context.
                ops::RopeParams yarn = linear;
                yarn.ext_factor = 1.0f;
                yarn.n_ctx_orig = 4096;
                // YaRN on top of factors, a partial mix and a magnitude scale (all paths at once).
                ops::RopeParams combo = yarn;
                combo.ext_factor = 0.5f;
                combo.attn_factor = 0.8f;
                combo.base = 10000.0f;
                const std::vector<float> none;
                const auto prefill = positions_from(0, 9), late = positions_from(4090, 9);
                const std::vector<int32_t> far = {100000, 65536, 99999, 31, 70001};
                struct Case {
                    const char* name;
                    const ops::RopeParams& rp;
                    const std::vector<float>& ff;
                };
                for (const Case& c : {Case{"freq factors", plain, ff}, Case{"linear", linear, none},
                                      Case{"yarn", yarn, none}, Case{"yarn+factors", combo, ff}})
                    for (const auto* pos : {&prefill, &late, &far}) {
                        const auto r = run_rope_params(ctx, uint32_t(pos->size()), c.rp, c.ff, *pos, max_rate(c.rp, c.ff));
                        const std::string key = fmt::format("{} pos<={}", c.name, pos->back() > 5000 ? 100000 : 4098);
                        worst[key] = std::max(worst[key], r.nmse);
                    }
            }
        // Odd window offsets with factors bound through an unaligned slice.
        ops::RopeParams rp{4, 64, 64, 10000.0f, RopeLayout::HalfSplit, 0.5f};
        run_rope_params(ctx, 3, rp, random_factors(32, 7, 1.0f, 8.0f), {7, 8, 9}, 1.0, 4);
    }
    for (const auto& [k, v] : worst) MESSAGE("rope scaled worst nmse, " << k << ": " << v);
}

TEST_CASE("rope: the plain overload equals RopeParams defaults bit for bit") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const uint32_t n_tokens = 5, heads = 4, hd = 64;
    const size_t n = size_t(n_tokens) * heads * hd;
    const auto x = test::random_floats(n, 99);
    const auto pos = positions_from(1234, n_tokens);
    test::GuardedBuffer a(ctx, n * 4, "a"), b(ctx, n * 4, "b"), dp(ctx, n_tokens * 4, "positions");
    a.upload(x.data(), n * 4);
    b.upload(x.data(), n * 4);
    dp.upload(pos.data(), n_tokens * 4);
    CommandStream s(ctx);
    s.begin();
    ops::rope(ctx, s, a.slice(), dp.slice(), n_tokens, heads, hd, hd, 10000.0f, RopeLayout::Adjacent);
    ops::rope(ctx, s, b.slice(), dp.slice(), n_tokens, ops::RopeParams{heads, hd, hd, 10000.0f, RopeLayout::Adjacent});
    s.end();
    s.submit_and_wait();
    CHECK(a.download_floats(n) == b.download_floats(n));
}

TEST_CASE("rope: bad scaling parameters and short factor buffers are rejected") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "b");
    const BufferSlice small = b.slice(0, 60);  // 15 factors, 16 needed for rot_dim 32
    CommandStream s(ctx);
    s.begin();
    auto run = [&](ops::RopeParams rp, const BufferSlice* ff = nullptr) { ops::rope(ctx, s, b.slice(), b.slice(), 1, rp, ff); };
    const ops::RopeParams ok{1, 32, 32, 1e4f, RopeLayout::Adjacent};
    auto with = [&](auto f) {
        ops::RopeParams rp = ok;
        f(rp);
        return rp;
    };
    CHECK_THROWS_AS(run(with([](auto& r) { r.freq_scale = 0.0f; })), std::invalid_argument);
    CHECK_THROWS_AS(run(with([](auto& r) { r.freq_scale = -1.0f; })), std::invalid_argument);
    CHECK_THROWS_AS(run(with([](auto& r) { r.attn_factor = NAN; })), std::invalid_argument);
    CHECK_THROWS_AS(run(with([](auto& r) { r.ext_factor = 1.0f; })), std::invalid_argument);  // n_ctx_orig 0
    CHECK_THROWS_AS(run(with([](auto& r) { r.ext_factor = 1.0f, r.n_ctx_orig = 4096, r.beta_slow = 0.0f; })),
                    std::invalid_argument);
    CHECK_THROWS_AS(run(ok, &small), std::invalid_argument);
    CHECK(s.stats().dispatches == 0);
    run(with([](auto& r) { r.ext_factor = 1.0f, r.n_ctx_orig = 4096; }));
    CHECK(s.stats().dispatches == 1);
    s.end();
}

namespace {

// Multi-axis positions: token t's components (t0 + t, 3 t + 1, 100 - t, 7) apart, so a pair that took
// the wrong component would turn by another angle.
std::vector<int32_t> multi_positions(uint32_t n_tokens, int32_t t0) {
    std::vector<int32_t> p;
    for (uint32_t t = 0; t < n_tokens; ++t)
        for (int32_t v : {t0 + int32_t(t), 3 * int32_t(t) + 1, 100 - int32_t(t), 7}) p.push_back(v);
    return p;
}

}  // namespace

TEST_CASE("rope: M-RoPE sections (Qwen2-VL's text model) and the vision mode (its ViT), against the reference") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        // Qwen2-VL 7B: 28 / 4 heads x 128, sections 16 24 24 0; 2B: 12 / 2 x 128, the same sections.
        for (uint32_t heads : {28u, 4u}) {
            ops::RopeParams rp{heads, 128, 128, 1e6f, RopeLayout::HalfSplit};
            rp.sections = {{16, 24, 24, 0}};
            run_rope_params(ctx, 9, rp, {}, multi_positions(9, 0));
            run_rope_params(ctx, 3, rp, {}, multi_positions(3, 4000));
        }
        // Odd shapes: a fourth section in use, sections shorter than the pairs (the sector wraps), rot_dim < head_dim.
        ops::RopeParams odd{3, 40, 24, 1e4f, RopeLayout::HalfSplit};
        odd.sections = {{2, 3, 1, 1}};
        run_rope_params(ctx, 5, odd, {}, multi_positions(5, 17));
        odd.layout = RopeLayout::Adjacent;
        run_rope_params(ctx, 5, odd, {}, multi_positions(5, 17));
        // Qwen2-VL's ViT: 16 heads x 80 (1280 wide), rows at (y, x); Qwen2.5-VL's likewise.
        ops::RopeParams vit{16, 80, 80, 1e4f, RopeLayout::HalfSplit};
        vit.sections = {{20, 20, 0, 0}, true};
        run_rope_params(ctx, 12, vit, {}, multi_positions(12, 0), 1.0);
        ops::RopeParams tiny{2, 8, 8, 1e4f, RopeLayout::HalfSplit};
        tiny.sections = {{2, 2, 0, 0}, true};
        run_rope_params(ctx, 4, tiny, {}, multi_positions(4, 3), 1.0);
    }
}

TEST_CASE("rope: the reference's multi-axis forms are their definitions") {
    // M-RoPE with every component equal is plain RoPE (llama.cpp's text tokens).
    const uint32_t heads = 2, hd = 16, n = 3;
    ops::RopeParams plain{heads, hd, hd, 1e4f, RopeLayout::HalfSplit}, multi = plain;
    multi.sections = {{2, 3, 3, 0}};
    const auto x = test::random_floats(size_t(n) * heads * hd, 5);
    auto a = x, b = x;
    const std::vector<int32_t> pos{5, 6, 7}, pos4{5, 5, 5, 0, 6, 6, 6, 0, 7, 7, 7, 0};
    ref::rope(a.data(), pos.data(), n, plain);
    ref::rope(b.data(), pos4.data(), n, multi);
    CHECK(a == b);
    // The vision mode on a head of d = 16 at (y, x): pair j < 4 turns by y base^(-4j/16), pair 4 <= j < 8
    // by x base^(-4(j - 4)/16), each pair (j, j + 8).
    ops::RopeParams vit = plain;
    vit.sections = {{4, 4, 0, 0}, true};
    auto v = x;
    const std::vector<int32_t> yx{2, 9, 0, 0, 1, 3, 0, 0, 4, 0, 0, 0};
    ref::rope(v.data(), yx.data(), n, vit);
    for (uint32_t t = 0; t < n; ++t)
        for (uint32_t h = 0; h < heads; ++h)
            for (uint32_t j = 0; j < 8; ++j) {
                const size_t at = (size_t(t) * heads + h) * hd;
                const double pos_j = j < 4 ? yx[4 * t] : yx[4 * t + 1];
                const double angle = pos_j * std::pow(1e4, -4.0 * (j % 4) / 16);
                const double x0 = x[at + j], x1 = x[at + j + 8];
                CHECK(v[at + j] == doctest::Approx(x0 * std::cos(angle) - x1 * std::sin(angle)).epsilon(1e-6));
                CHECK(v[at + j + 8] == doctest::Approx(x0 * std::sin(angle) + x1 * std::cos(angle)).epsilon(1e-6));
            }
}

TEST_CASE("rope: bad sections are rejected, and the fused kernels refuse them") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    auto run = [&](const ops::RopeParams& rp, const BufferSlice* ff = nullptr, const BufferSlice* pos = nullptr) {
        ops::rope(ctx, s, b.slice(), pos ? *pos : b.slice(), 2, rp, ff);
    };
    ops::RopeParams rp{1, 32, 32, 1e4f, RopeLayout::HalfSplit};
    rp.sections = {{8, 8, 1, 0}};  // 17 sectors for 16 pairs
    CHECK_THROWS_AS(run(rp), std::invalid_argument);
    rp.sections = {{8, 8, 0, 0}, true};
    const BufferSlice ff = b.slice(0, 64);
    CHECK_THROWS_AS(run(rp, &ff), std::invalid_argument);
    ops::RopeParams yarn = rp;
    yarn.ext_factor = 1.0f, yarn.n_ctx_orig = 4096;
    CHECK_THROWS_AS(run(yarn), std::invalid_argument);
    ops::RopeParams vision_alone{1, 32, 32, 1e4f, RopeLayout::HalfSplit};
    vision_alone.sections.vision = true;
    CHECK_THROWS_AS(run(vision_alone), std::invalid_argument);
    const BufferSlice short_pos = b.slice(0, 2 * 4 * 4 - 4);  // 2 tokens need 8 positions
    CHECK_THROWS_AS(run(rp, nullptr, &short_pos), std::invalid_argument);
    CHECK_THROWS_AS(ops::detail::rope_shader_params(rp), std::invalid_argument);
    CHECK(s.stats().dispatches == 0);
    run(rp);
    CHECK(s.stats().dispatches == 1);
    s.end();
}

// CacheBlend moves cached K to another position by rotating it again by the distance
// (ModelGpu::import_kv): that holds only if rotations compose, rope(d) after rope(p) = rope(p + d),
// for every layout, a partial rotation, frequency factors and distances either way. YaRN's
// magnitude factor would apply twice, which is why import_kv refuses it.
TEST_CASE("rope reference: rotations compose (rope(d) after rope(p) is rope(p + d))") {
    const std::vector<float> factors{1.0f, 1.5f, 2.0f, 4.0f, 8.0f, 1.0f, 3.0f, 1.25f};
    for (const RopeLayout layout : {RopeLayout::Adjacent, RopeLayout::HalfSplit})
        for (const uint32_t rot_dim : {16u, 8u})
            for (const bool with_factors : {false, true})
                for (const int32_t delta : {37, -29, 1000}) {
                    CAPTURE(int(layout));
                    CAPTURE(rot_dim);
                    CAPTURE(with_factors);
                    CAPTURE(delta);
                    ops::RopeParams p{.n_heads = 2, .head_dim = 16, .rot_dim = rot_dim, .base = 10000.0f, .layout = layout};
                    p.freq_scale = 0.5f;  // linear scaling keeps the magnitude: composes too
                    const float* ff = with_factors ? factors.data() : nullptr;
                    const std::vector<int32_t> at{3, 250, 4000}, moved{3 + delta, 250 + delta, 4000 + delta};
                    std::vector<float> x(size_t(at.size()) * p.n_heads * p.head_dim);
                    for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.37 * double(i) + 0.1));
                    std::vector<float> twice = x, once = x;
                    ref::rope(twice.data(), at.data(), uint32_t(at.size()), p, ff);
                    const std::vector<int32_t> by(at.size(), delta);
                    ref::rope(twice.data(), by.data(), uint32_t(at.size()), p, ff);
                    ref::rope(once.data(), moved.data(), uint32_t(at.size()), p, ff);
                    double worst = 0;
                    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, double(std::abs(twice[i] - once[i])));
                    CHECK(worst < 2e-5);
                }
}
