// gelu, quick gelu, geglu, scale, softcap, clamp, relu and add_rows against their double references.
#include "support/test_context.h"

#include "support/small_ops_testing.h"

#include "runtime/ops/elementwise.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

using namespace vkllm;
using small_ops_testing::ShiftedBuffer;

namespace {

enum class Op { Gelu, Geglu, Scale, Softcap, Clamp, Relu, SwigluOai, GeluQuick };
const char* op_name(Op op) {
    switch (op) {
        case Op::Gelu: return "gelu";
        case Op::Geglu: return "geglu";
        case Op::Scale: return "scale";
        case Op::Softcap: return "softcap";
        case Op::Clamp: return "clamp";
        case Op::Relu: return "relu";
        case Op::SwigluOai: return "swiglu_oai";
        case Op::GeluQuick: return "gelu_quick";
    }
    return "?";
}
enum class Alias { None, First, Second };  // out aliases nothing / the first input / the second (geglu)

// Magnitudes where a naive tanh or exp overflows (or x^3 does), mixed into the inputs of the
// large-range tests: the outputs must be finite and right. Up to max_abs (geglu multiplies by up, in
// [-2, 2], so its true result overflows beyond ~1.7e38).
std::vector<float> extreme_values(float max_abs) {
    std::vector<float> v;
    for (float a : {0.0f, 1e-30f, 1e-6f, 0.1f, 0.25f, 1.0f, 5.0f, 10.0f, 10.5f, 11.0f, 30.0f, 44.0f, 45.0f, 89.0f, 100.0f,
                    1e3f, 1e4f, 1e6f, 1e13f, 1e20f, 3e38f, std::numeric_limits<float>::max()}) {
        if (a > max_abs) continue;
        v.push_back(a);
        v.push_back(-a);
    }
    return v;
}

// The tolerances: gelu / softcap / geglu are a few f32 operations deep, so ~1e-7 relative per element
// (and NMSE ~1e-14); scale is one correctly rounded multiply, clamp and relu a selection: exact.
test::Tolerance tolerance(Op op) {
    if (op == Op::Scale || op == Op::Clamp || op == Op::Relu) return {0, 0, 0};
    return {1e-11, 1e-7, 2e-6};
}

struct Run {
    Op op;
    uint32_t n;
    float lo = -6.0f, hi = 6.0f;  // the range of x (the gate for geglu)
    Alias alias = Alias::None;
    float param = 0.0f;           // scale factor / soft-cap
    bool extremes = false;        // overwrite the first elements with extreme_values()
    uint32_t shift = 0;
};

test::Compare run_op(Context& ctx, const Run& r) {
    const std::string name = op_name(r.op);
    CAPTURE(name);
    CAPTURE(r.n);
    CAPTURE(r.lo);
    CAPTURE(r.hi);
    CAPTURE(int(r.alias));
    CAPTURE(r.param);
    CAPTURE(r.shift);
    const uint32_t n = r.n;
    auto a = test::random_floats(n, 11 + n, r.lo, r.hi), b = test::random_floats(n, 13 + n, -2.0f, 2.0f);
    if (r.extremes) {
        const auto ext = extreme_values(r.op == Op::Geglu ? 1e38f : std::numeric_limits<float>::max());
        std::copy_n(ext.begin(), std::min<size_t>(ext.size(), n), a.begin());
    }
    std::vector<float> ref(n);
    switch (r.op) {
        case Op::Gelu: ref::gelu(a.data(), ref.data(), n); break;
        case Op::Geglu: ref::geglu(a.data(), b.data(), ref.data(), n); break;
        case Op::Scale: ref = a; ref::scale(ref.data(), n, r.param); break;
        case Op::Softcap: ref = a; ref::softcap(ref.data(), n, r.param); break;
        case Op::Clamp: ref = a; ref::clamp(ref.data(), n, r.param); break;
        case Op::Relu: ref::relu(a.data(), ref.data(), n); break;
        case Op::SwigluOai: ref::swiglu_oai(a.data(), b.data(), ref.data(), n); break;
        case Op::GeluQuick: ref::gelu_quick(a.data(), ref.data(), n); break;
    }

    ShiftedBuffer da(ctx, size_t(n) * 4, r.shift, "a"), db(ctx, size_t(n) * 4, r.shift, "b"),
        dout(ctx, size_t(n) * 4, r.shift, "out");
    da.upload(a.data(), size_t(n) * 4);
    db.upload(b.data(), size_t(n) * 4);
    const bool in_place = r.op == Op::Scale || r.op == Op::Softcap || r.op == Op::Clamp;
    const ShiftedBuffer& out = in_place || r.alias == Alias::First ? da : r.alias == Alias::Second ? db : dout;
    CommandStream s(ctx);
    s.begin();
    switch (r.op) {
        case Op::Gelu: ops::gelu(ctx, s, da.slice(), out.slice(), n); break;
        case Op::Geglu: ops::geglu(ctx, s, da.slice(), db.slice(), out.slice(), n); break;
        case Op::Scale: ops::scale(ctx, s, da.slice(), n, r.param); break;
        case Op::Softcap: ops::softcap(ctx, s, da.slice(), n, r.param); break;
        case Op::Clamp: ops::clamp(ctx, s, da.slice(), n, r.param); break;
        case Op::Relu: ops::relu(ctx, s, da.slice(), out.slice(), n); break;
        case Op::SwigluOai: ops::swiglu_oai(ctx, s, da.slice(), db.slice(), out.slice(), n); break;
        case Op::GeluQuick: ops::gelu_quick(ctx, s, da.slice(), out.slice(), n); break;
    }
    s.end();
    s.submit_and_wait();
    auto c = test::validate_result(fmt::format("{}[{}]", name, n), out.download_floats(n), ref, tolerance(r.op));
    da.check_guards();
    db.check_guards();
    dout.check_guards();
    return c;
}

test::Compare run_add_rows(Context& ctx, uint32_t rows, uint32_t dim, uint32_t shift = 0) {
    CAPTURE(rows);
    CAPTURE(dim);
    CAPTURE(shift);
    const size_t n = size_t(rows) * dim;
    auto x = test::random_floats(n, 21 + dim + rows, -3.0f, 3.0f), b = test::random_floats(dim, 23 + dim, -1.0f, 1.0f);
    std::vector<float> ref = x;
    ref::add_rows(ref.data(), b.data(), rows, dim);
    ShiftedBuffer dx(ctx, n * 4, shift, "x"), dbias(ctx, size_t(dim) * 4, shift, "b");
    dx.upload(x.data(), n * 4);
    dbias.upload(b.data(), size_t(dim) * 4);
    CommandStream s(ctx);
    s.begin();
    ops::add_rows(ctx, s, dx.slice(), dbias.slice(), rows, dim);
    s.end();
    s.submit_and_wait();
    // One f32 add per element, correctly rounded on every Vulkan device: exact.
    auto c = test::validate_result(fmt::format("add_rows x[{}x{}]", rows, dim), dx.download_floats(n), ref, {0, 0, 0});
    dx.check_guards();
    dbias.check_guards();
    return c;
}

}  // namespace

