// matvec (decode-time linear layer, m <= 8) against the CPU reference, for every weight type and
// device variant: tiny and odd shapes, the real LLaMA / TinyLlama projection shapes, batches of
// 2..8 vectors, residual add (separate and in place), unaligned slices, and weights larger than
// maxStorageBufferRange (split over dispatches), forced small with max-storage-range=8m and real.
// The shapes and device variants cover both kernels: matvec_rows.comp for rows of at most 1 KiB
// where the caps ask for CPU tuning (the default lavapipe context and the weak-capability one), and
// matvec.comp with its subgroup and shared-memory reductions (longer rows, and gpu-tuning).
#include "support/test_context.h"
#include "support/linear_testing.h"

#include "runtime/ops/linear.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <map>

using namespace vkllm;
using namespace vkllm::test::linear;

namespace {

std::map<TensorType, double>& worst_nmse() {
    static std::map<TensorType, double> m;
    return m;
}

// Records matvec (or linear) for p, runs it and checks Y and its guards (see run_problem).
void run(Context& ctx, const std::string& spec, const Problem& p, bool via_linear = false, bool misalign = false) {
    auto [c, dispatches] = run_problem(ctx, spec, p, misalign, [&](CommandStream& s, const BufferSlice& w, const BufferSlice& x,
                                                                   const BufferSlice& y, const BufferSlice* r) {
        if (via_linear)
            ops::linear(ctx, s, p.t, w, x, y, p.m, p.n, p.k, r);
        else
            ops::matvec(ctx, s, p.t, w, x, y, p.m, p.n, p.k, r);
    });
    (void)dispatches;
    double& w = worst_nmse()[p.t];
    w = std::max(w, c.nmse);
}

void run_variants(const Problem& p, bool via_linear = false) {
    for (const std::string& spec : test::device_variants()) {
        CAPTURE(spec);
        run(test::context_for(spec), spec, p, via_linear);
    }
}

}  // namespace

TEST_CASE("matvec: tiny shapes, every weight type and device variant") {
    test::ValidationGuard guard;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        for (uint32_t m = 1; m <= 3; ++m) run_variants(make_problem(t, m, 4, blocks_k(t, 1), Res::None, 10 + m));
        run_variants(make_problem(t, 1, 1, blocks_k(t, 1), Res::None, 20));
    }
}

TEST_CASE("matvec: odd shapes (rows and k not multiples of the workgroup or unit)") {
    test::ValidationGuard guard;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        // Three blocks per row: rows of 2-byte-aligned block types (Q8_0, Q4_0, Q5_0, Q3_K, Q6_K, ...)
        // alternate 4- and 2-byte alignment.
        run_variants(make_problem(t, 1, 172, blocks_k(t, 2), Res::None, 30));
        run_variants(make_problem(t, 7, 172, blocks_k(t, 3), Res::None, 31));
        run_variants(make_problem(t, 1, 4097, blocks_k(t, 3), Res::Separate, 32));
        run_variants(make_problem(t, 5, 4097, blocks_k(t, 5), Res::None, 33));
        if (is_float_type(t)) {
            // Any k: odd k makes F16 rows 2-byte aligned; tails shorter than the 16-byte unit.
            run_variants(make_problem(t, 1, 172, 1, Res::None, 34));
            run_variants(make_problem(t, 3, 173, 37, Res::None, 35));
            run_variants(make_problem(t, 2, 33, 1003, Res::Separate, 36));
        }
    }
}

TEST_CASE("matvec: batches of 2..8 vectors share the weight pass; residual add, separate and in place") {
    test::ValidationGuard guard;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        // Every batch size on the real device; on the other variants (each compiles its own
        // pipelines, slowly on lavapipe) sizes on both sides of where linear() changes the rows
        // per workgroup (m 4 / 5 when GPU-tuned; 4 also fills the most shared memory there), and
        // the largest.
        for (uint32_t m = 2; m <= 8; ++m) {
            const Problem p = make_problem(t, m, 300, std::max(512u, blocks_k(t, 2)), m % 2 ? Res::InPlace : Res::Separate, 40 + m);
            if (m == 2 || m == 4 || m == 5 || m == 8)
                run_variants(p);
            else
                run(test::context(), "", p);
        }
        run_variants(make_problem(t, 1, 4096, std::max(256u, blocks_k(t, 1)), Res::InPlace, 49));
    }
}

