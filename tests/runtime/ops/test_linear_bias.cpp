// The bias fused into the linear epilogue (Y = X W^T + bias (+ R)), for matvec, matmul and
// linear(): every weight type and device variant, with and without a residual (separate and in
// place), unaligned slices, GPT-2-size projections, and dispatch splits where each dispatch's
// bias window starts at its own first row.
#include "support/test_context.h"
#include "support/linear_testing.h"

#include "runtime/ops/linear.h"

#include <fmt/format.h>

using namespace vkllm;
using namespace vkllm::test::linear;

namespace {

enum class Op { Matvec, Matmul, Linear };

uint32_t run(Context& ctx, const std::string& spec, const Problem& p, Op op, bool misalign = false) {
    auto [c, dispatches] = run_problem(ctx, spec, p, misalign, BiasRecordFn([&](CommandStream& s, const BufferSlice& w,
                                                                                const BufferSlice& x, const BufferSlice& y,
                                                                                const BufferSlice* r, const BufferSlice* b) {
        switch (op) {
            case Op::Matvec: ops::matvec(ctx, s, p.t, w, x, y, p.m, p.n, p.k, r, b); break;
            case Op::Matmul: ops::matmul(ctx, s, p.t, w, x, y, p.m, p.n, p.k, r, b); break;
            case Op::Linear: ops::linear(ctx, s, p.t, w, x, y, p.m, p.n, p.k, r, b); break;
        }
    }));
    (void)c;
    return dispatches;
}

void run_variants(const Problem& p, Op op, bool misalign = false) {
    for (const std::string& spec : test::device_variants()) {
        CAPTURE(spec);
        run(test::context_for(spec), spec, p, op, misalign);
    }
}

}  // namespace

TEST_CASE("linear bias: matvec, every weight type, batches 1..8, with and without residual") {
    // The epilogue is the same code after either reduction: every device variant for one shape per
    // type, the default device for the rest (keeps the test quick on CPU drivers).
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        run_variants(make_problem(t, 3, 67, blocks_k(t, 3), Res::Separate, 81, true), Op::Matvec);
        run(ctx, "", make_problem(t, 1, 172, blocks_k(t, 2), Res::None, 80, true), Op::Matvec);
        run(ctx, "", make_problem(t, 8, 129, blocks_k(t, 1), Res::InPlace, 82, true), Op::Matvec);
        run(ctx, "", make_problem(t, 5, 7, blocks_k(t, 2), Res::None, 83, true), Op::Matvec, true);
    }
}

TEST_CASE("linear bias: matmul, every weight type, odd shapes, with and without residual") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        run_variants(make_problem(t, 33, 129, blocks_k(t, 1), Res::Separate, 92, true), Op::Matmul, true);
        run(ctx, "", make_problem(t, 9, 172, blocks_k(t, 2), Res::None, 90, true), Op::Matmul);
        run(ctx, "", make_problem(t, 70, 67, blocks_k(t, 1), Res::InPlace, 91, true), Op::Matmul);
    }
}

TEST_CASE("linear bias: GPT-2 / Qwen2-size projections through linear() (decode and prefill)") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    // GPT-2 small: c_attn 768 -> 2304, c_fc 768 -> 3072, c_proj 3072 -> 768 (+ residual); Qwen2-0.5B q 896 -> 896.
    struct Shape { TensorType t; uint32_t n, k; Res res; };
    const Shape shapes[] = {{TensorType::F32, 2304, 768, Res::None},  {TensorType::F16, 3072, 768, Res::None},
                            {TensorType::Q8_0, 768, 3072, Res::InPlace}, {TensorType::Q4_K, 2304, 768, Res::None},
                            {TensorType::Q6_K, 768, 3072, Res::Separate}, {TensorType::Q5_0, 896, 896, Res::None}};
    for (const Shape& sh : shapes) {
        CAPTURE(type_traits(sh.t).name);
        for (uint32_t m : {1u, 4u, 16u}) run(ctx, "", make_problem(sh.t, m, sh.n, sh.k, sh.res, 100 + m, true), Op::Linear);
    }
}

TEST_CASE("linear bias: dispatches split by maxStorageBufferRange each bind their part of the bias") {
    test::ValidationGuard guard;
    const std::string spec = "max-storage-range=8m";
    Context& small = test::context_for(spec);
    // 4097 rows of 2048 f16 / q8_0 weights are 16.8 / 8.9 MB: several W row ranges, each with its bias.
    CHECK(run(small, spec, make_problem(TensorType::F16, 2, 4097, 2048, Res::InPlace, 110, true), Op::Matvec) >= 3);
    CHECK(run(small, spec, make_problem(TensorType::Q8_0, 9, 4097, 2048, Res::None, 111, true), Op::Matmul, true) >= 2);
}

TEST_CASE("linear bias: argument checks") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "b");
    const BufferSlice small = b.slice(0, 60), odd = b.slice(2, 256);
    CommandStream s(ctx);
    s.begin();
    for (uint32_t m : {1u, 16u}) {
        CAPTURE(m);
        CHECK_THROWS_AS(ops::linear(ctx, s, TensorType::F32, b.slice(), b.slice(), b.slice(), m, 16, 32, nullptr, &small),
                        std::invalid_argument);  // bias holds 15 of 16 floats
        CHECK_THROWS_AS(ops::linear(ctx, s, TensorType::F32, b.slice(), b.slice(), b.slice(), m, 16, 32, nullptr, &odd),
                        std::invalid_argument);  // bias not 4-byte aligned
    }
    CHECK(s.stats().dispatches == 0);
    s.end();
}
