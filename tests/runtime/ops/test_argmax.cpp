#include "support/test_context.h"

#include "support/small_ops_testing.h"

#include "runtime/ops/sampling_ops.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

using namespace vkllm;
using small_ops_testing::ShiftedBuffer;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Compares the device's argmax of x[rows][n] with the reference, index for index.
void run_argmax(Context& ctx, const std::vector<float>& x, uint32_t rows, uint32_t n, const char* what,
                uint32_t shift = 0) {
    CAPTURE(what);
    CAPTURE(rows);
    CAPTURE(n);
    CAPTURE(shift);
    REQUIRE(x.size() == size_t(rows) * n);
    std::vector<uint32_t> ref(rows);
    ref::argmax(x.data(), ref.data(), rows, n);
    ShiftedBuffer dx(ctx, x.size() * 4, shift, "x"), dout(ctx, rows * 4, shift, "out");
    dx.upload(x.data(), x.size() * 4);
    CommandStream s(ctx);
    s.begin();
    ops::argmax(ctx, s, dx.slice(), dout.slice(), rows, n);
    s.end();
    s.submit_and_wait();
    std::vector<uint32_t> got(rows);
    dout.download(got.data(), rows * 4);
    size_t bad = 0;
    for (uint32_t r = 0; r < rows; ++r)
        if (got[r] != ref[r] && bad++ < 5)
            MESSAGE(fmt::format("{}: row {}: gpu {} (x = {}), ref {} (x = {})", what, r, got[r],
                                got[r] < n ? x[size_t(r) * n + got[r]] : NAN, ref[r], x[size_t(r) * n + ref[r]]));
    CHECK(bad == 0);
    dout.check_guards();
}

std::vector<float> logits(uint32_t rows, uint32_t n, uint32_t seed) { return test::random_floats(size_t(rows) * n, seed, -10.0f, 10.0f); }

}  // namespace

TEST_CASE("argmax: random logits, tiny to vocabulary sizes") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t n : {1u, 7u, 172u, 255u, 256u, 257u, 4097u, 32000u})
            for (uint32_t rows : {1u, 7u}) run_argmax(ctx, logits(rows, n, n + rows), rows, n, "random");
        run_argmax(ctx, logits(64, 32000, 5), 64, 32000, "random, 64 rows");
        run_argmax(ctx, logits(1, 128256, 6), 1, 128256, "random, LLaMA-3 vocabulary");
    }
}

TEST_CASE("argmax: ties, the max at either end, NaN, infinities, signed zeros, denormals") {
    test::ValidationGuard guard;
    const uint32_t n = 32000;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        const uint32_t rows = 12;
        auto x = logits(rows, n, 42);
        auto row = [&](uint32_t r) { return x.data() + size_t(r) * n; };
        row(0)[n - 1] = 50.0f;                                             // max at the last index
        row(1)[0] = 50.0f;                                                 // max at the first index
        for (uint32_t i : {31999u, 17000u, 257u, 9000u}) row(2)[i] = 50.0f;  // ties: the lowest index wins (257)
        for (uint32_t i = 0; i < n; ++i) row(3)[i] = 1.5f;                 // all equal: index 0
        row(4)[100] = kNaN;                                                // NaN never wins ...
        row(4)[200] = 50.0f;
        row(4)[300] = -kNaN;
        for (uint32_t i = 0; i < n; ++i) row(5)[i] = i % 3 ? kNaN : -kInf;  // ... not even over -inf: index 0
        for (uint32_t i = 0; i < n; ++i) row(6)[i] = kNaN;                 // all NaN: 0
        row(7)[4000] = kInf;                                               // +inf wins
        row(7)[5000] = kInf;
        for (uint32_t i = 0; i < n; ++i) row(8)[i] = -std::fabs(row(8)[i]) - 1.0f;  // all negative, +/-0 ties
        row(8)[700] = -0.0f;
        row(8)[600] = 0.0f;
        row(8)[800] = -0.0f;
        for (uint32_t i = 0; i < n; ++i) row(9)[i] = -std::fabs(row(9)[i]) - 1.0f;
        row(9)[20000] = -0.0f;  // a lone -0 is the max
        for (uint32_t i = 0; i < n; ++i) row(10)[i] = -1.0f;
        row(10)[31000] = 1e-45f;  // denormals are ordered, not flushed
        row(10)[30000] = 1e-44f;
        row(10)[29000] = 5e-45f;
        for (uint32_t i = 0; i < n; ++i) row(11)[i] = 0.0f;
        row(11)[n - 1] = std::nextafter(0.0f, 1.0f);
        run_argmax(ctx, x, rows, n, "edge rows");
        // And one row of each on their own (one workgroup per dispatch, first and only row).
        std::vector<float> last(row(0), row(0) + n);
        run_argmax(ctx, last, 1, n, "max at the last index");
    }
}

TEST_CASE("argmax: rows beyond one binding are split over dispatches") {
    test::ValidationGuard guard;
    Context& ctx = test::context_for("max-storage-range=65536");
    run_argmax(ctx, logits(30, 4097, 3), 30, 4097, "4097 x 30 in 64 KiB windows");
    run_argmax(ctx, logits(30, 4097, 4), 30, 4097, "4097 x 30 in 64 KiB windows, shifted", 4);
}

TEST_CASE("argmax: slices at offsets below the storage-buffer alignment") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        run_argmax(ctx, logits(7, 32000, 8), 7, 32000, "shifted", 4);
    }
}

TEST_CASE("argmax: bad shapes are rejected") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1024, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::argmax(ctx, s, b.slice(), b.slice(), 1, 257), std::invalid_argument);
    CHECK_THROWS_AS(ops::argmax(ctx, s, b.slice(), b.slice(), 1, 0), std::invalid_argument);
    CHECK(s.stats().dispatches == 0);
    s.end();
}