TEST_CASE("matvec: unaligned slices (W 2-byte aligned, X/Y/R off the binding alignment)") {
    test::ValidationGuard guard;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        for (const std::string& spec : test::device_variants()) {
            CAPTURE(spec);
            Context& ctx = test::context_for(spec);
            run(ctx, spec, make_problem(t, 1, 100, blocks_k(t, 3), Res::Separate, 50), false, true);
            run(ctx, spec, make_problem(t, 3, 65, blocks_k(t, 2), Res::InPlace, 51), false, true);
        }
    }
}

TEST_CASE("matvec: real LLaMA-7B and TinyLlama projection shapes") {
    test::ValidationGuard guard;
    struct Shape { uint32_t n, k; };
    // q/k/v/o 4096x4096, gate/up 11008x4096, down 4096x11008, TinyLlama gate/up 5632x2048 and the
    // 32000x2048 output head (f32: 262 MB, more than lavapipe's 128 MiB binding: split).
    const Shape shapes[] = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {5632, 2048}, {32000, 2048}};
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        for (const Shape& sh : shapes) {
            CAPTURE(sh.n);
            CAPTURE(sh.k);
            // The biggest f32/f16 shapes on the default device only: they test streaming and
            // splitting, which the weak-device variants do not change.
            const bool big = uint64_t(sh.n) * row_bytes(t, sh.k) > (96ull << 20);
            Problem p = make_problem(t, 1, sh.n, sh.k, sh.n == 4096 && sh.k == 4096 ? Res::InPlace : Res::None, 60);
            if (big)
                run(test::context(), "", p, true);
            else
                run_variants(p, true);
        }
    }
}

TEST_CASE("matvec: weights larger than maxStorageBufferRange are split over dispatches") {
    test::ValidationGuard guard;
    // Forced small: 8 MiB bindings; n = 4097 rows of k = 4096 are 9.4 MB (Q4_0) .. 67 MB (F32).
    const std::string spec = "max-storage-range=8m";
    Context& small = test::context_for(spec);
    REQUIRE(small.caps().max_storage_buffer_range == (8u << 20));
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        Problem p = make_problem(t, 3, 4097, 4096, Res::InPlace, 70);
        run(small, spec, p);
        CommandStream s(small);
        Buffer w = small.create_buffer(p.w.size(), MemoryUsage::Device, "w");
        Buffer x = small.create_buffer(p.x.size() * 4, MemoryUsage::Device, "x");
        Buffer y = small.create_buffer(p.ref.size() * 4, MemoryUsage::Device, "y");
        s.begin();
        ops::matvec(small, s, p.t, w.slice(), x.slice(), y.slice(), p.m, p.n, p.k);
        s.end();
        CHECK(s.stats().dispatches >= (p.w.size() + (8u << 20) - 1) / (8u << 20));
    }
    // Real: LLaMA-3-8B's ffn 14336 x 4096 in f32 is 235 MB, more than lavapipe's 128 MiB.
    Context& ctx = test::context();
    Problem p = make_problem(TensorType::F32, 1, 14336, 4096, Res::None, 71);
    if (p.w.size() <= ctx.caps().max_storage_buffer_range)
        MESSAGE("this device binds " << ctx.caps().max_storage_buffer_range << " bytes: 235 MB needs no split here");
    run(ctx, "", p);
}

TEST_CASE("matvec: argument checks") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType::Q8_0, b.slice(), b.slice(), b.slice(), 1, 4, 48), std::invalid_argument);
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType::F32, b.slice(), b.slice(), b.slice(), 9, 4, 32), std::invalid_argument);
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType::F32, b.slice(), b.slice(), b.slice(), 1, 1000, 1000),
                    std::invalid_argument);  // W slice too small
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType::F32, b.slice(2, 4096), b.slice(), b.slice(), 1, 4, 32),
                    std::invalid_argument);  // F32 rows must be 4-byte aligned
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType(4), b.slice(), b.slice(), b.slice(), 1, 4, 32), std::invalid_argument);
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType(16), b.slice(), b.slice(), b.slice(), 1, 4, 256), std::invalid_argument);
    // K-quant rows must be whole 256-element super-blocks.
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType::Q4_K, b.slice(), b.slice(), b.slice(), 1, 4, 96), std::invalid_argument);
    s.end();
}

