// The cooperative-matrix matmul (matmul_coopmat.comp, tensor cores) against ref::linear_f16 (X and
// the decoded weights rounded to half, the kernel's definition) for every weight type: tiny shapes,
// shapes that are not multiples of the tile, the coopmat shape or the k slice, residual and bias,
// unaligned slices, a real LLaMA-size projection; and the plan itself on GPU-like caps (no device).
// The device cases need VK_KHR_cooperative_matrix: Mesa 26 lavapipe (scripts/mesa26.sh; 8x8x8,
// emulated) runs them in CI, other drivers skip them (test::coopmat_context()).
#include "support/linear_testing.h"
#include "support/test_context.h"

#include "runtime/ops/linear.h"
#include "runtime/ops/matmul_coopmat.h"
#include "runtime/ops/moe.h"

using namespace vkllm;
using namespace vkllm::test::linear;

namespace {

// make_problem with the reference recomputed as the kernel defines its products.
Problem coopmat_problem(TensorType t, uint32_t m, uint32_t n, uint32_t k, Res res, uint32_t seed, bool bias = false) {
    Problem p = make_problem(t, m, n, k, res, seed, bias);
    ref::linear_f16(t, p.w.data(), p.x.data(), p.ref.data(), m, n, k, res == Res::None ? nullptr : p.r.data(),
                    bias ? p.b.data() : nullptr);
    return p;
}

void run(Context& ctx, const Problem& p, bool misalign = false) {
    const ops::MatmulPlan plan = ops::plan_matmul(ctx.caps(), p.t, p.m, p.n, p.k, !misalign);
    REQUIRE(plan.kernel == ops::MatmulPlan::Kernel::Coopmat);
    run_problem(ctx, "coopmat", p, misalign,
                [&](CommandStream& s, const BufferSlice& w, const BufferSlice& x, const BufferSlice& y,
                    const BufferSlice* r, const BufferSlice* b) {
                    ops::matmul(ctx, s, ops::plan_matmul(ctx.caps(), p.t, p.m, p.n, p.k, w.offset % 4 == 0), w, x, y,
                                p.m, p.n, p.k, r, b);
                });
}

// A discrete GPU as the planner sees it: 32-wide subgroups that can be required, 48 KiB of shared
// memory, f16 shapes 16x16x16 and 16x8x16 (and an int8 one the f16 kernel must not take).
DeviceCaps gpu_caps() {
    DeviceCaps c;
    c.name = "GPU-like";
    c.subgroup_size = c.min_subgroup_size = c.max_subgroup_size = 32;
    c.subgroup_size_control = c.subgroup_basic = c.subgroup_arithmetic = true;
    c.fp16 = c.vulkan_memory_model = c.cooperative_matrix = true;
    c.coop_shapes = {{16, 8, 16, "f16", "f16", "f32", "f32"},
                     {16, 16, 16, "f16", "f16", "f32", "f32"},
                     {32, 32, 32, "s8", "s8", "s32", "s32"},
                     {16, 16, 16, "f16", "f16", "f16", "f16"}};
    c.max_shared_memory = 48 * 1024;
    c.max_workgroup_invocations = 1024;
    c.max_workgroup_size = {1024, 1024, 64};
    c.coopmat_kernels = coopmat_usable(c);
    return c;
}

}  // namespace