TEST_CASE("gelu / geglu / scale / softcap: tiny and odd sizes, in place") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t n : {1u, 2u, 3u, 5u, 7u, 8u, 129u, 255u, 257u, 1000u, 4099u}) {
            run_op(ctx, {.op = Op::Gelu, .n = n});
            run_op(ctx, {.op = Op::Gelu, .n = n, .alias = Alias::First});
            run_op(ctx, {.op = Op::Geglu, .n = n});
            run_op(ctx, {.op = Op::Geglu, .n = n, .alias = n % 2 ? Alias::First : Alias::Second});
            run_op(ctx, {.op = Op::Scale, .n = n, .param = 0.03125f + n});
            run_op(ctx, {.op = Op::Softcap, .n = n, .lo = -100.0f, .hi = 100.0f, .param = 30.0f});
            run_op(ctx, {.op = Op::Clamp, .n = n, .lo = -12.0f, .hi = 12.0f, .param = 8.0f});
            run_op(ctx, {.op = Op::Relu, .n = n, .alias = n % 2 ? Alias::First : Alias::None});
            run_op(ctx, {.op = Op::GeluQuick, .n = n, .alias = n % 2 ? Alias::First : Alias::None});
            // gpt-oss's clamped SwiGLU: gates past its limit of 7 both ways
            run_op(ctx, {.op = Op::SwigluOai, .n = n, .lo = -12.0f, .hi = 12.0f,
                         .alias = n % 2 ? Alias::First : Alias::Second});
        }
    }
}

