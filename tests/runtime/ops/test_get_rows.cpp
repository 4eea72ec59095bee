// get_rows (embedding lookup) against the CPU reference, for every table type and device variant:
// tiny tables with out-of-range ids (zeros, no out-of-bounds read), odd dims, the real LLaMA /
// TinyLlama vocabularies, unaligned slices, many ids (split over dispatches), and a table too big
// for one binding (DeviceLimitError, so the model looks it up on the host).
#include "support/test_context.h"

#include "runtime/ops/get_rows.h"
#include "runtime/quant/random_blocks.h"
#include "runtime/vk_check.h"

#include <fmt/format.h>

#include <bit>
#include <climits>
#include <cmath>
#include <map>

using namespace vkllm;

namespace {

constexpr auto& kTypes = kAllTensorTypes;

// dim of `blocks32` blocks of 32 elements, or as many 256-element super-blocks for the K-quants and
// IQ4_XS (see tests/support/linear_testing.h).
uint32_t blocks_dim(TensorType t, uint32_t blocks32) {
    return blocks32 * uint32_t(type_traits(t).block_elems > 32 ? type_traits(t).block_elems : 32);
}

// F32/F16/BF16/Q8_0/Q4_0 decode with one multiply at most: the copy is exact. The other types apply
// scale and min in a different (but equally rounded) order than the reference: a few ulps.
test::Tolerance copy_tolerance(TensorType t) {
    switch (t) {
    case TensorType::F32: case TensorType::F16: case TensorType::BF16: case TensorType::Q8_0: case TensorType::Q4_0:
        return {0, 0, 0};
    default: return {1e-12, 1e-6, 1e-6};
    }
}

struct Table {
    TensorType t;
    uint32_t rows, dim;
    std::vector<uint8_t> bytes;
};

Table make_table(TensorType t, uint32_t rows, uint32_t dim, uint32_t seed) {
    // Random valid rows: every quant and scale bit random (runtime/quant/random_blocks.h).
    return Table{t, rows, dim, quant::random_rows(t, seed, rows, dim)};
}

std::vector<int32_t> make_ids(uint32_t n, uint32_t rows, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = int32_t(rng() % rows);
    if (n > 2) ids[n - 1] = int32_t(rows - 1), ids[0] = 0;
    return ids;
}

// Looks the ids up on the device and compares with the reference (copy_tolerance).
// `misalign` puts the table 2 (F32: 4) bytes and ids / out 1..2 words off the binding alignment.
uint32_t run(Context& ctx, const std::string& spec, const Table& tb, const std::vector<int32_t>& ids,
             bool misalign = false) {
    const uint32_t n = uint32_t(ids.size());
    const uint64_t tbytes = tb.bytes.size(), ob = uint64_t(n) * tb.dim * 4;
    const uint64_t t_off = misalign ? (tb.t == TensorType::F32 ? 4 : 2) : 0, i_off = misalign ? 4 : 0,
                   o_off = misalign ? 8 : 0;
    Buffer dt = ctx.create_buffer(tbytes + t_off, MemoryUsage::Device, "table");
    ctx.upload(dt, tb.bytes.data(), tbytes, t_off);
    Buffer di = ctx.create_buffer(n * 4 + i_off, MemoryUsage::Device, "ids");
    ctx.upload(di, ids.data(), n * 4, i_off);
    test::GuardedBuffer dout(ctx, ob + o_off, "out");
    BufferSlice os = dout.slice();
    os.offset += o_off;
    os.size = ob;

    CommandStream s(ctx);
    s.begin();
    ops::get_rows(ctx, s, tb.t, dt.slice(t_off, tbytes), tb.rows, tb.dim, di.slice(i_off, n * 4), n, os);
    s.end();
    s.submit_and_wait();

    std::vector<float> ref(size_t(n) * tb.dim);
    ref::get_rows(tb.t, tb.bytes.data(), tb.rows, tb.dim, ids.data(), n, ref.data());
    std::vector<float> got(ref.size() + o_off / 4);
    dout.download(got.data(), got.size() * 4);
    for (uint64_t i = 0; i < o_off / 4; ++i)
        CHECK_MESSAGE(std::bit_cast<uint32_t>(got[i]) == 0xA5C3E1F7u, "written before the misaligned out slice");
    test::validate_result(fmt::format("out {} rows={} dim={} ids={} [{}]", type_traits(tb.t).name, tb.rows, tb.dim, n,
                                      spec),
                          got.data() + o_off / 4, ref.data(), ref.size(), copy_tolerance(tb.t));
    dout.check_guards();
    return s.stats().dispatches;
}

void run_variants(const Table& tb, const std::vector<int32_t>& ids) {
    for (const std::string& spec : test::device_variants()) {
        CAPTURE(spec);
        run(test::context_for(spec), spec, tb, ids);
    }
}

}  // namespace

