#include "support/test_context.h"

#include "support/small_ops_testing.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/kv_store.h"
#include "runtime/ops/rope.h"
#include "runtime/ops/sampling_ops.h"

#include <fmt/format.h>

#include <cmath>

using namespace vkllm;
using small_ops_testing::ShiftedBuffer;

namespace {

enum class Op { Swiglu, Add };
enum class Alias { None, First, Second };  // out aliases nothing / the first input / the second

// Runs swiglu or add over n elements and compares with the reference. `lo`/`hi` bound the first
// input (the gate for swiglu), so that large |gate| exercises exp overflow and underflow.
test::Compare run_binary(Context& ctx, Op op, uint32_t n, Alias alias, float lo = -4.0f, float hi = 4.0f,
                         uint32_t shift = 0) {
    const char* name = op == Op::Swiglu ? "swiglu" : "add";
    CAPTURE(name);
    CAPTURE(n);
    CAPTURE(int(alias));
    CAPTURE(shift);
    auto a = test::random_floats(n, 7 + n, lo, hi), b = test::random_floats(n, 9 + n, -2.0f, 2.0f);
    std::vector<float> ref(n);
    if (op == Op::Swiglu)
        ref::swiglu(a.data(), b.data(), ref.data(), n);
    else
        ref::add(a.data(), b.data(), ref.data(), n);

    ShiftedBuffer da(ctx, size_t(n) * 4, shift, "a"), db(ctx, size_t(n) * 4, shift, "b"), dout(ctx, size_t(n) * 4, shift, "out");
    da.upload(a.data(), size_t(n) * 4);
    db.upload(b.data(), size_t(n) * 4);
    const ShiftedBuffer& out = alias == Alias::First ? da : alias == Alias::Second ? db : dout;
    CommandStream s(ctx);
    s.begin();
    if (op == Op::Swiglu)
        ops::swiglu(ctx, s, da.slice(), db.slice(), out.slice(), n);
    else
        ops::add(ctx, s, da.slice(), db.slice(), out.slice(), n);
    s.end();
    s.submit_and_wait();
    // silu uses exp and a division (a few ulp on GPUs); add is exact.
    const test::Tolerance tol = op == Op::Swiglu ? test::Tolerance{1e-7, 1e-6, 1e-5} : test::Tolerance{0, 0, 0};
    auto c = test::validate_result(fmt::format("{}[{}]", name, n), out.download_floats(n), ref, tol);
    out.check_guards();
    return c;
}

}  // namespace

TEST_CASE("swiglu / add: tiny and odd sizes, in place") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (Op op : {Op::Swiglu, Op::Add})
            for (uint32_t n : {1u, 7u, 172u, 255u, 256u, 257u, 4097u}) {
                run_binary(ctx, op, n, Alias::None);
                run_binary(ctx, op, n, Alias::First);
            }
        run_binary(ctx, Op::Add, 4097, Alias::Second);
        // Saturated gates: exp(-g) overflows to inf (silu -> -0) or underflows (silu -> g).
        run_binary(ctx, Op::Swiglu, 4097, Alias::None, -120.0f, 120.0f);
    }
}

TEST_CASE("swiglu / add: LLaMA sizes (ffn 5632 / 11008 / 14336, dim 2048 / 4096)") {
    test::ValidationGuard guard;
    double worst_swiglu = 0, worst_add = 0;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (uint32_t ffn : {5632u, 11008u, 14336u})
            for (uint32_t rows : {1u, 7u, 64u})
                worst_swiglu = std::max(worst_swiglu, run_binary(ctx, Op::Swiglu, ffn * rows, rows == 7 ? Alias::First : Alias::None).nmse);
        worst_swiglu = std::max(worst_swiglu, run_binary(ctx, Op::Swiglu, 11008u * 512, Alias::First).nmse);
        for (uint32_t dim : {2048u, 4096u})
            for (uint32_t rows : {1u, 7u, 512u})
                worst_add = std::max(worst_add, run_binary(ctx, Op::Add, dim * rows, rows == 7 ? Alias::None : Alias::First).nmse);
    }
    MESSAGE("swiglu worst nmse " << worst_swiglu << ", add worst nmse " << worst_add);
}

