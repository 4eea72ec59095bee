// The integer-dot matvec and matmul (quantize_q8_1.comp + matvec_dot.comp / matmul_dot.comp,
// MatvecPlan / MatmulPlan::Kernel::Dot), forced
// with `--caps int-dot` (lavapipe supports the packed dot without accelerating it, so it is never
// its default). Two references, both from definitions: the same math (ref::quantize_q8_1 of the
// input, then ref::linear over those values: the kernel's integer sums are exact, so only X's
// rounding at ties may differ), and the float path (ref::linear of the raw input), which the Q8_1
// activations may miss by their quantization error only. Every integer-dot type, tiny / odd / real
// shapes, batches, fused RMSNorm and SwiGLU inputs, residual and bias, the CPU-tuned, GPU-tuned and
// tree-reduction variants, and batch invariance; for the matmul (prompt chunks), rows and columns
// that are no multiple of the tile, k slices that end inside a slice, and bindings split in rows.
#include "support/test_context.h"
#include "support/linear_testing.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/linear.h"
#include "runtime/ops/norm.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

using namespace vkllm;
using namespace vkllm::test::linear;
using Kind = ops::MatvecInput::Kind;

namespace {

// The device variants of the suite (VKLLM_TEST_DEVICE_VARIANTS: all, subgroup or real), each with
// the integer-dot kernels forced: CPU-tuned, GPU-tuned, and GPU-tuned with the tree reduction.
const std::vector<std::string>& dot_variants() {
    static const std::vector<std::string> v = [] {
        const size_t n = test::device_variants().size();
        std::vector<std::string> out{"int-dot"};
        if (n >= 2) out.push_back("int-dot,gpu-tuning");
        if (n >= 3) out.push_back("int-dot,gpu-tuning,no-subgroup-ops");
        return out;
    }();
    return v;
}
// The GPU-tuned variant where the suite runs it, else the real device's.
const std::string& gpu_spec() { return dot_variants().size() >= 2 ? dot_variants()[1] : dot_variants()[0]; }

std::vector<TensorType> dot_types() {
    std::vector<TensorType> out;
    for (TensorType t : kTypes)
        if (ops::int_dot_type(t)) out.push_back(t);
    return out;
}

// The matvec input of x (m rows of k) after the fused op; g: the norm weight [k] or up rows [m][k].
std::vector<float> fused_input(Kind kind, const std::vector<float>& x, const std::vector<float>& g, uint32_t m,
                               uint32_t k, float eps) {
    std::vector<float> in = x;
    if (kind == Kind::RmsNorm) ref::rms_norm(x.data(), g.data(), in.data(), m, k, eps);
    if (kind == Kind::SwiGlu) ref::swiglu(x.data(), g.data(), in.data(), m * k);
    return in;
}

struct DotCase {
    TensorType t;
    uint32_t m, n, k;
    Kind kind = Kind::Plain;
    bool residual = false, bias = false;
    bool w_offset2 = false;  // W's slice starts 2 bytes into its buffer (no aligned-word reads)
    bool matmul = false;     // a prompt chunk's plan (matmul_dot) instead of batch-invariant matvec rows
};

// Runs one case on ctx through plan_linear (the path the model records) and checks Y against both
// references. Returns Y's bits.
std::vector<float> run_case(Context& ctx, const std::string& spec, const DotCase& c, uint32_t seed) {
    const auto plan = ops::plan_linear(ctx.caps(), c.t, c.m, c.n, c.k, !c.w_offset2, c.kind, !c.matmul);
    REQUIRE_MESSAGE(plan.int_dot(), "the integer-dot kernel was not chosen under --caps " << spec);
    REQUIRE((plan.kernel == ops::LinearPlan::Kernel::Matmul) == c.matmul);
    const uint64_t w_off = c.w_offset2 ? 2 : 0;
    const float eps = 1e-5f;
    const std::vector<uint8_t> w = make_weights(c.t, c.n, c.k, seed);
    const std::vector<float> x = test::random_floats(size_t(c.m) * c.k, seed + 1, -4.0f, 4.0f);
    const std::vector<float> g = c.kind == Kind::Plain ? std::vector<float>{}
                                 : c.kind == Kind::RmsNorm ? test::random_floats(c.k, seed + 2, -2.0f, 2.0f)
                                                           : test::random_floats(size_t(c.m) * c.k, seed + 2, -2.0f, 2.0f);
    const std::vector<float> r = c.residual ? test::random_floats(size_t(c.m) * c.n, seed + 3) : std::vector<float>{};
    const std::vector<float> b = c.bias ? test::random_floats(c.n, seed + 4) : std::vector<float>{};

    const std::vector<float> in = fused_input(c.kind, x, g, c.m, c.k, eps);
    // The same math in the kernel's order: RMSNorm's row scale is applied to the sums, so X * G is
    // what gets quantized (rounding X * G * scale instead would move values at a tie).
    std::vector<float> qin = in;
    std::vector<double> row_scale(c.m, 1.0);
    if (c.kind == Kind::RmsNorm)
        for (uint32_t i = 0; i < c.m; ++i) {
            double ss = 0;
            for (uint32_t e = 0; e < c.k; ++e) {
                const size_t o = size_t(i) * c.k + e;
                ss += double(x[o]) * x[o];
                qin[o] = x[o] * g[e];
            }
            row_scale[i] = 1.0 / std::sqrt(ss / c.k + eps);
        }
    std::vector<float> xq(in.size());
    for (uint32_t i = 0; i < c.m; ++i) ref::quantize_q8_1(qin.data() + size_t(i) * c.k, xq.data() + size_t(i) * c.k, c.k);
    std::vector<float> same(size_t(c.m) * c.n), flt(same.size());
    ref::linear(c.t, w.data(), xq.data(), same.data(), c.m, c.n, c.k);
    for (uint32_t i = 0; i < c.m; ++i)
        for (uint32_t j = 0; j < c.n; ++j) {
            double v = same[size_t(i) * c.n + j] * row_scale[i];
            if (c.bias) v += b[j];
            if (c.residual) v += r[size_t(i) * c.n + j];
            same[size_t(i) * c.n + j] = float(v);
        }
    ref::linear(c.t, w.data(), in.data(), flt.data(), c.m, c.n, c.k, c.residual ? r.data() : nullptr,
                c.bias ? b.data() : nullptr);

    Buffer dw = ctx.create_buffer(w.size() + w_off, MemoryUsage::Device, "w");
    ctx.upload(dw, w.data(), w.size(), w_off);
    Buffer dx = ctx.create_buffer(x.size() * 4, MemoryUsage::Device, "x");
    ctx.upload(dx, x.data(), x.size() * 4);
    Buffer dg, dr, db;
    ops::MatvecInput input{c.kind, {}, eps};
    if (!g.empty()) {
        dg = ctx.create_buffer(g.size() * 4, MemoryUsage::Device, "g");
        ctx.upload(dg, g.data(), g.size() * 4);
        (c.kind == Kind::RmsNorm ? input.norm_weight : input.up) = dg.slice();
    }
    test::GuardedBuffer q8(ctx, c.m * ops::q8_1_row_bytes(c.k), "xq");
    input.q8 = q8.slice();
    test::GuardedBuffer dy(ctx, same.size() * 4, "y");
    BufferSlice rs, bs;
    if (c.residual) {
        dr = ctx.create_buffer(r.size() * 4, MemoryUsage::Device, "r");
        ctx.upload(dr, r.data(), r.size() * 4);
        rs = dr.slice();
    }
    if (c.bias) {
        db = ctx.create_buffer(b.size() * 4, MemoryUsage::Device, "b");
        ctx.upload(db, b.data(), b.size() * 4);
        bs = db.slice();
    }
    CommandStream s(ctx);
    s.begin();
    ops::linear(ctx, s, plan, dw.slice(w_off, w.size()), dx.slice(), dy.slice(), c.residual ? &rs : nullptr,
                c.bias ? &bs : nullptr, input);
    s.end();
    s.submit_and_wait();
    std::vector<float> got(same.size());
    dy.download(got.data(), got.size() * 4);
    dy.check_guards();
    q8.check_guards();
    const std::string what = fmt::format("{} dot {} m={} n={} k={} in={} [{}]", c.matmul ? "matmul" : "matvec",
                                         type_traits(c.t).name, c.m, c.n, c.k, int(c.kind), spec);
    // The same math: exact integer sums, f32 across blocks. The device's reciprocal may differ from
    // the host's by an ulp or two, moving a value at a rounding tie one level (d * |w|, ~1e-2 here):
    // the element bound allows that, the NMSE bound (a wrong block gives ~1e-3 and more) does not.
    test::validate_result(what + " vs Q8_1 reference", got.data(), same.data(), got.size(), {1e-8, 5e-2, 1e-2});
    // The float path: the activation quantization's error and no more. Rounding moves each X value
    // by at most half its block's step d, so |Y - Y_float| <= sum over blocks of d / 2 * sum |W|.
    std::vector<float> row(c.k);
    size_t over = 0;
    for (uint32_t j = 0; j < c.n; ++j) {
        dequantize_row(c.t, w.data() + j * row_bytes(c.t, c.k), row.data(), c.k);
        for (uint32_t i = 0; i < c.m; ++i) {
            double bound = 0;
            for (uint32_t blk = 0; blk < c.k / 32; ++blk) {
                double amax = 0, wsum = 0;
                for (uint32_t e = 32 * blk; e < 32 * blk + 32; ++e) {
                    amax = std::max(amax, double(std::fabs(in[size_t(i) * c.k + e])));
                    wsum += std::fabs(row[e]);
                }
                bound += amax / 127.0 / 2.0 * wsum;
            }
            const size_t o = size_t(i) * c.n + j;
            const double err = std::fabs(double(got[o]) - flt[o]);
            if (!(err <= bound * 1.001 + 1e-4 * std::fabs(flt[o]) + 1e-5)) {
                if (over++ < 3) MESSAGE(what << ": y[" << i << "][" << j << "] off the float path by " << err << " > " << bound);
            }
        }
    }
    CHECK(over == 0);
    return got;
}

}  // namespace

