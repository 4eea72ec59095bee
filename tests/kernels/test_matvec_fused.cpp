// matvec with a fused input op (ops::MatvecInput): RMSNorm of X, or the SwiGLU / GeGLU product of
// X's gate rows and separate up rows, applied as X is loaded. The reference runs the unfused ops on the host
// (ref::rms_norm, ref::swiglu / geglu, then ref::linear), so a fusion that normalizes with the
// wrong row, skips the weight, mixes up gate and up or drops the tail fails. Every weight type, the
// device variants, one vector and batches on both sides of the rows per workgroup (the kernel's two
// loop orders), float rows whose k is not a multiple of the 16-byte unit (scalar tail), residual
// and bias, real model shapes, and misaligned slices (scalar X and weight loads).
#include "support/test_context.h"
#include "kernels/linear_testing.h"

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
    const bool glu = kind == Kind::SwiGlu || kind == Kind::GeGlu;
    p = Problem{t, m, n, k, res, make_weights(t, n, k, seed), {}, {}, {}, {}};
    // Residual-stream magnitudes for the norm (its scale must matter), gates across silu's bend.
    p.x = test::random_floats(size_t(m) * k, seed + 1, kind == Kind::RmsNorm ? -6.0f : -4.0f,
                              kind == Kind::RmsNorm ? 6.0f : 4.0f);
    if (res != Res::None) p.r = test::random_floats(size_t(m) * n, seed + 2, -4.0f, 4.0f);
    if (bias) p.b = test::random_floats(n, seed + 3, -3.0f, 3.0f);
    std::vector<float> in(size_t(m) * k);
    if (kind == Kind::RmsNorm) {
        f.g = test::random_floats(k, seed + 4, -2.0f, 2.0f);
        ref::rms_norm(p.x.data(), f.g.data(), in.data(), m, k, f.eps);
    } else if (glu) {
        f.g = test::random_floats(size_t(m) * k, seed + 4, -2.0f, 2.0f);  // up rows
        if (kind == Kind::SwiGlu)
            ref::swiglu(p.x.data(), f.g.data(), in.data(), m * k);
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

}  // namespace

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
        for (Kind kind : {Kind::RmsNorm, Kind::SwiGlu, Kind::GeGlu}) {
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
    // Rows of 1152 (Q4_0) and 8192 (F32) bytes: a row's k spread over the lanes and reduced, with
    // the batch below and above the rows per workgroup (the two loop orders).
    for (TensorType t : {TensorType::Q4_0, TensorType::F32}) {
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
            for (Kind kind : {Kind::RmsNorm, Kind::SwiGlu})
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
