// The linear-kernel table (runtime/ops/kernel_table.h): every dense row the test device can run,
// forced with `--caps kernel=<row>`, against ref::linear for a few weight types and shapes (odd ones
// too: n and k off the tiles, m off the matmul tile), and the forcing rules (unknown names, two rows
// of one problem, a row the device cannot run, a forced row that does not serve the shape).
#include "support/test_context.h"
#include "support/linear_testing.h"

#include "runtime/ops/kernel_table.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <set>
#include <string_view>
#include <tuple>

using namespace vkllm;
using namespace vkllm::test::linear;
using Kind = ops::MatvecInput::Kind;

namespace {

bool dense(const ops::KernelRow& r) {
    return r.problem == ops::LinearProblem::DenseMatvec || r.problem == ops::LinearProblem::DenseMatmul;
}
bool dot_row(const ops::KernelRow& r) { return r.name.find("dot") != std::string_view::npos; }

// Runs p through the plan plan_linear makes on ctx. The integer-dot rows get the Q8_1 scratch and
// are checked against ref::linear of X's blocks quantized as the kernel quantizes them (its exact
// math but for rounding ties), with test_matvec_dot's tolerance.
void run_row(Context& ctx, const std::string& spec, const ops::KernelRow& row, const Problem& p) {
    const bool matmul = row.problem == ops::LinearProblem::DenseMatmul, dot = dot_row(row);
    const ops::LinearPlan plan = ops::plan_linear(ctx.caps(), p.t, p.m, p.n, p.k, true, Kind::Plain, false, dot);
    REQUIRE((plan.kernel == ops::LinearPlan::Kernel::Matmul) == matmul);
    REQUIRE(plan.int_dot() == dot);
    if (!dot) {
        if (matmul && plan.matmul.kernel == ops::MatmulPlan::Kernel::Coopmat) {
            // The matrix units multiply X and W rounded to half: the reference rounds them too.
            Problem half = p;
            ref::linear_f16(p.t, p.w.data(), p.x.data(), half.ref.data(), p.m, p.n, p.k,
                            p.r.empty() ? nullptr : p.r.data());
            run_problem(ctx, spec, half, false,
                        [&](CommandStream& s, const BufferSlice& w, const BufferSlice& x, const BufferSlice& y,
                            const BufferSlice* r) { ops::linear(ctx, s, plan, w, x, y, r); });
            return;
        }
        run_problem(ctx, spec, p, false,
                    [&](CommandStream& s, const BufferSlice& w, const BufferSlice& x, const BufferSlice& y,
                        const BufferSlice* r) { ops::linear(ctx, s, plan, w, x, y, r); });
        return;
    }
    std::vector<float> xq(p.x.size()), same(p.ref.size());
    for (uint32_t i = 0; i < p.m; ++i) ref::quantize_q8_1(p.x.data() + size_t(i) * p.k, xq.data() + size_t(i) * p.k, p.k);
    ref::linear(p.t, p.w.data(), xq.data(), same.data(), p.m, p.n, p.k, p.r.empty() ? nullptr : p.r.data());
    Buffer dw = ctx.create_buffer(p.w.size(), MemoryUsage::Device, "w");
    ctx.upload(dw, p.w.data(), p.w.size());
    Buffer dx = ctx.create_buffer(p.x.size() * 4, MemoryUsage::Device, "x");
    ctx.upload(dx, p.x.data(), p.x.size() * 4);
    Buffer dr = ctx.create_buffer(p.r.size() * 4, MemoryUsage::Device, "r");
    ctx.upload(dr, p.r.data(), p.r.size() * 4);
    test::GuardedBuffer q8(ctx, p.m * ops::q8_1_row_bytes(p.k), "xq");
    test::GuardedBuffer dy(ctx, same.size() * 4, "y");
    ops::MatvecInput in;
    in.q8 = q8.slice();
    const BufferSlice rs = dr.slice();
    CommandStream s(ctx);
    s.begin();
    ops::linear(ctx, s, plan, dw.slice(), dx.slice(), dy.slice(), &rs, nullptr, in);
    s.end();
    s.submit_and_wait();
    std::vector<float> got(same.size());
    dy.download(got.data(), got.size() * 4);
    test::validate_result(label(p, spec) + " vs Q8_1 reference", got.data(), same.data(), got.size(),
                          {1e-8, 5e-2, 1e-2});
    dy.check_guards();
    q8.check_guards();
}

}  // namespace