TEST_CASE("matvec dot: the plan takes the integer-dot kernel exactly where it should") {
    Context& forced = test::context_for("int-dot");
    Context& plain = test::context_for("");
    REQUIRE(forced.caps().int_dot_product);  // lavapipe has the extension (not accelerated)
    CHECK(forced.caps().int_dot_kernels);
    // lavapipe's packed dot is not accelerated: the float kernels by default. int-dot needs the
    // extension; no-int-dot wins over int-dot.
    CHECK_FALSE(plain.caps().int_dot_accelerated);
    CHECK_FALSE(plain.caps().int_dot_kernels);
    DeviceCaps none = plain.caps();
    none.int_dot_product = false;
    CapsOverride::parse("int-dot").apply(none);
    CHECK_FALSE(none.int_dot_kernels);
    DeviceCaps both = plain.caps();
    CapsOverride::parse("int-dot,no-int-dot").apply(both);
    CHECK_FALSE(both.int_dot_kernels);
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        const uint32_t k = blocks_k(t, 2);
        const auto p = ops::plan_linear(forced.caps(), t, 1, 64, k);
        CHECK(p.int_dot() == ops::int_dot_type(t));
        if (p.int_dot()) {
            const auto d = p.pipelines();
            REQUIRE(d.size() == 2);
            CHECK(d[0].shader == "quantize_q8_1");
            CHECK(d[1].shader.rfind("matvec_dot_", 0) == 0);
        }
        // Prompt chunks: the integer-dot matmul, its quantizer listed with it.
        const auto mm = ops::plan_linear(forced.caps(), t, 16, 64, k);
        CHECK(mm.kernel == ops::LinearPlan::Kernel::Matmul);
        CHECK(mm.int_dot() == ops::int_dot_type(t));
        if (mm.int_dot()) {
            const auto d = mm.pipelines();
            REQUIRE(d.size() == 2);
            CHECK(d[0].shader == "quantize_q8_1");
            CHECK(d[1].shader == "matmul_dot_" + std::string(type_traits(t).lower));
        }
        // Without a scratch for the quantized X (the convenience functions), the float kernels.
        CHECK_FALSE(ops::plan_linear(forced.caps(), t, 1, 64, k, true, Kind::Plain, false, false).int_dot());
        CHECK_FALSE(ops::plan_linear(forced.caps(), t, 16, 64, k, true, Kind::Plain, false, false).int_dot());
        CHECK_FALSE(ops::plan_matmul(forced.caps(), t, 16, 64, k).kernel == ops::MatmulPlan::Kernel::Dot);
        // Too little shared memory for a tile holding whole units: the float matmul.
        DeviceCaps small = forced.caps();
        small.max_shared_memory = 1024;
        CHECK(ops::plan_matmul(small, t, 16, 64, k, true, true).kernel != ops::MatmulPlan::Kernel::Dot);
        small.max_shared_memory = 8 * 1024;  // 32 x 32 tiles: slices of 4 blocks need 12.5 KiB, of 2 blocks 7
        small.max_workgroup_invocations = 128;
        const auto cramped = ops::plan_matmul(small, t, 16, 64, k, true, true);
        if (t == TensorType::Q6_K) {
            CHECK(cramped.kernel != ops::MatmulPlan::Kernel::Dot);  // its units span 4 blocks
        } else if (ops::int_dot_type(t)) {
            CHECK(cramped.kernel == ops::MatmulPlan::Kernel::Dot);
            CHECK(cramped.bk == 64);
        }
        DeviceCaps off = forced.caps();
        CapsOverride::parse("no-int-dot").apply(off);
        CHECK_FALSE(ops::plan_linear(off, t, 1, 64, k).int_dot());
    }
    CHECK_THROWS_AS(CapsOverride::parse("int-dots"), std::invalid_argument);
}