TEST_CASE("get_rows: tiny tables; out-of-range ids give zeros") {
    test::ValidationGuard guard;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        Table tb = make_table(t, 5, blocks_dim(t, 1), 1);
        run_variants(tb, {0, 4, 2, 2});
        run_variants(tb, {3});
        // Negative, one past the end, far out, extremes: rows of zeros, the valid ids still right.
        run_variants(tb, {-1, 5, 1, 1000, INT_MIN, INT_MAX, 4, 6});
        Table one = make_table(t, 1, blocks_dim(t, 2), 2);
        run_variants(one, {0, 1, -1, 0});
    }
}

TEST_CASE("get_rows: every f16 bit pattern, with the native and the integer conversion (soft-half)") {
    // The random tables never hold subnormals, infinities or NaNs; this one holds all 65536 halves,
    // so both conversions of half.glsl are checked bit for bit against the format's definition
    // (f16_to_f32), a NaN only for being a NaN (its payload may be quieted).
    test::ValidationGuard guard;
    constexpr uint32_t rows = 256, dim = 256;
    Table tb{TensorType::F16, rows, dim, std::vector<uint8_t>(size_t(rows) * dim * 2)};
    for (uint32_t i = 0; i < rows * dim; ++i) {
        tb.bytes[2 * i] = uint8_t(i & 0xffu);
        tb.bytes[2 * i + 1] = uint8_t(i >> 8);
    }
    std::vector<int32_t> ids(rows);
    for (uint32_t r = 0; r < rows; ++r) ids[r] = int32_t(rows - 1 - r);  // reversed: row order matters too
    for (const std::string& spec : {std::string(), std::string("soft-half")}) {
        CAPTURE(spec);
        Context& ctx = test::context_for(spec);
        Buffer dt = ctx.create_buffer(tb.bytes.size(), MemoryUsage::Device, "table");
        ctx.upload(dt, tb.bytes.data(), tb.bytes.size());
        Buffer di = ctx.create_buffer(rows * 4, MemoryUsage::Device, "ids");
        ctx.upload(di, ids.data(), rows * 4);
        test::GuardedBuffer dout(ctx, uint64_t(rows) * dim * 4, "out");
        CommandStream s(ctx);
        s.begin();
        ops::get_rows(ctx, s, TensorType::F16, dt.slice(), rows, dim, di.slice(), rows, dout.slice());
        s.end();
        s.submit_and_wait();
        std::vector<float> got(size_t(rows) * dim);
        dout.download(got.data(), got.size() * 4);
        dout.check_guards();
        uint32_t wrong = 0;
        for (uint32_t r = 0; r < rows; ++r)
            for (uint32_t j = 0; j < dim; ++j) {
                const uint16_t h = uint16_t(uint32_t(ids[r]) * dim + j);
                const float want = f16_to_f32(h), have = got[size_t(r) * dim + j];
                const bool ok = std::isnan(want) ? std::isnan(have)
                                                 : std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(have);
                if (!ok && ++wrong <= 5)
                    MESSAGE(fmt::format("half 0x{:04x}: got 0x{:08x}, want 0x{:08x}", h, std::bit_cast<uint32_t>(have),
                                        std::bit_cast<uint32_t>(want)));
            }
        CHECK(wrong == 0);
    }
}

TEST_CASE("get_rows: odd dims and odd row alignment") {
    test::ValidationGuard guard;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        // Rows of 3 blocks: rows of 2-byte-aligned block types alternate 4- and 2-byte alignment.
        run_variants(make_table(t, 37, blocks_dim(t, 3), 3), make_ids(41, 37, 4));
        if (type_traits(t).block_elems == 1) {
            run_variants(make_table(t, 10, 1, 5), make_ids(7, 10, 6));
            run_variants(make_table(t, 33, 37, 7), make_ids(65, 33, 8));
            run_variants(make_table(t, 9, 4097, 9), make_ids(9, 9, 10));
        }
    }
}

