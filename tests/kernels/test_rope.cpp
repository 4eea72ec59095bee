#include "support/test_context.h"

#include "kernels/small_ops_testing.h"

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

test::Compare run_rope(Context& ctx, const RopeShape& sh, const std::vector<int32_t>& pos, uint32_t shift = 0) {
    CAPTURE(sh.n_tokens);
    CAPTURE(sh.n_heads);
    CAPTURE(sh.head_dim);
    CAPTURE(sh.rot_dim);
    CAPTURE(sh.base);
    CAPTURE(int(sh.layout));
    CAPTURE(pos.front());
    CAPTURE(shift);
    const size_t n = size_t(sh.n_tokens) * sh.n_heads * sh.head_dim;
    auto x = test::random_floats(n, 300 + sh.n_tokens + sh.head_dim + uint32_t(pos.front()));
    auto ref = x;
    ref::rope(ref.data(), pos.data(), sh.n_tokens, sh.n_heads, sh.head_dim, sh.rot_dim, sh.base, sh.layout);

    ShiftedBuffer dx(ctx, n * 4, shift, "x"), dp(ctx, pos.size() * 4, shift, "positions");
    dx.upload(x.data(), n * 4);
    dp.upload(pos.data(), pos.size() * 4);
    CommandStream s(ctx);
    s.begin();
    ops::rope(ctx, s, dx.slice(), dp.slice(), sh.n_tokens, sh.n_heads, sh.head_dim, sh.rot_dim, sh.base, sh.layout);
    s.end();
    s.submit_and_wait();
    auto got = dx.download_floats(n);
    const int32_t max_pos = *std::max_element(pos.begin(), pos.end());
    auto c = test::validate_result(
        fmt::format("rope x[{}][{}][{}] rot {} layout {} pos {}..{}", sh.n_tokens, sh.n_heads, sh.head_dim, sh.rot_dim,
                    int(sh.layout), pos.front(), pos.back()),
        got, ref, rope_tolerance(max_pos));
    // Elements past rot_dim are not touched at all.
    size_t changed = 0;
    for (size_t h = 0; h < n / sh.head_dim; ++h)
        for (uint32_t i = sh.rot_dim; i < sh.head_dim; ++i) changed += got[h * sh.head_dim + i] != x[h * sh.head_dim + i];
    CHECK(changed == 0);
    dx.check_guards();
    dp.check_guards();
    return c;
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