TEST_CASE("matvec dot: quantize_q8_1 follows the Q8_1 definition (plain, RMSNorm and SwiGLU inputs)") {
    Context& ctx = test::context_for("int-dot");
    const uint32_t m = 3, k = 320;
    for (Kind kind : {Kind::Plain, Kind::RmsNorm, Kind::SwiGlu}) {
        CAPTURE(int(kind));
        std::vector<float> x = test::random_floats(size_t(m) * k, 7, -4.0f, 4.0f);
        for (uint32_t i = 0; i < 32; ++i) x[32 + i] = 0.0f;  // an all-zero block: d = 0, q = 0
        x[70] = 1e-30f;                                         // a tiny value beside large ones
        const std::vector<float> g = kind == Kind::Plain ? std::vector<float>{}
                                     : kind == Kind::RmsNorm ? test::random_floats(k, 8, -2.0f, 2.0f)
                                                             : test::random_floats(size_t(m) * k, 8, -2.0f, 2.0f);
        // What the kernel quantizes: RMSNorm's row scale stays out (the matvec applies it).
        std::vector<float> in = kind == Kind::SwiGlu ? fused_input(kind, x, g, m, k, 1e-5f) : x;
        if (kind == Kind::RmsNorm)
            for (size_t i = 0; i < in.size(); ++i) in[i] *= g[i % k];
        Buffer dx = ctx.create_buffer(x.size() * 4, MemoryUsage::Device, "x");
        ctx.upload(dx, x.data(), x.size() * 4);
        Buffer dg;
        ops::MatvecInput input{kind, {}, 1e-5f};
        if (!g.empty()) {
            dg = ctx.create_buffer(g.size() * 4, MemoryUsage::Device, "g");
            ctx.upload(dg, g.data(), g.size() * 4);
            (kind == Kind::RmsNorm ? input.norm_weight : input.up) = dg.slice();
        }
        const uint64_t rb = ops::q8_1_row_bytes(k);
        test::GuardedBuffer q8(ctx, m * rb, "xq");
        CommandStream s(ctx);
        s.begin();
        ops::quantize_q8_1(ctx, s, dx.slice(), q8.slice(), m, k, input);
        s.end();
        s.submit_and_wait();
        std::vector<uint8_t> got(m * rb);
        q8.download(got.data(), got.size());
        q8.check_guards();
        size_t moved = 0;
        for (uint32_t row = 0; row < m; ++row) {
            std::vector<int8_t> q(k);
            std::vector<float> d(k / 32), deq(k);
            ref::quantize_q8_1(in.data() + size_t(row) * k, deq.data(), k, q.data(), d.data());
            const uint8_t* base = got.data() + row * rb;
            for (uint32_t j = 0; j < k / 32; ++j) {
                float gd, gs, gss;
                std::memcpy(&gd, base + k + 16 * j, 4);
                std::memcpy(&gs, base + k + 16 * j + 4, 4);
                std::memcpy(&gss, base + k + 16 * j + 8, 4);
                CHECK(std::fabs(gd - d[j]) <= 1e-6f * d[j]);
                double ss = 0;  // RMSNorm: the block's raw sum of squares, else 0
                for (uint32_t e = 32 * j; e < 32 * j + 32; ++e) ss += double(x[row * k + e]) * x[row * k + e];
                CHECK(std::fabs(gss - (kind == Kind::RmsNorm ? ss : 0.0)) <= 1e-5 * ss);
                int sum = 0;
                for (uint32_t e = 0; e < 32; ++e) {
                    const int gq = int8_t(base[32 * j + e]);
                    sum += gq;
                    CHECK(std::abs(gq - q[32 * j + e]) <= 1);
                    moved += gq != q[32 * j + e];
                }
                CHECK(std::fabs(gs - gd * float(sum)) <= 1e-5f * std::max(1.0f, std::fabs(gs)));
                if (row == 0 && j == 1 && kind != Kind::SwiGlu) CHECK(gd == 0.0f);
            }
        }
        CHECK(moved <= 2);  // only values at a rounding tie may land on the other level
    }
}