TEST_CASE("gelu / geglu / scale / softcap: model sizes, several rows") {
    // gelu / geglu over GPT-2 (3072 = 4 x 768) and Gemma (9216, 16384) feed-forward widths,
    // scale over Gemma's sqrt(dim) embedding scale, softcap over attention scores and logits.
    test::ValidationGuard guard;
    double worst = 0;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t width : {3072u, 9216u, 16384u})
            for (uint32_t rows : {1u, 7u, 64u}) {
                const Alias alias = rows == 7 ? Alias::First : Alias::None;
                worst = std::max(worst, run_op(ctx, {.op = Op::Gelu, .n = width * rows, .alias = alias}).nmse);
                worst = std::max(worst, run_op(ctx, {.op = Op::Geglu, .n = width * rows, .alias = alias}).nmse);
            }
        // T5 v1.0's feed-forward widths (t5-small 2048, t5-base 3072, t5-large 4096) over a prompt chunk.
        for (uint32_t width : {2048u, 3072u, 4096u}) run_op(ctx, {.op = Op::Relu, .n = width * 64, .alias = Alias::First});
        // CLIP ViT-L/14's feed-forward (4096) over LLaVA-1.5's 577 positions.
        worst = std::max(worst, run_op(ctx, {.op = Op::GeluQuick, .n = 4096 * 577, .alias = Alias::First}).nmse);
        for (uint32_t dim : {768u, 2048u, 2304u, 3072u, 4096u}) {
            run_op(ctx, {.op = Op::Scale, .n = dim * 64, .param = std::sqrt(float(dim))});
            worst = std::max(worst, run_op(ctx, {.op = Op::Softcap, .n = dim * 8, .lo = -200.0f, .hi = 200.0f,
                                                 .param = 50.0f}).nmse);
        }
        // Logits of a 256k vocabulary, capped at 30 (Gemma 2's final soft-cap).
        worst = std::max(worst, run_op(ctx, {.op = Op::Softcap, .n = 256000, .lo = -40.0f, .hi = 40.0f, .param = 30.0f}).nmse);
    }
    MESSAGE("gelu / geglu / softcap worst nmse " << worst);
}

TEST_CASE("gelu / geglu / softcap: large magnitudes stay finite and right") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (float range : {100.0f, 1e4f}) {
            run_op(ctx, {.op = Op::Gelu, .n = 4099, .lo = -range, .hi = range, .extremes = true});
            run_op(ctx, {.op = Op::Geglu, .n = 4099, .lo = -range, .hi = range, .alias = Alias::Second, .extremes = true});
            for (float cap : {1.0f, 30.0f, 50.0f})
                run_op(ctx, {.op = Op::Softcap, .n = 4099, .lo = -range, .hi = range, .param = cap, .extremes = true});
            run_op(ctx, {.op = Op::Scale, .n = 4099, .lo = -range, .hi = range, .param = 0.125f, .extremes = true});
            run_op(ctx, {.op = Op::Relu, .n = 4099, .lo = -range, .hi = range, .extremes = true});
            run_op(ctx, {.op = Op::GeluQuick, .n = 4099, .lo = -range, .hi = range, .extremes = true});
            run_op(ctx, {.op = Op::SwigluOai, .n = 4099, .lo = -range, .hi = range, .extremes = true});
        }
        // The transition of gelu (x in [-12, -8]: the exp clamp) and small softcap arguments, where
        // (1 - e) / (1 + e) would lose relative precision: every element against rtol, not only the NMSE.
        run_op(ctx, {.op = Op::Gelu, .n = 4099, .lo = -12.0f, .hi = -8.0f});
        run_op(ctx, {.op = Op::Softcap, .n = 4099, .lo = -0.5f, .hi = 0.5f, .param = 30.0f});
        run_op(ctx, {.op = Op::Softcap, .n = 4099, .lo = -1e-3f, .hi = 1e-3f, .param = 50.0f});
    }
}

TEST_CASE("add_rows: tiny, odd, model and vocabulary widths, many rows") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t dim : {1u, 2u, 7u, 8u, 129u, 1000u, 4099u})
            for (uint32_t rows : {1u, 3u, 64u}) run_add_rows(ctx, rows, dim);
        for (uint32_t dim : {768u, 2048u, 2304u, 3072u, 4096u}) run_add_rows(ctx, dim == 768 ? 64 : 7, dim);
        run_add_rows(ctx, 2, 151936);  // Qwen2's vocabulary (a biased output head)
        run_add_rows(ctx, 3, 1000, 4);
    }
}

TEST_CASE("gelu / geglu / scale / softcap / add_rows: split into several dispatches when a binding exceeds "
          "maxStorageBufferRange") {
    test::ValidationGuard guard;
    Context& ctx = test::context_for("max-storage-range=65536");
    for (Op op : {Op::Gelu, Op::Geglu}) {
        run_op(ctx, {.op = op, .n = 100003});
        run_op(ctx, {.op = op, .n = 100003, .alias = Alias::First});
        run_op(ctx, {.op = op, .n = 100003, .shift = 4});
    }
    run_op(ctx, {.op = Op::Scale, .n = 100003, .param = 3.0f, .shift = 4});
    run_op(ctx, {.op = Op::Softcap, .n = 100003, .lo = -100.0f, .hi = 100.0f, .param = 30.0f, .shift = 4});
    run_op(ctx, {.op = Op::Clamp, .n = 100003, .lo = -3.0f, .hi = 3.0f, .param = 0.5f, .shift = 4});
    run_op(ctx, {.op = Op::Relu, .n = 100003, .shift = 4});
    // Windows of ~16k elements end inside rows of 4099 and 7: the column of each dispatch's first element.
    run_add_rows(ctx, 30, 4099);
    run_add_rows(ctx, 20000, 7, 4);
    // A bias row of 20000 floats does not fit one 64 KiB binding: a clear error.
    Buffer b = ctx.create_buffer(40000 * 4, MemoryUsage::Device, "big");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::add_rows(ctx, s, b.slice(), b.slice(), 2, 20000), DeviceLimitError);
    s.end();
}