TEST_CASE("matmul_coopmat: the plan takes the device's largest f16 shape and the tile its shared memory holds") {
    DeviceCaps c = gpu_caps();
    REQUIRE(c.coopmat_kernels);
    const CoopMatShape* shape = coopmat_f16_shape(c);
    REQUIRE(shape != nullptr);
    CHECK((shape->m == 16 && shape->n == 16 && shape->k == 16 && shape->c_type == "f32"));

    const ops::MatmulPlan big = ops::plan_matmul(c, TensorType::Q4_K, 512, 4096, 4096);
    REQUIRE(big.kernel == ops::MatmulPlan::Kernel::Coopmat);
    CHECK(big.bm == 128);
    CHECK(big.bn == 128);
    CHECK(big.bk % big.ck == 0);
    CHECK((big.bm / big.sgm) % big.cm == 0);
    CHECK((big.bn / big.sgn) % big.cn == 0);
    const PipelineDesc d = big.pipeline();
    CHECK(d.shader == "matmul_coopmat_q4_k");
    REQUIRE(d.spec.size() == 11);
    CHECK(d.spec[0] == big.sgm * big.sgn * 32);  // whole subgroups of the required size
    CHECK(d.subgroup_size == 32);
    CHECK(ops::matmul_coopmat_shared_bytes(big.bm, big.bn, big.bk, big.sgm * big.sgn, big.cm, big.cn, false) <=
          c.max_shared_memory);

    // Short prompts take the small tile; so does a device whose shared memory holds only that.
    CHECK(ops::plan_matmul(c, TensorType::Q4_K, 40, 4096, 4096).bm == 64);
    DeviceCaps small = c;
    small.max_shared_memory = 24 * 1024;
    const ops::MatmulPlan sp = ops::plan_matmul(small, TensorType::Q8_0, 512, 4096, 4096);
    CHECK(sp.kernel == ops::MatmulPlan::Kernel::Coopmat);
    CHECK(sp.bm == 64);
    // The experts' form keeps its slots in shared memory too.
    CHECK(ops::plan_moe_matmul(c, TensorType::Q4_K, 768, 2048, 512).mm.kernel == ops::MatmulPlan::Kernel::Coopmat);

    // What takes the kernel away: --caps no-coopmat, no f16 shape, no fp16, no Vulkan memory model,
    // no subgroup size control; and CPU drivers unless forced.
    for (const char* spec : {"no-coopmat", "no-fp16", "no-subgroup-size-control"}) {
        CAPTURE(spec);
        DeviceCaps weak = c;
        CapsOverride::parse(spec).apply(weak);
        CHECK_FALSE(weak.coopmat_kernels);
        CHECK(ops::plan_matmul(weak, TensorType::Q4_K, 512, 4096, 4096).kernel != ops::MatmulPlan::Kernel::Coopmat);
    }
    DeviceCaps int8_only = c;
    int8_only.coop_shapes = {{32, 32, 32, "s8", "s8", "s32", "s32"}};
    CHECK_FALSE(coopmat_usable(int8_only));
    DeviceCaps no_vmm = c;
    no_vmm.vulkan_memory_model = false;
    CHECK_FALSE(coopmat_usable(no_vmm));
    DeviceCaps cpu = c;
    cpu.cpu_tuning = true;
    cpu.coopmat_kernels = false;  // as query_caps leaves a CPU driver
    CapsOverride::parse("coopmat").apply(cpu);
    CHECK(cpu.coopmat_kernels);
    CapsOverride::parse("coopmat,no-coopmat").apply(cpu);
    CHECK_FALSE(cpu.coopmat_kernels);
}

TEST_CASE("matmul_coopmat: tiny and odd shapes, residual and bias, every weight type (--caps coopmat)") {
    test::ValidationGuard guard;
    Context* ctx = test::coopmat_context();
    if (!ctx) return;
    uint32_t seed = 100;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        for (uint32_t m = 1; m <= 3; ++m) run(*ctx, coopmat_problem(t, m, 4, blocks_k(t, 1), Res::None, seed + m));
        // Not multiples of the tile, the coopmat shape or the k slice; rows alternating 4- and
        // 2-byte alignment (three blocks).
        run(*ctx, coopmat_problem(t, 9, 172, blocks_k(t, 2), Res::None, seed + 10));
        run(*ctx, coopmat_problem(t, 33, 172, blocks_k(t, 3), Res::Separate, seed + 11));
        run(*ctx, coopmat_problem(t, 65, 130, blocks_k(t, 3), Res::InPlace, seed + 12));
        run(*ctx, coopmat_problem(t, 70, 97, blocks_k(t, 5), Res::None, seed + 13, true));
        if (is_float_type(t)) {
            // Any k: tails inside a group of 8 and inside a k slice; odd k makes F16 rows 2-byte aligned.
            run(*ctx, coopmat_problem(t, 17, 100, 1, Res::None, seed + 14));
            run(*ctx, coopmat_problem(t, 70, 129, 203, Res::Separate, seed + 15));
        }
        // Unaligned: W 2 (F32: 4) bytes off, X / Y / R off the binding alignment (X read float by float).
        run(*ctx, coopmat_problem(t, 40, 100, blocks_k(t, 3), Res::Separate, seed + 16), true);
        seed += 20;
    }
}

TEST_CASE("matmul_coopmat: LLaMA-size projections (--caps coopmat)") {
    test::ValidationGuard guard;
    Context* ctx = test::coopmat_context();
    if (!ctx) return;
    // A 64-token chunk through LLaMA-7B's attention projection (4096 x 4096) and a 100-token one
    // through TinyLlama's FFN down projection (2048 x 5632): many k slices, partial last tiles.
    run(*ctx, coopmat_problem(TensorType::Q4_K, 64, 4096, 4096, Res::InPlace, 1));
    run(*ctx, coopmat_problem(TensorType::Q6_K, 100, 2048, 5632, Res::None, 2));
    run(*ctx, coopmat_problem(TensorType::F16, 37, 1024, 4096, Res::None, 3, true));
}
