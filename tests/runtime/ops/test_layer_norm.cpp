#include "support/test_context.h"

#include "support/small_ops_testing.h"

#include "runtime/ops/norm.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>

using namespace vkllm;
using small_ops_testing::ShiftedBuffer;

namespace {

struct LnCase {
    uint32_t rows = 1, dim = 1;
    float eps = 1e-5f;
    bool in_place = false;
    bool bias = true;
    float offset = 0.0f;  // x = offset + U(-spread, spread): a large offset is the case naive variance fails
    float spread = 2.0f;
    uint32_t shift = 0;   // bytes by which every slice is moved off the storage-buffer alignment
};

// y is O(1) (x is centred and scaled to unit variance, w in [0.2, 2], b in [-1, 1]): f32 gives
// ~1e-7 relative per element, so NMSE ~1e-13; 1e-10 leaves room for reduction order and still
// fails for any real mistake (a wrong mean or variance shows up at 1e-6 or worse).
constexpr test::Tolerance kTol{1e-10, 2e-5, 2e-5};

test::Compare run_layer_norm(Context& ctx, const LnCase& c) {
    CAPTURE(c.rows);
    CAPTURE(c.dim);
    CAPTURE(c.in_place);
    CAPTURE(c.bias);
    CAPTURE(c.offset);
    CAPTURE(c.spread);
    CAPTURE(c.shift);
    const size_t n = size_t(c.rows) * c.dim;
    auto x = test::random_floats(n, 300 + c.rows * 31 + c.dim, -c.spread, c.spread);
    for (float& v : x) v += c.offset;
    auto w = test::random_floats(c.dim, 400 + c.dim, 0.2f, 2.0f);
    auto b = test::random_floats(c.dim, 500 + c.dim, -1.0f, 1.0f);
    std::vector<float> ref(n);
    ref::layer_norm(x.data(), w.data(), c.bias ? b.data() : nullptr, ref.data(), c.rows, c.dim, c.eps);

    ShiftedBuffer dx(ctx, n * 4, c.shift, "x"), dw(ctx, c.dim * 4, c.shift, "w"), db(ctx, c.dim * 4, c.shift, "b"),
        dy(ctx, n * 4, c.shift, "y");
    dx.upload(x.data(), n * 4);
    dw.upload(w.data(), c.dim * 4);
    db.upload(b.data(), c.dim * 4);
    const ShiftedBuffer& out = c.in_place ? dx : dy;
    const BufferSlice bs = db.slice();
    CommandStream s(ctx);
    s.begin();
    ops::layer_norm(ctx, s, dx.slice(), dw.slice(), c.bias ? &bs : nullptr, out.slice(), c.rows, c.dim, c.eps);
    s.end();
    s.submit_and_wait();
    auto got = out.download_floats(n);
    auto cmp = test::validate_result(fmt::format("layer_norm y[{}x{}]", c.rows, c.dim), got, ref, kTol);
    out.check_guards();
    dx.check_guards();
    dw.check_guards();
    db.check_guards();
    return cmp;
}

}  // namespace

TEST_CASE("layer_norm: tiny and odd sizes, with and without bias") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t dim : {1u, 2u, 3u, 5u, 7u, 8u, 129u, 255u, 256u, 257u, 1000u, 4099u})
            for (uint32_t rows : {1u, 3u}) {
                run_layer_norm(ctx, {.rows = rows, .dim = dim});
                run_layer_norm(ctx, {.rows = rows, .dim = dim, .in_place = true, .bias = false});
            }
        // A constant row: var = 0, y = b exactly (eps keeps it finite).
        run_layer_norm(ctx, {.rows = 2, .dim = 129, .offset = 3.0f, .spread = 0.0f});
        // Tiny activations: eps dominates, as it must.
        run_layer_norm(ctx, {.rows = 2, .dim = 1000, .spread = 1e-4f});
    }
}

