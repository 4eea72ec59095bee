// matvec with a fused input op (ops::MatvecInput): RMSNorm of X, or the SwiGLU / GeGLU product of
// X's gate rows and separate up rows, applied as X is loaded. The reference runs the unfused ops on the host
// (ref::rms_norm, ref::swiglu / geglu, then ref::linear), so a fusion that normalizes with the
// wrong row, skips the weight, mixes up gate and up or drops the tail fails. Every weight type, the
// device variants, one vector and batches on both sides of the rows per workgroup (the kernel's two
// loop orders), float rows whose k is not a multiple of the 16-byte unit (scalar tail), residual
// and bias, real model shapes, and misaligned slices (scalar X and weight loads).
#include "support/test_context.h"
#include "support/linear_testing.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/linear.h"

#include <fmt/format.h>

using namespace vkllm;
using namespace vkllm::test::linear;
using Kind = ops::MatvecInput::Kind;

namespace {

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::Plain: return "plain";
        case Kind::RmsNorm: return "rms_norm";
        case Kind::SwiGlu: return "swiglu";
        case Kind::GeGlu: return "geglu";
        case Kind::SwiGluOai: return "swiglu_oai";
    }
    return "?";
}

struct FusedProblem {
    Problem p;               // p.x: what the kernel reads as X (raw rows, or gate rows); p.ref as fused
    std::vector<float> g;    // RmsNorm weight [k], or the GLU's up rows [m][k]
    float eps = 1e-5f;
};

FusedProblem make_fused(Kind kind, TensorType t, uint32_t m, uint32_t n, uint32_t k, Res res, uint32_t seed,
                        bool bias = false) {
    FusedProblem f;
    Problem& p = f.p;
    const bool glu = ops::MatvecInput::glu(kind);
    p = Problem{t, m, n, k, res, make_weights(t, n, k, seed), {}, {}, {}, {}};
    // Residual-stream magnitudes for the norm (its scale must matter), gates across silu's bend,
    // and past gpt-oss's clamps at 7.
    const float amp = kind == Kind::RmsNorm ? 6.0f : kind == Kind::SwiGluOai ? 10.0f : 4.0f;
    p.x = test::random_floats(size_t(m) * k, seed + 1, -amp, amp);
    if (res != Res::None) p.r = test::random_floats(size_t(m) * n, seed + 2, -4.0f, 4.0f);
    if (bias) p.b = test::random_floats(n, seed + 3, -3.0f, 3.0f);
    std::vector<float> in = p.x;  // Plain: X as it is
    if (kind == Kind::RmsNorm) {
        f.g = test::random_floats(k, seed + 4, -2.0f, 2.0f);
        ref::rms_norm(p.x.data(), f.g.data(), in.data(), m, k, f.eps);
    } else if (glu) {
        const float up_amp = kind == Kind::SwiGluOai ? 10.0f : 2.0f;
        f.g = test::random_floats(size_t(m) * k, seed + 4, -up_amp, up_amp);  // up rows
        if (kind == Kind::SwiGlu)
            ref::swiglu(p.x.data(), f.g.data(), in.data(), m * k);
        else if (kind == Kind::SwiGluOai)
            ref::swiglu_oai(p.x.data(), f.g.data(), in.data(), m * k);
        else
            ref::geglu(p.x.data(), f.g.data(), in.data(), m * k);
    }
    p.ref.resize(size_t(m) * n);
    ref::linear(t, p.w.data(), in.data(), p.ref.data(), m, n, k, res == Res::None ? nullptr : p.r.data(),
                bias ? p.b.data() : nullptr);
    double norm = 0;
    for (float v : p.ref) norm += double(v) * v;
    REQUIRE(norm > 0);
    return f;
}

void run_fused(Context& ctx, const std::string& spec, Kind kind, const FusedProblem& f, bool misalign = false) {
    CAPTURE(kind_name(kind));
    const uint64_t g_off = misalign ? 4 : 0, gb = f.g.size() * 4;
    Buffer dg;
    ops::MatvecInput in{kind, {}, f.eps};
    if (kind != Kind::Plain) {
        dg = ctx.create_buffer(gb + g_off, MemoryUsage::Device, kind == Kind::RmsNorm ? "g" : "up");
        ctx.upload(dg, f.g.data(), gb, g_off);
        (kind == Kind::RmsNorm ? in.norm_weight : in.up) = dg.slice(g_off, gb);
    }
    const Problem& p = f.p;
    auto [c, dispatches] =
        run_problem(ctx, spec, p, misalign,
                    BiasRecordFn([&](CommandStream& s, const BufferSlice& w, const BufferSlice& x, const BufferSlice& y,
                                     const BufferSlice* r, const BufferSlice* b) {
                        ops::matvec(ctx, s, p.t, w, x, y, p.m, p.n, p.k, r, b, in);
                    }));
    (void)c;  // run_problem checked Y, the guards and the bytes before a misaligned Y
    CHECK(dispatches == 1);  // the fused op costs no dispatch of its own
}

