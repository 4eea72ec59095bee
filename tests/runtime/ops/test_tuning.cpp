// Tuned kernel configurations (runtime/kernel_tuning.h) entering through the planners
// (ops::configure, kernel_table.h): an entry changes the plan of its row and shape class only, one
// that no longer fits the device is ignored, a decode batch keeps the decode workgroup size; and
// `vkllm tune`'s measurement (runtime/ops/tuning.h) on a small shape, its winner checked against
// ref::linear through the plan the table now gives.
#include "support/linear_testing.h"
#include "support/test_context.h"

#include "runtime/kernel_tuning.h"
#include "runtime/ops/kernel_table.h"
#include "runtime/ops/tuning.h"

using namespace vkllm;
using Kind = ops::MatvecInput::Kind;

namespace {

DeviceCaps with(const DeviceCaps& base, std::vector<std::string> forced, const TuningKey& key, const TunedConfig& c) {
    DeviceCaps caps = base;
    caps.forced_kernels = std::move(forced);
    auto t = std::make_shared<KernelTuning>();
    t->entries[key] = c;
    caps.tuning = t;
    return caps;
}

}  // namespace

TEST_CASE("tuning: a tuned entry changes the plan of its row and shape class only") {
    const DeviceCaps base = test::context().caps();
    const uint32_t q8 = uint32_t(TensorType::Q8_0), n = 256, k = 512;
    SUBCASE("matvec-strided: workgroup size and rows") {
        const std::vector<std::string> force = {"matvec-strided"};
        DeviceCaps plain = base;
        plain.forced_kernels = force;
        const ops::MatvecPlan def = ops::plan_matvec(plain, TensorType::Q8_0, 1, n, k);
        const uint32_t wg = def.wg == 64 ? 128 : 64, rows = def.rows == 4 ? 2 : 4;
        const DeviceCaps tuned = with(base, force, {"matvec-strided", q8, n, k, "1"}, {.wg = wg, .rows = rows});
        const ops::MatvecPlan p = ops::plan_matvec(tuned, TensorType::Q8_0, 1, n, k);
        CHECK(p.wg == wg);
        CHECK(p.rows == rows);
        // A decode batch: the decode workgroup size (batch invariance), its own rows (none tuned).
        const ops::MatvecPlan b = ops::plan_matvec(tuned, TensorType::Q8_0, 4, n, k);
        CHECK(b.wg == wg);
        CHECK(b.rows == ops::plan_matvec(plain, TensorType::Q8_0, 4, n, k).rows);
        // Another shape, type or row: untouched.
        CHECK(ops::plan_matvec(tuned, TensorType::Q8_0, 1, n, 2 * k).wg == def.wg);
        CHECK(ops::plan_matvec(tuned, TensorType::Q4_0, 1, n, k).wg == def.wg);
        DeviceCaps rows_row = tuned;
        rows_row.forced_kernels = {"matvec-rows"};
        CHECK(ops::plan_matvec(rows_row, TensorType::Q8_0, 1, n, k).kernel == ops::MatvecPlan::Kernel::Rows);
    }
    SUBCASE("matmul-tiled: tiles per m bucket") {
        const std::vector<std::string> force = {"matmul-tiled"};
        const DeviceCaps tuned =
            with(base, force, {"matmul-tiled", q8, n, k, "64"}, {.bm = 32, .bn = 128, .bk = 16, .tm = 2, .tn = 8});
        const ops::MatmulPlan p = ops::plan_matmul(tuned, TensorType::Q8_0, 64, n, k);
        REQUIRE(p.kernel == ops::MatmulPlan::Kernel::Tiled);
        if (base.max_workgroup_invocations >= 256 && base.max_shared_memory >= 16 * (33 + 129) * 4) {
            CHECK(p.bm == 32);
            CHECK(p.bn == 128);
            CHECK(p.bk == 16);
            CHECK(p.tn == 8);
        }
        const ops::MatmulPlan other = ops::plan_matmul(tuned, TensorType::Q8_0, 128, n, k);  // another bucket
        CHECK(other.bn == 64);
    }
}