TEST_CASE("layer_norm: model sizes (768 / 2048 / 2304 / 3072 / 4096) and many rows, in place and not") {
    test::ValidationGuard guard;
    double worst = 0;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t dim : {768u, 2048u, 2304u, 3072u, 4096u})
            for (uint32_t rows : {1u, 7u, 64u}) {
                const bool in_place = rows == 7;
                worst = std::max(worst, run_layer_norm(ctx, {.rows = rows, .dim = dim, .in_place = in_place}).nmse);
                if (rows != 64)
                    worst = std::max(worst, run_layer_norm(ctx, {.rows = rows, .dim = dim, .eps = 1e-6f,
                                                                 .in_place = !in_place, .bias = false, .spread = 30.0f})
                                                .nmse);
            }
    }
    MESSAGE("layer_norm worst nmse " << worst);
}

TEST_CASE("layer_norm: a large common offset (x = 1000 + noise, x = -3e4 + noise) normalises exactly") {
    // In f32, E[x^2] - E[x]^2 at x = 1000 +- 1 is 1e6 - 1e6 with an ulp of 0.06: the variance would be
    // noise. The shader must centre first, and centre accurately.
    test::ValidationGuard guard;
    double worst = 0;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t dim : {7u, 768u, 4099u}) {
            worst = std::max(worst, run_layer_norm(ctx, {.rows = 5, .dim = dim, .offset = 1000.0f, .spread = 1.7f}).nmse);
            worst = std::max(worst, run_layer_norm(ctx, {.rows = 5, .dim = dim, .in_place = true, .bias = false,
                                                         .offset = -3.0e4f, .spread = 1.0f})
                                        .nmse);
        }
    }
    MESSAGE("layer_norm (offset) worst nmse " << worst);
}

TEST_CASE("layer_norm: split into several dispatches when a binding exceeds maxStorageBufferRange") {
    test::ValidationGuard guard;
    // 64 KiB bindings: 3 rows of 4099 per window, windows starting inside an alignment unit.
    Context& ctx = test::context_for("max-storage-range=65536");
    run_layer_norm(ctx, {.rows = 20, .dim = 4099});
    run_layer_norm(ctx, {.rows = 20, .dim = 4099, .in_place = true, .bias = false});
    run_layer_norm(ctx, {.rows = 100, .dim = 172, .in_place = true});
    run_layer_norm(ctx, {.rows = 20, .dim = 4099, .shift = 4});
    // One row bigger than a binding cannot be split: a clear error, not a validation failure.
    Buffer b = ctx.create_buffer(20000 * 4, MemoryUsage::Device, "big");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::layer_norm(ctx, s, b.slice(), b.slice(), nullptr, b.slice(), 1, 20000, 1e-5f), DeviceLimitError);
    s.end();
}

TEST_CASE("layer_norm: slices at offsets below the storage-buffer alignment") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        run_layer_norm(ctx, {.rows = 7, .dim = 768, .shift = 4});
        run_layer_norm(ctx, {.rows = 3, .dim = 129, .in_place = true, .bias = false, .shift = 4});
    }
}

TEST_CASE("layer_norm: bad shapes are rejected") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1024, MemoryUsage::Device, "b");
    const BufferSlice small = b.slice(0, 128);
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::layer_norm(ctx, s, b.slice(), b.slice(), nullptr, b.slice(), 2, 256, 1e-5f), std::invalid_argument);
    CHECK_THROWS_AS(ops::layer_norm(ctx, s, b.slice(), b.slice(), nullptr, b.slice(), 0, 64, 1e-5f), std::invalid_argument);
    CHECK_THROWS_AS(ops::layer_norm(ctx, s, b.slice(), b.slice(), nullptr, b.slice(), 1, 0, 1e-5f), std::invalid_argument);
    CHECK_THROWS_AS(ops::layer_norm(ctx, s, b.slice(), b.slice(), &small, b.slice(), 1, 64, 1e-5f), std::invalid_argument);
    CHECK_THROWS_AS(ops::layer_norm(ctx, s, b.slice(), small, nullptr, b.slice(), 1, 64, 1e-5f), std::invalid_argument);
    CHECK_THROWS_AS(ops::layer_norm(ctx, s, b.slice(2, 256), b.slice(), nullptr, b.slice(), 1, 64, 1e-5f),
                    std::invalid_argument);
    CHECK(s.stats().dispatches == 0);
    s.end();
}