TEST_CASE("matvec dot: every integer-dot type, one vector (tiny, odd rows, residual and bias), every variant") {
    uint32_t seed = 100;
    for (const std::string& spec : dot_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (TensorType t : dot_types()) {
            CAPTURE(type_traits(t).name);
            run_case(ctx, spec, {t, 1, 1, blocks_k(t, 1)}, ++seed);
            run_case(ctx, spec, {t, 1, 37, blocks_k(t, 3), Kind::Plain, true, true}, ++seed);
            run_case(ctx, spec, {t, 1, 67, blocks_k(t, 5)}, ++seed);
            run_case(ctx, spec, {t, 1, 21, blocks_k(t, 2), Kind::Plain, false, false, true}, ++seed);
        }
    }
}

TEST_CASE("matvec dot: fused RMSNorm and SwiGLU inputs, one vector") {
    Context& ctx = test::context_for(gpu_spec());
    uint32_t seed = 400;
    for (TensorType t : {TensorType::Q4_0, TensorType::Q6_K}) {
        CAPTURE(type_traits(t).name);
        run_case(ctx, gpu_spec(), {t, 1, 96, blocks_k(t, 4), Kind::RmsNorm, false, true}, ++seed);
        run_case(ctx, gpu_spec(), {t, 1, 40, blocks_k(t, 3), Kind::SwiGlu, true}, ++seed);
    }
}

