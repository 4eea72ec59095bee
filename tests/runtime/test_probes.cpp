#include "support/test_context.h"

#include "runtime/probes.h"

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
