#include "support/test_context.h"

#include "runtime/vk_check.h"

using namespace vkllm;

namespace {

void vec_add_reference(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& c) {
    for (size_t i = 0; i < a.size(); ++i) c[i] = a[i] + b[i];
}

void run_vec_add(Context& ctx, uint32_t n, uint32_t wg) {
    CAPTURE(n);
    CAPTURE(wg);
    auto a = test::random_floats(n, 1 + n), b = test::random_floats(n, 2 + n);
    std::vector<float> ref(n);
    vec_add_reference(a, b, ref);
    test::GuardedBuffer da(ctx, n * 4, "a"), db(ctx, n * 4, "b"), dc(ctx, n * 4, "c");
    da.upload(a.data(), n * 4);
    db.upload(b.data(), n * 4);
    const Pipeline& p = ctx.pipeline({"vec_add", {wg}});
    CHECK(p.local_size()[0] == wg);
    CommandStream s(ctx);
    s.begin();
    s.dispatch(p, {da.slice(), db.slice(), dc.slice()}, n, {(n + wg - 1) / wg, 1, 1}, "vec_add");
    s.end();
    s.submit_and_wait();
    test::validate_result("c", dc.download_floats(n), ref, {0, 0, 0});
    dc.check_guards();
}

}  // namespace

TEST_CASE("vec_add: matches C++ over odd sizes and workgroup sizes") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (uint32_t wg : {32u, 64u, 128u})
        for (uint32_t n : {1u, 7u, 63u, 64u, 65u, 1000u, 4097u, 100003u}) run_vec_add(ctx, n, wg);
}

TEST_CASE("command stream: barriers only where a dependency exists; re-submission reuses the recording") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const uint32_t n = 256;
    auto a = test::random_floats(n, 11), b = test::random_floats(n, 12);
    Buffer da = ctx.create_buffer(n * 4, MemoryUsage::Device, "a"), db = ctx.create_buffer(n * 4, MemoryUsage::Device, "b");
    Buffer t1 = ctx.create_buffer(n * 4, MemoryUsage::Device, "t1"), t2 = ctx.create_buffer(n * 4, MemoryUsage::Device, "t2");
    Buffer out = ctx.create_buffer(n * 4, MemoryUsage::Device, "out");
    ctx.upload(da, a.data(), n * 4);
    ctx.upload(db, b.data(), n * 4);
    const Pipeline& p = ctx.pipeline({"vec_add", {64}});
    CommandStream s(ctx);
    s.begin(true);
    s.dispatch(p, {da.slice(), db.slice(), t1.slice()}, n, {4, 1, 1}, "t1");   // independent ...
    s.dispatch(p, {da.slice(), da.slice(), t2.slice()}, n, {4, 1, 1}, "t2");   // ... of this one: no barrier
    CHECK(s.stats().barriers == 0);
    s.dispatch(p, {t1.slice(), t2.slice(), out.slice()}, n, {4, 1, 1}, "out");  // reads both: one barrier
    CHECK(s.stats().barriers == 1);
    s.dispatch(p, {da.slice(), db.slice(), t1.slice()}, n, {4, 1, 1}, "war");  // overwrites t1 read above: barrier
    CHECK(s.stats().barriers == 2);
    s.end();
    CHECK(s.stats().dispatches == 4);
    for (int rep = 0; rep < 3; ++rep) {
        s.submit_and_wait();
        std::vector<float> got(n);
        ctx.download(out, got.data(), n * 4);
        std::vector<float> ref(n);
        for (uint32_t i = 0; i < n; ++i) ref[i] = (a[i] + b[i]) + (a[i] + a[i]);
        test::validate_result("out", got, ref, {0, 0, 0});
    }
    if (ctx.caps().timestamps) {
        auto t = s.timings();
        REQUIRE(t.size() == 4);
        CHECK(t[0].label == "t1");
        for (auto& x : t) CHECK(x.ns >= 0);
    }
}

TEST_CASE("command stream: misuse is reported, not undefined behaviour") {
    Context& ctx = test::context();
    const Pipeline& p = ctx.pipeline({"vec_add", {64}});
    Buffer b = ctx.create_buffer(1024, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    uint32_t n = 4;
    CHECK_THROWS_AS(s.dispatch(p, {b.slice(), b.slice(), b.slice()}, n, {1, 1, 1}), std::logic_error);
    s.begin();
    CHECK_THROWS_AS(s.dispatch(p, {b.slice(), b.slice()}, n, {1, 1, 1}), std::logic_error);
    uint64_t wrong = 0;
    CHECK_THROWS_AS(s.dispatch(p, {b.slice(), b.slice(), b.slice()}, wrong, {1, 1, 1}), std::logic_error);
    CHECK_THROWS_AS(s.dispatch(p, {b.slice(), b.slice(), b.slice()}, n, {0, 1, 1}), DeviceLimitError);
    s.end();
    CHECK_THROWS_AS(ctx.pipeline({"no_such_shader"}), std::out_of_range);
}
