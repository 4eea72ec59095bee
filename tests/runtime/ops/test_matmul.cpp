// matmul (prefill-time linear layer) against the CPU reference, for every weight type and device
// variant: matmul_broadcast (CPU tuning with subgroups, the default lavapipe variant) and the
// shared-memory tiled matmul (the no-subgroup-ops and gpu-tuning variants; the 16 KiB
// shared-memory variant gets a shallower k slice): tiny and odd shapes
// (m, n, k not multiples of the tile), one real LLaMA-size projection per type, residual add
// (separate and in place), unaligned slices, linear()'s choice between matvec and matmul, and X / Y /
// W larger than the binding range (forced with max-storage-range=8m).
#include "support/test_context.h"
#include "support/linear_testing.h"

#include "runtime/ops/linear.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <map>
#include <set>

using namespace vkllm;
using namespace vkllm::test::linear;

namespace {

std::map<TensorType, double>& worst_nmse() {
    static std::map<TensorType, double> m;
    return m;
}

enum class Op { Matmul, Linear };

// Records the op for p, runs it and checks Y and its guards (see run_problem). Returns the
// stream's dispatch count.
uint32_t run(Context& ctx, const std::string& spec, const Problem& p, Op op = Op::Matmul, bool misalign = false) {
    auto [c, dispatches] = run_problem(ctx, spec, p, misalign, [&](CommandStream& s, const BufferSlice& w, const BufferSlice& x,
                                                                   const BufferSlice& y, const BufferSlice* r) {
        if (op == Op::Linear)
            ops::linear(ctx, s, p.t, w, x, y, p.m, p.n, p.k, r);
        else
            ops::matmul(ctx, s, p.t, w, x, y, p.m, p.n, p.k, r);
    });
    double& w = worst_nmse()[p.t];
    w = std::max(w, c.nmse);
    return dispatches;
}

void run_variants(const Problem& p, Op op = Op::Matmul) {
    for (const std::string& spec : test::device_variants()) {
        CAPTURE(spec);
        run(test::context_for(spec), spec, p, op);
    }
}

}  // namespace

TEST_CASE("matmul: tile choice fits the device") {
    // The device variants cover both kernels: CPU tuning with subgroups takes matmul_broadcast,
    // no-subgroup-ops and gpu-tuning the shared-memory tiles; every case below runs on all three.
    std::set<std::string> kernels;
    for (const std::string& spec : test::device_variants()) {
        CAPTURE(spec);
        const DeviceCaps& caps = test::context_for(spec).caps();
        for (uint32_t m : {9u, 32u, 33u, 512u}) {
            const ops::MatmulPlan plan = ops::plan_matmul(caps, TensorType::Q4_0, m, 4096, 4096);
            const PipelineDesc d = plan.pipeline();
            if (plan.kernel == ops::MatmulPlan::Kernel::Broadcast) {
                kernels.insert("broadcast");
                REQUIRE(d.spec.size() == 4);
                // Workgroup = one full subgroup, required wherever the device allows requiring it.
                if (caps.subgroup_size_control) CHECK(d.subgroup_size == d.spec[0]);
                continue;
            }
            kernels.insert("tiled");
            REQUIRE(d.spec.size() == 6);
            const uint32_t wg = d.spec[0], bm = d.spec[1], bn = d.spec[2], bk = d.spec[3], tm = d.spec[4], tn = d.spec[5];
            CHECK(wg == (bm / tm) * (bn / tn));
            CHECK(wg <= caps.max_workgroup_invocations);
            CHECK(bk % 8 == 0);
            CHECK(uint64_t(bk) * (bm + 1 + bn + 1) * 4 <= caps.max_shared_memory);
        }
    }
    // On lavapipe, both kernels are exercised by the variants (on a GPU, only the tiled one exists).
    const DeviceCaps& real = test::context_for("").caps();
    if (test::device_variants().size() > 1 && real.cpu_tuning && real.subgroup_ballot) CHECK(kernels.size() == 2);
}

TEST_CASE("matmul: tiny shapes, every weight type and device variant") {
    test::ValidationGuard guard;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        for (uint32_t m = 1; m <= 3; ++m) run_variants(make_problem(t, m, 4, blocks_k(t, 1), Res::None, 10 + m));
    }
}

TEST_CASE("matmul: odd shapes (m, n, k not multiples of the tile)") {
    test::ValidationGuard guard;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        // Three blocks per row: rows of 2-byte-aligned block types alternate 4- and 2-byte alignment.
        run_variants(make_problem(t, 7, 172, blocks_k(t, 2), Res::None, 20));
        run_variants(make_problem(t, 33, 172, blocks_k(t, 3), Res::Separate, 21));
        run_variants(make_problem(t, 65, 172, blocks_k(t, 3), Res::InPlace, 22));
        run_variants(make_problem(t, 9, 4097, blocks_k(t, 2), Res::None, 23));
        if (is_float_type(t)) {
            // Any k: odd k makes F16 rows 2-byte aligned; k tails inside an 8-element group.
            run_variants(make_problem(t, 17, 100, 1, Res::None, 24));
            run_variants(make_problem(t, 33, 65, 37, Res::Separate, 25));
            run_variants(make_problem(t, 70, 129, 203, Res::None, 26));
        }
    }
}

TEST_CASE("matmul: unaligned slices (W 2-byte aligned, X/Y/R off the binding alignment)") {
    test::ValidationGuard guard;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        for (const std::string& spec : test::device_variants()) {
            CAPTURE(spec);
            run(test::context_for(spec), spec, make_problem(t, 40, 100, blocks_k(t, 3), Res::Separate, 30), Op::Matmul, true);
            run(test::context_for(spec), spec, make_problem(t, 12, 66, blocks_k(t, 2), Res::InPlace, 31), Op::Matmul, true);
        }
    }
}