TEST_CASE("matvec: linear_pipelines names what linear() uses; bandwidth report") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (TensorType t : kTypes) {
        auto d = ops::linear_pipelines(ctx, t, 1, 4096, 4096);
        REQUIRE(d.size() == 1);
        CHECK(d[0].shader.rfind("matvec_", 0) == 0);
        // Long rows: a row's k spread over the lanes, reduced with subgroup operations where there are.
        CHECK((d[0].shader.find("_subgroup") != std::string::npos) == ctx.caps().subgroup_ops());
        // Rows of at most 1 KiB on a CPU driver: lanes owning rows, no cross-lane reduction at all.
        auto small = ops::linear_pipelines(ctx, t, 1, 288, 256);
        REQUIRE(small.size() == 1);
        CHECK((small[0].shader.rfind("matvec_rows_", 0) == 0) == ctx.caps().cpu_tuning);
        // CPU drivers read X through a uniform buffer where it fits (64 KiB at most; every device
        // allows 16 KiB): a batch of 8 rows of 4096 floats (128 KiB) falls back to the storage buffer.
        const uint64_t ubo = std::min<uint64_t>(ctx.caps().max_uniform_buffer_range, 65536);
        const bool cpu = ctx.caps().cpu_tuning;
        // Q8_0 and Q4_0 blocks are read as 8-byte words there where the device has shaderInt64.
        const bool wide = cpu && ctx.caps().int64 && (t == TensorType::Q8_0 || t == TensorType::Q4_0);
        const std::string lower(type_traits(t).lower);
        CHECK((small[0].shader == (wide ? "matvec_rows_u64_" : "matvec_rows_u_") + lower) == cpu);
        const bool long_uniform = cpu && ubo >= 4096 * 4 + 64;
        CHECK((d[0].shader.rfind(wide && ctx.caps().subgroup_ops() ? "matvec_u64_" : "matvec_u_", 0) == 0) == long_uniform);
        auto batch = ops::linear_pipelines(ctx, t, 8, 4096, 4096);
        CHECK(batch[0].shader.rfind("matvec_u", 0) != 0);  // neither *_u_* nor *_u64_*
        ctx.prepare_pipelines(d);
    }
    CHECK(ops::linear_bytes_read(TensorType::Q4_0, 1, 4096, 4096) == 4096ull * 4096 / 32 * 18 + 4096 * 4 + 4096 * 4);

    // Rough GB/s of the decode matvec (Q4_0 4096 x 4096), from device timestamps.
    if (!ctx.caps().timestamps) return;
    const uint32_t n = 4096, k = 4096;
    auto w = make_weights(TensorType::Q4_0, n, k, 80);
    auto x = test::random_floats(k, 81);
    Buffer dw = ctx.create_buffer(w.size(), MemoryUsage::Device, "w");
    Buffer dx = ctx.create_buffer(k * 4, MemoryUsage::Device, "x");
    Buffer dy = ctx.create_buffer(n * 4, MemoryUsage::Device, "y");
    ctx.upload(dw, w.data(), w.size());
    ctx.upload(dx, x.data(), k * 4);
    CommandStream s(ctx);
    s.begin(true);
    for (int i = 0; i < 5; ++i) ops::matvec(ctx, s, TensorType::Q4_0, dw.slice(), dx.slice(), dy.slice(), 1, n, k);
    s.end();
    s.submit_and_wait();
    auto timings = s.timings();
    REQUIRE(timings.size() == 5);
    double best = 1e30;
    for (auto& tm : timings) best = std::min(best, tm.ns);
    MESSAGE(fmt::format("matvec q4_0 {}x{}: {:.3f} ms, {:.2f} GB/s ({})", n, k, best * 1e-6,
                        double(ops::linear_bytes_read(TensorType::Q4_0, 1, n, k)) / best, ctx.caps().name));
}

TEST_CASE("matvec: worst NMSE per weight type (report)") {
    for (auto& [t, v] : worst_nmse()) MESSAGE(fmt::format("matvec worst nmse {}: {:.3g}", type_traits(t).name, v));
}