void run_variants(Kind kind, const FusedProblem& f) {
    for (const std::string& spec : test::device_variants()) {
        CAPTURE(spec);
        run_fused(test::context_for(spec), spec, kind, f);
    }
}

// A batch of m vectors must give each row of Y bit for bit what that vector gives alone: a decode
// batch of sequences computes what a lone token does. On CPU drivers the lone vector may read X
// through a uniform buffer and the batch through a storage buffer (its X past 64 KiB or the
// device's maxUniformBufferRange), which must not change the arithmetic. x_shift misaligns X and G.
// Returns the shaders (lone, batch) the two took.
std::pair<std::string, std::string> check_batch_invariance(Context& ctx, Kind kind, TensorType t, uint32_t m, uint32_t n,
                                                           uint32_t k, uint32_t x_shift, uint32_t seed) {
    CAPTURE(kind_name(kind));
    CAPTURE(type_traits(t).name);
    CAPTURE(m);
    CAPTURE(k);
    CAPTURE(x_shift);
    const FusedProblem f = make_fused(kind, t, m, n, k, Res::None, seed);
    const Problem& p = f.p;
    Buffer dw = ctx.create_buffer(p.w.size(), MemoryUsage::Device, "w");
    Buffer dx = ctx.create_buffer(p.x.size() * 4 + x_shift, MemoryUsage::Device, "x");
    Buffer dg = ctx.create_buffer(std::max<size_t>(f.g.size(), 1) * 4 + x_shift, MemoryUsage::Device, "g");
    Buffer dy = ctx.create_buffer(size_t(m) * n * 4 * 2, MemoryUsage::Device, "y");
    ctx.upload(dw, p.w.data(), p.w.size());
    ctx.upload(dx, p.x.data(), p.x.size() * 4, x_shift);
    if (!f.g.empty()) ctx.upload(dg, f.g.data(), f.g.size() * 4, x_shift);
    const bool glu = ops::MatvecInput::glu(kind);
    auto input = [&](uint32_t row, uint32_t rows) {
        ops::MatvecInput in{kind, {}, f.eps};
        if (kind == Kind::RmsNorm) in.norm_weight = dg.slice(x_shift, uint64_t(k) * 4);
        if (glu) in.up = dg.slice(x_shift + uint64_t(row) * k * 4, uint64_t(rows) * k * 4);
        return in;
    };
    const uint64_t batch_y = uint64_t(m) * n * 4;
    CommandStream s(ctx);
    s.begin();
    ops::matvec(ctx, s, t, dw.slice(), dx.slice(x_shift, uint64_t(m) * k * 4), dy.slice(0, batch_y), m, n, k, nullptr,
                nullptr, input(0, m));
    for (uint32_t i = 0; i < m; ++i)
        ops::matvec(ctx, s, t, dw.slice(), dx.slice(x_shift + uint64_t(i) * k * 4, uint64_t(k) * 4),
                    dy.slice(batch_y + uint64_t(i) * n * 4, uint64_t(n) * 4), 1, n, k, nullptr, nullptr, input(i, 1));
    s.end();
    s.submit_and_wait();
    std::vector<uint32_t> y(size_t(m) * n * 2);
    ctx.download(dy, y.data(), y.size() * 4);
    size_t differ = 0;
    for (size_t i = 0; i < size_t(m) * n; ++i) differ += y[i] != y[size_t(m) * n + i];
    CHECK(differ == 0);
    return {ops::linear_pipelines(ctx, t, 1, n, k, kind)[0].shader, ops::linear_pipelines(ctx, t, m, n, k, kind)[0].shader};
}

}  // namespace