TEST_CASE("swiglu / add: split into several dispatches when a binding exceeds maxStorageBufferRange") {
    test::ValidationGuard guard;
    Context& ctx = test::context_for("max-storage-range=65536");
    for (Op op : {Op::Swiglu, Op::Add}) {
        run_binary(ctx, op, 100003, Alias::None);
        run_binary(ctx, op, 100003, Alias::First);
        run_binary(ctx, op, 100003, Alias::None, -4.0f, 4.0f, 4);
    }
}

TEST_CASE("swiglu / add: slices at offsets below the storage-buffer alignment") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        for (Op op : {Op::Swiglu, Op::Add}) {
            run_binary(ctx, op, 4097, Alias::None, -4.0f, 4.0f, 4);
            run_binary(ctx, op, 172, Alias::First, -4.0f, 4.0f, 4);
        }
    }
}

TEST_CASE("swiglu / add: too-small buffers are rejected, n = 0 records nothing") {
    Context& ctx = test::context();
    Buffer b = ctx.create_buffer(1024, MemoryUsage::Device, "b");
    CommandStream s(ctx);
    s.begin();
    CHECK_THROWS_AS(ops::swiglu(ctx, s, b.slice(), b.slice(), b.slice(), 257), std::invalid_argument);
    CHECK_THROWS_AS(ops::add(ctx, s, b.slice(), b.slice(0, 512), b.slice(), 256), std::invalid_argument);
    ops::add(ctx, s, b.slice(), b.slice(), b.slice(), 0);
    CHECK(s.stats().dispatches == 0);
    s.end();
}

TEST_CASE("small_op_pipelines: prepares every pipeline the small ops record") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        const auto descs = ops::small_op_pipelines(ctx);
        CHECK(descs.size() == ops::detail::kAllSmallOps.size());
        ctx.prepare_pipelines(descs);
        const uint32_t created = ctx.pipeline_stats().created;
        // One tiny call of every op: none may need a pipeline that was not prepared.
        test::GuardedBuffer a(ctx, 4096, "a"), b(ctx, 4096, "b"), c(ctx, 4096, "c"), pos(ctx, 4, "pos"),
            big(ctx, 4ull * (ops::detail::kSoftmaxShortRow + 1), "big");
        const int32_t zero = 0;
        pos.upload(&zero, 4);
        const BufferSlice bias = c.slice();
        CommandStream s(ctx);
        s.begin();
        ops::rms_norm(ctx, s, a.slice(), b.slice(), a.slice(), 1, 64, 1e-5f);
        ops::swiglu(ctx, s, a.slice(), b.slice(), a.slice(), 64);
        ops::add(ctx, s, a.slice(), b.slice(), a.slice(), 64);
        ops::rope(ctx, s, a.slice(), pos.slice(), 1, 1, 64, 64, 1e4f, ops::RopeLayout::Adjacent);
        ops::kv_store(ctx, s, a.slice(), b.slice(), pos.slice(), 1, 64, 2, ops::KvType::F16);
        ops::kv_store(ctx, s, a.slice(), b.slice(), pos.slice(), 1, 64, 2, ops::KvType::F32);
        ops::kv_store(ctx, s, a.slice(), b.slice(), pos.slice(), 1, 64, 2, ops::KvType::Q8_0);
        ops::argmax(ctx, s, a.slice(), b.slice(), 1, 64);
        ops::softmax(ctx, s, a.slice(), a.slice(), 1, 64, 1.0f);  // SoftmaxShort
        ops::softmax(ctx, s, big.slice(), big.slice(), 1, ops::detail::kSoftmaxShortRow + 1, 1.0f);  // Softmax
        ops::topk(ctx, s, a.slice(), 64, 8, b.slice(), c.slice());
        ops::layer_norm(ctx, s, a.slice(), b.slice(), &bias, a.slice(), 1, 64, 1e-5f);
        ops::geglu(ctx, s, a.slice(), b.slice(), a.slice(), 64);
        ops::gelu(ctx, s, a.slice(), a.slice(), 64);
        ops::scale(ctx, s, a.slice(), 64, 2.0f);
        ops::softcap(ctx, s, a.slice(), 64, 30.0f);
        ops::add_rows(ctx, s, a.slice(), b.slice(), 4, 16);
        ops::clamp(ctx, s, a.slice(), 64, 8.0f);
        ops::relu(ctx, s, a.slice(), a.slice(), 64);
        ops::gelu_quick(ctx, s, a.slice(), a.slice(), 64);
        ops::swiglu_oai(ctx, s, a.slice(), b.slice(), a.slice(), 64);
        ops::copy_cols(ctx, s, {a.slice(), 16, 4}, {c.slice(), 8, 0}, 4, 8);
        s.end();
        s.submit_and_wait();
        CHECK(ctx.pipeline_stats().created == created);
        CHECK(s.stats().dispatches == ops::detail::kAllSmallOps.size());
    }
}