// Batches compile a variant per batch size: left out on slow drivers (scripts/slow_driver_tests.sh).
TEST_CASE("matvec dot: batches of 2..8 vectors and beyond (groups of 8), every integer-dot type, fused inputs") {
    uint32_t seed = 200;
    for (const std::string& spec : dot_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (TensorType t : dot_types()) {
            CAPTURE(type_traits(t).name);
            run_case(ctx, spec, {t, 3, 67, blocks_k(t, 5)}, ++seed);
            run_case(ctx, spec, {t, 8, 19, blocks_k(t, 2), Kind::Plain, true}, ++seed);
        }
    }
    Context& ctx = test::context_for(gpu_spec());
    for (TensorType t : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K}) {
        CAPTURE(type_traits(t).name);
        run_case(ctx, gpu_spec(), {t, 5, 40, blocks_k(t, 3), Kind::SwiGlu, true}, ++seed);
        run_case(ctx, gpu_spec(), {t, 11, 33, blocks_k(t, 2), Kind::RmsNorm}, ++seed);  // groups 8 + 3
    }
}

TEST_CASE("matvec dot: real model shapes (TinyLlama, Llama-3-8B rows)") {
    Context& ctx = test::context_for(gpu_spec());
    run_case(ctx, gpu_spec(), {TensorType::Q4_0, 1, 256, 2048}, 900);
    run_case(ctx, gpu_spec(), {TensorType::Q4_K, 2, 128, 5632, Kind::SwiGlu}, 901);
    run_case(ctx, gpu_spec(), {TensorType::Q6_K, 1, 64, 14336}, 902);
    run_case(ctx, gpu_spec(), {TensorType::Q8_0, 1, 128, 4096, Kind::RmsNorm}, 903);
}