TEST_CASE("kernel table: every row names a problem once, and each problem ends in a row that always serves") {
    std::set<std::string_view> names;
    for (const ops::KernelRow& r : ops::kernel_table()) {
        CHECK(names.insert(r.name).second);
        CHECK(ops::find_kernel_row(r.name) == &r);
        const int set = (r.matvec != nullptr) + (r.matmul != nullptr) + (r.moe_matvec != nullptr);
        CHECK(set == 1);
    }
    CHECK(ops::find_kernel_row("no-such-row") == nullptr);
    DeviceCaps caps = test::context().caps();
    for (auto p : {ops::LinearProblem::DenseMatvec, ops::LinearProblem::DenseMatmul, ops::LinearProblem::ExpertMatvec,
                   ops::LinearProblem::ExpertMatmul}) {
        const ops::KernelRow* last = nullptr;
        for (const ops::KernelRow& r : ops::kernel_table())
            if (r.problem == p) last = &r;
        REQUIRE(last);
        const ops::LinearShape shape{TensorType::Q4_0, 16, 64, 256};
        CHECK(last->runs_on(caps));
        CHECK(last->serves(caps, shape));
        CHECK(last->preferred(caps, shape));
    }
}

TEST_CASE("kernel table: each dense row the device runs, forced, against the CPU reference") {
    const DeviceCaps& real = test::context().caps();
    int ran = 0;
    for (const ops::KernelRow& row : ops::kernel_table()) {
        if (!dense(row)) continue;
        CAPTURE(row.name);
        if (!row.runs_on(real)) {
            MESSAGE("the test device cannot run " << row.name);
            continue;
        }
        const std::string spec = fmt::format("kernel={}", row.name);
        Context& ctx = test::context_for(spec);
        const bool matmul = row.problem == ops::LinearProblem::DenseMatmul;
        for (TensorType t : {TensorType::F16, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K, TensorType::IQ4_NL}) {
            if (dot_row(row) && !ops::int_dot_type(t)) continue;
            CAPTURE(type_traits(t).name);
            for (const auto& [m, n, blocks] : {std::tuple{1u, 67u, 3u}, {3u, 130u, 1u}, {8u, 33u, 2u}, {13u, 71u, 3u},
                                                {40u, 129u, 1u}}) {
                const bool mm = m > 8;
                if (mm != matmul) continue;
                const uint32_t k = blocks_k(t, blocks);
                const ops::LinearShape shape{t, m, n, k, true, Kind::Plain, dot_row(row)};
                REQUIRE(row.serves(ctx.caps(), shape));
                CHECK(&ops::pick_kernel(ctx.caps(), row.problem, shape) == &row);
                run_row(ctx, spec, row, make_problem(t, m, n, k, Res::Separate, 100 + m + n));
                ++ran;
            }
        }
    }
    CHECK(ran > 0);
}

TEST_CASE("kernel table: forcing rules") {
    DeviceCaps caps = test::context().caps();
    const ops::LinearShape shape{TensorType::F32, 1, 64, 256};
    SUBCASE("an unknown name") {
        caps.forced_kernels = {"matvec-nope"};
        CHECK_THROWS_AS(ops::check_forced_kernels(caps), std::invalid_argument);
        CHECK_THROWS_AS(ops::plan_matvec(caps, TensorType::F32, 1, 64, 256), std::invalid_argument);
    }
    SUBCASE("two rows of one problem") {
        caps.forced_kernels = {"matvec-rows", "matvec-strided"};
        CHECK_THROWS_AS(ops::check_forced_kernels(caps), std::invalid_argument);
    }
    SUBCASE("rows of different problems") {
        caps.forced_kernels = {"matvec-strided", "matmul-tiled"};
        CHECK_NOTHROW(ops::check_forced_kernels(caps));
        CHECK(ops::plan_matvec(caps, TensorType::F32, 1, 64, 256).kernel == ops::MatvecPlan::Kernel::Strided);
        CHECK(ops::plan_matmul(caps, TensorType::F32, 16, 64, 256).kernel == ops::MatmulPlan::Kernel::Tiled);
    }
    SUBCASE("a row the device cannot run") {
        caps.int_dot_product = caps.int_dot_accelerated = caps.int_dot_kernels = false;
        caps.forced_kernels = {"matvec-dot"};
        CHECK_THROWS_AS(ops::check_forced_kernels(caps), DeviceLimitError);
    }
    SUBCASE("a forced row that does not serve the shape falls back to the table's order") {
        if (caps.int_dot_product) {
            caps.forced_kernels = {"matvec-dot"};
            caps.int_dot_kernels = false;
            const ops::KernelRow& unforced = [&]() -> const ops::KernelRow& {
                DeviceCaps plain = caps;
                plain.forced_kernels.clear();
                return ops::pick_kernel(plain, ops::LinearProblem::DenseMatvec, shape);
            }();
            CHECK(&ops::pick_kernel(caps, ops::LinearProblem::DenseMatvec, shape) == &unforced);  // F32: no dot
        }
    }
}