TEST_CASE("copy_cols: column blocks between row strides (latent attention's concatenations), odd sizes, bad blocks") {
    test::ValidationGuard guard;
    for (const auto& spec : test::device_variants()) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        struct Case {
            uint32_t rows, width, src_stride, src_col, dst_stride, dst_col;
        };
        // DeepSeek: a head's rope part of [nope 128 | rope 64] into [rope 64 | latent 512]; the latent
        // behind it; a tiny odd block.
        for (const Case& k : {Case{64 * 16, 64, 192, 128, 576, 0}, Case{64, 512, 576, 0, 576, 64}, Case{7, 3, 5, 1, 9, 6},
                              Case{1, 1, 1, 0, 1, 0}}) {
            CAPTURE(k.rows);
            CAPTURE(k.width);
            const std::vector<float> src = test::random_floats(size_t(k.rows) * k.src_stride, 31, -1.0f, 1.0f);
            std::vector<float> want = test::random_floats(size_t(k.rows) * k.dst_stride, 32, -1.0f, 1.0f);
            test::GuardedBuffer ds(ctx, src.size() * 4, "src"), dd(ctx, want.size() * 4, "dst");
            ds.upload(src.data(), src.size() * 4);
            dd.upload(want.data(), want.size() * 4);
            ref::copy_cols(src.data(), k.src_stride, k.src_col, want.data(), k.dst_stride, k.dst_col, k.rows, k.width);
            CommandStream s(ctx);
            s.begin();
            ops::copy_cols(ctx, s, {ds.slice(), k.src_stride, k.src_col}, {dd.slice(), k.dst_stride, k.dst_col}, k.rows,
                           k.width);
            s.end();
            s.submit_and_wait();
            CHECK(dd.download_floats(want.size()) == want);  // a copy is exact, and the other columns are kept
            dd.check_guards();
        }
        test::GuardedBuffer a(ctx, 1024, "a"), b(ctx, 1024, "b");
        CommandStream bad(ctx);
        bad.begin();
        CHECK_THROWS_AS(ops::copy_cols(ctx, bad, {a.slice(), 8, 4}, {b.slice(), 8, 0}, 2, 5), std::invalid_argument);
        CHECK_THROWS_AS(ops::copy_cols(ctx, bad, {a.slice(), 8, 0}, {b.slice(), 8, 0}, 64, 8), std::invalid_argument);
        CHECK_THROWS_AS(ops::copy_cols(ctx, bad, {a.slice(), 8, 0}, {a.slice(), 8, 4}, 2, 4), std::invalid_argument);
        CHECK(bad.stats().dispatches == 0);
        bad.end();
    }
}