TEST_CASE("matvec dot: batches of 2..8: each row is what the vector gives alone") {
    for (const std::string& spec : {dot_variants()[0], gpu_spec()}) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (TensorType t : {TensorType::Q4_0, TensorType::Q5_1, TensorType::Q4_K, TensorType::Q6_K}) {
            CAPTURE(type_traits(t).name);
            // 8192 columns: several units per invocation on every variant (the per-invocation
            // order matters); 11 vectors: a group of 8 and one of 3.
            const uint32_t k = 8192, n = 45, m = 11;
            const DotCase batch{t, m, n, k, Kind::RmsNorm};
            const std::vector<float> all = run_case(ctx, spec, batch, 77);
            // The same rows one at a time: run_case draws X from the seed, so row i alone is
            // checked by re-running with m = 1 on the batch's row data.
            const std::vector<uint8_t> w = make_weights(t, n, k, 77);
            const std::vector<float> x = test::random_floats(size_t(m) * k, 78, -4.0f, 4.0f);
            const std::vector<float> g = test::random_floats(k, 79, -2.0f, 2.0f);
            Buffer dw = ctx.create_buffer(w.size(), MemoryUsage::Device, "w");
            ctx.upload(dw, w.data(), w.size());
            Buffer dx = ctx.create_buffer(x.size() * 4, MemoryUsage::Device, "x");
            ctx.upload(dx, x.data(), x.size() * 4);
            Buffer dg = ctx.create_buffer(g.size() * 4, MemoryUsage::Device, "g");
            ctx.upload(dg, g.data(), g.size() * 4);
            Buffer q8 = ctx.create_buffer(ops::q8_1_row_bytes(k), MemoryUsage::Device, "xq");
            Buffer dy = ctx.create_buffer(size_t(m) * n * 4, MemoryUsage::Device, "y");
            const auto lone = ops::plan_linear(ctx.caps(), t, 1, n, k, true, Kind::RmsNorm, true);
            CommandStream s(ctx);
            s.begin();
            for (uint32_t i = 0; i < m; ++i) {
                ops::MatvecInput in{Kind::RmsNorm, dg.slice(), 1e-5f};
                in.q8 = q8.slice();
                ops::linear(ctx, s, lone, dw.slice(), dx.slice(uint64_t(i) * k * 4, uint64_t(k) * 4),
                            dy.slice(uint64_t(i) * n * 4, uint64_t(n) * 4), nullptr, nullptr, in);
            }
            s.end();
            s.submit_and_wait();
            std::vector<float> one(size_t(m) * n);
            ctx.download(dy, one.data(), one.size() * 4);
            CHECK(std::memcmp(one.data(), all.data(), one.size() * 4) == 0);
        }
    }
}

