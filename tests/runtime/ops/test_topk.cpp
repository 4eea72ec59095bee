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

// Top-k of one row on the device against the reference: ids must match exactly, values bit for bit.
void run_topk(Context& ctx, const std::vector<float>& x, uint32_t k, const char* what, uint32_t shift = 0) {
    const uint32_t n = uint32_t(x.size());
    CAPTURE(what);
    CAPTURE(n);
    CAPTURE(k);
    CAPTURE(shift);
    std::vector<uint32_t> ref_ids(k);
    std::vector<float> ref_vals(k);
    ref::topk(x.data(), n, k, ref_ids.data(), ref_vals.data());
    ShiftedBuffer dx(ctx, size_t(n) * 4, shift, "x"), di(ctx, k * 4, shift, "ids"), dv(ctx, k * 4, shift, "vals");
    dx.upload(x.data(), size_t(n) * 4);
    CommandStream s(ctx);
    s.begin();
    ops::topk(ctx, s, dx.slice(), n, k, di.slice(), dv.slice());
    s.end();
    s.submit_and_wait();
    std::vector<uint32_t> ids(k);
    std::vector<float> vals(k);
    di.download(ids.data(), k * 4);
    dv.download(vals.data(), k * 4);
    size_t bad = 0;
    for (uint32_t j = 0; j < k; ++j)
        if ((ids[j] != ref_ids[j] || std::memcmp(&vals[j], &ref_vals[j], 4) != 0) && bad++ < 5)
            MESSAGE(fmt::format("{}: rank {}: gpu id {} val {}, ref id {} val {}", what, j, ids[j], vals[j], ref_ids[j],
                                ref_vals[j]));
    CHECK(bad == 0);
    di.check_guards();
    dv.check_guards();
}

}  // namespace

TEST_CASE("topk: random logits, k from 1 to 256") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        run_topk(ctx, {0.5f}, 1, "n = 1");
        run_topk(ctx, test::random_floats(7, 1), 7, "n = k = 7");
        run_topk(ctx, test::random_floats(300, 2), 256, "k = 256 of 300");
        for (uint32_t k : {1u, 40u, 256u}) run_topk(ctx, test::random_floats(32000, 3 + k, -10.0f, 10.0f), k, "32000");
        run_topk(ctx, test::random_floats(128256, 9, -10.0f, 10.0f), 50, "128256");
        run_topk(ctx, test::random_floats(32000, 10, -10.0f, 10.0f), 40, "32000, shifted slices", 4);
    }
}

TEST_CASE("topk: ties, quantised logits, NaN and infinities") {
    test::ValidationGuard guard;
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        // Few distinct values: ties across the k boundary are resolved by index.
        auto x = test::random_floats(32000, 11, 0.0f, 8.0f);
        for (auto& v : x) v = std::floor(v);
        run_topk(ctx, x, 100, "8 distinct values");
        std::vector<float> same(4097, 1.0f);
        run_topk(ctx, same, 256, "all equal");
        auto y = test::random_floats(5000, 12);
        y[10] = nan;
        y[20] = inf;
        y[30] = -inf;
        y[40] = -0.0f;
        y[50] = 0.0f;
        y[4999] = 2.0f;
        run_topk(ctx, y, 256, "with nan and inf");
        std::vector<float> nans(300, nan);
        nans[7] = -inf;
        nans[200] = 1.0f;
        run_topk(ctx, nans, 5, "mostly nan");
    }
}

TEST_CASE("topk: bad k is rejected") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::topk(ctx, s, b.slice(), 1000, 0, b.slice(), b.slice()), std::invalid_argument);
    CHECK_THROWS_AS(ops::topk(ctx, s, b.slice(), 1000, 257, b.slice(), b.slice()), std::invalid_argument);
    CHECK_THROWS_AS(ops::topk(ctx, s, b.slice(), 10, 11, b.slice(), b.slice()), std::invalid_argument);
    CHECK(s.stats().dispatches == 0);
    s.end();
}
