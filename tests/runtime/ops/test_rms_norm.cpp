#include "support/test_context.h"

#include "support/small_ops_testing.h"

#include "runtime/ops/elementwise.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

using namespace vkllm;
using small_ops_testing::ShiftedBuffer;

namespace {

// Runs rms_norm on rows x dim inputs scaled by `scale` (RMSNorm is scale-invariant up to eps, so the
// scale tests that eps enters where it should) and compares with the double reference.
test::Compare run_rms_norm(Context& ctx, uint32_t rows, uint32_t dim, float eps, bool in_place, float scale = 1.0f,
                           uint32_t shift = 0) {
    CAPTURE(rows);
    CAPTURE(dim);
    CAPTURE(in_place);
    CAPTURE(scale);
    CAPTURE(shift);
    const size_t n = size_t(rows) * dim;
    auto x = test::random_floats(n, 100 + rows * 31 + dim, -scale, scale);
    auto w = test::random_floats(dim, 200 + dim, 0.2f, 2.0f);
    std::vector<float> ref(n);
    ref::rms_norm(x.data(), w.data(), ref.data(), rows, dim, eps);

    ShiftedBuffer dx(ctx, n * 4, shift, "x"), dw(ctx, dim * 4, shift, "w"), dy(ctx, n * 4, shift, "y");
    dx.upload(x.data(), n * 4);
    dw.upload(w.data(), dim * 4);
    const ShiftedBuffer& out = in_place ? dx : dy;
    CommandStream s(ctx);
    s.begin();
    ops::rms_norm(ctx, s, dx.slice(), dw.slice(), out.slice(), rows, dim, eps);
    s.end();
    s.submit_and_wait();
    auto got = out.download_floats(n);
    auto c = test::validate_result(fmt::format("rms_norm y[{}x{}]", rows, dim), got, ref, {1e-7, 1e-5, 1e-4});
    out.check_guards();
    dx.check_guards();
    dw.check_guards();
    return c;
}

}  // namespace

TEST_CASE("rms_norm: tiny and odd sizes") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t dim : {1u, 7u, 64u, 172u, 255u, 257u, 4097u})
            for (uint32_t rows : {1u, 7u}) run_rms_norm(ctx, rows, dim, 1e-5f, false);
        // An all-zero row: y = 0 * w exactly, the eps keeps it finite.
        run_rms_norm(ctx, 3, 172, 1e-5f, false, 0.0f);
        // Tiny activations: eps dominates, as it must.
        run_rms_norm(ctx, 2, 172, 1e-5f, false, 1e-4f);
    }
}

TEST_CASE("rms_norm: LLaMA sizes (dim 2048 / 4096), in place and not") {
    test::ValidationGuard guard;
    double worst = 0;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t dim : {2048u, 4096u})
            for (uint32_t rows : {1u, 7u, 64u, 512u}) {
                worst = std::max(worst, run_rms_norm(ctx, rows, dim, 1e-5f, false, 3.0f).nmse);
                if (rows <= 64) worst = std::max(worst, run_rms_norm(ctx, rows, dim, 1e-6f, true, 3.0f).nmse);
            }
    }
    MESSAGE("rms_norm worst nmse " << worst);
}

TEST_CASE("rms_norm: split into several dispatches when a binding exceeds maxStorageBufferRange") {
    test::ValidationGuard guard;
    // 64 KiB bindings: 3 rows of 4097 per window, windows starting inside an alignment unit.
    Context& ctx = test::context_for("max-storage-range=65536");
    run_rms_norm(ctx, 20, 4097, 1e-5f, false);
    run_rms_norm(ctx, 20, 4097, 1e-5f, true);
    run_rms_norm(ctx, 100, 172, 1e-5f, true);
    run_rms_norm(ctx, 20, 4097, 1e-5f, false, 1.0f, 4);
    // One row bigger than a binding cannot be split: a clear error, not a validation failure.
    Buffer b = ctx.create_buffer(20000 * 4, MemoryUsage::Device, "big");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::rms_norm(ctx, s, b.slice(), b.slice(), b.slice(), 1, 20000, 1e-5f), DeviceLimitError);
    s.end();
}

TEST_CASE("rms_norm: slices at offsets below the storage-buffer alignment") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        run_rms_norm(ctx, 7, 4096, 1e-5f, false, 1.0f, 4);
        run_rms_norm(ctx, 3, 172, 1e-5f, true, 1.0f, 4);
    }
}

TEST_CASE("rms_norm: bad shapes are rejected") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1024, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::rms_norm(ctx, s, b.slice(), b.slice(), b.slice(), 2, 256, 1e-5f), std::invalid_argument);
    CHECK_THROWS_AS(ops::rms_norm(ctx, s, b.slice(), b.slice(), b.slice(), 1, 0, 1e-5f), std::invalid_argument);
    CHECK_THROWS_AS(ops::rms_norm(ctx, s, b.slice(2, 256), b.slice(), b.slice(), 1, 64, 1e-5f), std::invalid_argument);
    CHECK(s.stats().dispatches == 0);
    s.end();
}