TEST_CASE("tuning: a tuned entry that no longer fits the device is ignored") {
    const DeviceCaps base = test::context().caps();
    const uint32_t q8 = uint32_t(TensorType::Q8_0), n = 256, k = 512;
    DeviceCaps plain = base;
    plain.forced_kernels = {"matmul-tiled"};
    const ops::MatmulPlan def = ops::plan_matmul(plain, TensorType::Q8_0, 64, n, k);
    // 128 x 128 tiles of 1 x 1 per invocation: 16384 invocations, beyond every device.
    DeviceCaps tuned = with(base, {"matmul-tiled"}, {"matmul-tiled", q8, n, k, "64"},
                            {.bm = 128, .bn = 128, .bk = 32, .tm = 1, .tn = 1});
    ops::MatmulPlan p = ops::plan_matmul(tuned, TensorType::Q8_0, 64, n, k);
    CHECK(p.bm == def.bm);
    CHECK(p.tm == def.tm);
    // Tiles that fit a device with its shared memory, on one with a quarter of it (`--caps shared-mem=`).
    tuned = with(base, {"matmul-tiled"}, {"matmul-tiled", q8, n, k, "64"},
                 {.bm = 128, .bn = 128, .bk = 32, .tm = 8, .tn = 8});
    tuned.max_shared_memory = 8192;
    p = ops::plan_matmul(tuned, TensorType::Q8_0, 64, n, k);
    CHECK(p.bm != 128);
    CHECK(uint64_t(p.bk) * (p.bm + 1 + p.bn + 1) * 4 <= 8192);
    // A matvec workgroup beyond the device's invocations keeps the row's own.
    DeviceCaps mv = with(base, {"matvec-strided"}, {"matvec-strided", q8, n, k, "1"}, {.wg = 1u << 16});
    DeviceCaps mv_plain = base;
    mv_plain.forced_kernels = {"matvec-strided"};
    CHECK(ops::plan_matvec(mv, TensorType::Q8_0, 1, n, k).wg ==
          ops::plan_matvec(mv_plain, TensorType::Q8_0, 1, n, k).wg);
}

TEST_CASE("tuning: tune_shape times candidates, and the table's plan still computes the projection") {
    test::ValidationGuard guard;
    Context& ctx = test::float_path_context();
    KernelTuning table;
    table.header = KernelTuning::header_for(ctx.caps());
    for (uint32_t m : {1u, 8u, 40u}) {
        CAPTURE(m);
        const ops::TuneShape shape{TensorType::Q8_0, m, 96, 256};
        ops::TuneOptions o;
        o.reps = 2;
        const ops::TuneResult r = ops::tune_shape(ctx, shape, table, o);
        CHECK(!r.row.empty());
        CHECK(r.base_ms > 0);
        CHECK(r.best_ms <= r.base_ms);
        CHECK(r.notes.empty());  // every candidate computed what the row's own configuration does
        if (r.improved) {
            CHECK(table.find(r.row, uint32_t(shape.wtype), shape.n, shape.k, m) != nullptr);
            CHECK(r.best_ms < r.base_ms * 0.97);
        }
        // Whatever won, the plan the table gives agrees with ref::linear.
        DeviceCaps caps = ctx.caps();
        caps.tuning = std::make_shared<KernelTuning>(table);
        const ops::LinearPlan plan =
            ops::plan_linear(caps, shape.wtype, m, shape.n, shape.k, true, Kind::Plain, false, false);
        test::linear::Problem p =
            test::linear::make_problem(shape.wtype, m, shape.n, shape.k, test::linear::Res::None, 7 + m);
        test::linear::run_problem(
            ctx, "tuned", p, false,
            [&](CommandStream& s, const BufferSlice& w, const BufferSlice& x, const BufferSlice& y,
                const BufferSlice* res) { ops::linear(ctx, s, plan, w, x, y, res); });
    }
}