TEST_CASE("matvec: a batch computes every row bit for bit as a lone vector (uniform and storage X)") {
    test::ValidationGuard guard;
    // Uniform-X variants: *_u_*, and *_u64_* (Q8_0 / Q4_0 with 8-byte weight loads where the device
    // has shaderInt64), so the lone vector may also differ from the batch in how it loads W.
    auto uniform = [](const std::string& shader) {
        return shader.find("_u_") != std::string::npos || shader.find("_u64_") != std::string::npos;
    };
    for (const std::string& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        const bool cpu_64k = ctx.caps().cpu_tuning && ctx.caps().max_uniform_buffer_range >= 65536;
        for (Kind kind : {Kind::Plain, Kind::RmsNorm, Kind::SwiGlu}) {
            // Long rows (matvec.comp on CPU drivers): alone 8 KiB of X, batched 64 KiB plus the window's slack.
            auto [lone, batch] = check_batch_invariance(ctx, kind, TensorType::Q4_0, 8, 64, 2048, 0, 500);
            if (cpu_64k) CHECK((uniform(lone) && !uniform(batch)));
            // X just under the 64 KiB a uniform binding may hold, misaligned, k not a multiple of 4.
            auto [lone2, batch2] = check_batch_invariance(ctx, kind, TensorType::F32, 4, 40, 4090, 4, 510);
            if (cpu_64k) CHECK((uniform(lone2) && uniform(batch2)));
        }
    }
}

// Devices that take other loads of W and X: contexts of their own, which compile every pipeline
// again (slow drivers leave them out: scripts/slow_driver_tests.sh).
TEST_CASE("matvec: batch invariance on weakened devices (no int64, 4 KiB uniform range)") {
    test::ValidationGuard guard;
    auto uniform = [](const std::string& shader) {
        return shader.find("_u_") != std::string::npos || shader.find("_u64_") != std::string::npos;
    };
    // Without 64-bit integers the uniform-X variants load Q8_0 / Q4_0 weights as 4-byte words: the
    // long-row form with subgroup operations (matvec_u_*_subgroup) runs in no other device variant.
    Context& narrow = test::context_for("no-int64");
    for (TensorType t : {TensorType::Q4_0, TensorType::Q8_0}) {
        auto [lone, batch] = check_batch_invariance(narrow, Kind::RmsNorm, t, 8, 64, 2048, 0, 530);
        if (narrow.caps().cpu_tuning) CHECK((lone.find("_u_") != std::string::npos && !uniform(batch)));
    }
    // Short rows (matvec_rows on CPU drivers) on a device allowing 4 KiB of uniform buffer: the lone
    // vector (1 KiB) reads X as a uniform buffer, the batch (8 KiB) as a storage buffer.
    Context& small = test::context_for("max-uniform-range=4096");
    for (Kind kind : {Kind::Plain, Kind::RmsNorm, Kind::SwiGlu}) {
        auto [lone, batch] = check_batch_invariance(small, kind, TensorType::Q8_0, 8, 96, 256, 4, 520);
        if (small.caps().cpu_tuning) CHECK((uniform(lone) && !uniform(batch)));
    }
}

TEST_CASE("matvec fused input: every weight type, one vector and batches, residual and bias") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    // The fused code reads X, not W: every weight type once per kind (each is its own pipeline, and
    // lavapipe compiles slowly), the device variants and the batch loop orders on a few types.
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        for (Kind kind : {Kind::RmsNorm, Kind::SwiGlu}) {
            const uint32_t seed = 100 + uint32_t(kind) * 10;
            run_fused(ctx, "", kind, make_fused(kind, t, 1, 172, blocks_k(t, 2), Res::None, seed));
            run_fused(ctx, "", kind, make_fused(kind, t, 1, 65, blocks_k(t, 3), Res::InPlace, seed + 1, true));
            if (is_float_type(t)) {
                // k not a multiple of 4 or of the unit: scalar X (and gate / up) loads and the tail.
                run_fused(ctx, "", kind, make_fused(kind, t, 1, 70, 37, Res::None, seed + 4));
                run_fused(ctx, "", kind, make_fused(kind, t, 1, 19, 1003, Res::Separate, seed + 5));
            }
        }
    }
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0, TensorType::Q4_K}) {
        CAPTURE(type_traits(t).name);
        for (Kind kind : {Kind::RmsNorm, Kind::SwiGlu, Kind::GeGlu, Kind::SwiGluOai}) {
            const uint32_t seed = 150 + uint32_t(kind) * 10;
            run_variants(kind, make_fused(kind, t, 1, 100, blocks_k(t, 2), Res::Separate, seed, true));
            // Batches below and above the rows per workgroup: the kernel's two loop orders.
            run_fused(ctx, "", kind, make_fused(kind, t, 3, 40, blocks_k(t, 1), Res::Separate, seed + 1));
            run_fused(ctx, "", kind, make_fused(kind, t, 8, 33, blocks_k(t, 2), Res::InPlace, seed + 2, true));
        }
    }
}

