#include "support/test_context.h"

#include "runtime/probes.h"
#include "runtime/vk_check.h"

#include <cmath>

using namespace vkllm;

TEST_CASE("probes: bandwidth probe reads every byte; fma probe computes") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    size_t bytes = 4u << 20;
    ProbeResult bw = probe_bandwidth(ctx, bytes, 1);
    // The buffer holds (i % 7) * 0.25 for i < bytes / 4: the kernel's sum proves it read it all.
    double expected = 0;
    for (size_t i = 0; i < bytes / 4; ++i) expected += double(i % 7) * 0.25;
    CHECK(std::fabs(bw.check - expected) <= 1e-5 * expected);
    CHECK(bw.value > 0);
    CHECK(std::isfinite(bw.value));
    ProbeResult f = probe_fma(ctx, 64, 1);
    CHECK(f.value > 0);
    CHECK(std::isfinite(f.check));
    MESSAGE("lavapipe probes (small sizes, not a benchmark): " << bw.value << " GB/s, " << f.value << " GFLOP/s");
}

TEST_CASE("probes: the integer-dot probe computes the packed dot products it counts") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    if (!ctx.caps().int_dot_product) {
        CHECK_THROWS_AS(probe_int_dot(ctx, 16, 1), DeviceLimitError);
        return;
    }
    ProbeResult d = probe_int_dot(ctx, 64, 1);
    CHECK(d.value > 0);
    CHECK(uint32_t(d.check) == probe_int_dot_expected(64));
    CHECK(probe_int_dot_expected(64) != probe_int_dot_expected(63));  // the chains do change
    MESSAGE("lavapipe int-dot probe (not accelerated, not a benchmark): " << d.value << " GOP/s");
}