TEST_CASE("gelu / geglu / scale / softcap / add_rows: slices at offsets below the storage-buffer alignment") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        run_op(ctx, {.op = Op::Gelu, .n = 4099, .shift = 4});
        run_op(ctx, {.op = Op::Geglu, .n = 172, .alias = Alias::First, .shift = 4});
        run_op(ctx, {.op = Op::Scale, .n = 4099, .param = -2.5f, .shift = 4});
        run_op(ctx, {.op = Op::Softcap, .n = 172, .lo = -100.0f, .hi = 100.0f, .param = 50.0f, .shift = 4});
        run_op(ctx, {.op = Op::Clamp, .n = 172, .lo = -100.0f, .hi = 100.0f, .param = 6.0f, .shift = 4});
        run_op(ctx, {.op = Op::Relu, .n = 172, .alias = Alias::First, .shift = 4});
        run_add_rows(ctx, 5, 768, 4);
    }
}

TEST_CASE("gelu / geglu / scale / softcap / add_rows: bad arguments are rejected, n = 0 records nothing") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1024, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::gelu(ctx, s, b.slice(), b.slice(0, 512), 256), std::invalid_argument);
    CHECK_THROWS_AS(ops::gelu(ctx, s, b.slice(0, 512), b.slice(), 256), std::invalid_argument);
    CHECK_THROWS_AS(ops::relu(ctx, s, b.slice(), b.slice(0, 512), 256), std::invalid_argument);
    CHECK_THROWS_AS(ops::geglu(ctx, s, b.slice(), b.slice(), b.slice(), 257), std::invalid_argument);
    CHECK_THROWS_AS(ops::scale(ctx, s, b.slice(), 257, 2.0f), std::invalid_argument);
    CHECK_THROWS_AS(ops::softcap(ctx, s, b.slice(), 257, 30.0f), std::invalid_argument);
    CHECK_THROWS_AS(ops::softcap(ctx, s, b.slice(), 16, 0.0f), std::invalid_argument);
    CHECK_THROWS_AS(ops::softcap(ctx, s, b.slice(), 16, -30.0f), std::invalid_argument);
    CHECK_THROWS_AS(ops::softcap(ctx, s, b.slice(), 16, std::numeric_limits<float>::quiet_NaN()), std::invalid_argument);
    CHECK_THROWS_AS(ops::softcap(ctx, s, b.slice(), 16, std::numeric_limits<float>::infinity()), std::invalid_argument);
    CHECK_THROWS_AS(ops::clamp(ctx, s, b.slice(), 257, 8.0f), std::invalid_argument);
    CHECK_THROWS_AS(ops::clamp(ctx, s, b.slice(), 16, 0.0f), std::invalid_argument);
    CHECK_THROWS_AS(ops::clamp(ctx, s, b.slice(), 16, std::numeric_limits<float>::quiet_NaN()), std::invalid_argument);
    CHECK_THROWS_AS(ops::add_rows(ctx, s, b.slice(), b.slice(), 0, 16), std::invalid_argument);
    CHECK_THROWS_AS(ops::add_rows(ctx, s, b.slice(), b.slice(), 16, 0), std::invalid_argument);
    CHECK_THROWS_AS(ops::add_rows(ctx, s, b.slice(), b.slice(), 2, 129), std::invalid_argument);
    CHECK_THROWS_AS(ops::add_rows(ctx, s, b.slice(), b.slice(0, 64), 2, 17), std::invalid_argument);
    CHECK_THROWS_AS(ops::scale(ctx, s, b.slice(2, 256), 16, 2.0f), std::invalid_argument);
    ops::gelu(ctx, s, b.slice(), b.slice(), 0);
    ops::geglu(ctx, s, b.slice(), b.slice(), b.slice(), 0);
    ops::scale(ctx, s, b.slice(), 0, 2.0f);
    ops::softcap(ctx, s, b.slice(), 0, 30.0f);
    CHECK(s.stats().dispatches == 0);
    s.end();
}