TEST_CASE("matmul dot: every integer-dot type, prompt chunks (odd rows and columns, k slices ending early, residual and bias), every variant") {
    uint32_t seed = 1000;
    for (const std::string& spec : dot_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (TensorType t : dot_types()) {
            CAPTURE(type_traits(t).name);
            DotCase c{t, 9, 1, blocks_k(t, 1)};
            c.matmul = true;
            run_case(ctx, spec, c, ++seed);
            c = {t, 33, 37, blocks_k(t, 3), Kind::Plain, true, true};  // 3 blocks (or 3 super-blocks)
            c.matmul = true;
            run_case(ctx, spec, c, ++seed);
            c = {t, 70, 67, blocks_k(t, 5)};  // two row tiles, two column tiles, 5 blocks: a slice and a bit
            c.matmul = true;
            run_case(ctx, spec, c, ++seed);
            c = {t, 17, 21, blocks_k(t, 2), Kind::Plain, false, false, true};  // W not word-aligned
            c.matmul = true;
            run_case(ctx, spec, c, ++seed);
        }
    }
}

TEST_CASE("matmul dot: real model shapes (Llama-3-8B rows, gpt-oss experts' k) and a bias") {
    Context& ctx = test::context_for(gpu_spec());
    const DotCase cases[] = {
        {TensorType::Q4_K, 64, 96, 4096},
        {TensorType::Q6_K, 40, 64, 14336, Kind::Plain, true},
        {TensorType::Q4_0, 128, 128, 2048},
        {TensorType::MXFP4, 24, 72, 2880, Kind::Plain, false, true},
        {TensorType::Q8_0, 48, 100, 896, Kind::Plain, false, true},  // Qwen2-0.5B's dim, biased
    };
    uint32_t seed = 1100;
    for (DotCase c : cases) {
        c.matmul = true;
        run_case(ctx, gpu_spec(), c, ++seed);
    }
}

TEST_CASE("matmul dot: X, Y and W larger than one binding are split in rows") {
    // A 64 KiB binding limit: X's 300 rows of 1024 floats and W's rows split over dispatches, each
    // quantizing and multiplying its own rows.
    Context& ctx = test::context_for("int-dot,max-storage-range=64K");
    for (TensorType t : {TensorType::Q4_0, TensorType::Q6_K}) {
        CAPTURE(type_traits(t).name);
        DotCase c{t, 300, 150, 1024, Kind::Plain, true, true};
        c.matmul = true;
        run_case(ctx, "int-dot,max-storage-range=64K", c, 1200);
    }
}