TEST_CASE("matmul: one real LLaMA-size prefill projection per weight type") {
    test::ValidationGuard guard;
    struct Shape { TensorType t; uint32_t m, n, k; };
    // 64-token prompt through q (4096x4096); TinyLlama down (2048x5632) for 96 tokens; a 128-token
    // prompt through LLaMA-3 k/v (1024x4096); 64 tokens through TinyLlama gate (5632x2048), q
    // (2048x2048) and k/v (256x2048), through LLaMA-2 down (4096x11008) for a few rows, and
    // through a gpt-oss-20b expert (2880x2880, MXFP4 as released).
    const Shape shapes[] = {{TensorType::F32, 64, 4096, 4096},     {TensorType::F16, 96, 2048, 5632},
                            {TensorType::Q8_0, 128, 1024, 4096},   {TensorType::Q4_0, 64, 5632, 2048},
                            {TensorType::BF16, 64, 1024, 4096},    {TensorType::Q4_1, 64, 2048, 2048},
                            {TensorType::Q5_0, 96, 2048, 5632},    {TensorType::Q5_1, 64, 256, 2048},
                            {TensorType::IQ4_NL, 64, 2048, 2048},  {TensorType::Q2_K, 64, 2048, 2048},
                            {TensorType::Q3_K, 64, 2048, 5632},    {TensorType::Q4_K, 64, 5632, 2048},
                            {TensorType::Q5_K, 64, 2048, 2048},    {TensorType::Q6_K, 40, 1024, 11008},
                            {TensorType::IQ4_XS, 64, 2048, 2048},  {TensorType::MXFP4, 64, 2880, 2880}};
    static_assert(std::size(shapes) == std::size(kTypes), "one real shape per weight type");
    for (const Shape& sh : shapes) {
        CAPTURE(type_traits(sh.t).name);
        run_variants(make_problem(sh.t, sh.m, sh.n, sh.k, Res::InPlace, 40), Op::Linear);
    }
}

TEST_CASE("linear: m <= 8 takes matvec, m > 8 matmul; same results") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        CHECK(ops::linear_pipelines(ctx, t, 8, 256, 256)[0].shader.rfind("matvec_", 0) == 0);
        CHECK(ops::linear_pipelines(ctx, t, 9, 256, 256)[0].shader.rfind("matmul_", 0) == 0);
        for (uint32_t m : {1u, 8u, 9u, 16u}) run(ctx, "", make_problem(t, m, 160, 256, Res::Separate, 50 + m), Op::Linear);
    }
    // Start-up compiles exactly what the ops then use: no pipeline is created afterwards.
    std::vector<PipelineDesc> all;
    for (TensorType t : kTypes)
        for (uint32_t m : {1u, 3u, 64u}) {
            auto d = ops::linear_pipelines(ctx, t, m, 512, 512);
            all.insert(all.end(), d.begin(), d.end());
        }
    ctx.prepare_pipelines(all);
    const uint32_t created = ctx.pipeline_stats().created;
    for (TensorType t : kTypes)
        for (uint32_t m : {1u, 3u, 64u}) run(ctx, "", make_problem(t, m, 64, 512, Res::None, 60), Op::Linear);
    CHECK(ctx.pipeline_stats().created == created);
}

TEST_CASE("matmul: W, X and Y larger than maxStorageBufferRange are split over dispatches") {
    test::ValidationGuard guard;
    const std::string spec = "max-storage-range=8m";
    Context& small = test::context_for(spec);
    REQUIRE(small.caps().max_storage_buffer_range == (8u << 20));
    // W split: 4097 x 4096 is 9.4 MB (Q4_0) .. 67 MB (F32).
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        uint32_t d = run(small, spec, make_problem(t, 20, 4097, 4096, Res::InPlace, 70));
        CHECK(d >= (uint64_t(4097) * row_bytes(t, 4096) + (8u << 20) - 1) / (8u << 20));
    }
    // X split: 600 x 4096 f32 is 9.8 MB; Y split: 600 x 3600 f32 is 8.6 MB.
    CHECK(run(small, spec, make_problem(TensorType::Q4_0, 600, 70, 4096, Res::Separate, 71)) >= 2);
    CHECK(run(small, spec, make_problem(TensorType::Q8_0, 600, 3600, 64, Res::InPlace, 72)) >= 2);
}

TEST_CASE("matmul: argument checks") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::matmul(ctx, s, TensorType::Q4_0, b.slice(), b.slice(), b.slice(), 16, 4, 40), std::invalid_argument);
    CHECK_THROWS_AS(ops::matmul(ctx, s, TensorType::Q6_K, b.slice(), b.slice(), b.slice(), 16, 4, 160), std::invalid_argument);
    CHECK_THROWS_AS(ops::matmul(ctx, s, TensorType::F32, b.slice(), b.slice(), b.slice(), 0, 4, 32), std::invalid_argument);
    CHECK_THROWS_AS(ops::matmul(ctx, s, TensorType::F32, b.slice(), b.slice(0, 100), b.slice(), 16, 4, 32),
                    std::invalid_argument);  // X slice too small
    CHECK_THROWS_AS(ops::matmul(ctx, s, TensorType::F16, b.slice(1, 4096), b.slice(), b.slice(), 16, 4, 32),
                    std::invalid_argument);  // W must be 2-byte aligned
    s.end();
}

TEST_CASE("matmul: worst NMSE per weight type (report)") {
    for (auto& [t, v] : worst_nmse()) MESSAGE(fmt::format("matmul worst nmse {}: {:.3g}", type_traits(t).name, v));
}