TEST_CASE("get_rows: unaligned slices") {
    test::ValidationGuard guard;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        for (const std::string& spec : test::device_variants()) {
            CAPTURE(spec);
            run(test::context_for(spec), spec, make_table(t, 19, blocks_dim(t, 5), 11), make_ids(23, 19, 12), true);
            run(test::context_for(spec), spec, make_table(t, 20, blocks_dim(t, 2), 13), {19, -3, 0, 7, 20}, true);
        }
    }
}

TEST_CASE("get_rows: real vocabularies (LLaMA 32000 x 4096, TinyLlama 32000 x 2048)") {
    test::ValidationGuard guard;
    Context& ctx = test::context();
    const uint64_t limit = ctx.caps().max_storage_buffer_range;
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        for (uint32_t dim : {2048u, 4096u}) {
            CAPTURE(dim);
            const uint64_t bytes = 32000ull * row_bytes(t, dim);
            if (bytes + 256 > limit) {
                // The API contract: too big for one binding is a clear DeviceLimitError.
                Buffer dt = ctx.create_buffer(bytes, MemoryUsage::Device, "table");
                Buffer di = ctx.create_buffer(64, MemoryUsage::Device, "ids");
                Buffer dout = ctx.create_buffer(uint64_t(dim) * 4 * 16, MemoryUsage::Device, "out");
                CommandStream s(ctx);
                s.begin();
                CHECK_THROWS_AS(ops::get_rows(ctx, s, t, dt.slice(), 32000, dim, di.slice(), 16, dout.slice()),
                                DeviceLimitError);
                s.end();
                continue;
            }
            Table tb = make_table(t, 32000, dim, 20);
            // A prompt's worth of ids, both ends of the table included; weak variants on the small one.
            auto ids = make_ids(77, 32000, 21);
            if (dim == 2048)
                run_variants(tb, ids);
            else
                run(ctx, "", tb, ids);
        }
    }
}

TEST_CASE("get_rows: many ids are split over dispatches; a table over the binding range throws") {
    test::ValidationGuard guard;
    const std::string spec = "max-storage-range=8m";
    Context& small = test::context_for(spec);
    // 600 ids x 4096 f32 = 9.8 MB of output: two dispatches at least.
    for (TensorType t : kTypes) {
        CAPTURE(type_traits(t).name);
        Table tb = make_table(t, 300, 4096, 30);
        CHECK(run(small, spec, tb, make_ids(600, 300, 31)) >= 2);
    }
    // 3000 x 4096 Q4_0 is 6.9 MB (fits), 4000 x 4096 is 9.2 MB (does not).
    Table fits = make_table(TensorType::Q4_0, 3000, 4096, 32);
    run(small, spec, fits, make_ids(5, 3000, 33));
    Buffer dt = small.create_buffer(4000ull * row_bytes(TensorType::Q4_0, 4096), MemoryUsage::Device, "table");
    Buffer di = small.create_buffer(64, MemoryUsage::Device, "ids");
    Buffer dout = small.create_buffer(4096 * 4 * 16, MemoryUsage::Device, "out");
    CommandStream s(small);
    s.begin();
    CHECK_THROWS_AS(ops::get_rows(small, s, TensorType::Q4_0, dt.slice(), 4000, 4096, di.slice(), 16, dout.slice()),
                    DeviceLimitError);
    CHECK_THROWS_AS(ops::get_rows(small, s, TensorType::Q8_0, dt.slice(), 10, 100, di.slice(), 16, dout.slice()),
                    std::invalid_argument);  // dim not a multiple of the block
    CHECK_THROWS_AS(ops::get_rows(small, s, TensorType::Q5_K, dt.slice(), 10, 288, di.slice(), 16, dout.slice()),
                    std::invalid_argument);  // K-quant rows are whole super-blocks
    ops::get_rows(small, s, TensorType::Q4_0, dt.slice(), 10, 4096, di.slice(), 0, dout.slice());  // no ids: nothing
    s.end();
    CHECK(s.stats().dispatches == 0);
}
