#include "support/test_context.h"

#include "support/small_ops_testing.h"

#include "runtime/ops/sampling_ops.h"

#include <fmt/format.h>

#include <cmath>

using namespace vkllm;
using small_ops_testing::ShiftedBuffer;

namespace {

// softmax of rows x n logits in [-scale, scale] at `temperature`, against the double reference.
// exp on GPUs is good to a few ulp over the range that matters (arguments near 0 give the large
// probabilities that dominate the nmse); tiny probabilities carry a relative error that grows with
// |argument| (~|arg| ulp), which the element-wise atol absorbs. The nmse bound is the f32 standard.
test::Compare run_softmax(Context& ctx, uint32_t rows, uint32_t n, float temperature, bool in_place, float scale = 10.0f,
                          uint32_t shift = 0) {
    CAPTURE(rows);
    CAPTURE(n);
    CAPTURE(temperature);
    CAPTURE(in_place);
    CAPTURE(shift);
    const size_t total = size_t(rows) * n;
    auto x = test::random_floats(total, 600 + n + rows, -scale, scale);
    std::vector<float> ref(total);
    ref::softmax(x.data(), ref.data(), rows, n, temperature);

    ShiftedBuffer dx(ctx, total * 4, shift, "x"), dy(ctx, total * 4, shift, "y");
    dx.upload(x.data(), total * 4);
    const ShiftedBuffer& out = in_place ? dx : dy;
    CommandStream s(ctx);
    s.begin();
    ops::softmax(ctx, s, dx.slice(), out.slice(), rows, n, temperature);
    s.end();
    s.submit_and_wait();
    auto got = out.download_floats(total);
    auto c = test::validate_result(fmt::format("softmax y[{}x{}] T={}", rows, n, temperature), got, ref, {1e-7, 1e-7, 1e-4});
    for (uint32_t r = 0; r < rows; ++r) {
        double sum = 0;
        for (uint32_t i = 0; i < n; ++i) sum += got[size_t(r) * n + i];
        CHECK(std::fabs(sum - 1.0) < 1e-5);
    }
    out.check_guards();
    return c;
}

}  // namespace

TEST_CASE("softmax: tiny and odd sizes, temperatures, in place") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t n : {1u, 7u, 172u, 255u, 257u, 4097u})
            for (uint32_t rows : {1u, 7u}) {
                run_softmax(ctx, rows, n, 1.0f, false);
                run_softmax(ctx, rows, n, 0.7f, true);
            }
        run_softmax(ctx, 3, 4097, 0.05f, false);       // very peaked
        run_softmax(ctx, 3, 4097, 2.0f, false, 1e4f);  // huge logits: the max subtraction keeps it finite
    }
}

TEST_CASE("softmax: vocabulary sizes (32000, 128256)") {
    test::ValidationGuard guard;
    double worst = 0;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t rows : {1u, 7u, 64u}) worst = std::max(worst, run_softmax(ctx, rows, 32000, 0.8f, rows == 7).nmse);
        worst = std::max(worst, run_softmax(ctx, 1, 128256, 1.0f, true).nmse);
    }
    MESSAGE("softmax worst nmse " << worst);
}

TEST_CASE("softmax: rows beyond one binding are split over dispatches") {
    test::ValidationGuard guard;
    Context& ctx = test::context_for("max-storage-range=65536");
    run_softmax(ctx, 30, 4097, 1.0f, false);
    run_softmax(ctx, 30, 4097, 1.0f, true);
    run_softmax(ctx, 30, 4097, 1.0f, false, 10.0f, 4);
}

TEST_CASE("softmax: slices at offsets below the storage-buffer alignment") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        run_softmax(ctx, 7, 32000, 1.0f, false, 10.0f, 4);
        run_softmax(ctx, 2, 4097, 1.0f, true, 10.0f, 4);
    }
}

TEST_CASE("softmax: bad arguments are rejected") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1024, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::softmax(ctx, s, b.slice(), b.slice(), 1, 256, 0.0f), std::invalid_argument);
    CHECK_THROWS_AS(ops::softmax(ctx, s, b.slice(), b.slice(), 1, 256, -1.0f), std::invalid_argument);
    CHECK_THROWS_AS(ops::softmax(ctx, s, b.slice(), b.slice(), 2, 256, 1.0f), std::invalid_argument);
    CHECK(s.stats().dispatches == 0);
    s.end();
}