TEST_CASE("matvec fused input: rows longer than 1 KiB (matvec.comp on CPU drivers too), batches") {
    test::ValidationGuard guard;
    // Rows of 1152 (Q4_0), 4096 (F16) and 8192 (F32) bytes: a row's k spread over the lanes and
    // reduced, with the batch below and above the rows per workgroup (the two loop orders).
    for (TensorType t : {TensorType::Q4_0, TensorType::F16, TensorType::F32}) {
        CAPTURE(type_traits(t).name);
        for (Kind kind : {Kind::RmsNorm, Kind::SwiGlu, Kind::GeGlu})
            for (uint32_t m : {1u, 3u, 8u})
                run_variants(kind, make_fused(kind, t, m, 70, 2048, m == 3 ? Res::InPlace : Res::None, 400 + m, m == 8));
    }
}

TEST_CASE("matvec fused input: real model shapes (stories15M, TinyLlama)") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    // stories15M: qkv 864 x 288, gate_up 1536 x 288, down 288 x 768, head 32000 x 288;
    // TinyLlama: qkv 2560 x 2048, down 2048 x 5632.
    for (TensorType t : {TensorType::F32, TensorType::Q8_0, TensorType::Q4_0}) {
        CAPTURE(type_traits(t).name);
        run_fused(ctx, "", Kind::RmsNorm, make_fused(Kind::RmsNorm, t, 1, 864, 288, Res::None, 200));
        run_fused(ctx, "", Kind::RmsNorm, make_fused(Kind::RmsNorm, t, 1, 1536, 288, Res::None, 201));
        run_fused(ctx, "", Kind::SwiGlu, make_fused(Kind::SwiGlu, t, 1, 288, 768, Res::InPlace, 202));
        run_fused(ctx, "", Kind::RmsNorm, make_fused(Kind::RmsNorm, t, 1, 32000, 288, Res::None, 203));
        run_fused(ctx, "", Kind::RmsNorm, make_fused(Kind::RmsNorm, t, 1, 2560, 2048, Res::None, 204));
        run_fused(ctx, "", Kind::SwiGlu, make_fused(Kind::SwiGlu, t, 1, 2048, 5632, Res::InPlace, 205));
    }
}

TEST_CASE("matvec fused input: misaligned X, norm weight and W") {
    test::ValidationGuard guard;
    for (const std::string& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (TensorType t : {TensorType::F32, TensorType::Q4_K}) {
            CAPTURE(type_traits(t).name);
            for (Kind kind : {Kind::RmsNorm, Kind::SwiGlu, Kind::GeGlu})
                run_fused(ctx, spec, kind, make_fused(kind, t, 2, 100, blocks_k(t, 3), Res::Separate, 300), true);
        }
    }
}

TEST_CASE("matvec fused input: argument checks") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1 << 16, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    // No norm weight, a short one, a negative or NaN eps.
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType::F32, b.slice(), b.slice(), b.slice(), 1, 4, 32, nullptr, nullptr,
                                {Kind::RmsNorm, {}, 1e-5f}),
                    std::invalid_argument);
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType::F32, b.slice(), b.slice(), b.slice(), 1, 4, 32, nullptr, nullptr,
                                {Kind::RmsNorm, b.slice(0, 64), 1e-5f}),
                    std::invalid_argument);
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType::F32, b.slice(), b.slice(), b.slice(), 1, 4, 32, nullptr, nullptr,
                                {Kind::RmsNorm, b.slice(), -1.0f}),
                    std::invalid_argument);
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType::F32, b.slice(), b.slice(), b.slice(), 1, 4, 32, nullptr, nullptr,
                                {Kind::RmsNorm, b.slice(), NAN}),
                    std::invalid_argument);
    // A GLU input needs its up rows: none, or too short.
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType::F32, b.slice(), b.slice(), b.slice(), 1, 4, 32, nullptr, nullptr,
                                {Kind::SwiGlu, {}, 0, {}}),
                    std::invalid_argument);
    CHECK_THROWS_AS(ops::matvec(ctx, s, TensorType::F32, b.slice(), b.slice(), b.slice(), 2, 4, 32, nullptr, nullptr,
                                {Kind::GeGlu, {}, 0, b.slice(0, 4 * 32)}),
                    std::invalid_argument);
    // Fusion is a matvec feature: prefill shapes have none.
    CHECK_THROWS_AS(ops::linear_pipelines(ctx, TensorType::F32, 9, 4, 32, Kind::RmsNorm), std::invalid_argument);
    s.end();
}