TEST_CASE("matvec dot: NaN or Inf in X gives non-finite outputs, as the float path does (and the matmul's)") {
    // max() and the int8 conversion would drop a NaN: the quantizer marks the block's scale NaN, so
    // that the forward pass's non-finite check still fires (a NaN must never turn into text).
    Context& ctx = test::context_for(gpu_spec());
    const TensorType t = TensorType::Q4_0;
    const uint32_t n = 16, k = 128;
    const std::vector<uint8_t> w = make_weights(t, n, k, 5);
    Buffer dw = ctx.create_buffer(w.size(), MemoryUsage::Device, "w");
    ctx.upload(dw, w.data(), w.size());
    // Y (m rows of n) of `plan` over X's m rows, input's Q8_1 scratch made here.
    auto run = [&](const ops::LinearPlan& plan, const std::vector<float>& x, uint32_t m, ops::MatvecInput input) {
        REQUIRE(plan.int_dot());
        Buffer dx = ctx.create_buffer(x.size() * 4, MemoryUsage::Device, "x");
        ctx.upload(dx, x.data(), x.size() * 4);
        Buffer q8 = ctx.create_buffer(m * ops::q8_1_row_bytes(k), MemoryUsage::Device, "xq");
        Buffer dy = ctx.create_buffer(size_t(m) * n * 4, MemoryUsage::Device, "y");
        input.q8 = q8.slice();
        CommandStream s(ctx);
        s.begin();
        ops::linear(ctx, s, plan, dw.slice(), dx.slice(), dy.slice(), nullptr, nullptr, input);
        s.end();
        s.submit_and_wait();
        std::vector<float> y(size_t(m) * n);
        ctx.download(dy, y.data(), y.size() * 4);
        return y;
    };
    for (Kind kind : {Kind::Plain, Kind::SwiGlu}) {
        for (float bad : {std::nanf(""), INFINITY}) {
            CAPTURE(int(kind));
            CAPTURE(bad);
            std::vector<float> x = test::random_floats(k, 6), up = test::random_floats(k, 7);
            x[40] = bad;
            Buffer dup = ctx.create_buffer(k * 4, MemoryUsage::Device, "up");
            ctx.upload(dup, up.data(), k * 4);
            ops::MatvecInput in{kind, {}, 0};
            if (kind == Kind::SwiGlu) in.up = dup.slice();
            const std::vector<float> y = run(ops::plan_linear(ctx.caps(), t, 1, n, k, true, kind, true), x, 1, in);
            for (float v : y) CHECK_FALSE(std::isfinite(v));
            if (kind == Kind::Plain) {  // a prompt chunk's matmul: the bad row's outputs, and only its
                const uint32_t m = 12;
                std::vector<float> xs = test::random_floats(size_t(m) * k, 8);
                xs[size_t(5) * k + 40] = bad;
                const auto mm = ops::plan_linear(ctx.caps(), t, m, n, k);
                REQUIRE(mm.kernel == ops::LinearPlan::Kernel::Matmul);
                const std::vector<float> ys = run(mm, xs, m, ops::MatvecInput{});
                for (uint32_t i = 0; i < m; ++i)
                    for (uint32_t j = 0; j < n; ++j) CHECK(std::isfinite(ys[size_t(i) * n + j]) == (i != 5));
            }
            // The reference marks the block the same way.
            std::vector<float> xq(k);
            ref::quantize_q8_1(x.data(), xq.data(), k);
            CHECK(std::isnan(xq[33]));
            CHECK(std::isfinite(xq[0]));
        }
    }
}

TEST_CASE("matvec dot: argument checks") {
    Context& ctx = test::context_for("int-dot");
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    const auto plan = ops::plan_linear(ctx.caps(), TensorType::Q4_0, 1, 32, 64);
    REQUIRE(plan.int_dot());
    // No Q8_1 scratch: named, not a crash.
    CHECK_THROWS_WITH_AS(ops::linear(ctx, s, plan, b.slice(), b.slice(), b.slice()),
                         doctest::Contains("Q8_1 scratch"), std::invalid_argument);
    CHECK_THROWS_AS(ops::quantize_q8_1(ctx, s, b.slice(), b.slice(), 1, 48), std::invalid_argument);  // k % 32
    CHECK_THROWS_AS(ops::quantize_q8_1(ctx, s, b.slice(), b.slice(0, 16), 1, 64), std::invalid_argument);
    s.end();
}
